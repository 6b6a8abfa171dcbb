"""Rig-shaped IK that converges: damped least squares (Levenberg-Marquardt) over a rig's
bone turns, for the few poses whose goals the analytic re-aims and rig-shaped FABRIK leave
short.

A rig turns each bone about its head, carrying everything below it; the pelvis and chest
are single bones, so the joints they carry (hips and spine, neck and clavicles) turn
together (:mod:`.rigid_branches`). Here each joint with children turns its whole subtree
about itself, and the pelvis also moves: every answer keeps the bone lengths and the rigid
branches exactly, as a rig would show it. Rig-shaped FABRIK reaches the same goals only
slowly where the trunk must bend to reach them with the feet held (a hand dragged 11 cm
with both planted feet held, Bandai Namco's BVH skeleton: 9.7 mm short after its 60
iterations, 3.3 mm after 2,000); Gauss-Newton steps on the goals' positions converge in a
few. Batched over poses; the loops run over iterations and the tree's depth levels.
"""

from __future__ import annotations

import numpy as np

from .conversions import axis_angle_to_matrix
from .quaternions import norm
from .skeleton import ANCESTORS, DEPTHS, NUM_JOINTS, PARENTS, ROOT

ITERATIONS = 100
# Every other joint is held where the steps start with this weight (a goal's is 1), shrinking
# by STAY_DECAY each step, so the goals end exact and the body moves as little as it must:
# on the poses the engine's drags leave here (1,000 CMU test poses and 1,000 poses of Bandai
# Namco's BVH skeleton per drag: hands, feet, head and pelvis, with and without pins), the
# joints off the goals moved 4.6 and 3.8 cm on average without it, 2.6 and 2.3 with it, the
# goals reached as often.
STAY_WEIGHT, STAY_DECAY = 0.1, 0.8
_INITIAL_DAMPING = 1e-3  # of each turn's own curvature (Marquardt): the start, adapted per pose
_DAMPING_DOWN, _DAMPING_UP = 0.3, 10.0
_MIN_DAMPING, _MAX_DAMPING = 1e-9, 1e6
_MIN_SCALE = 1e-9  # of the largest: a turn that moves nothing is still damped (any units)

# The joints a rig turns (each joint with children), and which joints each one carries:
# BELOW[j, i] when joint i hangs below pivot j (the pelvis carries every other joint).
_PIVOTS = np.array([j for j in range(NUM_JOINTS) if (PARENTS == j).any()])
_BELOW = ((ANCESTORS.T > 0) & ~np.eye(NUM_JOINTS, dtype=bool))
_BELOW[ROOT] = np.arange(NUM_JOINTS) != ROOT
_CARRIED = _BELOW[_PIVOTS].astype(np.float64)  # (P, 21)
_PIVOT_OF = np.full(NUM_JOINTS, -1)
_PIVOT_OF[_PIVOTS] = np.arange(len(_PIVOTS))
# Per depth level (pelvis first): the joints there, whose turns compose with their
# parents' (a bone below a pivot turns by every pivot above it, outermost first).
_LEVELS = tuple(np.flatnonzero(DEPTHS == d) for d in range(1, int(DEPTHS.max()) + 1))
_PARAMS = 3 + 3 * len(_PIVOTS)  # the pelvis's move, then a turn vector per pivot


def _skew_rows(v: np.ndarray) -> np.ndarray:
    """(..., 3, 3) the matrix taking a turn vector w to ``w x v`` (= -[v]x)."""
    out = np.zeros((*v.shape, 3))
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    out[..., 0, 1], out[..., 0, 2] = z, -y
    out[..., 1, 0], out[..., 1, 2] = -z, x
    out[..., 2, 0], out[..., 2, 1] = y, -x
    return out


def _jacobian(p: np.ndarray) -> np.ndarray:
    """(B, 21 * 3, _PARAMS) how each joint moves with the pelvis's move and each pivot's
    turn."""
    b = len(p)
    jac = np.zeros((b, NUM_JOINTS, 3, _PARAMS))
    jac[:, :, :, :3] = np.eye(3)
    arm = p[:, None, :, :] - p[:, _PIVOTS, None, :]  # (B, P, 21, 3) pivot -> joint
    blocks = _skew_rows(arm) * _CARRIED[None, :, :, None, None]  # (B, P, 21, 3, 3)
    jac[:, :, :, 3:] = blocks.transpose(0, 2, 3, 1, 4).reshape(b, NUM_JOINTS, 3, -1)
    return jac.reshape(b, NUM_JOINTS * 3, _PARAMS)


