"""Create or refresh a virtual environment from pinned requirement files, only when needed.

Used by ``scripts/test.sh`` (the dev and Blender venvs) and ``build_addon.py`` (which needs
Blender's extension CLI from the bpy venv), so both agree on what an up-to-date venv is: a
``.stamp`` file in the venv holds a hash of every requirement file it was installed from,
``-r`` includes followed. Stdlib only: this runs before any venv exists.

    python3 scripts/venvs.py .venv requirements.txt requirements-dev.txt
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REQUIRED_PYTHON = (3, 11)  # bpy 4.5 / 5.0 wheels and the extension's wheels are cp311 only
STAMP_NAME = ".stamp"
STAMP_CHARS = 16
INCLUDE_RE = re.compile(r"^\s*(?:-r|--requirement)[\s=]+(\S+)")
# A bpy venv takes about 1.2 GB installed and the dev venv (CPU torch) 1.3 GB; pip unpacks the
# wheels beside them while installing. Below this, pip would stop half-way with ENOSPC.
MIN_FREE_BYTES = 3 * 1024**3


class VenvError(RuntimeError):
    """No suitable Python, or pip failed: the message says which venv and what to do."""


def requirement_files(files: list[Path]) -> list[Path]:
    """The given files plus every file they include with ``-r``, each once, in order."""
    seen: list[Path] = []

    def visit(path: Path) -> None:
        path = path.resolve()
        if path in seen:
            return
        if not path.is_file():
            raise VenvError(f"requirement file not found: {path}")
        seen.append(path)
        for line in path.read_text().splitlines():
            if m := INCLUDE_RE.match(line):
                visit(path.parent / m.group(1))

    for f in files:
        visit(f)
    return seen


def stamp(files: list[Path]) -> str:
    """Hash of the requirement files' names and contents: a pin change means a reinstall."""
    h = hashlib.sha256()
    for path in requirement_files(files):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:STAMP_CHARS]


def find_python() -> str:
    """This interpreter if it is 3.11, else ``python3.11`` on PATH."""
    if sys.version_info[:2] == REQUIRED_PYTHON:
        return sys.executable
    name = "python{}.{}".format(*REQUIRED_PYTHON)
    if found := shutil.which(name):
        return found
    raise VenvError(f"{name} is needed (bpy and the extension's wheels are built for it); "
                    f"this is Python {sys.version.split()[0]}")


def venv_python(venv: Path) -> Path:
    """The venv's interpreter (Windows venvs keep it in Scripts/)."""
    return venv / "Scripts" / "python.exe" if os.name == "nt" else venv / "bin" / "python"


def is_current(venv: Path, files: list[Path]) -> bool:
    """True when the venv exists and was installed from exactly these pins."""
    stamp_file = venv / STAMP_NAME
    return (venv_python(venv).exists() and stamp_file.is_file()
            and stamp_file.read_text().strip() == stamp(files))


def check_free_space(venv: Path, min_free: int = MIN_FREE_BYTES) -> None:
    """Refuse to start an install that the disk cannot hold, rather than leave a broken venv."""
    where = venv.resolve()
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    if free < min_free:
        raise VenvError(f"only {free / 1024**3:.1f} GiB free on the disk of {where}; setting up "
                        f"{venv} needs about {min_free / 1024**3:.0f} GiB: free some space "
                        "(old clones, build folders) and run again")


def ensure_venv(venv: Path, files: list[Path], python: str | None = None) -> Path:
    """Create ``venv`` or update it when its requirement files changed; its interpreter."""
    files = [Path(f) for f in files]
    if is_current(venv, files):
        return venv_python(venv)
    print(f"setting up {venv} from {', '.join(f.name for f in files)} ...", flush=True)
    python = python or find_python()
    check_free_space(venv)
    (venv / STAMP_NAME).unlink(missing_ok=True)  # an interrupted install must not look done
    if not venv_python(venv).exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    cmd = [str(venv_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-cache-dir"]  # a wheel cache would double what the install takes on disk
    for f in files:
        cmd += ["-r", str(f)]
    if subprocess.run(cmd).returncode != 0:
        raise VenvError(f"pip could not install {', '.join(map(str, files))} into {venv}")
    (venv / STAMP_NAME).write_text(stamp(files) + "\n")
    return venv_python(venv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("venv", type=Path)
    parser.add_argument("requirements", type=Path, nargs="+")
    parser.add_argument("--python", help="interpreter to create the venv with (default: 3.11)")
    args = parser.parse_args(argv)
    try:
        ensure_venv(args.venv, args.requirements, args.python)
    except (VenvError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
