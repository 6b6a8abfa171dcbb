"""Rig-shaped IK that converges: damped least squares (Levenberg-Marquardt) over a rig's
bone turns, for the poses whose goals the analytic re-aims leave short (the least change
from there, in Live drag updates too) and those rig-shaped FABRIK leaves short.

A rig turns each bone about its head, carrying everything below it; the pelvis and chest
are single bones, so the joints they carry (hips and spine, neck and clavicles) turn
together (:mod:`.rigid_branches`). Here each joint with children turns its whole subtree
about itself, and the pelvis also moves: every answer keeps the bone lengths and the rigid
branches exactly, as a rig would show it. Rig-shaped FABRIK reaches the same goals only
slowly where the trunk must bend to reach them with the feet held (a hand dragged 11 cm
with both planted feet held, Bandai Namco's BVH skeleton: 9.7 mm short after its 60
iterations, 3.3 mm after 2,000); Gauss-Newton steps on the goals' positions converge in a
few. Batched over poses; the loop runs over iterations.
"""

from __future__ import annotations

import numpy as np

from . import native
from .conversions import axis_angle_to_matrix, cross_matrix
from .quaternions import norm
from .skeleton import ANCESTORS, NUM_JOINTS, PARENTS, ROOT, SKELETON_PARENTS

ITERATIONS = 100
# Every other joint is held where the steps start with this weight (a goal's is 1), shrinking
# by STAY_DECAY each step, so the goals end exact and the body moves as little as it must:
# on the poses the engine's drags leave here (1,000 CMU test poses and 1,000 poses of Bandai
# Namco's BVH skeleton per drag: hands, feet, head and pelvis, with and without pins), the
# joints off the goals moved 4.6 and 3.8 cm on average without it, 2.6 and 2.3 with it, the
# goals reached as often (a decay of 0.8 then; at 0.6 a Live drag update's 20 steps reach
# what 0.8 reached in 26-35, where at 0.8 no pose of the latency suite's got there in 20).
# The engine's least change holds the body longer, in more steps, and its stance harder and
# at the start pose (pipeline.LEAST_CHANGE_STAY_DECAY, LEAST_CHANGE_STEPS, STANCE_HOLD).
STAY_WEIGHT, STAY_DECAY = 0.1, 0.6
# ... down to this once a pose is near its goals: with none, a pose whose goals were all
# but met drifted along turns that hardly move a goal (one pose of the units test, after
# 100 steps: 4 cm apart in metres and in centimetres; 0.9 mm with it).
STAY_FLOOR, FLOOR_NEAR = 1e-5, 10.0  # the floor holds within FLOOR_NEAR tolerances
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
_PARAMS = 3 + 3 * len(_PIVOTS)  # the pelvis's move, then a turn vector per pivot


def _bone_chain() -> np.ndarray:
    """(21, depth) per bone (joint j's, from its parent): the pivots whose turns carry it,
    pelvis first, as indices into the turns with the identity (``len(_PIVOTS)``) after."""
    chains = []
    for j in range(NUM_JOINTS):
        path, k = [], int(PARENTS[j])
        while k >= 0:
            path.append(int(_PIVOT_OF[k]))
            k = int(PARENTS[k])
        chains.append(path[::-1])
    depth = max(len(c) for c in chains)
    return np.array([c + [len(_PIVOTS)] * (depth - len(c)) for c in chains])


_BONE_CHAIN = _bone_chain()
_PARENT = PARENTS.clip(min=0)  # each joint's parent (the pelvis its own)
_EYE3 = np.eye(3)


