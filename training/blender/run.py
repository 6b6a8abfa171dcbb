"""Run a script of :mod:`training.blender_side` inside the bpy venv, from the dev venv.

The dev venv has no ``bpy`` (a 1 GB wheel pinned to Python 3.11 and numpy < 2), so the
Blender-side commands start ``<venv>/bin/python -m training.blender_side.<script>`` in a
child process: under ``timeout`` (Blender 4.5 can hang at exit when a Python handler is
left registered), with ``BLENDER_USER_RESOURCES`` in a temp dir (the user's own Blender
config is never read or written), the repo as working directory (the add-on registers from
``blender_addon/``), and the same one-thread settings as the engine benchmark.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = ".venv-bpy45"
VENV_PREFIX = ".venv-"  # .venv-bpy45 is made from requirements-bpy45.txt
KILL_GRACE_S = 10  # after the timeout's TERM, KILL this much later
TIMEOUT_CODES = (124, 137)
SINGLE_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
BANDAI_ARCHIVE = REPO.parent / "shared" / "data" / "bandai-namco" / "bandai-namco-dataset-1.tar.xz"


class BlenderRunError(RuntimeError):
    """The Blender-side script could not start, failed or timed out (message says which)."""


def requirements_for(venv: Path) -> Path:
    """The pinned requirement file a Blender venv is made from (by its folder name)."""
    return REPO / f"requirements-{venv.name.removeprefix(VENV_PREFIX)}.txt"


def blender_python(venv: str | os.PathLike[str] = DEFAULT_VENV) -> Path:
    """The bpy venv's interpreter; the venv is created (or refreshed) from its pinned
    requirements with ``scripts/venvs.py`` when those exist, as ``scripts/test.sh`` does."""
    from scripts.venvs import VenvError, ensure_venv, venv_python

    path = Path(venv)
    if not path.is_absolute():
        path = REPO / path
    requirements = requirements_for(path)
    if requirements.is_file():
        try:
            return ensure_venv(path, [requirements])
        except (VenvError, subprocess.CalledProcessError) as exc:
            raise BlenderRunError(f"cannot set up {path}: {exc}") from exc
    python = venv_python(path)
    if not python.exists():
        raise BlenderRunError(f"{path}: no such venv, and no {requirements.name} to make it "
                              f"from; pass --blender-venv {DEFAULT_VENV} or .venv-bpy50")
    return python


def run_in_blender(script: str, args: Sequence[str], venv: str | os.PathLike[str],
                   timeout_s: float) -> None:
    """Run ``training.blender_side.<script>`` with ``args`` in the bpy venv; its output
    streams to this console. Raises :class:`BlenderRunError` on failure or timeout."""
    python = blender_python(venv)
    if shutil.which("timeout") is None:
        raise BlenderRunError("the `timeout` command (coreutils) is needed to guard bpy runs")
    user = tempfile.mkdtemp(prefix="npe-blender-user-")
    env = dict(os.environ, BLENDER_USER_RESOURCES=user, PYTHONUNBUFFERED="1")
    for var in SINGLE_THREAD_ENV:
        env.setdefault(var, "1")
    cmd = ["timeout", f"--kill-after={KILL_GRACE_S}", str(int(timeout_s)), str(python), "-m",
           f"training.blender_side.{script}", *args]
    try:
        rc = subprocess.run(cmd, cwd=REPO, env=env).returncode
    finally:
        shutil.rmtree(user, ignore_errors=True)
    if rc in TIMEOUT_CODES:
        raise BlenderRunError(f"{script} in {python} timed out after {int(timeout_s)} s "
                              "(raise --timeout, or look for a hang at exit)")
    if rc != 0:
        raise BlenderRunError(f"{script} in {python} failed with exit code {rc}")


def check_inputs(models: str, archive: Path) -> None:
    """Fail before starting Blender when the model set or the mocap archive is missing."""
    if not (Path(models) / "manifest.json").is_file():
        raise FileNotFoundError(f"{models}: no model set (manifest.json) there; pass --models "
                                "with a folder made by `python -m training export`")
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: the Bandai Namco mocap archive is needed "
                                "(../shared/data/bandai-namco beside the repo, or --archive)")


def extract_clips(archive: Path, names: Sequence[str], out_dir: Path) -> list[Path]:
    """Clips of a ``.tar.xz`` archive by member name (path or bare file name), in one
    streaming pass; returned in the order asked. Missing names are an error."""
    wanted = {Path(n).name: n for n in names}
    found: dict[str, Path] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            name = Path(member.name).name
            if name in wanted and name not in found:
                out = out_dir / name
                out.write_bytes(tar.extractfile(member).read())
                found[name] = out
                if len(found) == len(wanted):
                    break
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"{archive}: no member named {', '.join(missing)}")
    return [found[Path(n).name] for n in names]
