"""The clavicles' turns as refinement variables (a request that shrugs or opens the
shoulders)."""

from __future__ import annotations

import numpy as np

from .. import skeleton
from ..conversions import axis_angle_to_matrix
from ..metrics import MetricSpec
from ..quaternions import EPS, norm
from .layout import _POSE_DIM

# The clavicles' turns as variables: a radian of elevation costs like a joint moved
# SHRUG_PRIOR ** 0.5 m, of protraction PROTRACTION_PRIOR ** 0.5 m.
SHRUG_PRIOR = 1e-2

PROTRACTION_PRIOR = 0.7

_SHRUG_VARIABLES = 4  # elevation and protraction, each side

_SHRUG_SIDES = skeleton.joint_indices(["l_clavicle", "r_clavicle"])

_SHRUG_NEXT = skeleton.joint_indices(["l_upperarm", "r_upperarm"])

# What hangs below each shoulder (elbow, wrist): carried along by a shrug, not swung.
_SHRUG_BELOW = np.stack([np.flatnonzero(skeleton.ANCESTORS[:, j] > 0)[1:] for j in _SHRUG_NEXT])

# Pose coordinates (63,) a clavicle turn does not carry: the body a request that only turns
# the clavicles keeps as firmly as a drag keeps it (LEAST_CHANGE; at LEAST_CHANGE_METRIC_EDIT
# the latent's small moves turned the chest 0.1-0.6 degrees and moved these joints 1-2.5 mm
# opening the shoulders 20 degrees, 0.1-0.6 mm held; the other metrics the same).
_UNCARRIED = np.isin(np.arange(skeleton.NUM_JOINTS), np.r_[_SHRUG_NEXT, _SHRUG_BELOW.ravel()],
                     invert=True).repeat(3)

_TRUNK_UP = skeleton.joint_indices(["chest", "neck"])


def moves_shoulders(spec: MetricSpec) -> bool:
    """Whether a metric reads a clavicle bone (a clavicle joint and its upper arm), so a
    request for it gets the clavicles' turns as variables (:data:`SHRUG_PRIOR`)."""
    joints = {skeleton.JOINT_INDEX[j] for j in spec.joints}
    return any({int(c), int(u)} <= joints for c, u in zip(_SHRUG_SIDES, _SHRUG_NEXT,
                                                           strict=True))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(norm(v), EPS)[..., None]


def _shrugged(pose: np.ndarray, turn: np.ndarray, jac: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """The pose (B, 21, 3) with each clavicle bone turned about its clavicle joint, the arm
    below carried along as it hangs (its shoulder moves, its direction stays: the shoulder
    joint takes the turn back, as a shrug does), and, given the pose's Jacobian (B, 63, V),
    the turned pose's with the turns' columns appended (the axes taken as fixed). ``turn``
    (B, 4) radians: the left and right clavicles' elevation (about the axis square to the
    trunk and the clavicle bone; positive lowers both), then their protraction (about the
    axis square to that one and the bone: a hunch)."""
    centre = pose[:, _SHRUG_SIDES]  # (B, 2, 3)
    up = pose[:, _TRUNK_UP[1]] - pose[:, _TRUNK_UP[0]]
    bone = pose[:, _SHRUG_NEXT] - centre
    lift = _unit(np.cross(up[:, None], bone))
    reach = _unit(np.cross(bone, lift))
    first = axis_angle_to_matrix(lift, turn[:, :2])
    second = axis_angle_to_matrix(reach, turn[:, 2:])
    rot = second @ first  # (B, 2, 3, 3)
    turned = (rot @ bone[..., None])[..., 0]
    move = turned - bone  # (B, 2, 3): the shoulder's, and all it carries
    out = pose.copy()
    out[:, _SHRUG_NEXT] += move
    out[:, _SHRUG_BELOW] += move[:, :, None]
    if jac is None:
        return out, None
    b, variables = len(pose), jac.shape[-1]
    j = jac.reshape(b, skeleton.NUM_JOINTS, 3, variables).copy()
    base = j[:, _SHRUG_SIDES]  # (B, 2, 3, V)
    dmove = rot @ (j[:, _SHRUG_NEXT] - base) - (j[:, _SHRUG_NEXT] - base)
    j[:, _SHRUG_NEXT] += dmove
    j[:, _SHRUG_BELOW] += dmove[:, :, None]
    # d/dturn of R2 R1 bone: (R2 lift) x (R bone), and reach x (R bone).
    lift_now = (second @ lift[..., None])[..., 0]
    columns = np.zeros((b, skeleton.NUM_JOINTS, 3, 4))
    for k, axis in enumerate((lift_now, reach)):
        moved = np.cross(axis, turned)  # (B, 2, 3)
        for side in range(2):
            carried = np.r_[_SHRUG_NEXT[side], _SHRUG_BELOW[side]]
            columns[..., 2 * k + side][:, carried] = moved[:, side, None]
    return out, np.concatenate([j, columns], axis=3).reshape(b, _POSE_DIM, variables + 4)
