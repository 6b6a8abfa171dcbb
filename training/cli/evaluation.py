"""Evaluation and benchmark commands run from the dev venv: ``evaluate``, ``benchmark``,
``benchmark-bvh``, ``solver-check``, ``slider-reach``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from training.cli.common import DEFAULT_DATA, write_report

SINGLE_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def add_benchmark(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benchmark", help="the engine vs classic FABRIK: accuracy, single-thread "
                       "latency, propagation, memory, figure")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", default=None, help=f"dataset .npz, test split (default "
                     f"{DEFAULT_DATA})")
    src.add_argument("--bvh", nargs="+", default=None, metavar="PATH",
                     help="BVH files, folders or archives, in their own proportions")
    p.add_argument("--map", default="auto", dest="map_spec", help="mapping for --bvh")
    p.add_argument("--units", default="auto", help="units for --bvh")
    p.add_argument("--up", default="auto", choices=("auto", "y", "z"),
                   help="up axis for --bvh (y, z or auto, as for prepare)")
    p.add_argument("--ranges", default=None, metavar="NPZ",
                   help="prepared dataset whose train split fits the joint-angle ranges the "
                   "drags and propagation suites judge (the models' training data; default: "
                   "--data's, with --bvh the clips' own)")
    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--pairs", type=int, default=1000,
                   help="pairs per effector set (drags, sliders: start poses; propagation: "
                   "edited clips)")
    p.add_argument("--solves", type=int, default=1000, help="timed single solves per method")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/benchmark", help="folder for the figure and reports")
    p.add_argument("--json", default=None, help="JSON report path (default OUT/<suite>.json)")
    p.add_argument("--suite", default="engine",
                   choices=("engine", "drags", "latency", "sliders", "propagation", "families"),
                   help="engine: (x, x') pairs, latency, propagation, memory; drags: user-style "
                   "drags from start poses, planted feet, plausibility; latency: single solves "
                   "and Live drag updates alone, with the machine; sliders: each metric asked "
                   "for its value + delta, as evaluate's sweep; propagation: a hand moved at "
                   "one frame and propagated, judged as motion (pops, goals, plausibility); "
                   "families: one hand dragged on CMU poses lying, upside down, kneeling, "
                   "crouching, sitting or with hands on the floor (--bvh: the CMU clips; "
                   "--pairs: poses per family) (default %(default)s)")
    p.add_argument("--max-clips", type=int, default=400, help="clips read (default %(default)s)")
    p.set_defaults(run=_run_benchmark)


def _run_benchmark(args: argparse.Namespace) -> int:
    """One thread, as the add-on runs: the environment for what loads later (onnxruntime's
    OpenMP), and a limit on the thread pools already loaded (numpy's BLAS is, by the
    parser: with as many threads as cores it spun them on a 16-core machine)."""
    import os

    from threadpoolctl import threadpool_limits

    for var in SINGLE_THREAD_ENV:
        os.environ.setdefault(var, "1")
    with threadpool_limits(limits=1):
        return _benchmark(args)


def _benchmark(args: argparse.Namespace) -> int:
    from blender_addon.core.fileio import atomic_open
    from training.evaluation import (
        benchmark,
        drags,
        latency,
        pose_families,
        propagation_quality,
        sliders,
    )

    out = Path(args.out)
    data = args.data or (None if args.bvh else DEFAULT_DATA)
    json_path = Path(args.json or out / f"{args.suite}.json")
    figure = str(json_path.with_suffix(".png"))
    if args.suite in ("drags", "sliders", "propagation"):
        clips, description = benchmark.load_clips(data, args.bvh, args.map_spec, args.units,
                                                  args.max_clips, args.up)
    ranges_data = args.ranges or data
    if args.suite == "drags":
        ranges = drags_ranges(ranges_data, clips)
        result = drags.run(args.models, clips, description, ranges, n=args.pairs,
                           seed=args.seed, figure=figure)
        text = drags.markdown(result)
        short = drags.summary(result)
    elif args.suite == "families":
        if not args.bvh:
            raise SystemExit("--suite families reads CMU's BVH clips: give --bvh (the CMU "
                             "folder or archive, e.g. ../shared/data/cmu)")
        result = pose_families.run(args.models, args.bvh, n=args.pairs, seed=args.seed,
                                   map_spec=args.map_spec, units=args.units)
        text = short = pose_families.markdown(result)
    elif args.suite == "propagation":
        result = propagation_quality.run(args.models, clips, description,
                                         drags_ranges(ranges_data, clips), n=args.pairs,
                                         seed=args.seed, figure=figure)
        text = short = propagation_quality.markdown(result)
    elif args.suite == "sliders":
        result = sliders.run(args.models, clips, description, n=args.pairs, seed=args.seed)
        text = sliders.report(result)
        short = sliders.report(result, (sliders.DEFAULT_METHOD,))
    elif args.suite == "latency":
        result = latency.run(args.models, data=data, bvh=args.bvh, map_spec=args.map_spec,
                             units=args.units, solves=args.solves, max_clips=args.max_clips,
                             seed=args.seed, up=args.up)
        text = short = latency.markdown(result)
    else:
        result = benchmark.run(args.models, data=data, bvh=args.bvh, map_spec=args.map_spec,
                               units=args.units, pairs=args.pairs, solves=args.solves,
                               seed=args.seed, figure=figure, max_clips=args.max_clips,
                               up=args.up)
        text = short = benchmark.markdown(result)
    if args.suite in ("drags", "propagation"):  # where its joint-angle ranges came from
        result["angle_ranges"] = f"train split of {ranges_data}" if ranges_data \
            else "the clips themselves"
    print(text)
    write_report(json_path, args.command_line, result, text)
    with atomic_open(Path(json_path).with_suffix(".summary.md"), "w") as fh:
        fh.write(short)
    written = [json_path, Path(json_path).with_suffix(".md"), result.get("figure")]
    print("wrote " + ", ".join(str(p) for p in written if p))
    return 0


RANGE_FRAME_STEP = 10  # every 10th training frame fits the joint-angle ranges


def drags_ranges(data: str | None, clips: list):
    """Joint-angle ranges from the dataset's train split, or from the BVH clips themselves."""
    import numpy as np

    from training.data.dataset import PoseData
    from training.evaluation.plausibility import AngleRanges

    if data is not None:
        pd = PoseData.load(data)
        return AngleRanges.fit(pd.poses[pd.split_mask("train")][::RANGE_FRAME_STEP])
    return AngleRanges.fit(np.concatenate(clips)[::RANGE_FRAME_STEP])



