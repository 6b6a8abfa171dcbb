"""Fixtures for the add-on's tests in real Blender (the ``bpy`` module from PyPI).

Run with ``.venv-bpy45/bin/python -m pytest tests/blender`` (and ``.venv-bpy50``). In the
main venv, without bpy, every test module here skips itself with a message (each starts with
``pytest.importorskip("bpy")``; a skip raised in a conftest would be a collection error).
The add-on is registered from the repo once per session, every test starts from an empty
scene, and Blender's user config goes to a temp dir.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HAVE_BPY = importlib.util.find_spec("bpy") is not None

if HAVE_BPY:
    # Before bpy is imported: keep Blender's user config and extensions out of $HOME.
    _USER_RESOURCES = tempfile.mkdtemp(prefix="npe-blender-user-")
    os.environ.setdefault("BLENDER_USER_RESOURCES", _USER_RESOURCES)
    atexit.register(shutil.rmtree, _USER_RESOURCES, True)

    import bpy

    import blender_addon
    from blender_addon import preferences
    from blender_addon.core.models import MANIFEST_NAME, default_models_dir
    from tests.blender import rigs
    from training.blender_side.rigs import open_rigify, rigify_blend
    from training.blender_side.spread_figures import CENTER

REPO = Path(__file__).resolve().parents[2]
BANDAI_ARCHIVE = REPO.parent / "shared" / "data" / "bandai-namco" / "bandai-namco-dataset-1.tar.xz"
BANDAI_CLIP = "dataset-1_bow_angry_001.bvh"  # 90 frames
MODELS_ENV = "NPE_TEST_MODELS"

_registered = {"done": False}


def _unregister() -> None:
    """Unregister once: Blender 4.5 hangs at exit while a Python handler is left behind."""
    if _registered["done"]:
        blender_addon.unregister()
        _registered["done"] = False


if HAVE_BPY:
    atexit.register(_unregister)

# bpy 4.2 (the module) crashes in its own teardown once any property with an update
# callback was registered (SIGSEGV at exit, even after unregistering): there the test
# process leaves right after pytest has reported, with pytest's exit status.
_EXIT = {"status": 0}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT["status"] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    if HAVE_BPY and bpy.app.version < (4, 3, 0):
        _unregister()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT["status"])


@pytest.fixture(scope="session")
def addon() -> Iterator[None]:
    """The add-on registered from the repo, with an add-on entry for its preferences."""
    blender_addon.register()
    _registered["done"] = True
    addons = bpy.context.preferences.addons
    if addons.get(preferences.ADDON_ID) is None:
        addons.new().module = preferences.ADDON_ID
    yield
    _unregister()


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The shipped model set ($NPE_TEST_MODELS overrides the folder, as in tests/conftest.py);
    skips with a message when there is none."""
    folder = Path(os.environ.get(MODELS_ENV, default_models_dir()))
    if not (folder / MANIFEST_NAME).is_file():
        pytest.skip(f"no trained models in {folder}; run python -m training train-all/export "
                    f"(or point {MODELS_ENV} at a model folder)")
    return folder


@pytest.fixture
def fresh_scene(addon: None) -> Iterator[bpy.types.Scene]:
    """An empty scene per test; the add-on must stay registered across it."""
    bpy.ops.wm.read_homefile(use_empty=True)
    assert hasattr(bpy.types.Scene, "npe") and hasattr(bpy.ops.npe, "solve")
    prefs = preferences.get_preferences()
    prefs.model_folder = ""
    yield bpy.context.scene
    scene = bpy.context.scene
    if scene is not None and scene.npe.live:
        scene.npe.live = False  # removes the depsgraph handler


@pytest.fixture
def scene(models_dir: Path, fresh_scene: bpy.types.Scene) -> bpy.types.Scene:
    """A fresh scene using the test model set."""
    if models_dir != default_models_dir():
        preferences.get_preferences().model_folder = str(models_dir)
        fresh_scene.npe.model_set = str(models_dir)
    return fresh_scene


@pytest.fixture(scope="session")
def bandai_bvh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 90-frame Bandai Namco clip, extracted once."""
    if not BANDAI_ARCHIVE.is_file():
        pytest.skip(f"real mocap not found at {BANDAI_ARCHIVE} (needs ../shared beside the repo)")
    return rigs.extract_bvh(BANDAI_ARCHIVE, BANDAI_CLIP,
                            tmp_path_factory.mktemp("bvh") / BANDAI_CLIP)


def build_rig(kind: str, request: pytest.FixtureRequest) -> bpy.types.Object:
    """A rig of ``kind``, selected and active (the BVH one skips without the mocap)."""
    bvh = request.getfixturevalue("bandai_bvh") if kind == "bvh" else None
    return rigs.build(kind, bvh)


@pytest.fixture(params=rigs.KINDS if HAVE_BPY else ())
def rig(request: pytest.FixtureRequest, scene: bpy.types.Scene) -> bpy.types.Object:
    """Each test rig in turn, mapped, in a scene with the test model set."""
    obj = build_rig(request.param, request)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    return obj


@pytest.fixture
def rig_of_kind(request: pytest.FixtureRequest) -> Callable[[str], bpy.types.Object]:
    """Builds an unmapped rig of a given kind (for tests parametrized by kind themselves)."""
    return lambda kind: build_rig(kind, request)


@pytest.fixture
def mixamo_rig(scene: bpy.types.Scene) -> bpy.types.Object:
    """The Mixamo-named rig alone, mapped (for tests that need one rig, not each)."""
    obj = rigs.mixamo()
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    return obj


@pytest.fixture(scope="session")
def rigify_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A .blend holding a Rigify rig generated from the human metarig (defaults), made once
    per session by the bundled Rigify add-on in a child process."""
    return rigify_blend(tmp_path_factory.mktemp("rigify") / "generated_rigify.blend")


@pytest.fixture
def rigify_rig(rigify_file: Path, models_dir: Path, scene: bpy.types.Scene
               ) -> bpy.types.Object:
    """The generated Rigify rig, unmapped, selected, in a scene with the test model set."""
    rig = open_rigify(rigify_file)
    if models_dir != default_models_dir():
        bpy.context.scene.npe.model_set = str(models_dir)
    return rig


@pytest.fixture
def clip_rig(scene: bpy.types.Scene, bandai_bvh: Path) -> bpy.types.Object:
    """The 90-frame Bandai clip, mapped, at frame CENTER, with hand effectors."""
    obj = rigs.import_bvh(bandai_bvh)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(CENTER)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    return obj
