"""Spread Edit's goals on every frame of the range: where the effector joints land
(positions) and how the bones of effectors with Use Rotation turn (orientations), from the
effectors at the edited frame and W(t)."""

from __future__ import annotations

import numpy as np

from . import rig_io
from .core.propagate import kept_short
from .core.quaternions import matrix_to_quat, quat_to_matrix
from .core.skeleton import JOINT_INDEX


def positions(targets: list, clip: np.ndarray, edited: np.ndarray, w: np.ndarray, center: int,
              matrix_world: np.ndarray) -> dict[int, np.ndarray]:
    """Where effector joints must land exactly on every frame (armature space).

    A pin holds its joint where the clip had it; a full-weight effector reaches its empty at
    the edited frame, the rest of the models' miss fading out with W(t); one the solve left
    short there beyond its limb's reach (:func:`.core.propagate.kept_short`, as Solve's
    goals) and a softer one keep the edited positions.
    """
    aims = clip[center].copy()
    for t in targets:
        aims[JOINT_INDEX[t.joint]] = t.target_core
    short = kept_short(clip[center], edited[center], aims)
    goals = {}
    for t in targets:
        j = JOINT_INDEX[t.joint]
        if t.pin:
            goal = clip[:, j]
        elif t.weight >= 1.0 and not short[j]:
            goal = edited[:, j] + w[:, None] * (t.target_core - edited[center, j])
        else:
            goal = edited[:, j]
        goals[j] = rig_io.core_to_armature(matrix_world, goal)
    return goals


def orientations(info: rig_io.RigInfo, targets: list, quats: np.ndarray, locs: np.ndarray,
                 w: np.ndarray, center: int) -> dict[int, np.ndarray]:
    """Joint -> (T, 3, 3) armature-space rotations the bones of effectors with Use Rotation
    take: the turn the empty asks at the edited frame (from the bone's own rotation there)
    by W(t) of its angle, on each frame's own rotation (the single solve's at the edited
    frame, the motion's elsewhere)."""
    used = [t for t in targets if t.orientation_armature is not None and not t.pin]
    if not used:
        return {}
    _, rots = rig_io.joint_positions(info, quats, locs)  # (T, needed, 3, 3)
    out = {}
    for t in used:
        j = JOINT_INDEX[t.joint]
        own = rots[:, info.needed.index(info.joint_bones[j])]
        turn = matrix_to_quat(t.orientation_armature @ own[center].T)  # w >= 0
        half = np.arccos(np.clip(turn[0], -1.0, 1.0))
        axis = turn[1:] / max(np.sin(half), 1e-12)
        partial = np.concatenate([np.cos(half * w)[:, None],
                                  np.sin(half * w)[:, None] * axis[None]], axis=1)
        out[j] = quat_to_matrix(partial) @ own
    return out
