"""The last millimetres: put full-weight effectors exactly on their targets, from a pose the
refinement has brought within reach, keeping every bone length.

Hands, ankles and the head are placed by an analytic two-bone re-aim of the two bones above
them (upper arm and forearm, thigh and shin, neck and head) from where the limb starts,
bending in the limb's current plane; a toe is turned about its ankle; what hangs below a
moved joint follows it rigidly. Poses where a goal is still off (another effector joint: a
pelvis, a spine, an elbow; or a limb end beyond its limb's reach) take a few full-body
FABRIK iterations (:mod:`.fabrik`) from there, those poses only.
Everything is batched over poses; the loop runs over the few limb types.
"""

from __future__ import annotations

import numpy as np

from . import fabrik
from .skeleton import JOINT_INDEX, PARENTS

FABRIK_ITERATIONS = 30
_EPS = 1e-12
_LIMB_ENDS = tuple(JOINT_INDEX[j] for j in ("l_hand", "r_hand", "l_foot", "r_foot", "head"))
_TOE_OF = {JOINT_INDEX["l_foot"]: JOINT_INDEX["l_toe"], JOINT_INDEX["r_foot"]: JOINT_INDEX["r_toe"]}


def _norm(v: np.ndarray) -> np.ndarray:
    return np.sqrt((v * v).sum(-1))


_END = np.array(_LIMB_ENDS)
_MID = PARENTS[_END]
_START = PARENTS[_MID]
_TOE = np.array([_TOE_OF.get(int(e), -1) for e in _END])  # the toe below an ankle, or -1


def _two_bone(p: np.ndarray, rows: np.ndarray, limb: np.ndarray, target: np.ndarray,
              lengths: np.ndarray) -> None:
    """Re-aim the two bones above each (row, limb end) pair in place to put the end on its
    target; a toe below a moved ankle goes along."""
    end, mid, start = _END[limb], _MID[limb], _START[limb]
    s, a, g = p[rows, start], p[rows, mid], p[rows, end]
    l1, l2 = lengths[rows, mid], lengths[rows, end]
    to_t = target - s
    d = _norm(to_t)
    u = to_t / np.maximum(d, _EPS)[:, None]
    d = np.clip(d, np.abs(l1 - l2) + 1e-9, l1 + l2 - 1e-9)
    # The bend direction: the middle joint's offset from the start-target line (any
    # perpendicular when the limb is straight along it).
    side = (a - s) - u * ((a - s) * u).sum(-1, keepdims=True)
    side_n = _norm(side)
    straight = side_n < 1e-9
    if straight.any():
        side[straight] = np.stack([np.zeros(straight.sum()), u[straight, 2], -u[straight, 1]], 1)
        side_n = _norm(side)
    side /= np.maximum(side_n, _EPS)[:, None]
    cos_a = np.clip((l1 * l1 + d * d - l2 * l2) / (2.0 * l1 * d), -1.0, 1.0)
    new_a = s + l1[:, None] * (cos_a[:, None] * u + np.sqrt(1.0 - cos_a * cos_a)[:, None] * side)
    new_g = s + u * d[:, None]
    p[rows, mid] = new_a
    p[rows, end] = new_g
    toe = _TOE[limb]
    below = toe >= 0
    if below.any():
        p[rows[below], toe[below]] += (new_g - g)[below]


def solve(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray, lengths: np.ndarray,
          tolerance: float, fallback: bool = True) -> np.ndarray:
    """``pose`` (B, 21, 3) with the ``goals`` (B, 21) joints on ``targets``, lengths kept.
    ``fallback=False``: the analytic re-aim only (no FABRIK for what it leaves)."""
    p = np.array(pose, dtype=np.float64)
    lengths = np.broadcast_to(lengths, goals.shape)
    err = np.where(goals, _norm(p - targets), 0.0)
    if err.max(initial=0.0) <= tolerance:
        return p
    start = p.copy()
    rows, limb = np.nonzero(goals[:, _END] & (err[:, _END] > tolerance))
    if rows.size:
        _two_bone(p, rows, limb, targets[rows, _END[limb]], lengths)
    for ankle, toe in _TOE_OF.items():
        rows = np.flatnonzero(goals[:, toe])
        if rows.size:
            aim = targets[rows, toe] - p[rows, ankle]
            p[rows, toe] = p[rows, ankle] + aim * (lengths[rows, toe]
                                                   / np.maximum(_norm(aim), _EPS))[:, None]
    if not fallback:
        return p
    err = np.where(goals, _norm(p - targets), 0.0)
    left = np.flatnonzero(err.max(axis=1) > tolerance)
    if left.size:
        # From the pose before the re-aim: a limb pulled straight towards a target out of
        # its reach would stay straight through FABRIK; the refined bend carries over.
        p[left] = fabrik.solve(start[left], goals[left], targets[left], lengths[left],
                               FABRIK_ITERATIONS, tolerance)
    return p
