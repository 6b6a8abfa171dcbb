"""Command line: ``python -m training <command> [options]``.

Each command's work lives in its own module, imported only when that command runs, so
``prepare`` never pays for importing torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

DEFAULT_DATA = "runs/cmu.npz"  # the default models' data (see `prepare` in the README)


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="BVH files, folders or archives -> a model-space pose "
                       "dataset (.npz) split by clip or by subject")
    p.add_argument("--bvh", nargs="+", required=True, metavar="PATH",
                   help="BVH files, folders (recursive) or archives (.tar.xz, .tar.gz, .zip)")
    p.add_argument("--out", default=DEFAULT_DATA, help="output .npz (default %(default)s)")
    p.add_argument("--map", default="auto", dest="map_spec",
                   help="skeleton mapping: auto, a preset name or a JSON file (default auto)")
    p.add_argument("--units", default="auto", help="auto, m, cm, mm or in (default auto)")
    p.add_argument("--up", default="auto", choices=("auto", "y", "z"),
                   help="each --bvh entry's up axis: y (BVH's convention), z (Blender's BVH "
                   "exporter), or auto: z where most of its first clips have their spines "
                   "along +Z (default auto)")
    p.add_argument("--split", nargs=3, type=float, default=(0.8, 0.1, 0.1),
                   metavar=("TRAIN", "VAL", "TEST"), help="clip fractions (default 0.8 0.1 0.1)")
    p.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    p.add_argument("--split-by", default="auto", choices=("auto", "clip", "subject"),
                   help="split unit per --bvh dataset: auto = by subject where every clip is "
                   "<subject>/<subject>_<trial>.bvh (CMU), else by clip (default auto)")
    p.add_argument("--exclude-first-frame", default="auto", dest="first_frame",
                   choices=("auto", "always", "never"),
                   help="drop each clip's frame 0: auto = when it is a synthetic T-pose "
                   "(CMU's Daz-friendly BVH), always, never (default auto)")
    p.add_argument("--workers", type=int, default=None,
                   help="parser processes (default: one per core)")
    p.add_argument("--json", default=None, help="also write the summary (counts, split, time, "
                   "skipped clips with their reasons) to this JSON file")
    p.set_defaults(run=_run_prepare)


def _run_prepare(args: argparse.Namespace) -> int:
    from training.data import prepare

    summary = prepare(args.bvh, args.out, map_spec=args.map_spec, units=args.units,
                      fractions=args.split, seed=args.seed, workers=args.workers,
                      first_frame=args.first_frame, split_by=args.split_by, up=args.up)
    print(f"clips: {summary['clips']}  frames: {summary['frames']}  "
          f"skipped files: {len(summary['skipped'])}  elapsed: {summary['elapsed_s']:.1f} s")
    for d in summary["datasets"]:
        print(f"{d['path']}: {d['clips']} clips, {d['frames']} frames, {d['up'].upper()}-up, "
              f"split by {d['split_by']} "
              f"({d['groups']} {'subjects' if d['split_by'] == 'subject' else 'clips'}), "
              f"frame 0 dropped in {d['first_frame_dropped']} clips; train/val/test clips "
              + " / ".join(str(v) for v in d["split_clips"].values()) + ", frames "
              + " / ".join(str(v) for v in d["split_frames"].values()))
    print("split (clips): " + ", ".join(f"{k} {v}" for k, v in summary["split_clips"].items()))
    print("split (frames): " + ", ".join(f"{k} {v}" for k, v in summary["split_frames"].items()))
    for note in summary["notes"]:
        print(f"note: {note}")
    print("source bone lengths (m): " + json.dumps(summary["bone_lengths"]))
    print(f"wrote {summary['out']}")
    if args.json:
        from blender_addon.core.fileio import write_json

        write_json(args.json, {"command": args.command_line, **summary})
        print(f"wrote {args.json}")
    return 0


def _write_report(json_path: str | Path, command: str, result: dict, table: str) -> None:
    """A result's JSON, with the command that made it, and its markdown table beside it
    (.md), each written atomically."""
    from blender_addon.core.fileio import atomic_open, write_json

    write_json(json_path, {"command": command, **result})
    with atomic_open(Path(json_path).with_suffix(".md"), "w") as fh:
        fh.write(table)


def _add_benchmark_bvh(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benchmark-bvh", help="our BVH reader against the bvhio library, "
                       "same clips, same run")
    p.add_argument("--bvh", nargs="+", required=True, metavar="PATH")
    p.add_argument("--clips", type=int, default=20, help="clips to time (default 20)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file, "
                   "and their table beside it (.md)")
    p.set_defaults(run=_run_benchmark_bvh)


def _run_benchmark_bvh(args: argparse.Namespace) -> int:
    from training.bench_bvh import benchmark_bvh_readers

    result = benchmark_bvh_readers(args.bvh, max_clips=args.clips)
    if args.json:
        from training.bench_bvh import markdown

        _write_report(args.json, args.command_line, result, markdown(result))
    return 0


def _add_describe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("describe-data", help="the datasets table from prepare --json summaries")
    p.add_argument("summaries", nargs="+", metavar="SUMMARY.json")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)
    p = sub.add_parser("describe-latency", help="the range of each latency figure over "
                       "benchmark --suite latency reports (runs on a quiet machine)")
    p.add_argument("reports", nargs="+", metavar="LATENCY.json")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)
    p = sub.add_parser("describe-models", help="the model sets' training table (time, "
                       "parameters, validation losses) from their manifests")
    p.add_argument("folders", nargs="+", metavar="MODELS")
    p.add_argument("--datasets", nargs="*", default=[], metavar="SUMMARY.json",
                   help="prepare --json summaries giving each set's train frames")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)


def _run_describe(args: argparse.Namespace) -> int:
    from training import describe

    if args.command == "describe-data":
        result, text = describe.describe_data(args.summaries), describe.datasets_markdown
    elif args.command == "describe-latency":
        result, text = describe.describe_latency(args.reports), describe.latency_markdown
    else:
        result = describe.describe_models(args.folders, args.datasets)
        text = describe.models_markdown
    table = text(result)
    print(table)
    _write_report(args.json, args.command_line, result, table)
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


def _add_solver_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("solver-check", help="the universal solver alone on real pairs, drags, "
                       "null edits and out-of-reach rest poses (validation split)")
    _add_set_options(p, 2000, "for more columns")
    p.set_defaults(run=_run_solver_check)


def _run_solver_check(args: argparse.Namespace) -> int:
    from training.solver_check import markdown, run_sets

    return _run_sets(args, run_sets, markdown)


def _add_slider_reach(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("slider-reach", help="how far each metric network follows a request "
                       "(achieved / requested change, validation split)")
    _add_set_options(p, 300, "to compare sets")
    p.set_defaults(run=_run_slider_reach)


def _run_slider_reach(args: argparse.Namespace) -> int:
    from training.metric_reach import markdown_sets, run_sets

    return _run_sets(args, run_sets, markdown_sets)


def _run_sets(args: argparse.Namespace, run_sets: Callable, markdown: Callable) -> int:
    """Run a set-checking command (:func:`_add_set_options`), print its table, write it."""
    result = run_sets([tuple(s) for s in args.sets], args.poses, args.split, args.seed)
    table = markdown({"command": args.command_line, **result})
    print(table)
    if args.json:
        _write_report(args.json, args.command_line, result, table)
    return 0


DEFAULT_RUNS = "runs/train"


def _add_common_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=DEFAULT_DATA, help="dataset .npz (default %(default)s)")
    p.add_argument("--out", default=DEFAULT_RUNS, help="checkpoint folder (default %(default)s)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--epochs", type=int, default=None, help="maximum epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps-per-epoch", type=int, default=0,
                   help="batches per epoch (default: one pass over the train split)")
    p.add_argument("--patience", type=int, default=4, help="early-stopping patience in epochs")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 runs best on a busy "
                   "machine, where idle threads wait on each other)")


def _run_from(args: argparse.Namespace, default_epochs: int):
    from training.data import PoseData
    from training.recipes import Run
    from training.train import TrainConfig

    if args.epochs is not None and args.epochs < 1:
        raise CliError(f"--epochs must be at least 1, got {args.epochs}")
    if args.threads is not None:
        if args.threads < 1:
            raise CliError(f"--threads must be at least 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    cfg = TrainConfig(epochs=args.epochs or default_epochs, batch_size=args.batch_size,
                      lr=args.lr, steps_per_epoch=args.steps_per_epoch, patience=args.patience,
                      seed=args.seed, device=args.device, resume=args.resume,
                      progress=not args.no_progress)
    return Run(PoseData.load(args.data), Path(args.out), cfg)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-ae", help="train the pose autoencoder")
    _add_common_train(p)
    p.add_argument("--arch", default="all", help="seed, untied or all (default: all, the "
                   "lowest validation loss becomes ae.pt)")
    p.set_defaults(run=_run_train_ae)
    p = sub.add_parser("train-solver", help="train an IK solver (needs ae.pt in --out)")
    _add_common_train(p)
    p.add_argument("--group", default="universal", help="universal, hands, feet or head")
    p.set_defaults(run=_run_train_solver)
    p = sub.add_parser("train-metric", help="train metric networks (needs ae.pt in --out)")
    _add_common_train(p)
    p.add_argument("--metric", action="append", default=None, metavar="NAME",
                   help="metric name (repeatable; default: every metric of the spec file)")
    p.add_argument("--metric-specs", default=None, metavar="FILE.json",
                   help="metric specs (default: the built-in metrics)")
    p.set_defaults(run=_run_train_metric)
    p = sub.add_parser("train-all", help="train the whole default set (autoencoders, "
                       "solvers, metric networks)")
    _add_common_train(p)
    p.add_argument("--metric-specs", default=None, metavar="FILE.json")
    p.set_defaults(run=_run_train_all)


def _run_train_ae(args: argparse.Namespace) -> int:
    from training.recipes import AE_ARCHS, choose_autoencoder, train_autoencoder

    archs = list(AE_ARCHS) if args.arch == "all" else [args.arch]
    run = _run_from(args, 20)
    results = [train_autoencoder(run, a) for a in archs]
    best = choose_autoencoder(run, results)
    for r in results:
        print(f"ae {r['arch']}: best val loss {r['best_val']:.4e} ({r['epochs']} epochs, "
              f"{r['seconds']:.0f} s)")
    print(f"chosen: {best['arch']} -> {run.out / 'ae.pt'}")
    return 0


def _run_train_solver(args: argparse.Namespace) -> int:
    from training.recipes import train_solver

    r = train_solver(_run_from(args, 20), args.group)
    print(f"{r['name']}: best val loss {r['best_val']:.4e} ({r['seconds']:.0f} s)")
    return 0


def _run_train_metric(args: argparse.Namespace) -> int:
    from training.recipes import resolve_metrics, train_metric

    run = _run_from(args, 4)
    for spec in resolve_metrics(args.metric, args.metric_specs):
        r = train_metric(run, spec)
        print(f"{r['name']}: best val loss {r['best_val']:.4e} ({r['seconds']:.0f} s)")
    return 0


def _add_add_metric(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add-metric", help="train a metric network onto an exported model set "
                       "(its autoencoder rebuilt from the ONNX files) and add it, or replace "
                       "the one of the same name")
    _add_common_train(p)
    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--metric", action="append", required=True, metavar="NAME",
                   help="metric name (repeatable)")
    p.add_argument("--metric-specs", default=None, metavar="FILE.json",
                   help="metric specs (default: the built-in metrics)")
    p.set_defaults(run=_run_add_metric, out="runs/add-metric")


def _run_add_metric(args: argparse.Namespace) -> int:
    from training.add_metric import add_metric
    from training.recipes import TRAIN_ALL_BUDGET, resolve_metrics

    epochs, steps = TRAIN_ALL_BUDGET["metric"]
    if not args.steps_per_epoch:
        args.steps_per_epoch = steps  # the budget train-all gives a metric network
    run = _run_from(args, epochs)
    for spec in resolve_metrics(args.metric, args.metric_specs):
        entry = add_metric(args.models, run, spec, args.command_line)
        print(f"{args.models}/{entry['file']}: {spec.name}, best val loss "
              f"{entry['best_val']:.4e} ({entry['seconds']:.0f} s); manifest updated")
    return 0


def _run_train_all(args: argparse.Namespace) -> int:
    from training.recipes import TRAIN_ALL_EPOCHS, resolve_metrics, train_all

    run = _run_from(args, 1)
    epochs = {k: args.epochs for k in TRAIN_ALL_EPOCHS} if args.epochs else None
    summary = train_all(run, resolve_metrics(None, args.metric_specs), epochs,
                        command=args.command_line)
    print(f"trained {len(summary['results']) + len(summary['autoencoders'])} networks in "
          f"{summary['seconds'] / 60:.1f} min; autoencoder: {summary['chosen_ae']}")
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="trained checkpoints -> ONNX + manifest.json "
                       "(and TorchScript)")
    p.add_argument("--runs", default=DEFAULT_RUNS, help="checkpoint folder (default %(default)s)")
    p.add_argument("--out", default="models", help="model folder to write (default %(default)s)")
    p.add_argument("--data", default=None, help="dataset .npz for parity checks on real poses")
    p.add_argument("--torchscript", default=None, metavar="DIR",
                   help="also write TorchScript files here (default: RUNS/torchscript)")
    p.add_argument("--about", default=None, metavar="FILE.json",
                   help="what the set learned from, for the manifest's 'about': a JSON object "
                   f"with {', '.join(ABOUT_FIELDS)}")
    p.set_defaults(run=_run_export)


ABOUT_FIELDS = ("name", "data", "licence", "commercial_use", "credit")


def load_about(path: str) -> dict:
    """The ``--about`` JSON: an object with every field of :data:`ABOUT_FIELDS`."""
    try:
        about = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"--about {path}: not a readable JSON file ({exc})") from exc
    missing = [k for k in ABOUT_FIELDS if not isinstance(about, dict) or k not in about]
    if missing:
        raise CliError(f"--about {path}: missing fields {missing} (need {list(ABOUT_FIELDS)})")
    if not isinstance(about["commercial_use"], bool):
        raise CliError(f"--about {path}: commercial_use must be true or false")
    return about


def _run_export(args: argparse.Namespace) -> int:
    from training.export import export

    about = load_about(args.about) if args.about else None
    ts = args.torchscript or str(Path(args.runs) / "torchscript")
    manifest = export(args.runs, args.out, data=args.data, torchscript=ts, about=about)
    total = sum(m["bytes"] for m in manifest["modules"])
    worst = max(manifest["parity_max_abs_error"].values())
    print(f"exported {len(manifest['modules'])} modules to {args.out} "
          f"({total / 1024:.0f} KiB ONNX); torch/onnxruntime parity max error {worst:.1e}; "
          f"TorchScript in {ts}")
    return 0


def _add_export_jacobian(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-jacobian", help="give an exported model set the decoder's "
                       "exact Jacobian graph (refinement in one call per step)")
    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--data", default=None, help="prepared .npz whose training poses choose "
                   "the refined latent directions (default: every latent axis)")
    p.set_defaults(run=_run_export_jacobian)


def _run_export_jacobian(args: argparse.Namespace) -> int:
    from training.jacobian import add_to_folder

    entry = add_to_folder(args.models, args.data)
    print(f"wrote {args.models}/{entry['file']} ({entry['bytes'] / 1024:.0f} KiB, "
          f"relative parity error {entry['parity_relative_error']:.1e})")
    return 0


def _add_results(sub: argparse._SubParsersAction) -> None:
    from training.results import RESULTS

    p = sub.add_parser("results", help="remake the published figures (docs/results/, the "
                       "README's tables) with the commands that make them")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"results to make (default all): {', '.join(RESULTS)}")
    p.set_defaults(run=_run_results)


def _run_results(args: argparse.Namespace) -> int:
    from training.results import run

    run(args.names)
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
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
    from training.evaluate import evaluate, markdown, write_report

    result = evaluate(args.models, args.data, n_pairs=args.pairs, seed=args.seed)
    result["command"] = args.command_line
    print(markdown(result))
    paths = write_report(result, args.out, args.name)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


SINGLE_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _add_benchmark(sub: argparse._SubParsersAction) -> None:
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
    from training import benchmark, drags, latency, pose_families, propagation_quality, sliders

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
    _write_report(json_path, args.command_line, result, text)
    with atomic_open(Path(json_path).with_suffix(".summary.md"), "w") as fh:
        fh.write(short)
    written = [json_path, Path(json_path).with_suffix(".md"), result.get("figure")]
    print("wrote " + ", ".join(str(p) for p in written if p))
    return 0


RANGE_FRAME_STEP = 10  # every 10th training frame fits the joint-angle ranges


def drags_ranges(data: str | None, clips: list):
    """Joint-angle ranges from the dataset's train split, or from the BVH clips themselves."""
    import numpy as np

    from training.data import PoseData
    from training.plausibility import AngleRanges

    if data is not None:
        pd = PoseData.load(data)
        return AngleRanges.fit(pd.poses[pd.split_mask("train")][::RANGE_FRAME_STEP])
    return AngleRanges.fit(np.concatenate(clips)[::RANGE_FRAME_STEP])


