"""Inside bpy: the add-on registered from the repo, a model set chosen, a clean exit.

The launcher (:mod:`training.blender.run`) sets ``BLENDER_USER_RESOURCES`` to a temp dir
before this process starts (the package checks it), so ``import bpy`` never touches the
user's own Blender config.
Blender 4.5 hangs at exit while a Python handler is still registered: :func:`start`
registers the add-on's ``unregister`` with ``atexit``, and scripts must not leave handlers
of their own behind.
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path

import bpy

import blender_addon
from blender_addon import preferences
from blender_addon.core.models import default_models_dir

_STATE = {"registered": False, "t0": time.perf_counter()}


def _unregister() -> None:
    if _STATE["registered"]:
        blender_addon.unregister()
        _STATE["registered"] = False


def start() -> None:
    """Register the add-on from the repo (with a preferences entry) once per process."""
    if _STATE["registered"]:
        return
    blender_addon.register()
    _STATE["registered"] = True
    atexit.register(_unregister)
    addons = bpy.context.preferences.addons
    if addons.get(preferences.ADDON_ID) is None:
        addons.new().module = preferences.ADDON_ID


def new_scene(models: Path) -> bpy.types.Scene:
    """An empty scene using the model set in ``models`` (the shipped one or any folder)."""
    bpy.ops.wm.read_homefile(use_empty=True)
    return use_models(bpy.context.scene, models)


def use_models(scene: bpy.types.Scene, models: Path) -> bpy.types.Scene:
    """Make ``scene`` use the model set in ``models`` (the shipped one or any folder)."""
    prefs = preferences.get_preferences()
    if Path(models).resolve() == default_models_dir().resolve():
        prefs.model_folder = ""
    else:
        prefs.model_folder = str(models)
        scene.npe.model_set = str(models)
    return scene


def progress(message: str) -> None:
    """One progress line with the seconds since start (slow steps say what they do)."""
    print(f"[{time.perf_counter() - _STATE['t0']:6.1f} s] {message}", flush=True)
