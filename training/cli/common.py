"""What every command group shares: the user-error type, the default dataset, and how a
result is written (JSON with its markdown table beside it)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DATA = "runs/cmu.npz"  # the default models' data (see `prepare` in the README)
DEFAULT_RUNS = "runs/train"  # where the train commands write and export reads checkpoints


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


def write_report(json_path: str | Path, command: str, result: dict, table: str) -> None:
    """A result's JSON, with the command that made it, and its markdown table beside it
    (.md), each written atomically."""
    from blender_addon.core.fileio import atomic_open, write_json

    write_json(json_path, {"command": command, **result})
    with atomic_open(Path(json_path).with_suffix(".md"), "w") as fh:
        fh.write(table)
