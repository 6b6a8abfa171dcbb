"""The user guide's Scripting example runs as printed: map, edit and key two frames, spread."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "USER_GUIDE.md"  # the example lives there
SECTION = "## Scripting"
TIMEOUT_S = 300  # a fresh bpy process: import, solve, propagate, exit
REACH_CM = 1.0  # the right wrist ends this close to its dragged empty
KEPT_CM = 0.05  # a keyed frame stays as keyed after another frame is edited (printed in cm)
# bpy 4.2 (the module, not Blender itself) crashes in its own teardown, after the script
# has run, once any property with an update callback was registered (SIGSEGV at exit):
# there the script passes when it printed everything.
TEARDOWN_CRASH = -11 if bpy.app.version < (4, 3, 0) else None


def readme_example() -> str:
    """The first ```python block after the Scripting heading."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    match = re.search(r"```python\n(.*?)```", text[start:], re.DOTALL)
    assert match, f"no python block under {SECTION!r} in {GUIDE}"
    return match.group(1)


def test_readme_scripting_example_runs(tmp_path: Path, bandai_bvh: Path, models_dir: Path
                                       ) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), BLENDER_USER_RESOURCES=str(tmp_path / "user"))
    proc = subprocess.run([sys.executable, str(script), str(bandai_bvh), str(models_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, TEARDOWN_CRASH), out[-3000:]
    miss = re.search(r"right wrist ([\d.]+) cm from its empty", out)
    assert miss and float(miss.group(1)) < REACH_CM, out[-3000:]
    frame_40 = re.search(r"frame 40: left wrist ([\d.]+) cm from its empty", out)
    assert frame_40 and float(frame_40.group(1)) < REACH_CM, out[-3000:]
    frame_30 = re.search(r"frame 30: right wrist ([\d.]+) cm from where it was keyed", out)
    assert frame_30 and float(frame_30.group(1)) < KEPT_CM, out[-3000:]
    assert "Spread Edit over frames" in out, out[-3000:]
