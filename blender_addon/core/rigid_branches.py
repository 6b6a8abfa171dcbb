"""Branch points a rig carries rigidly: the pelvis holds the spine and both hips, the chest
the neck and both clavicles.

On a rig each of these is one bone, so the angles between its children cannot change; the
networks' poses (and classic FABRIK's) change them, and the rotation stage's best fit of
that bone then leaves the hips, the neck or the shoulders off where the engine solved
them: with a planted foot and a nearly straight leg, the foot ends out of the leg's reach
as Blender evaluates the rig, and a hand out of its arm's. :func:`keep_rigid` puts both
branches of the start pose, each as a whole, where they best fit the solved ones before
the exact-reach pass, so the limbs are re-aimed from places the rig really has;
:func:`turn_branches` keeps them rigid inside FABRIK (``fabrik.solve(rig_shaped=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import native
from .quaternions import norm, rotation_from_covariance
from .skeleton import ANCESTORS, JOINT_INDEX, PARENTS, ROOT

# The pelvis branch fits its place too (the pelvis is the rig's root; a translation is
# free): the hips count most, as the legs hang from them and the feet are often held, so
# a knee need not bend to make up for a hip the fit moved; the pelvis and spine settle the
# turn about the line through the hips.
_PELVIS_POINTS = np.array([ROOT] + [JOINT_INDEX[j] for j in ("spine", "l_thigh", "r_thigh")])
_PELVIS_WEIGHTS = np.array([0.01, 0.01, 1.0, 1.0])
_HELD_PELVIS_WEIGHT = 1e6  # a pelvis with a goal of its own stays where it is
# The chest branch turns about the chest (the spine bone below fixes where the chest is).
_CHEST = JOINT_INDEX["chest"]
_CHEST_CHILDREN = np.array([JOINT_INDEX[j] for j in ("neck", "l_clavicle", "r_clavicle")])
_CHEST_WEIGHTS = np.ones(len(_CHEST_CHILDREN))
# A branch child that moves swings its own bone back towards the joint below it (the
# chest, the knees; the head, the shoulders), as the rig's bone would: what hangs below
# moves by as little.
_PELVIS_NEXT = np.array([JOINT_INDEX[j] for j in ("chest", "l_shin", "r_shin")])
# The joints each of those carries (itself and below): its shift reaches them all in one
# product, (21, K) @ (B, K, 3).
_PELVIS_CARRY = np.stack([ANCESTORS[:, g] for g in _PELVIS_NEXT], axis=1)
_CHEST_NEXT = np.array([JOINT_INDEX[j] for j in ("head", "l_upperarm", "r_upperarm")])
_CHEST_CARRY = np.stack([ANCESTORS[:, g] for g in _CHEST_NEXT], axis=1)


# The joints whose place changes :func:`keep_rigid`'s answer elsewhere: the branches' points
# and the joints each child's bone swings towards. Moving any other joint moves it alone.
FIT_JOINTS = np.unique(np.r_[_PELVIS_POINTS, _CHEST, _CHEST_CHILDREN, _PELVIS_NEXT,
                             _CHEST_NEXT])


def _covariance(was: np.ndarray, now: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(B, 3, 3) sum_k w_k was_k now_k^T, whose best rotation (Kabsch) minimises
    sum_k w_k |R was_k - now_k|^2; ``was`` / ``now`` (B, K, 3), ``weights`` (K,) or (B, K)."""
    return np.swapaxes(was * weights[..., None], -1, -2) @ now


def _place(out: np.ndarray, children: np.ndarray, placed: np.ndarray, nexts: np.ndarray,
           carry: np.ndarray) -> None:
    """Branch children to their places (B, K, 3), in place; each one's bone to the next
    joint swung to aim where that joint was, its length kept, and what hangs below that
    joint moved with it."""
    below = out[:, nexts]
    bone = below - out[:, children]
    toward = below - placed
    scale = np.sqrt(np.add.reduce(bone * bone, axis=-1) / np.maximum(
        np.add.reduce(toward * toward, axis=-1), 1e-24))
    out[:, children] = placed
    out += carry @ (placed + toward * scale[..., None] - below)