def _jacobian(p: np.ndarray) -> np.ndarray:
    """(B, 21 * 3, _PARAMS) how each joint moves with the pelvis's move and each pivot's
    turn."""
    b = len(p)
    jac = np.zeros((b, NUM_JOINTS, 3, _PARAMS))
    jac[:, :, :, :3] = _EYE3
    # A turn w about a pivot moves a joint it carries by w x arm = [-arm]x w.
    back = p[:, _PIVOTS, None, :] - p[:, None, :, :]  # (B, P, 21, 3) joint -> pivot
    blocks = cross_matrix(back) * _CARRIED[None, :, :, None, None]  # (B, P, 21, 3, 3)
    jac[:, :, :, 3:] = blocks.transpose(0, 2, 3, 1, 4).reshape(b, NUM_JOINTS, 3, -1)
    return jac.reshape(b, NUM_JOINTS * 3, _PARAMS)


def _apply(p: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The pose (B, 21, 3) after the pelvis moves by ``step[:, :3]`` and each pivot turns
    by its turn vector, all about the pose's current joints (the turns' axes are in world
    space, so each bone's offset turns by every pivot above it, outermost last)."""
    b = len(p)
    turns = np.empty((b, len(_PIVOTS) + 1, 3, 3))
    vectors = step[:, 3:].reshape(b, len(_PIVOTS), 3)
    turns[:, :-1] = axis_angle_to_matrix(vectors, norm(vectors))
    turns[:, -1] = _EYE3
    # Each bone turns by the pivots from the pelvis down to its parent, composed outermost
    # first (one product per depth level, padded with the identity).
    chain = turns[:, _BONE_CHAIN]  # (B, 21, depth, 3, 3)
    total = chain[:, :, 0]
    for k in range(1, _BONE_CHAIN.shape[1]):
        total = total @ chain[:, :, k]
    bones = p - p[:, _PARENT]
    bones[:, ROOT] = 0.0
    turned = (total @ bones[..., None])[..., 0]
    root = p[:, ROOT:ROOT + 1] + step[:, None, :3]
    return root + ANCESTORS @ turned


def solve(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray,
          tolerance: float | np.ndarray, iterations: int = ITERATIONS,
          stay: float = STAY_WEIGHT, stay_decay: float = STAY_DECAY,
          frozen: np.ndarray | None = None, rest: np.ndarray | None = None,
          stay_scale: np.ndarray | None = None) -> np.ndarray:
    """``pose`` (B, 21, 3) turned as a rig turns it (bone lengths and the pelvis's and
    chest's shapes kept) so its ``goals`` (B, 21) joints reach ``targets``, each pose
    stopping once every goal is within ``tolerance`` (or one per pose, (B,)) or its steps
    stop helping; the other joints are held where they start (or at ``rest`` (B, 21, 3))
    with the weight ``stay`` (times ``stay_scale`` (21,) per joint), shrinking by
    ``stay_decay`` a step. Goals no rig pose reaches end as near as the steps
    get (in the least-squares sense, the error shared among them).
    A joint that carries no goal never turns: what hangs below it goes along with what
    carries it (a free head with the chest, as a body carries it; held where it started,
    it bent the neck 38 degrees back when the trunk leaned). ``frozen`` (B, 21): more
    joints that keep their bend (an elbow whose hand is a goal would straighten first,
    as that moves no other joint)."""
    p = np.array(pose, dtype=np.float64)
    goals = np.asarray(goals, dtype=bool)
    turns = (goals @ _CARRIED.T) > 0  # (B, P) the pivots that carry a goal
    if frozen is not None:
        turns &= ~np.asarray(frozen, dtype=bool)[:, _PIVOTS]
    tol2 = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), (len(p),)) ** 2
    if (kernels := native.kernels()) is not None:
        return _solve_native(kernels, p, goals, targets, tol2, turns, iterations, stay,
                             stay_decay, rest, stay_scale)
    turning = np.ones((len(p), _PARAMS))
    turning[:, 3:] = np.repeat(turns, 3, axis=1)
    damping = np.full(len(p), _INITIAL_DAMPING)
    eye = np.eye(_PARAMS)
    # Where each joint is held (a goal's target, the others' start) and how firmly: the
    # goals at 1, the others at ``stay`` shrinking each step.
    aim = np.where(goals[..., None], targets, p if rest is None else rest)
    held = goals.astype(np.float64)
    other = 1.0 - held if stay_scale is None else (1.0 - held) * stay_scale
    off2 = np.add.reduce((aim - p) ** 2, axis=-1)  # (B, 21) squared distance to the aims
    for step_index in range(iterations):
        miss2 = (off2 * held).max(axis=1, initial=0.0)
        going = (miss2 > tol2) & (damping < _MAX_DAMPING)
        if not going.any():
            break
        rows = np.flatnonzero(going)
        q, at = p[rows], aim[rows]
        # The stay weight, no lower than STAY_FLOOR once a pose's goals are all but met.
        floor = np.where(miss2[rows] < (FLOOR_NEAR * FLOOR_NEAR) * tol2[rows], STAY_FLOOR, 0.0)
        weight = held[rows] + np.maximum(stay * stay_decay ** step_index,
                                         floor)[:, None] * other[rows]
        jac = _jacobian(q) * turning[rows, None, :]
        weighted = jac * np.repeat(weight, 3, axis=1)[..., None]
        normal = np.swapaxes(weighted, 1, 2) @ jac
        diagonal = np.diagonal(normal, axis1=1, axis2=2)
        scale = np.maximum(diagonal, _MIN_SCALE * diagonal.max(axis=1, keepdims=True))
        lhs = normal + damping[rows, None, None] * (eye * scale[:, None, :])
        rhs = np.swapaxes(weighted, 1, 2) @ (at - q).reshape(len(rows), -1, 1)
        trial = _apply(q, np.linalg.solve(lhs, rhs)[..., 0])
        trial2 = np.add.reduce((at - trial) ** 2, axis=-1)
        better = (np.add.reduce(weight * trial2, axis=1)
                  < np.add.reduce(weight * off2[rows], axis=1))
        taken = rows[better]
        p[taken], off2[taken] = trial[better], trial2[better]
        damping[rows] = np.where(better, np.maximum(damping[rows] * _DAMPING_DOWN,
                                                    _MIN_DAMPING),
                                 damping[rows] * _DAMPING_UP)
    return p


