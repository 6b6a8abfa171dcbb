"""Blender commands, run in the bpy venv: ``benchmark-blender``, ``render-walkthrough``."""

from __future__ import annotations

import argparse
from pathlib import Path

from training.cli.common import DEFAULT_DATA, CliError, write_report


def _add_blender_common(p: argparse.ArgumentParser, timeout_s: int) -> None:
    from training.blender.run import DEFAULT_VENV

    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--blender-venv", default=DEFAULT_VENV,
                   help="venv with bpy to run in (default %(default)s; made from its pinned "
                   "requirements when missing)")
    p.add_argument("--archive", default=None, metavar="TAR_XZ",
                   help="Bandai Namco archive to take clips from (default: dataset-1 in "
                   "../shared/data/bandai-namco)")
    p.add_argument("--timeout", type=int, default=timeout_s,
                   help="seconds before the Blender run is stopped (default %(default)s)")


def add_benchmark_blender(sub: argparse._SubParsersAction) -> None:
    from training.blender.benchmark import DEFAULT_CLIPS, DEFAULT_OUT, DEFAULT_TIMEOUT_S

    p = sub.add_parser("benchmark-blender", help="the add-on inside Blender: live-update "
                       "latency, accuracy against Blender's IK constraints, propagation")
    _add_blender_common(p, DEFAULT_TIMEOUT_S)
    p.add_argument("--data", default=DEFAULT_DATA,
                   help="prepared dataset whose test split picks the clips (default "
                   "%(default)s; a built-in list when missing)")
    p.add_argument("--clips", type=int, default=DEFAULT_CLIPS, help="test clips for the IK "
                   "comparison (default %(default)s)")
    p.add_argument("--moves", type=int, default=200, help="timed moves per live setting")
    p.add_argument("--profile-moves", type=int, default=100,
                   help="instrumented moves per live setting (time breakdown)")
    p.add_argument("--pairs", type=int, default=200, help="(x, x') pairs for the IK comparison")
    p.add_argument("--propagation-runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", nargs="+", default=(), choices=("live", "ik", "propagation"),
                   help="parts to leave out")
    p.add_argument("--out", default=DEFAULT_OUT, help="report folder (default %(default)s)")
    p.set_defaults(run=_run_benchmark_blender)


def _run_benchmark_blender(args: argparse.Namespace) -> int:
    from training.blender.benchmark import markdown, plot_profile, run
    from training.blender.run import BANDAI_ARCHIVE, BlenderRunError

    if min(args.moves, args.profile_moves, args.pairs, args.propagation_runs,
           args.clips) < 1:
        raise CliError("--moves, --profile-moves, --pairs, --propagation-runs and --clips "
                       "must be at least 1")
    try:
        result = run(args.models, args.blender_venv, data=args.data,
                     archive=Path(args.archive) if args.archive else BANDAI_ARCHIVE,
                     clips=args.clips, moves=args.moves, profile_moves=args.profile_moves,
                     pairs=args.pairs, propagation_runs=args.propagation_runs,
                     seed=args.seed, skip=tuple(args.skip), timeout_s=args.timeout)
    except BlenderRunError as exc:
        raise CliError(str(exc)) from exc
    out = Path(args.out)
    figure = plot_profile(result, out / "benchmark_blender.png")
    text = markdown(result)
    print(text)
    write_report(out / "benchmark_blender.json", args.command_line, result, text)
    print(f"wrote {out / 'benchmark_blender.json'}, {out / 'benchmark_blender.md'}"
          + (f", {figure}" if figure else ""))
    return 0


def add_render_walkthrough(sub: argparse._SubParsersAction) -> None:
    from training.blender.render_walkthrough import (
        DEFAULT_CLIP,
        DEFAULT_OUT,
        DEFAULT_TIMEOUT_S,
        DEFAULT_WORK,
    )

    p = sub.add_parser("render-walkthrough", help="the README's walkthrough pictures: the "
                       "five-minute walkthrough run through the add-on in Blender, rendered")
    _add_blender_common(p, DEFAULT_TIMEOUT_S)
    p.add_argument("--clip", default=DEFAULT_CLIP, help="BVH clip of the archive "
                   "(default %(default)s)")
    p.add_argument("--out", default=DEFAULT_OUT, help="folder for the figures "
                   "(default %(default)s)")
    p.add_argument("--work", default=DEFAULT_WORK, help="folder for the raw renders and what "
                   "each step did, as JSON (default %(default)s)")
    p.set_defaults(run=_run_render_walkthrough)


def _run_render_walkthrough(args: argparse.Namespace) -> int:
    from training.blender.render_walkthrough import render
    from training.blender.run import BANDAI_ARCHIVE, BlenderRunError

    try:
        written, result = render(args.models, args.blender_venv, out=args.out, work=args.work,
                                 archive=Path(args.archive) if args.archive else BANDAI_ARCHIVE,
                                 clip=args.clip, timeout_s=args.timeout)
    except BlenderRunError as exc:
        raise CliError(str(exc)) from exc
    def show(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.1f}"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k} {show(v)}" for k, v in value.items()) + "}"
        return str(value)

    for fig in result["figures"]:
        print(f"{fig['file']}: " + ", ".join(f"{k} {show(v)}" for k, v in fig["facts"].items()))
    total = sum(p.stat().st_size for p in written)
    print(f"wrote {len(written)} figures to {args.out} ({total / 1024:.0f} KiB); raw renders "
          f"and walkthrough.json in {args.work}")
    return 0
