"""Branch points a rig carries rigidly: the pelvis holds the spine and both hips, the chest
the neck and both clavicles.

On a rig each of these is one bone, so the angles between its children cannot change; the
networks' poses change them a little, and the rotation stage's best fit of that bone then
leaves the hips (or the neck) some millimetres from where the engine solved them. With a
planted foot and a nearly straight leg that is enough to put the foot out of the leg's
reach as Blender evaluates the rig. :func:`keep_rigid` puts each branch of the start pose,
as a whole, where it best fits the solved one before the exact-reach pass, so the engine's
answer is one the rig can take exactly.
"""

from __future__ import annotations

import numpy as np

from .quaternions import best_rotation
from .skeleton import ANCESTORS, JOINT_INDEX, ROOT

# The pelvis branch fits its place too (the pelvis is the rig's root; a translation is
# free): the hips count most, as the legs hang from them and the feet are often held, so
# a knee need not bend to make up for a hip the fit moved; the pelvis and spine settle the
# turn about the line through the hips (the chest above is re-aimed anyway).
_PELVIS_POINTS = np.array([ROOT] + [JOINT_INDEX[j] for j in ("spine", "l_thigh", "r_thigh")])
_PELVIS_WEIGHTS = np.array([0.01, 0.01, 1.0, 1.0])
_LEAN_WEIGHTS = np.array([0.01, 1.0, 1.0, 1.0])
_HELD_PELVIS_WEIGHT = 1e6  # a pelvis with a goal of its own stays where it is
# The chest branch turns about the chest (the spine bone below fixes where the chest is).
_CHEST = JOINT_INDEX["chest"]
_CHEST_CHILDREN = np.array([JOINT_INDEX[j] for j in ("neck", "l_clavicle", "r_clavicle")])
# Each branch child's subtree (the child included), carried along when the child moves.
_SUBTREE: dict[int, np.ndarray] = {
    int(c): np.flatnonzero(ANCESTORS[:, c] > 0)
    for c in (*_PELVIS_POINTS[1:], *_CHEST_CHILDREN)
}


def _carry(out: np.ndarray, children: np.ndarray, placed: np.ndarray) -> None:
    """Move each child to its new place (B, K, 3), in place, with what hangs below it."""
    shift = placed - out[:, children]
    for k, c in enumerate(children):
        out[:, _SUBTREE[int(c)]] += shift[:, k, None]


def keep_rigid(pose: np.ndarray, start: np.ndarray, held_pelvis: np.ndarray | None = None,
               lean: bool = False) -> np.ndarray:
    """``pose`` (B, 21, 3) with each branch placed as in ``start`` (B, 21, 3), moved as a
    whole to best fit the pose's; what hangs below a branch's child moves with it, so every
    bone keeps its length. ``held_pelvis`` (B,): poses whose pelvis must stay put;
    ``lean``: the spine counts as much as the hips (a pose that leans to reach, where the
    pelvis turns with the trunk and the legs are re-aimed after)."""
    out = np.array(pose, dtype=np.float64)
    weights = np.broadcast_to(_LEAN_WEIGHTS if lean else _PELVIS_WEIGHTS,
                              (len(out), len(_PELVIS_POINTS))).copy()
    if held_pelvis is not None:
        weights[held_pelvis, 0] = _HELD_PELVIS_WEIGHT
    share = (weights / weights.sum(axis=1, keepdims=True))[..., None]
    was, now = start[:, _PELVIS_POINTS], out[:, _PELVIS_POINTS]
    was_c, now_c = (was * share).sum(axis=1), (now * share).sum(axis=1)
    turn = best_rotation(was - was_c[:, None], now - now_c[:, None], weights)
    placed = now_c[:, None] + (was - was_c[:, None]) @ turn.swapaxes(-1, -2)
    out[:, ROOT] = placed[:, 0]
    _carry(out, _PELVIS_POINTS[1:], placed[:, 1:])

    was = start[:, _CHEST_CHILDREN] - start[:, _CHEST, None]
    turn = best_rotation(was, out[:, _CHEST_CHILDREN] - out[:, _CHEST, None])
    _carry(out, _CHEST_CHILDREN, out[:, _CHEST, None] + was @ turn.swapaxes(-1, -2))
    return out