def _solve_native(kernels: native.Kernels, p: np.ndarray, goals: np.ndarray,
                  targets: np.ndarray, tol2: np.ndarray, turns: np.ndarray, iterations: int,
                  stay: float, stay_decay: float, rest: np.ndarray | None,
                  stay_scale: np.ndarray | None) -> np.ndarray:
    """:func:`solve`'s steps by the compiled kernel, pose by pose (the same algorithm; its
    normal equations summed block by block, as only the pivots above a joint move it)."""
    goal_flags = np.ascontiguousarray(goals, dtype=np.int64)
    aims = np.ascontiguousarray(np.broadcast_to(targets, p.shape), dtype=np.float64)
    tol2 = np.ascontiguousarray(tol2)
    turning = np.ascontiguousarray(turns, dtype=np.int64)
    rests = None if rest is None else np.ascontiguousarray(
        np.broadcast_to(rest, p.shape), dtype=np.float64)
    scales = None if stay_scale is None else np.ascontiguousarray(stay_scale, dtype=np.float64)
    status = kernels.rig_ik(
        len(p), NUM_JOINTS, native.address(SKELETON_PARENTS),
        native.address(_NATIVE_PIVOT_OF), len(_PIVOTS), native.address(p),
        native.address(goal_flags), native.address(aims),
        None if rests is None else native.address(rests),
        None if scales is None else native.address(scales), native.address(tol2),
        native.address(turning), iterations, stay, stay_decay,
        STAY_FLOOR, FLOOR_NEAR, _INITIAL_DAMPING, _DAMPING_DOWN, _DAMPING_UP, _MIN_DAMPING,
        _MAX_DAMPING, _MIN_SCALE)
    if status != 0:
        raise RuntimeError(f"the rig IK kernel refused a skeleton of {NUM_JOINTS} joints")
    return p


_NATIVE_PIVOT_OF = np.ascontiguousarray(_PIVOT_OF, dtype=np.int64)
