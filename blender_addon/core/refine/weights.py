"""The refinement's weights: requests, least change, priors, and how much of the body a
request moves (its share)."""

from __future__ import annotations

import functools

import numpy as np

from .. import skeleton
from .layout import _ENDS
from .shrug import PROTRACTION_PRIOR, SHRUG_PRIOR

METRIC_UNIT_M = {"deg": 0.01, "m": 1.0}  # a metric error's weight in metres of joint error

# Per unit of effector weight, chosen on the drag and engine benchmarks (CMU test split,
# default set): heavier lets the learned body do the reaching (other joints nearer real
# motion on hands+feet+head: 1.34 cm at 3, 1.17 at 30; classic FABRIK 3.01) but moves the
# other joints more in a one-hand drag (1.66 cm at 3, 1.71 at 5, 1.85 at 30; FABRIK 1.21).
EFFECTOR_WEIGHT = 5.0

# A request that moves most of the end joints (hands, feet, head: at least
# FULL_BODY_MIN_ENDS) describes the whole body, and the learned body should do the reaching
# (the universal solver is trained the same way on such pairs): its effectors weigh
# FULL_BODY_EFFECTOR_WEIGHT. The weight grows geometrically with the move of the
# FULL_BODY_MIN_ENDS-th most moved end, reaching it at FULL_BODY_MOVE (model metres), so a
# pose never jumps when one more end starts to move. Engine benchmark, hands+feet+head,
# refined non-effector MPJPE: CMU set on CMU 1.41 -> 1.17 cm (FABRIK 3.18), on Bandai Namco
# 1.59 -> 1.16 (3.40); CMU + Bandai set on Bandai Namco 1.43 -> 0.90 (300: 0.91, 3000:
# 0.90). With the least change weighted the same way (LEAST_CHANGE below), a move of 2 cm
# instead of 5 for the full weights: CMU 1.21 -> 1.17 cm, CMU + Bandai on Bandai Namco
# 1.09 -> 1.06. Drags move one or two ends: unchanged.
FULL_BODY_MIN_ENDS = 4

FULL_BODY_EFFECTOR_WEIGHT = 1000.0

FULL_BODY_MOVE = 0.02

# A requested metric: 1 degree off costs like a local effector 25 cm off. In an edit with
# metric requests the effectors and pins (planted feet among them) weigh as much as a
# requested metric, 1 cm like 1 degree: the refinement must hold them while it changes the
# pose, or the exact-reach pass puts them back afterwards by bending the legs behind the
# sliders' back. The metrics nobody asked about are held (during a metric-only edit) at
# 1/300 of a request: firmer holds meet the sweep's bound everywhere but find poses the
# metrics do not see (lowering the hands 20 cm with knees and trunk held tilts the whole
# body at the ankles: twice the motion and further from the learned poses). Slider sweep,
# 100 CMU test poses, other metrics' largest change (median) / joints moved / manifold
# distance, lowering the hands 20 cm: 300 / 1 and effectors at 5: 15.8 deg / 8.6 / 0.67
# cm; these: 4.9 / 14.3 / 0.89; holds at 300: 1.0 / 19.5 / 0.95. Flexing the spine 40 deg:
# 5.6 / 8.5 / 2.58, 38 % of poses with an angle out of range; these: 1.3 / 10.7 / 1.52, 22 %.
METRIC_WEIGHT = 3000.0

HOLD_WEIGHT = 10.0  # metrics nobody asked about, during a metric-only edit

BALANCE_WEIGHT = HOLD_WEIGHT  # the body's lean over its feet (:func:`balance`), per metre

# Per non-requested joint coordinate, for a local request (LEAST_CHANGE) and a full-body
# one (FULL_BODY_LEAST_CHANGE), between them as the effector weight (geometrically with the
# same share). A local drag's answers are taken as a rig takes them (pelvis and chest
# rigid, limbs re-aimed exactly): a firm hold keeps the networks' body, and the exact-reach
# pass does the last centimetres in the dragged limb. Drag benchmark, one hand moved 10-25
# cm, CMU set on CMU, other joints' mean displacement / out-of-range angles (classic FABRIK
# 1.21 cm / 21 %): at 0.8 1.87 cm / 26 %, 3: 1.78 / 21 %, 10: 1.76 / 16 % (on Bandai Namco
# poses 2.22 -> 2.08 cm, FABRIK 1.31). A full-body request holds them loosely, as the
# learned body does the reaching (engine benchmark, hands+feet+head, CMU set on CMU / CMU +
# Bandai set on Bandai Namco: 1.17 / 1.06 cm at 0.8, 1.15 / 1.03 at 0.2; 1.27 on CMU at 10).
LEAST_CHANGE = 10.0

FULL_BODY_LEAST_CHANGE = 0.2

# In an edit with metric requests the held metrics (and the body's balance over its feet)
# keep the body; a firmer least change there spreads the request over the held metrics.
# Slider sweep, 60 CMU test poses, the other metrics' largest change (median) / joints
# moved: lowering the hands 20 cm 16.2 deg / 13.3 cm at 0.5, 12.9 / 15.2 at 0.2 (4.2 /
# 19.8 at 0.05 without the balance hold, by leaning the body over its feet); flexing the
# spine 40 deg 1.4 / 11.5 at 0.5, 0.6 / 12.3 at 0.2; every request still reached.
LEAST_CHANGE_METRIC_EDIT = 0.2

LEARNED_PRIOR = 1e-4  # m^2 per latent unit^2: stay near the networks' latent

SHIFT_PRIOR = 1.0  # a body shift along the floor costs like missing a target by as much

DAMPING = 1e-6  # keeps the normal equations well posed whatever the weights

LM_START, LM_UP, LM_DOWN = 1e-4, 10.0, 0.3  # Levenberg-Marquardt damping, its changes

FD_STEP = 1e-4  # metres: the metric gradient's finite-difference step

# An angle of 0 or 180 degrees (two vectors in line, as a T-pose's clavicles) is a kink: any
# move opens it, so a forward difference there points every way at once. A metric held at
# such a value (value and target within this of it) keeps its cost but no gradient: its
# rows would otherwise fight every other request (lowering a T-pose rig's hands reached
# 95 % of the request with the clavicle angle held at 0 through its gradient).
KINK_DEG = 0.5

# A rig's pelvis bone carries the spine and both hips rigidly, its chest bone the neck and
# both clavicles (:mod:`.rigid_branches`): rows on the distances between each branch's
# children (in metres, this weight each) keep the refinement near answers a rig can take,
# so the rigid fit afterwards moves little. Engine benchmark, hands+feet+head, CMU + Bandai
# set on Bandai Namco, refined non-effector MPJPE: 1.03 cm without, 0.99 at 10, 100 or
# 1000; the drag benchmark's figures stay within 0.01 cm and 1 point. Not in slider edits,
# where the held metrics keep the body (lowering the hands 20 cm, CMU test poses, the
# elbows' change: 2.9 degrees without the rows, 3.1 with).
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
