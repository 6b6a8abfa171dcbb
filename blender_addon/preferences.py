"""Add-on preferences: where extra model sets live, and how many threads the models use.

Nothing needs telling when they change: the model sets are listed and loaded per folder
and thread count (:mod:`.model_sets`).
"""

from pathlib import Path

import bpy
from bpy.props import IntProperty, StringProperty

ADDON_ID = __package__  # "blender_addon" from the repo, "bl_ext.<repo>.neural_pose_editor"
DEFAULT_THREADS = 1
MAX_THREADS = 64


class NPE_AddonPreferences(bpy.types.AddonPreferences):
    """Model sets trained with ``python -m training`` are listed beside the shipped one."""

    bl_idname = ADDON_ID

    model_folder: StringProperty(
        name="Extra Models",
        description=(
            "A folder with a model set made by `python -m training export` (it holds "
            "manifest.json), or a folder of such sets: they are listed beside the shipped "
            "models in the Neural Pose panel"
        ),
        subtype="DIR_PATH",
    )
    threads: IntProperty(
        name="Threads",
        description="Threads each model may use (onnxruntime intra-op threads)",
        default=DEFAULT_THREADS,
        min=1,
        max=MAX_THREADS,
    )

    def draw(self, context: bpy.types.Context) -> None:
        layout = self.layout
        layout.use_property_split = True
        layout.prop(self, "model_folder")
        layout.prop(self, "threads")
        from .core import native  # deferred: loading checks the kernels once

        row = layout.row()
        row.label(text="Compiled Kernels")
        row.label(text=native.status())
        from . import keymaps

        keymaps.draw(context, layout)


def get_preferences(context: bpy.types.Context | None = None) -> "NPE_AddonPreferences | None":
    """This add-on's preferences, or None when it was registered without an add-on entry."""
    prefs = (context or bpy.context).preferences
    addon = prefs.addons.get(ADDON_ID) if prefs is not None else None
    return addon.preferences if addon is not None else None


def extra_model_folder(context: bpy.types.Context | None = None) -> Path | None:
    prefs = get_preferences(context)
    if prefs is None or not prefs.model_folder:
        return None
    return Path(bpy.path.abspath(prefs.model_folder))


def threads(context: bpy.types.Context | None = None) -> int:
    prefs = get_preferences(context)
    return DEFAULT_THREADS if prefs is None else int(prefs.threads)


CLASSES = (NPE_AddonPreferences,)
