"""The built linux-x64 zip in real Blender: install through Blender's extension operators
into a fresh user folder, enable, disable, enable, restart, run onnxruntime from the bundled
wheel on the shipped models, uninstall. Runs in the bpy venvs (``.venv-bpy45``,
``.venv-bpy50``); skipped where bpy is not installed.

Self-contained: nothing here depends on the other tests' fixtures. The zip is built once per
session with this venv's own ``blender_ext.py``, so each Blender version also checks the
build. Each step runs in its own Blender process (see ``install_probe.py`` for why).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("bpy") is None:
    pytest.skip("bpy is not installed (run in .venv-bpy45 / .venv-bpy50)",
                allow_module_level=True)

import build_addon

PROBE = Path(__file__).with_name("install_probe.py")
RESULT_PREFIX = "NPE_RESULT "
PLATFORM = "linux-x64"  # the platform these tests run on
BLENDER_TIMEOUT_S = 300  # a bpy process that hangs at exit must not hang the suite
MODEL_FILE_MODULES = ("encoder", "decoder")
OPERATOR_RE = re.compile(r"""bl_idname\s*=\s*["']npe\.""")
NUM_JOINTS = 21


def models_dir() -> Path:
    """The model set the zip ships: models/, or NPE_TEST_MODELS (as in tests/conftest.py)."""
    return Path(os.environ.get("NPE_TEST_MODELS", build_addon.MODELS_DIR))


def addon_defines_operators() -> bool:
    """Whether the add-on's source declares any ``npe.*`` operator yet."""
    return any(OPERATOR_RE.search(p.read_text()) for p in build_addon.ADDON_DIR.rglob("*.py"))


def run_probe(user_dir: Path, *args: str) -> dict[str, Any]:
    """Run one probe step in a new Blender process on ``user_dir``; its NPE_RESULT."""
    env = {**os.environ, "BLENDER_USER_RESOURCES": str(user_dir)}
    proc = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True,
                          text=True, timeout=BLENDER_TIMEOUT_S)
    output = proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and lines, f"probe {args[0]} failed:\n{output[-4000:]}"
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


@pytest.fixture(scope="session")
def linux_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The linux-x64 zip, built once with this venv's blender_ext.py into a temp folder."""
    if not (models_dir() / build_addon.MODELS_MANIFEST).is_file():
        pytest.skip(f"no model set in {models_dir()} to ship (train + export first)")
    ext = build_addon.find_blender_ext(Path(sys.executable))
    zips = build_addon.build([PLATFORM], tmp_path_factory.mktemp("dist"),
                             models_dir=models_dir(), blender_ext=ext)
    manifest = tomllib.loads((build_addon.ADDON_DIR / build_addon.MANIFEST_NAME).read_text())
    assert [z.name for z in zips] == [build_addon.zip_name(manifest, PLATFORM)]
    return zips[0]


@pytest.fixture(scope="session")
def lifecycle(linux_zip: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Install (+ disable, enable) in one Blender, then restart, use and uninstall in another."""
    user_dir = tmp_path_factory.mktemp("blender_user")
    return {"install": run_probe(user_dir, "install", str(linux_zip)),
            "restart": run_probe(user_dir, "restart")}


def test_install_enable_disable_enable(lifecycle: dict[str, Any]) -> None:
    r = lifecycle["install"]
    assert r["install"] == ["FINISHED"]
    assert r["installed_dir"]
    assert any(n.startswith("onnxruntime-") and n.endswith(".dist-info")
               for n in r["wheels_extracted"]), r["wheels_extracted"]
    assert r["after_install"]["enabled"]
    assert not r["after_disable"]["enabled"]
    assert r["after_disable"]["operators"] == [], "disable left npe operators registered"
    assert r["after_disable"]["handlers"] == [], "disable left handlers registered"
    assert r["after_enable"]["enabled"]
    if addon_defines_operators():
        assert r["after_install"]["operators"], "no bpy.ops.npe operators after enabling"
        assert r["after_enable"]["operators"] == r["after_install"]["operators"]


def test_restart_keeps_it_enabled(lifecycle: dict[str, Any]) -> None:
    r = lifecycle["restart"]
    if not r["restored_by_userpref"]:
        pytest.skip("the bpy 4.2 module crashes in wm.read_userpref (even with nothing "
                    "installed): enabled extensions cannot be restored in it")
    assert r["after_restart"]["enabled"]
    if addon_defines_operators():
        assert r["after_restart"]["operators"]


def test_onnxruntime_runs_from_the_bundled_wheel(lifecycle: dict[str, Any]) -> None:
    r = lifecycle["restart"]
    assert not r["onnxruntime_preloaded"]
    assert Path(r["onnxruntime_file"]).is_relative_to(r["local_site_packages"]), \
        f"onnxruntime came from {r['onnxruntime_file']}, not the extension's wheel"
    install_dir = Path(lifecycle["install"]["repo_dir"]) / "neural_pose_editor"
    assert Path(r["models_dir"]) == install_dir / "models"
    assert set(MODEL_FILE_MODULES) <= set(r["modules"])
    assert r["decoded_shape"] == [1, NUM_JOINTS, 3]
    # The venv has them, real Blender does not: none may be needed (see addon-wheels.txt).
    assert r["unbundled_imported"] == [], "onnxruntime used a dependency the zip lacks"


def test_the_compiled_kernels_load_from_the_installed_extension(
        lifecycle: dict[str, Any]) -> None:
    """The zip's library for this platform loads in Blender's Python and agrees with the
    numpy code (its self-check), so Live updates run on it."""
    r = lifecycle["restart"]
    install_dir = Path(lifecycle["install"]["repo_dir"]) / "neural_pose_editor"
    assert r["kernels_refused"] is None
    assert r["kernels"] == str(install_dir / "core" / "_native" / PLATFORM / "npe_native.so")


def test_uninstall_leaves_nothing(lifecycle: dict[str, Any]) -> None:
    r = lifecycle["restart"]
    assert r["uninstall"] == ["FINISHED"]
    assert not r["after_uninstall"]["enabled"]
    assert r["after_uninstall"]["operators"] == []
    assert r["after_uninstall"]["handlers"] == []
    assert not r["installed_dir_after"]
    assert r["leftovers"] == []
