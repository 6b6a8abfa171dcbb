"""The steps of ``test_install.py``, each run in a fresh Blender (a new ``import bpy``).

    python install_probe.py install ZIP      install + enable, disable, enable, save prefs
    python install_probe.py restart          read prefs, use onnxruntime and models, uninstall

A separate process per step because the test needs what a user gets: a fresh user folder
(``BLENDER_USER_RESOURCES``, set by the test), and a restarted Blender, where the extracted
wheels folder comes first on ``sys.path``. Installed mid-session, Blender appends that folder
after the venv's site-packages, so the venv's own onnxruntime would win. Prints one line
``NPE_RESULT {json}`` for the test to check; asserts nothing itself.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import bpy

PKG_ID = "neural_pose_editor"
REPO = "user_default"
MODULE = f"bl_ext.{REPO}.{PKG_ID}"
RESULT_PREFIX = "NPE_RESULT "
NUM_JOINTS = 21
USERPREF_FIXED = (4, 3, 0)  # bpy versions from which read_userpref works in the module
# onnxruntime's declared dependencies that the build does not bundle (addon-wheels.txt).
UNBUNDLED = ("coloredlogs", "flatbuffers", "google", "humanfriendly", "packaging", "sympy")


def repo_dir() -> Path:
    repos = {r.module: r for r in bpy.context.preferences.extensions.repos}
    return Path(repos[REPO].directory)


def local_site_packages() -> Path:
    """Where Blender extracts the wheels of every installed extension."""
    version = "python{}.{}".format(*sys.version_info[:2])
    return repo_dir().parent / ".local" / "lib" / version / "site-packages"


def our_handlers() -> list[str]:
    """Handlers (in any bpy.app.handlers list) defined by the add-on's modules."""
    found = []
    for name in dir(bpy.app.handlers):
        handlers = getattr(bpy.app.handlers, name)
        if isinstance(handlers, list):
            found += [f"{name}:{getattr(f, '__module__', '')}" for f in handlers
                      if getattr(f, "__module__", "").startswith(MODULE)]
    return found


def state() -> dict[str, Any]:
    return {"enabled": MODULE in bpy.context.preferences.addons,
            "operators": sorted(dir(bpy.ops.npe)), "handlers": our_handlers()}


def leftovers() -> list[str]:
    """Files under the extensions folder, besides Blender's own caches and indexes."""
    root = repo_dir().parent
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                  and p.relative_to(root).parts[0] != ".cache" and ".blender_ext" not in p.parts)


def step_install(zip_path: str) -> dict[str, Any]:
    result: dict[str, Any] = {"repo_dir": str(repo_dir())}
    result["install"] = sorted(bpy.ops.extensions.package_install_files(
        filepath=zip_path, repo=REPO, enable_on_install=True))
    result["installed_dir"] = (repo_dir() / PKG_ID).is_dir()
    result["wheels_extracted"] = sorted(p.name for p in local_site_packages().iterdir()
                                        if p.name.startswith("onnxruntime"))
    result["after_install"] = state()
    bpy.ops.preferences.addon_disable(module=MODULE)
    result["after_disable"] = state()
    bpy.ops.preferences.addon_enable(module=MODULE)
    result["after_enable"] = state()
    bpy.ops.wm.save_userpref()
    return result


def step_restart() -> dict[str, Any]:
    result: dict[str, Any] = {"onnxruntime_preloaded": "onnxruntime" in sys.modules}
    # A fresh `import bpy` starts from factory preferences; read_userpref restores the
    # enabled extensions. The bpy 4.2 module crashes in read_userpref (SIGSEGV, even with
    # nothing installed): there the add-on is enabled by hand instead.
    result["restored_by_userpref"] = bpy.app.version >= USERPREF_FIXED
    if result["restored_by_userpref"]:
        bpy.ops.wm.read_userpref()
    else:
        bpy.ops.preferences.addon_enable(module=MODULE)
    result["after_restart"] = state()
    import onnxruntime as ort

    result["onnxruntime_file"] = ort.__file__
    result["local_site_packages"] = str(local_site_packages())
    models = importlib.import_module(f"{MODULE}.core.models")
    import numpy as np

    model_set = models.ModelSet()  # the shipped set, found by default_models_dir()
    result["models_dir"] = str(model_set.folder)
    result["modules"] = sorted(model_set.modules)
    latent = model_set.encode(np.zeros((1, NUM_JOINTS, 3), np.float32))
    result["decoded_shape"] = list(model_set.decode(latent).shape)
    result["unbundled_imported"] = sorted(m for m in UNBUNDLED if m in sys.modules)
    native = importlib.import_module(f"{MODULE}.core.native")
    kernels = native.kernels()  # loaded and checked against numpy in Blender's Python
    result["kernels"] = str(kernels.path) if kernels else None
    result["kernels_refused"] = native._refused

    result["uninstall"] = sorted(bpy.ops.extensions.package_uninstall(
        repo_directory=str(repo_dir()), pkg_id=PKG_ID))
    result["after_uninstall"] = state()
    result["installed_dir_after"] = (repo_dir() / PKG_ID).exists()
    result["leftovers"] = leftovers()
    return result


def main() -> None:
    step, args = sys.argv[1], sys.argv[2:]
    result = step_install(*args) if step == "install" else step_restart()
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    if bpy.app.version < USERPREF_FIXED:  # the 4.2 module also crashes in its teardown
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
