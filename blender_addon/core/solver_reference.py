"""The rotation solver and FK written bone by bone: the readable specification.

Not used by the add-on (a Python loop over bones is too slow for a drag).
:func:`.solver.positions_to_rotations` is this algorithm with the loops turned into index
tables and one vectorized step per tree level; ``tests/test_rotations_reference.py`` holds
the two to the same numbers (1e-9) on random rigs, mappings, poses, targets and
orientations. Change the algorithm here first, then the fast solver to match.

Arrays are flat batches: ``q`` ``(n, B, 4)``, ``loc`` ``(n, B, 3)``, ``targets``
``(n, 21, 3)``, ``orientations``: joint -> ``(n, 3, 3)``; notation as in :mod:`.rotations`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .quaternions import (
    apply,
    matrix_to_quat,
    orthonormalize,
    quat_multiply,
    quat_normalize,
    quat_to_matrix,
    rotation_from_covariance,
    swing_quat,
)
from .rig import Rig
from .solver import KABSCH_PRIOR


def forward_kinematics_per_bone(
    rig: Rig, q: np.ndarray, loc: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Blender's pose evaluation, one bone at a time: world rotations and heads, per bone
    ``(n, 3, 3)`` and ``(n, 3)``."""
    nb = rig.num_bones
    world_r: list[np.ndarray] = [np.empty(0)] * nb
    world_t: list[np.ndarray] = [np.empty(0)] * nb
    for b in range(nb):
        r = rig.rest_rotations[b]
        m = r @ quat_to_matrix(q[:, b])
        off = rig.rest_offsets[b] + apply(r, loc[:, b])
        p = rig.parents[b]
        if p < 0:
            world_r[b], world_t[b] = m, off
        else:
            world_r[b] = world_r[p] @ m
            world_t[b] = world_t[p] + apply(world_r[p], off)
    return world_r, world_t


def positions_to_rotations_per_bone(
    rig: Rig,
    q: np.ndarray,
    loc: np.ndarray,
    joint_bones: Sequence[int | None],
    targets: np.ndarray,
    orientations: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """New local rotations ``(n, B, 4)`` and locations ``(n, B, 3)``: every bone in index
    order (parents first), in the pose as it is so far.

    A mapped bone with an orientation takes it; one with a single next mapped descendant
    swings to point at that one's target; one with several fits them all (Kabsch, with a
    small pull towards no change); a mapped bone without a mapped ancestor also takes the
    location putting its head on its target. All other bones keep their local transforms.
    """
    nb = rig.num_bones
    joint_of = {b: j for j, b in enumerate(joint_bones) if b is not None}
    next_mapped: dict[int, list[int]] = {b: [] for b in joint_of}
    top_level = set()
    for b in sorted(joint_of):
        p = int(rig.parents[b])
        while p >= 0 and p not in joint_of:
            p = int(rig.parents[p])
        if p < 0:
            top_level.add(b)
        else:
            next_mapped[p].append(b)
    orient = {joint_bones[j]: orthonormalize(o) for j, o in orientations.items()}
    old_r, old_t = forward_kinematics_per_bone(rig, q, loc)
    qn = quat_normalize(q)
    new_q, new_loc = q.copy(), loc.copy()
    world_r: list[np.ndarray] = [np.empty(0)] * nb
    world_t: list[np.ndarray] = [np.empty(0)] * nb
    eye = np.broadcast_to(np.eye(3), (q.shape[0], 3, 3))
    for b in range(nb):
        p = rig.parents[b]
        parent_r = eye if p < 0 else world_r[p]
        parent_t = 0.0 if p < 0 else world_t[p]
        offset = rig.rest_offsets[b] + apply(rig.rest_rotations[b], loc[:, b])
        head = parent_t + apply(parent_r, offset)
        a = parent_r @ rig.rest_rotations[b]  # where the local rotation acts
        world_t[b] = head
        if not (b in orient or next_mapped.get(b) or b in top_level):
            world_r[b] = a @ quat_to_matrix(qn[:, b])
            continue
        if b in top_level:  # solve base + a @ l = target for the location l
            base = head - apply(a, loc[:, b])
            new_loc[:, b] = apply(np.swapaxes(a, -1, -2), targets[:, joint_of[b]] - base)
            world_t[b] = head = base + apply(a, new_loc[:, b])
        old = qn[:, b]
        ds = next_mapped.get(b, [])
        if b in orient:
            rot = matrix_to_quat(np.swapaxes(a, -1, -2) @ orient[b])
            new = np.where(np.sum(rot * old, axis=-1, keepdims=True) < 0.0, -rot, rot)
        elif ds:
            # The vectors to the next mapped heads in the bone's posed frame, as they were;
            # where the local rotation acts (frame a), now and as the targets want them.
            rel = np.stack(
                [apply(np.swapaxes(old_r[b], -1, -2), old_t[d] - old_t[b]) for d in ds], axis=1
            )
            cur = rel @ np.swapaxes(quat_to_matrix(old), -1, -2)
            goal = (targets[:, [joint_of[d] for d in ds]] - head[:, None]) @ a
            if len(ds) == 1:
                change = swing_quat(cur[:, 0], goal[:, 0])
            else:
                h = np.swapaxes(cur, -1, -2) @ goal
                scale = np.sum(np.linalg.norm(cur, axis=-1) * np.linalg.norm(goal, axis=-1), -1)
                prior = (KABSCH_PRIOR * scale)[:, None, None] * np.eye(3)
                change = matrix_to_quat(rotation_from_covariance(h + prior))
            new = quat_multiply(change, old)
        else:  # a top-level end bone: only its location changes
            new = q[:, b]
        new_q[:, b] = new
        world_r[b] = a @ quat_to_matrix(new)
    return new_q, new_loc