def keep_rigid(pose: np.ndarray, start: np.ndarray, held_pelvis: np.ndarray | None = None
               ) -> np.ndarray:
    """``pose`` (B, 21, 3) with the pelvis and chest branches placed as in ``start``
    (B, 21, 3), each moved as a whole to best fit the pose's (the pelvis's place and turn,
    the chest's turn about the chest); every bone keeps its length. ``held_pelvis`` (B,):
    poses whose pelvis must stay put.

    A rig's rotation stage fits its pelvis and chest bones to any answer the same way, so
    an answer that bends them is not what the user sees: left to the rig, a chest the
    networks bent moves the shoulders and 11 % of one-hand drags on Bandai Namco poses miss
    their target by over 1 mm (the drag benchmark's *reached on a rig*). The networks open
    and close the shoulders mostly through the chest's shape, which a rig cannot take: such
    a request now shows what the rig can do (the clavicles turned towards it)."""
    out = np.array(pose, dtype=np.float64)
    if (kernels := native.kernels()) is not None:
        held = np.zeros(len(out), dtype=np.int64) if held_pelvis is None \
            else np.ascontiguousarray(held_pelvis, dtype=np.int64)
        start = np.ascontiguousarray(np.broadcast_to(start, out.shape), dtype=np.float64)
        kernels.keep_rigid(len(out), len(PARENTS), *_NATIVE_TABLES, _HELD_PELVIS_WEIGHT,
                           *_NATIVE_CARRIES, native.address(out), native.address(start),
                           native.address(held))
        return out
    weights = _PELVIS_WEIGHTS
    if held_pelvis is not None and held_pelvis.any():
        weights = np.where(held_pelvis[:, None] & (np.arange(len(weights)) == 0),
                           _HELD_PELVIS_WEIGHT, weights)
    share = weights / weights.sum(axis=-1, keepdims=True)
    was, now = start[:, _PELVIS_POINTS], out[:, _PELVIS_POINTS]
    was_c, now_c = share[..., None, :] @ was, share[..., None, :] @ now  # (B, 1, 3)
    was = was - was_c
    # Both fits in one call: the pelvis's step moves the chest's branch as a whole, which
    # leaves it unchanged relative to the chest.
    chest_was = start[:, _CHEST_CHILDREN] - start[:, _CHEST, None]
    n = len(out)
    turns = np.swapaxes(rotation_from_covariance(np.concatenate([
        _covariance(was, now - now_c, weights),
        _covariance(chest_was, out[:, _CHEST_CHILDREN] - out[:, _CHEST, None],
                    _CHEST_WEIGHTS)])), -1, -2)
    placed = now_c + was @ turns[:n]
    out[:, ROOT] = placed[:, 0]
    _place(out, _PELVIS_POINTS[1:], placed[:, 1:], _PELVIS_NEXT, _PELVIS_CARRY)
    _place(out, _CHEST_CHILDREN, out[:, _CHEST, None] + chest_was @ turns[n:], _CHEST_NEXT,
           _CHEST_CARRY)
    return out


# keep_rigid's joints as the compiled kernel reads them, and their addresses.
_NATIVE_ARRAYS = (
    np.ascontiguousarray(np.r_[_PELVIS_POINTS, _PELVIS_NEXT, _CHEST, _CHEST_CHILDREN,
                               _CHEST_NEXT], dtype=np.int64),
    np.ascontiguousarray(_PELVIS_WEIGHTS, dtype=np.float64),
    np.ascontiguousarray(_PELVIS_CARRY, dtype=np.int64),
    np.ascontiguousarray(_CHEST_CARRY, dtype=np.int64))
_NATIVE_TABLES = tuple(native.address(a) for a in _NATIVE_ARRAYS[:2])
_NATIVE_CARRIES = tuple(native.address(a) for a in _NATIVE_ARRAYS[2:])


