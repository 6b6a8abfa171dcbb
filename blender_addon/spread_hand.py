"""Spread Edit of a pose changed outside the add-on: bones turned by hand (Blender's own
rotate, Auto Keying or not), or keys changed at the edited frame. The edit is then the
whole change from the pose the edit started from to the pose shown: every joint aims at
where the rig shows it, but for the effectors moved since the last solve (and pins),
which keep their empties, as a solve does (:func:`.empties.follow_pose`). (Read from the
effectors alone, a forearm turned by hand was dropped, "nothing to spread"; keyed by Auto
Keying, the spread turned it back, the hand 109 mm off, and pushed the neighbours 55 mm
the other way.)"""

from __future__ import annotations

import bpy
import numpy as np

from . import empties, rig_io
from .core.skeleton import JOINTS
from .empties import Target


def shown_joints(obj: bpy.types.Object, info: rig_io.RigInfo, matrix_world: np.ndarray
                 ) -> np.ndarray:
    """(21, 3) core-space joints of the pose the rig shows now (read before any frame
    change)."""
    bpy.context.view_layer.update()
    return rig_io.armature_to_core(matrix_world, rig_io.evaluated_joints(obj, info))


def dragged(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None) -> set[str]:
    """The joints of the effectors whose empties moved since the last solve."""
    now = empties.matrices(obj, depsgraph)
    solved = empties.solved_matrices(obj)
    if solved.shape != (len(now), 16):
        return {item.joint for item in obj.npe.effectors}
    return {item.joint for item, m in zip(obj.npe.effectors, empties.moved_rows(now, solved),
                                          strict=True) if m}


def as_targets(targets: list[Target], shown: np.ndarray, moved: set[str]) -> list[Target]:
    """Every joint as a target at ``shown`` (21, 3), but the pinned effectors and those of
    ``moved`` (:func:`dragged`), kept as they are."""
    kept = [t for t in targets if t.pin or t.joint in moved]
    held = {t.joint for t in kept}
    return kept + [Target(name, shown[j], 1.0, False, None, np.eye(4).ravel())
                   for j, name in enumerate(JOINTS) if name not in held]
