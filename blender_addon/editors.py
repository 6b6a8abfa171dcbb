"""Pose editors (:class:`.core.pipeline.PoseEditor`) per model set and rig, and the
panel's solve options.

An editor carries the rig's bone lengths in world units, so it is kept per (model set,
rig as read, world scale); :func:`forget` drops those of one armature (through
:func:`.state.invalidate`, the one entry point).
"""

from __future__ import annotations

import bpy
import numpy as np

from . import rig_io
from .core import skeleton
from .core.models import ModelSet
from .core.pipeline import PoseEditor, SolveOptions

MAX_EDITORS = 16  # editors kept at most (each holds a few arrays and a model set reference)
SCALE_DECIMALS = 6  # world scales equal to this many decimals share an editor

_EDITORS: dict[tuple, PoseEditor] = {}


def editor_for(obj: bpy.types.Object, info: rig_io.RigInfo, models: ModelSet | None,
               matrix_world: np.ndarray | None = None) -> PoseEditor:
    """One editor per (model set, rig, world scale): its bone lengths are the rig's rest
    lengths in world units."""
    mw = rig_io.world_matrix(obj) if matrix_world is None else matrix_world
    scale = tuple(np.round(np.linalg.norm(mw[:3, :3], axis=0), SCALE_DECIMALS))
    key = (info.key, None if models is None else str(models.folder), id(models), scale)
    editor = _EDITORS.get(key)
    if editor is None:
        nb = len(info.names)
        rest, _ = rig_io.joint_positions(info, np.tile([1.0, 0.0, 0.0, 0.0], (nb, 1)),
                                         np.zeros((nb, 3)))
        lengths = skeleton.bone_lengths(rig_io.armature_to_core(mw, rest))
        editor = PoseEditor(models, lengths=lengths)
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


def solve_options(scene: bpy.types.Scene) -> SolveOptions:
    """The panel's solve options (its defaults are :class:`SolveOptions`' own)."""
    s = scene.npe
    return SolveOptions(solver=s.solver, combine=s.combine, refine_steps=s.refine_steps,
                        fix_lengths=s.fix_lengths, keep_details=s.keep_details,
                        keep_planted_feet=s.keep_planted_feet, body_follow=s.body_follow)