def add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="the exported model set on the test split: autoencoder, "
                       "solvers side by side, metric networks, sizes")
    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--data", default=DEFAULT_DATA, help="dataset .npz (default %(default)s)")
    p.add_argument("--out", default="runs/eval", help="report folder (default %(default)s)")
    p.add_argument("--pairs", type=int, default=4000, help="(x, x') pairs per effector set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="evaluation",
                   help="report file names: OUT/NAME.json and .md (default %(default)s)")
    p.set_defaults(run=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    from training.evaluation.evaluate import evaluate, markdown, write_report

    result = evaluate(args.models, args.data, n_pairs=args.pairs, seed=args.seed)
    result["command"] = args.command_line
    print(markdown(result))
    paths = write_report(result, args.out, args.name)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def add_benchmark_bvh(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benchmark-bvh", help="our BVH reader against the bvhio library, "
                       "same clips, same run")
    p.add_argument("--bvh", nargs="+", required=True, metavar="PATH")
    p.add_argument("--clips", type=int, default=20, help="clips to time (default 20)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file, "
                   "and their table beside it (.md)")
    p.set_defaults(run=_run_benchmark_bvh)


def _run_benchmark_bvh(args: argparse.Namespace) -> int:
    from training.evaluation.bench_bvh import benchmark_bvh_readers

    result = benchmark_bvh_readers(args.bvh, max_clips=args.clips)
    if args.json:
        from training.evaluation.bench_bvh import markdown

        write_report(args.json, args.command_line, result, markdown(result))
    return 0


def _add_set_options(p: argparse.ArgumentParser, poses: int, repeat: str) -> None:
    """``--set SOURCE DATA`` (repeated), the split, the poses, the seed and the report path
    of the commands that check shipped sets (or training runs) on a dataset."""
    p.add_argument("--set", nargs=2, action="append", required=True, dest="sets",
                   metavar=("SOURCE", "DATA"), help="a model folder (or a training run's "
                   f"folder of checkpoints) and a dataset .npz; repeat {repeat}")
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--poses", type=int, default=poses)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures here, the table "
                   "beside it (.md)")


def add_solver_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("solver-check", help="the universal solver alone on real pairs, drags, "
                       "null edits and out-of-reach rest poses (validation split)")
    _add_set_options(p, 2000, "for more columns")
    p.set_defaults(run=_run_solver_check)


def _run_solver_check(args: argparse.Namespace) -> int:
    from training.evaluation.solver_check import markdown, run_sets

    return _run_sets(args, run_sets, markdown)


def add_slider_reach(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slider-reach", help="how far each metric network follows a request "
                       "(achieved / requested change, validation split)")
    _add_set_options(p, 300, "to compare sets")
    p.set_defaults(run=_run_slider_reach)


def _run_slider_reach(args: argparse.Namespace) -> int:
    from training.evaluation.metric_reach import markdown_sets, run_sets

    return _run_sets(args, run_sets, markdown_sets)


def _run_sets(args: argparse.Namespace, run_sets: Callable, markdown: Callable) -> int:
    """Run a set-checking command (:func:`_add_set_options`), print its table, write it."""
    result = run_sets([tuple(s) for s in args.sets], args.poses, args.split, args.seed)
    table = markdown({"command": args.command_line, **result})
    print(table)
    if args.json:
        write_report(args.json, args.command_line, result, table)
    return 0
