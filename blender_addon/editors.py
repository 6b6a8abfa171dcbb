"""Pose editors (:class:`.core.pipeline.PoseEditor`) per model set and rig, and the
panel's solve options.

An editor measures the rig's bone lengths on each pose it edits (the distance between
two mapped joints is the pose's own: bones between them that no joint maps, such as the
Daz skeleton's buttock bones under the CMU mocap's thighs, keep their turn through an
edit, so the rest pose's distance is not the one to keep). It is kept per (model set,
rig as read) for the poses it prepared; :func:`forget` drops those of one armature
(through :func:`.state.invalidate`, the one entry point).
"""

from __future__ import annotations

import bpy

from . import rig_io
from .core.models import ModelSet
from .core.pipeline import PoseEditor, SolveOptions

MAX_EDITORS = 16  # editors kept at most (each holds a few arrays and a model set reference)

_EDITORS: dict[tuple, PoseEditor] = {}


def editor_for(obj: bpy.types.Object, info: rig_io.RigInfo, models: ModelSet | None
               ) -> PoseEditor:
    """One editor per (model set, rig); it takes each pose's own bone lengths."""
    key = (info.key, None if models is None else str(models.folder), id(models))
    editor = _EDITORS.get(key)
    if editor is None:
        editor = PoseEditor(models)
        if len(_EDITORS) >= MAX_EDITORS:
            _EDITORS.clear()
        _EDITORS[key] = editor
    return editor


def forget(obj_name: str | None = None) -> None:
    """Drop the editors of one armature (all when None)."""
    if obj_name is None:
        _EDITORS.clear()
        return
    for key in [k for k in _EDITORS if k[0][0] == obj_name]:  # RigInfo keys start with it
        del _EDITORS[key]


def solve_options(obj: bpy.types.Object) -> SolveOptions:
    """The character's solve options (their defaults are :class:`SolveOptions`' own)."""
    s = obj.npe
    return SolveOptions(solver=s.solver, combine=s.combine, refine_steps=s.refine_steps,
                        fix_lengths=s.fix_lengths, keep_details=s.keep_details,
                        keep_planted_feet=s.keep_planted_feet, body_follow=s.body_follow)
