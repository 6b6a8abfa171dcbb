"""Inside bpy: the add-on's interactive and propagation timings, and Blender's own IK on the
same problems (started by ``python -m training benchmark-blender``; writes one JSON file).

- Live update: an effector empty moved (``location`` set, ``view_layer.update()``) until
  the add-on's depsgraph handler has written the pose and Blender has evaluated it, on the
  mapped Bandai BVH rig and on a Rigify-size rig, refinement off and on, beside the same
  loop with Live off (the no-solve baseline). A second, instrumented pass splits the time
  into stages (:class:`~training.blender_side.bench_measure.StageTimer`). Then a Neural
  Grab of the right hand along the same path: one drag step of
  :func:`blender_addon.grab.update` per move, evaluated (:mod:`.bench_live`).
- Accuracy against Blender's IK constraints: (x, x') pairs of test clips (x' within +-20
  frames): the rig at x, targets at x' joints, evaluate; Blender's Legacy IK (and iTaSC)
  with chains to the same five effectors, against the add-on's Solve (:mod:`.bench_ik`).
- Propagation: ``npe.spread_edit`` over a 1,000-frame action, keys written, a few runs
  (:mod:`.bench_propagation`); and Spread Edit's modes as an animator uses them: keys kept,
  a layer, Esc (:mod:`.spread_figures`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bpy

from blender_addon.core.fileio import write_json
from training.blender_side import host
from training.blender_side.bench_ik import ik_comparison
from training.blender_side.bench_live import live_benchmark
from training.blender_side.bench_propagation import IK_SPREAD_RUNS, propagation_benchmark
from training.blender_side.bench_rig import EFFECTORS, MOVED
from training.blender_side.spread_figures import spread_benchmark


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="training.blender_side.bench", description=__doc__)
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--clips", nargs="+", required=True, type=Path,
                   help="BVH test clips; the first also serves the live and propagation runs")
    p.add_argument("--out", required=True, type=Path, help="JSON result")
    p.add_argument("--moves", type=int, default=200)
    p.add_argument("--profile-moves", type=int, default=100)
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--propagation-runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", nargs="*", default=(), choices=("live", "ik", "propagation"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    host.start()
    result: dict[str, Any] = {"blender": bpy.app.version_string, "models": str(args.models),
                              "moved_effector": MOVED, "effectors": list(EFFECTORS)}
    if "live" not in args.skip:
        result["live"] = [
            *live_benchmark("bvh", f"BVH ({args.clips[0].name})", args.models, args.clips[0],
                            args.moves, args.profile_moves),
            *live_benchmark("rigify", "Rigify-size (79 bones, object scale 0.01)",
                            args.models, None, args.moves, args.profile_moves),
            *live_benchmark("generated", "generated Rigify rig (controls)",
                            args.models, None, args.moves, args.profile_moves),
            *live_benchmark("generated-ik", "generated Rigify rig, limbs left in IK "
                            "(as generated)", args.models, None, args.moves,
                            args.profile_moves)]
    if "ik" not in args.skip:
        result["ik"] = ik_comparison(args.models, args.clips, args.pairs, args.seed)
    if "propagation" not in args.skip:
        result["propagation"] = propagation_benchmark(args.models, args.clips[0],
                                                      args.propagation_runs)
        result["propagation_generated"] = propagation_benchmark(
            args.models, args.clips[0], args.propagation_runs, "generated")
        result["propagation_generated_ik"] = propagation_benchmark(
            args.models, args.clips[0], min(args.propagation_runs, IK_SPREAD_RUNS),
            "generated-ik")
        result["spread"] = spread_benchmark(args.models, args.clips[0])
    write_json(args.out, result)
    host.progress(f"wrote {args.out}")


if __name__ == "__main__":
    main()