# The branches as bones: each branch joint's children, whose bone vectors (child - joint)
# turn together. FABRIK moves bone directions, so its branches fit there.
_BRANCH_BONES = (_PELVIS_POINTS[1:], _CHEST_CHILDREN)
_CHEST_BRANCH = 1  # the chest's place in _BRANCH_BONES
# In FABRIK, a branch child with no goal at or below it counts this much against one with
# a goal: the branch turns mostly the way its goals pull. One hand dragged 10-25 cm (300
# CMU test poses, the refined default), other joints' mean displacement: 0.3 -> 1.87 cm,
# 1 (all equal) -> 1.90, 10 -> 2.20; 0.01 -> 1.90 (the pelvis's alone: no difference).
INACTIVE_WEIGHT = 0.3
# The joints above the neck (the head), which turn with the chest's branch when none of
# them has a goal, as a rig's neck bone carries its head. Kept in their world direction (as
# FABRIK keeps a branch with no goal), the head stayed upright over a chest bent into a
# reach: its neck bent beyond any bend in the training data in 23 of 300 CMU two-hand drags
# (the engine's FABRIK fallback), none since. Arms with no goal keep their direction: they
# hang (turned with the chest, one-hand drags moved the other joints 1.53 -> 1.78 cm).
_NECK = JOINT_INDEX["neck"]
_ABOVE_NECK = np.flatnonzero((ANCESTORS[:, _NECK] > 0) & (np.arange(len(PARENTS)) != _NECK))


@dataclass(frozen=True)
class BranchShapes:
    """The branches' bone vectors of a pose, (2, ..., 3, 3), which :func:`turn_branches`
    keeps, and what each fit needs of them: their directions and each child's weight
    (made once per solve: they do not change while FABRIK iterates)."""
    shapes: np.ndarray
    units: np.ndarray  # the shapes' unit vectors
    weights: np.ndarray  # (2, ..., 3): 1, or INACTIVE_WEIGHT for a child with no goal
    head: np.ndarray  # (..., K, 3) the bone vectors above the neck (the head's)
    head_idle: np.ndarray  # (..., 1, 1) True where nothing at or above the neck has a goal


def branch_shapes(pose: np.ndarray, active: np.ndarray) -> BranchShapes:
    """The :class:`BranchShapes` of ``pose`` (..., 21, 3); ``active`` (..., 21): joints with
    a goal at or below them."""
    parents = (ROOT, _CHEST)
    shapes = np.stack([pose[..., bones, :] - pose[..., parent, None, :]
                       for parent, bones in zip(parents, _BRANCH_BONES, strict=True)])
    units = shapes / np.maximum(norm(shapes), 1e-12)[..., None]
    weights = np.stack([np.where(active[..., children], 1.0, INACTIVE_WEIGHT)
                        for children in _BRANCH_BONES])
    head = pose[..., _ABOVE_NECK, :] - pose[..., PARENTS[_ABOVE_NECK], :]
    return BranchShapes(shapes, units, weights, head, ~active[..., _NECK, None, None])


def turn_branches(bones: np.ndarray, branches: BranchShapes) -> np.ndarray:
    """Bone vectors ``bones`` (..., 21, 3) with each branch's children's vectors replaced
    by its shapes (:func:`branch_shapes`) turned as a whole to best fit their directions:
    one rotation per branch. A child with no goal at or below it holds the branch as it
    was: it counts :data:`INACTIVE_WEIGHT` times. A head with no goal turns with the chest,
    as a rig's neck carries it (see :data:`_ABOVE_NECK`)."""
    out = bones.copy()
    batch = bones.shape[:-2]
    covs = []
    for unit, weights, children in zip(branches.units, branches.weights, _BRANCH_BONES,
                                       strict=True):
        now = bones[..., children, :]
        now = now / np.maximum(norm(now), 1e-12)[..., None]
        covs.append(_covariance(unit, now, weights))
    turns = np.swapaxes(rotation_from_covariance(np.stack(covs)), -1, -2)
    for k, (shape, children) in enumerate(zip(branches.shapes, _BRANCH_BONES, strict=True)):
        out[..., children, :] = np.broadcast_to(shape, (*batch, *shape.shape[-2:])) @ turns[k]
    out[..., _ABOVE_NECK, :] = np.where(branches.head_idle, branches.head @ turns[_CHEST_BRANCH],
                                        out[..., _ABOVE_NECK, :])
    return out
