"""The Blender side of ``python -m training benchmark-blender`` runs end to end on a few
moves and pairs (its numbers are the benchmark's business; here: every part runs, on every
rig, and writes what the report reads)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600
LIVE_RIGS = ("BVH", "Rigify-size", "generated Rigify rig",
             "generated Rigify rig, limbs left in IK")
TEARDOWN_CRASH = -11 if bpy.app.version < (4, 3, 0) else None  # see test_readme_example


def test_benchmark_blender_runs_every_part(bandai_bvh: Path, models_dir: Path,
                                           tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), BLENDER_USER_RESOURCES=str(tmp_path / "user"))
    proc = subprocess.run(
        [sys.executable, "-m", "training.blender_side.bench", "--models", str(models_dir),
         "--clips", str(bandai_bvh), "--out", str(out), "--moves", "4", "--profile-moves",
         "2", "--pairs", "3", "--propagation-runs", "1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode in (0, TEARDOWN_CRASH), (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(out.read_text())
    live = [r for r in result["live"] if r["live"]]
    assert {r["rig"].split(" (")[0] for r in live} == set(LIVE_RIGS)
    assert all(math.isfinite(r["median_ms"]) and r["median_ms"] > 0 for r in live)
    grabs = [r for r in live if r["setting"].startswith("Neural Grab")]
    assert len(grabs) == len(LIVE_RIGS)  # a grab's drag steps on each rig
    assert all(math.isfinite(r["reach_median_mm"]) for r in grabs)
    assert all(r["profile"] and r["solves_per_move"] >= 1 for r in live if r not in grabs)
    rows = {r["method"].split(",")[0]: r for r in result["ik"]["rows"]}
    assert {"add-on Solve", "Blender IK constraints"} <= set(rows)
    assert rows["add-on Solve"]["median_ms"] > 0
    for key in ("propagation", "propagation_generated", "propagation_generated_ik"):
        assert result[key]["runs"] == 1 and result[key]["median_ms"] > 0, key
