"""Spread Edit of a pose changed outside the add-on: bones turned by hand (Blender's own
rotate, Auto Keying or not), or keys changed at the edited frame. The edit is then the
whole change from the pose the edit started from to the pose shown: every joint aims at
where the rig shows it, but for the effectors the animator dragged, which keep their
empties. (Read from the effectors alone, a forearm turned by hand was dropped, "nothing
to spread"; keyed by Auto Keying, the spread turned it back, the hand 109 mm off, and
pushed the neighbours 55 mm the other way.)"""

from __future__ import annotations

import bpy
import numpy as np

from . import rig_io
from .core.skeleton import JOINT_INDEX, JOINTS
from .empties import Target

DRAGGED_M = 1e-4  # an empty this far (m) from its joint in the pose the edit started from


def shown_joints(obj: bpy.types.Object, info: rig_io.RigInfo, matrix_world: np.ndarray
                 ) -> np.ndarray:
    """(21, 3) core-space joints of the pose the rig shows now (read before any frame
    change)."""
    bpy.context.view_layer.update()
    return rig_io.armature_to_core(matrix_world, rig_io.evaluated_joints(obj, info))


def as_targets(targets: list[Target], shown: np.ndarray, start: np.ndarray
               ) -> list[Target]:
    """Every joint as a target at ``shown`` (21, 3), but for the pinned effectors and those
    dragged off their joint in ``start`` (21, 3), kept as they are."""
    kept = [t for t in targets if t.pin or np.linalg.norm(
        t.target_core - start[JOINT_INDEX[t.joint]]) > DRAGGED_M]
    held = {t.joint for t in kept}
    return kept + [Target(name, shown[j], 1.0, False, None, np.eye(4).ravel())
                   for j, name in enumerate(JOINTS) if name not in held]