def _add_blender_common(p: argparse.ArgumentParser, timeout_s: int) -> None:
    from training.blender_run import DEFAULT_VENV

    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--blender-venv", default=DEFAULT_VENV,
                   help="venv with bpy to run in (default %(default)s; made from its pinned "
                   "requirements when missing)")
    p.add_argument("--archive", default=None, metavar="TAR_XZ",
                   help="Bandai Namco archive to take clips from (default: dataset-1 in "
                   "../shared/data/bandai-namco)")
    p.add_argument("--timeout", type=int, default=timeout_s,
                   help="seconds before the Blender run is stopped (default %(default)s)")


def _add_benchmark_blender(sub: argparse._SubParsersAction) -> None:
    from training.benchmark_blender import DEFAULT_CLIPS, DEFAULT_OUT, DEFAULT_TIMEOUT_S

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
    from training.benchmark_blender import markdown, plot_profile, run
    from training.blender_run import BANDAI_ARCHIVE, BlenderRunError

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
    _write_report(out / "benchmark_blender.json", args.command_line, result, text)
    print(f"wrote {out / 'benchmark_blender.json'}, {out / 'benchmark_blender.md'}"
          + (f", {figure}" if figure else ""))
    return 0


def _add_render_walkthrough(sub: argparse._SubParsersAction) -> None:
    from training.render_walkthrough import (
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
    from training.blender_run import BANDAI_ARCHIVE, BlenderRunError
    from training.render_walkthrough import render

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


COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_prepare, _add_train, _add_export, _add_export_jacobian,
    _add_add_metric, _add_evaluate,
    _add_benchmark,
    _add_benchmark_bvh, _add_describe, _add_solver_check, _add_slider_reach,
    _add_benchmark_blender, _add_render_walkthrough, _add_results,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    args.command_line = " ".join(["python -m training", *words])  # recorded by train-all
    try:
        return args.run(args)
    except (CliError, FileNotFoundError, ValueError, KeyError) as exc:
        # Every user-facing error names the file, joint or option at fault in its message.
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"error: {msg}", file=sys.stderr)
        return 2
