"""Export commands: ``export``, ``export-jacobian``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.cli.common import DEFAULT_RUNS, CliError


def add_export(sub: argparse._SubParsersAction) -> None:
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
    from training.export.model_set import export

    about = load_about(args.about) if args.about else None
    ts = args.torchscript or str(Path(args.runs) / "torchscript")
    manifest = export(args.runs, args.out, data=args.data, torchscript=ts, about=about)
    total = sum(m["bytes"] for m in manifest["modules"])
    worst = max(manifest["parity_max_abs_error"].values())
    print(f"exported {len(manifest['modules'])} modules to {args.out} "
          f"({total / 1024:.0f} KiB ONNX); torch/onnxruntime parity max error {worst:.1e}; "
          f"TorchScript in {ts}")
    return 0


def add_export_jacobian(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-jacobian", help="give an exported model set the decoder's "
                       "exact Jacobian graph (refinement in one call per step)")
    p.add_argument("--models", default="models", help="model folder (default %(default)s)")
    p.add_argument("--data", default=None, help="prepared .npz whose training poses choose "
                   "the refined latent directions (default: every latent axis)")
    p.set_defaults(run=_run_export_jacobian)


def _run_export_jacobian(args: argparse.Namespace) -> int:
    from training.export.jacobian import add_to_folder

    entry = add_to_folder(args.models, args.data)
    print(f"wrote {args.models}/{entry['file']} ({entry['bytes'] / 1024:.0f} KiB, "
          f"relative parity error {entry['parity_relative_error']:.1e})")
    return 0
