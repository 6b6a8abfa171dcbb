"""The last millimetres: put full-weight effectors exactly on their targets, from a pose the
refinement has brought within reach, keeping every bone length.

Hands, ankles and the head are placed by an analytic two-bone re-aim of the two bones above
them (upper arm and forearm, thigh and shin, neck and head) from where the limb starts,
bending in the limb's current plane; a toe is turned about its ankle; what hangs below a
moved joint follows it rigidly. A head goal beyond the neck's reach from the chest (necks
are nearly straight) first bends the trunk at the chest, the same way one level down.
Poses where a goal is still off (another effector joint: a
pelvis, a spine, an elbow; or a limb end beyond its limb's reach) take a few full-body
FABRIK iterations (:mod:`.fabrik`) from there, those poses only.
Everything is batched over poses; the loop runs over the few limb types.
"""

from __future__ import annotations

import numpy as np

from . import fabrik
from .skeleton import ANCESTORS, END_JOINTS, JOINT_INDEX, PARENTS

FABRIK_ITERATIONS = 30
_EPS = 1e-12
_SLACK = 1e-9  # of a limb's length: how far from fully straight or folded a limb stays
_LIMB_ENDS = tuple(JOINT_INDEX[j] for j in END_JOINTS)
_TOE_OF = {JOINT_INDEX["l_foot"]: JOINT_INDEX["l_toe"], JOINT_INDEX["r_foot"]: JOINT_INDEX["r_toe"]}


def _norm(v: np.ndarray) -> np.ndarray:
    return np.sqrt((v * v).sum(-1))


