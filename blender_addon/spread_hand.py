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
from .core.skeleton import JOINTS, PARENTS
from .empties import Target

# The joints no other hangs from (head, hands, toes): their bones' turns are not in the
# joints' places, so they are goals too (a wrist turned by hand was turned back, 0.6 rad).
_ENDS = tuple(j for j in range(len(JOINTS)) if j not in set(PARENTS.tolist()))


def shown_pose(obj: bpy.types.Object, info: rig_io.RigInfo, matrix_world: np.ndarray
               ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The pose the rig shows now (read before any frame change), where a snap would put
    the empties (:func:`.empties.joint_frames`): core-space joints (21, 3), and the
    armature-space rotations (3, 3) of the end joints' bones."""
    places, turns = empties.joint_frames(obj, info)
    ends = {j: rig_io.world_to_armature_rotation(matrix_world, turns[j]) for j in _ENDS
            if info.joint_bones[j] is not None}
    return rig_io.world_to_core(matrix_world, places), ends


def dragged(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None) -> set[str]:
    """The joints of the effectors whose empties moved since the last solve."""
    moved = empties.moved_since_solve(obj, empties.matrices(obj, depsgraph))
    return {item.joint for item, m in zip(obj.npe.effectors, moved, strict=True) if m}


def as_targets(targets: list[Target], shown: tuple[np.ndarray, dict[int, np.ndarray]],
               moved: set[str]) -> list[Target]:
    """Every joint as a target where :func:`shown_pose` has it (an end joint's bone turned
    as shown too), but the pinned effectors and those of ``moved`` (:func:`dragged`), kept
    as they are."""
    joints, ends = shown
    kept = [t for t in targets if t.pin or t.joint in moved]
    held = {t.joint for t in kept}
    return kept + [Target(name, joints[j], 1.0, False, ends.get(j), np.eye(4).ravel())
                   for j, name in enumerate(JOINTS) if name not in held]
