"""Metric rows: the sliders' errors and their gradients, measured on the pose as a rig
shows it, and the balance row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import skeleton
from ..metrics import MetricSpec, evaluate_metric
from ..rigid_branches import FIT_JOINTS, keep_rigid
from .layout import _POSE_DIM
from .lengths import _EYE_POSE
from .weights import FD_STEP, KINK_DEG, METRIC_UNIT_M


@dataclass
class MetricRows:
    """Metric residuals of one refinement: specs, their targets (B,) in model units, and
    their weights (B,) (0 switches a row off). ``start`` (B, 21, 3): measure the metrics on
    the pose as a rig shows it, its pelvis and chest branches put back in the start's
    shape (:func:`.rigid_branches.keep_rigid`, as the engine does afterwards); None: on
    the pose itself."""
    specs: list[MetricSpec]
    targets: list[np.ndarray]
    weights: list[np.ndarray]
    start: np.ndarray | None = None
    # (B, 2) the pelvis's floor offset from the ankles to keep (:func:`balance`) and its
    # weights (B,), or None.
    balance: np.ndarray | None = None
    balance_weights: np.ndarray | None = None


# The pelvis's offset along the floor (x, z) from the midpoint of the ankles, as rows over
# the flat pose (2, 63): how far the body leans over its feet. No slider measures it, so
# without a hold a request the held metrics resist (lowering the hands 20 cm with knees
# and trunk held) is met by tilting straight legs: the body slides half a metre over its
# planted feet.
_ANKLES = skeleton.joint_indices(["l_foot", "r_foot"])

_BALANCE_ROWS = np.zeros((2, skeleton.NUM_JOINTS, 3))
for _row, _axis in enumerate((0, 2)):
    _BALANCE_ROWS[_row, skeleton.ROOT, _axis] = 1.0
    _BALANCE_ROWS[_row, _ANKLES, _axis] = -0.5
_BALANCE_ROWS = _BALANCE_ROWS.reshape(2, _POSE_DIM)


def balance(pose: np.ndarray) -> np.ndarray:
    """(B, 2) the pelvis's floor offset from the midpoint of the ankles, of poses (B, 21, 3)."""
    return pose.reshape(len(pose), -1) @ _BALANCE_ROWS.T


def _as_rig_shows(pose: np.ndarray, start: np.ndarray | None) -> np.ndarray:
    """Poses (B, ..., 21, 3) as a rig shows them (see :class:`MetricRows`)."""
    if start is None:
        return pose
    flat = pose.reshape(len(pose), -1, skeleton.NUM_JOINTS, 3)
    starts = np.repeat(start, flat.shape[1], axis=0)
    return keep_rigid(flat.reshape(-1, skeleton.NUM_JOINTS, 3), starts).reshape(pose.shape)


def _probes(pose: np.ndarray, shown: np.ndarray, start: np.ndarray | None) -> np.ndarray:
    """The forward difference's probes (B, 63, 21, 3): the pose with each coordinate moved
    by :data:`FD_STEP`, as a rig shows it. A probe moving a joint outside
    :data:`.rigid_branches.FIT_JOINTS` is the shown pose with that joint moved (the fit
    does not see it): only the others go through the fit."""
    if start is None:
        return pose[:, None] + _EYE_POSE[None]
    probes = shown[:, None] + _EYE_POSE[None]
    probes[:, _FIT_COORDS] = _as_rig_shows(pose[:, None] + _EYE_POSE[_FIT_COORDS][None], start)
    return probes


_FIT_COORDS = (3 * FIT_JOINTS[:, None] + np.arange(3)).ravel()  # their coordinates in 63


def _metric_block(pose: np.ndarray, rows: MetricRows, gradient: bool = True
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """Weighted metric residuals (B, M) and, with ``gradient``, their gradients with respect
    to the pose (B, M, 63): a batched forward difference through the metrics as the sliders
    measure them, on the pose as a rig shows it; rows weighted 0 for every pose are
    skipped."""
    shown = _as_rig_shows(pose, rows.start)
    probes = _probes(pose, shown, rows.start) if gradient else None
    res, grads = [], []
    for spec, target, weight in zip(rows.specs, rows.targets, rows.weights, strict=True):
        if not weight.any():
            continue
        value = evaluate_metric(shown, spec)
        s = np.sqrt(weight) * METRIC_UNIT_M[spec.unit]
        res.append((value - target) * s)
        if gradient:
            grad = (evaluate_metric(probes, spec) - value[:, None]) / FD_STEP
            if spec.kind == "angle":
                grad[_at_kink(value) & _at_kink(target)] = 0.0
            grads.append(grad * s[:, None])
    if rows.balance is not None:
        s = np.sqrt(rows.balance_weights)[:, None]
        res.extend(((balance(pose) - rows.balance) * s).T)
        if gradient:
            grads.extend(np.broadcast_to(_BALANCE_ROWS[None] * s[..., None],
                                         (len(pose), *_BALANCE_ROWS.shape)).transpose(1, 0, 2))
    return np.stack(res, axis=1), np.stack(grads, axis=1) if gradient else None


def _at_kink(angle: np.ndarray) -> np.ndarray:
    """Angles (degrees) within :data:`KINK_DEG` of 0 or 180."""
    return np.minimum(angle, 180.0 - angle) < KINK_DEG
