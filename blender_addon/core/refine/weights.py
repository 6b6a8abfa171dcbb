"""The refinement's weights: requests, least change, priors, and how much of the body a
request moves (its share)."""

from __future__ import annotations

import functools

import numpy as np

from .. import skeleton
from .layout import _ENDS
from .shrug import PROTRACTION_PRIOR, SHRUG_PRIOR

METRIC_UNIT_M = {"deg": 0.01, "m": 1.0}  # a metric error's weight in metres of joint error

# Per unit of effector weight: heavier lets the learned body reach, lighter keeps a drag local.
EFFECTOR_WEIGHT = 5.0

# A request moving at least this many end joints describes the whole body: its effectors weigh
# up to FULL_BODY_EFFECTOR_WEIGHT, growing with the move up to FULL_BODY_MOVE (no jump).
FULL_BODY_MIN_ENDS = 4

FULL_BODY_EFFECTOR_WEIGHT = 1000.0

FULL_BODY_MOVE = 0.02

# A requested metric: 1 degree off costs like a local effector 25 cm off; effectors and pins
# weigh as much in a slider edit, the other metrics are held at HOLD_WEIGHT.
METRIC_WEIGHT = 3000.0

HOLD_WEIGHT = 10.0  # metrics nobody asked about, during a metric-only edit

BALANCE_WEIGHT = HOLD_WEIGHT  # the body's lean over its feet (:func:`balance`), per metre

# Per non-requested joint coordinate: firm for a local request, loose (FULL_BODY_LEAST_CHANGE)
# for a full-body one, between them with the effectors' share.
LEAST_CHANGE = 10.0

FULL_BODY_LEAST_CHANGE = 0.2

# In a slider edit the held metrics keep the body: a lighter least change.
LEAST_CHANGE_METRIC_EDIT = 0.2

LEARNED_PRIOR = 1e-4  # m^2 per latent unit^2: stay near the networks' latent

SHIFT_PRIOR = 1.0  # a body shift along the floor costs like missing a target by as much

DAMPING = 1e-6  # keeps the normal equations well posed whatever the weights

LM_START, LM_UP, LM_DOWN = 1e-4, 10.0, 0.3  # Levenberg-Marquardt damping, its changes

FD_STEP = 1e-4  # metres: the metric gradient's finite-difference step

# A metric held within this of 0 or 180 degrees (a kink) keeps its cost but no gradient.
KINK_DEG = 0.5

# The rigid branches' rows (pelvis and chest children's distances, per metre): answers a rig
# can take.
RIGID_WEIGHT = 100.0

_RIGID_PAIRS = np.array([[skeleton.JOINT_INDEX[a], skeleton.JOINT_INDEX[b]] for a, b in (
    ("spine", "l_thigh"), ("spine", "r_thigh"), ("l_thigh", "r_thigh"),
    ("neck", "l_clavicle"), ("neck", "r_clavicle"), ("l_clavicle", "r_clavicle"))]).T

_RIGID_SIGNS = (np.eye(skeleton.NUM_JOINTS)[_RIGID_PAIRS[0]]
                - np.eye(skeleton.NUM_JOINTS)[_RIGID_PAIRS[1]])  # (6, 21)


def full_body_share(mask: np.ndarray, targets: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """(B,) how much each request describes the whole body, 0 (local) to 1: the move of its
    :data:`FULL_BODY_MIN_ENDS`-th most moved end over :data:`FULL_BODY_MOVE` (model space)."""
    move = np.where(mask[:, _ENDS] > 0,
                    np.linalg.norm(targets[:, _ENDS] - pose[:, _ENDS], axis=-1), 0.0)
    ends_moved = np.sort(move, axis=1)[:, -FULL_BODY_MIN_ENDS]
    return np.minimum(ends_moved / FULL_BODY_MOVE, 1.0)


def effector_weights(share: np.ndarray) -> np.ndarray:
    """(B,) the effectors' weight per pose: :data:`EFFECTOR_WEIGHT` for a local request,
    rising to :data:`FULL_BODY_EFFECTOR_WEIGHT` with its :func:`full_body_share`."""
    return EFFECTOR_WEIGHT * (FULL_BODY_EFFECTOR_WEIGHT / EFFECTOR_WEIGHT) ** share


def least_change_weights(share: np.ndarray) -> np.ndarray:
    """(B,) the least-change weight per pose: :data:`LEAST_CHANGE` for a local request,
    :data:`FULL_BODY_LEAST_CHANGE` for a full-body one (see :func:`full_body_share`)."""
    return LEAST_CHANGE * (FULL_BODY_LEAST_CHANGE / LEAST_CHANGE) ** share


def _per_pose(value: np.ndarray | float, b: int) -> np.ndarray:
    """A weight given for all poses or per pose (B,), as a column (B, 1)."""
    a = np.asarray(value, dtype=np.float64)
    return a.reshape(-1, 1) if a.ndim else np.full((b, 1), float(a))


_XZ = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a shift (x, z) as a vector

_SHIFT_JAC = np.tile(_XZ.T, (skeleton.NUM_JOINTS, 1))  # d pose / d shift (63, 2): every joint


@functools.cache
def _prior(rank: int, shrug: bool) -> np.ndarray:
    """Per-variable prior weights: the latent's moves, the clavicles' turns (with
    ``shrug``), then the body's shift."""
    out = np.r_[np.full(rank, LEARNED_PRIOR + DAMPING),
                np.full(2 * shrug, SHRUG_PRIOR), np.full(2 * shrug, PROTRACTION_PRIOR),
                np.full(2, SHIFT_PRIOR)]
    out.flags.writeable = False
    return out


def _shifted(pose: np.ndarray, v: np.ndarray) -> np.ndarray:
    return pose + (v[:, -2:] @ _XZ)[:, None]