def _apply(p: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The pose (B, 21, 3) after the pelvis moves by ``step[:, :3]`` and each pivot turns
    by its turn vector, all about the pose's current joints (the turns' axes are in world
    space, so each bone's offset turns by every pivot above it, outermost last)."""
    turns = step[:, 3:].reshape(len(p), len(_PIVOTS), 3)
    turn = axis_angle_to_matrix(turns, norm(turns))  # (B, P, 3, 3)
    total = np.broadcast_to(np.eye(3), (len(p), NUM_JOINTS, 3, 3)).copy()
    total[:, ROOT] = turn[:, _PIVOT_OF[ROOT]]
    for level in _LEVELS:  # the turn of each joint's own bones: its parent's, then its own
        parents = PARENTS[level]
        own = _PIVOT_OF[level] >= 0
        total[:, level] = total[:, parents]
        if own.any():
            joints = level[own]
            total[:, joints] = total[:, joints] @ turn[:, _PIVOT_OF[joints]]
    bones = p - p[:, PARENTS.clip(min=0)]
    bones[:, ROOT] = 0.0
    turned = (total[:, PARENTS.clip(min=0)] @ bones[..., None])[..., 0]
    root = p[:, ROOT:ROOT + 1] + step[:, None, :3]
    return root + ANCESTORS @ turned


def _cost(p: np.ndarray, weights: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return (weights * np.add.reduce((targets - p) ** 2, axis=-1)).sum(axis=1)


def solve(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray,
          tolerance: float | np.ndarray, iterations: int = ITERATIONS,
          stay: float = STAY_WEIGHT, stay_decay: float = STAY_DECAY) -> np.ndarray:
    """``pose`` (B, 21, 3) turned as a rig turns it (bone lengths and the pelvis's and
    chest's shapes kept) so its ``goals`` (B, 21) joints reach ``targets``, each pose
    stopping once every goal is within ``tolerance`` (or one per pose, (B,)) or its steps
    stop helping; the other joints are held where they start with the weight ``stay``,
    shrinking by ``stay_decay`` a step. Goals no rig pose reaches end as near as the
    steps get (in the least-squares sense, the error shared among them)."""
    p = np.array(pose, dtype=np.float64)
    goals = np.asarray(goals, dtype=bool)
    start = p.copy()
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), (len(p),))
    damping = np.full(len(p), _INITIAL_DAMPING)
    eye = np.eye(_PARAMS)
    for step_index in range(iterations):
        err = np.where(goals, norm(targets - p), 0.0).max(axis=1, initial=0.0)
        going = (err > tol) & (damping < _MAX_DAMPING)
        if not going.any():
            break
        rows = np.flatnonzero(going)
        q = p[rows]
        aim = np.where(goals[rows, :, None], targets[rows], start[rows])
        weight = np.where(goals[rows], 1.0, stay * stay_decay ** step_index)  # (R, 21)
        jac = _jacobian(q)
        weighted = jac * np.repeat(weight, 3, axis=1)[..., None]
        normal = np.swapaxes(weighted, 1, 2) @ jac
        diagonal = np.diagonal(normal, axis1=1, axis2=2)
        scale = np.maximum(diagonal, _MIN_SCALE * diagonal.max(axis=1, keepdims=True))
        lhs = normal + damping[rows, None, None] * (eye * scale[:, None, :])
        rhs = np.swapaxes(weighted, 1, 2) @ (aim - q).reshape(len(rows), -1, 1)
        trial = _apply(q, np.linalg.solve(lhs, rhs)[..., 0])
        better = _cost(trial, weight, aim) < _cost(q, weight, aim)
        p[rows[better]] = trial[better]
        damping[rows] = np.where(better, np.maximum(damping[rows] * _DAMPING_DOWN,
                                                    _MIN_DAMPING),
                                 damping[rows] * _DAMPING_UP)
    return p