def _clip(v: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """np.clip without its overhead (a few microseconds a call on these small arrays)."""
    return np.minimum(np.maximum(v, low), high)


_END = np.array(_LIMB_ENDS)
_MID = PARENTS[_END]
_START = PARENTS[_MID]
_TOE = np.array([_TOE_OF.get(int(e), -1) for e in _END])  # the toe below an ankle, or -1
_PELVIS, _CHEST, _NECK, _HEAD = (JOINT_INDEX[j] for j in ("pelvis", "chest", "neck", "head"))
_TRUNK = np.flatnonzero(ANCESTORS[:, JOINT_INDEX["spine"]] > 0)  # the spine and above it
_NECK_UP = np.flatnonzero(ANCESTORS[:, _NECK] > 0)  # the neck and the head
_YZX, _ZXY = np.array([1, 2, 0]), np.array([2, 0, 1])  # cross products by index
_REACH_MARGIN = 1e-6  # m: a goal this close to the neck's full reach counts as beyond it


def _bend(s: np.ndarray, a: np.ndarray, target: np.ndarray, l1: np.ndarray, l2: np.ndarray,
          straightest: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Two segments, start ``s`` -> middle ``a`` (length ``l1``) -> end (``l2``), re-aimed
    from ``s`` so the end reaches ``target`` as near as their lengths allow (and no
    straighter than ``straightest``), bending in the plane of their current bend: the new
    middle and end (B, 3) each."""
    to_t = target - s
    d = _norm(to_t)
    u = to_t / np.maximum(d, _EPS)[:, None]
    d = _clip(d, np.abs(l1 - l2) + _SLACK * (l1 + l2),
              (l1 + l2) * min(1.0 - _SLACK, straightest))
    # The bend direction: the middle joint's offset from the start-target line (any
    # perpendicular when the limb is straight along it).
    side = (a - s) - u * ((a - s) * u).sum(-1, keepdims=True)
    side_n = _norm(side)
    straight = side_n < _SLACK * l1
    if straight.any():
        side[straight] = np.stack([np.zeros(straight.sum()), u[straight, 2], -u[straight, 1]], 1)
        side_n = _norm(side)
    side /= np.maximum(side_n, _EPS)[:, None]
    cos_a = _clip((l1 * l1 + d * d - l2 * l2) / (2.0 * l1 * d), -1.0, 1.0)
    new_a = s + l1[:, None] * (cos_a[:, None] * u + np.sqrt(1.0 - cos_a * cos_a)[:, None] * side)
    return new_a, s + u * d[:, None]


def _two_bone(p: np.ndarray, rows: np.ndarray, limb: np.ndarray, target: np.ndarray,
              lengths: np.ndarray, straightest: float = 1.0) -> None:
    """Re-aim the two bones above each (row, limb end) pair in place to put the end on its
    target; a toe below a moved ankle goes along."""
    end, mid, start = _END[limb], _MID[limb], _START[limb]
    g = p[rows, end]
    new_a, new_g = _bend(p[rows, start], p[rows, mid], target, lengths[rows, mid],
                         lengths[rows, end], straightest)
    p[rows, mid] = new_a
    p[rows, end] = new_g
    toe = _TOE[limb]
    below = toe >= 0
    if below.any():
        p[rows[below], toe[below]] += (new_g - g)[below]


def _rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(B, 3, 3) the smallest rotations taking the directions of ``a`` to those of ``b``
    (B, 3): ``I + [v]x + [v]x^2 / (1 + c)`` with ``v = a x b``, ``c = a . b`` (the turns
    here are small; opposite directions would have no smallest one)."""
    a = a / np.maximum(_norm(a), _EPS)[:, None]
    b = b / np.maximum(_norm(b), _EPS)[:, None]
    cross = a[:, _YZX] * b[:, _ZXY] - a[:, _ZXY] * b[:, _YZX]
    skew = np.zeros((len(a), 3, 3))  # [v]x
    skew[:, _ZXY, _YZX] = cross
    skew[:, _YZX, _ZXY] = -cross
    cos = (a * b).sum(-1)
    return np.eye(3) + skew + (skew @ skew) / np.maximum(1.0 + cos, _EPS)[:, None, None]


def _bend_spine_to_head(p: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                        lengths: np.ndarray) -> bool:
    """Where the head's goal lies beyond the neck's reach from the chest (a neck is nearly
    straight), bend the trunk at the chest, in place: the pelvis -> chest and chest -> head
    segments, each rigid, re-aimed as a two-bone limb from the pelvis (the trunk and all it
    carries turn about the pelvis, the neck and head about the chest). The two-bone re-aim
    of the neck then has the last millimetres to do. True where it bent a trunk."""
    rows = np.flatnonzero(goals[:, _HEAD])
    if not rows.size:
        return False
    pelvis, chest, head = p[rows, _PELVIS], p[rows, _CHEST], p[rows, _HEAD]
    goal = targets[rows, _HEAD]
    reach = lengths[rows, _NECK] + lengths[rows, _HEAD]
    far = _norm(goal - chest) > reach - _REACH_MARGIN
    if not far.any():
        return False
    rows, pelvis, chest, head, goal = (a[far] for a in (rows, pelvis, chest, head, goal))
    new_chest, _ = _bend(pelvis, chest, goal, _norm(chest - pelvis), _norm(head - chest))
    turn = _rotation(chest - pelvis, new_chest - pelvis)
    upper = p[rows][:, _TRUNK] - pelvis[:, None]
    p[rows[:, None], _TRUNK[None]] = pelvis[:, None] + upper @ turn.transpose(0, 2, 1)
    chest, head = p[rows, _CHEST], p[rows, _HEAD]
    turn = _rotation(head - chest, goal - chest)
    top = p[rows][:, _NECK_UP] - chest[:, None]
    p[rows[:, None], _NECK_UP[None]] = chest[:, None] + top @ turn.transpose(0, 2, 1)
    return True


def solve(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray, lengths: np.ndarray,
          tolerance: float | np.ndarray, fallback: bool = True, straightest: float = 1.0,
          bend_trunk: bool = True) -> np.ndarray:
    """``pose`` (B, 21, 3) with the ``goals`` (B, 21) joints on ``targets``, lengths kept.
    ``fallback=False``: the analytic re-aim only (no FABRIK for what it leaves);
    ``straightest``: a two-bone limb's end stays within this share of the limb's length
    from its start (below 1: the elbow or knee keeps a bend, as real ones do);
    ``bend_trunk=False``: a far head goal leaves the trunk as it is."""
    p = np.array(pose, dtype=np.float64)
    if lengths.shape != goals.shape:
        lengths = np.broadcast_to(lengths, goals.shape)
    tol = tolerance if isinstance(tolerance, np.ndarray) and tolerance.shape == goals.shape[:1] \
        else np.broadcast_to(np.asarray(tolerance, dtype=np.float64), goals.shape[:1])
    err = np.where(goals, _norm(p - targets), 0.0)
    if (err.max(axis=1, initial=0.0) <= tol).all():
        return p
    start = p.copy() if fallback else p
    if bend_trunk and _bend_spine_to_head(p, goals, targets, lengths):
        err = np.where(goals, _norm(p - targets), 0.0)
    rows, limb = np.nonzero(goals[:, _END] & (err[:, _END] > tol[:, None]))
    if rows.size:
        _two_bone(p, rows, limb, targets[rows, _END[limb]], lengths, straightest)
    for ankle, toe in _TOE_OF.items():
        rows = np.flatnonzero(goals[:, toe])
        if rows.size:
            aim = targets[rows, toe] - p[rows, ankle]
            p[rows, toe] = p[rows, ankle] + aim * (lengths[rows, toe]
                                                   / np.maximum(_norm(aim), _EPS))[:, None]
    if not fallback:
        return p
    err = np.where(goals, _norm(p - targets), 0.0)
    left = np.flatnonzero(err.max(axis=1) > tol)
    if left.size:
        # From the pose before the re-aim: a limb pulled straight towards a target out of
        # its reach would stay straight through FABRIK; the refined bend carries over.
        p[left] = fabrik.solve(start[left], goals[left], targets[left], lengths[left],
                               FABRIK_ITERATIONS, tol[left])
    return p
