"""Command line: ``python -m training <command> [options]``.

Each command's work lives in its own module, imported only when that command runs, so
``prepare`` never pays for importing torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from training.cli import blender, data, evaluation, export, learning, reports
from training.cli.common import CliError

# The sub-commands in the order --help lists them.
COMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    data.add_prepare, learning.add_train, export.add_export, export.add_export_jacobian,
    learning.add_add_metric, evaluation.add_evaluate,
    evaluation.add_benchmark, evaluation.add_benchmark_bvh, reports.add_describe,
    evaluation.add_solver_check, evaluation.add_slider_reach, blender.add_benchmark_blender,
    blender.add_render_walkthrough, reports.add_results,
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
