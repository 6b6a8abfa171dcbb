"""Learning commands: ``train-ae``, ``train-solver``, ``train-metric``, ``train-all``,
``add-metric``."""

from __future__ import annotations

import argparse
from pathlib import Path

from training.cli.common import DEFAULT_DATA, DEFAULT_RUNS, CliError


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
    from training.data.dataset import PoseData
    from training.learning.recipes import Run
    from training.learning.train import TrainConfig

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


def add_train(sub: argparse._SubParsersAction) -> None:
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
    from training.learning.recipes import AE_ARCHS, choose_autoencoder, train_autoencoder

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
    from training.learning.recipes import train_solver

    r = train_solver(_run_from(args, 20), args.group)
    print(f"{r['name']}: best val loss {r['best_val']:.4e} ({r['seconds']:.0f} s)")
    return 0


def _run_train_metric(args: argparse.Namespace) -> int:
    from training.learning.recipes import resolve_metrics, train_metric

    run = _run_from(args, 4)
    for spec in resolve_metrics(args.metric, args.metric_specs):
        r = train_metric(run, spec)
        print(f"{r['name']}: best val loss {r['best_val']:.4e} ({r['seconds']:.0f} s)")
    return 0


def add_add_metric(sub: argparse._SubParsersAction) -> None:
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
    from training.learning.add_metric import add_metric
    from training.learning.recipes import TRAIN_ALL_BUDGET, resolve_metrics

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
    from training.learning.recipes import TRAIN_ALL_EPOCHS, resolve_metrics, train_all

    run = _run_from(args, 1)
    epochs = {k: args.epochs for k in TRAIN_ALL_EPOCHS} if args.epochs else None
    summary = train_all(run, resolve_metrics(None, args.metric_specs), epochs,
                        command=args.command_line)
    print(f"trained {len(summary['results']) + len(summary['autoencoders'])} networks in "
          f"{summary['seconds'] / 60:.1f} min; autoencoder: {summary['chosen_ae']}")
    return 0
