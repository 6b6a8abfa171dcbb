"""Solved joint positions -> a rig's pose, with effectors reached exactly (pure numpy).

:func:`.rotations.positions_to_rotations` fits the rig to the solved joints, but a rig
cannot always take them exactly: a chest or pelvis bone carries its children rigidly, so
when the solve changed the angles between them (neck and clavicles; spine and thighs) the
best fit leaves every limb start a little off, and the limb's end inherits that error.
:func:`solve` fixes it for the effector joints (``goals``): a second pass re-aims the two
bones above each goal joint (upper arm and forearm, thigh and shin) like a two-bone IK from
where the limb really starts, bending in the plane of the fitted elbow or knee. Only those
limbs move in the second pass, so it solves just their bones.

Spaces: the rig's armature space throughout (like :mod:`.rotations`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import rotations
from .quaternions import norm
from .skeleton import ANCESTORS, CHILDREN, NUM_JOINTS, PARENTS

_EPS = 1e-12
LIMB_SLACK = 1e-6  # a limb never quite straightens (a straight limb has no bend plane)
REACHED = 1e-6  # of a limb's length: a goal this near after the first pass needs no second
# Joints hanging below each joint (carried along when it moves).
_BELOW = {j: [k for k in range(NUM_JOINTS) if k != j and ANCESTORS[k, j]]
          for j in range(NUM_JOINTS)}


@dataclass(frozen=True)
class MappedRig:
    """A rig and the bone whose head is each canonical joint."""

    rig: rotations.Rig
    joint_bones: tuple[int | None, ...]  # 21 entries: bone index of each joint, or None
    toe_feet: Mapping[int, int] = field(default_factory=dict)  # boneless toe -> foot bone
    lengths: np.ndarray | None = None  # (B,) rest bone lengths: a boneless toe's foot tail

    def __post_init__(self) -> None:
        if len(self.joint_bones) != NUM_JOINTS:
            raise ValueError(f"joint_bones needs {NUM_JOINTS} entries, got "
                             f"{len(self.joint_bones)}")
        if self.toe_feet and self.lengths is None:
            raise ValueError("a boneless toe sits at its foot bone's tail: give the lengths")


def joint_positions(mapped: MappedRig, quats: np.ndarray, locations: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Joints ``(..., 21, 3)`` and bone rotations ``(..., B, 3, 3)`` of a pose; frames may
    lead. A boneless toe is its foot bone's tail; other unmapped joints are zero."""
    world_r, heads = rotations.forward_kinematics(mapped.rig, quats, locations)
    joints = np.zeros((*heads.shape[:-2], NUM_JOINTS, 3))
    have = [j for j, b in enumerate(mapped.joint_bones) if b is not None]
    joints[..., have, :] = heads[..., [mapped.joint_bones[j] for j in have], :]
    for j, foot in mapped.toe_feet.items():
        joints[..., j, :] = heads[..., foot, :] + world_r[..., foot, :, 1] * mapped.lengths[foot]
    return joints, world_r


def with_toe_bones(mapped: MappedRig) -> MappedRig:
    """``mapped`` with each boneless toe made a bone of its own at its foot bone's tail
    (no turn of its own; appended after the rig's bones), so the solve aims the foot bone
    at the toe's target as at any next joint: left to keep its local turn, a foot carried
    by a knee that bends otherwise pitched its toe off where the engine held it (a planted
    foot's toe moved 1.4-3.3 mm in hand drags on CMU clips). Made once per rig."""
    rig = mapped.rig

    def build() -> MappedRig:
        feet = list(mapped.toe_feet.items())  # toe joint -> foot bone
        n = rig.num_bones
        tails = np.zeros((len(feet), 3))
        tails[:, 1] = [mapped.lengths[f] for _, f in feet]  # a bone's tail is on its +Y
        full = rotations.Rig([*rig.names, *(f"{rig.names[f]} (toe)" for _, f in feet)],
                             np.r_[rig.parents, [f for _, f in feet]],
                             np.concatenate([rig.rest_offsets, tails]),
                             np.concatenate([rig.rest_rotations,
                                             np.broadcast_to(np.eye(3), (len(feet), 3, 3))]))
        bones = list(mapped.joint_bones)
        for k, (toe, _) in enumerate(feet):
            bones[toe] = n + k
        return MappedRig(full, tuple(bones))

    return rig.derived(("toe bones", tuple(mapped.toe_feet.items())), build)


def solve(mapped: MappedRig, quats: np.ndarray, locations: np.ndarray, targets: np.ndarray,
          goals: Mapping[int, np.ndarray] | None = None,
          orientations: Mapping[int, np.ndarray] | None = None, *,
          rig_shaped: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Local rotations ``(..., B, 4)`` and locations ``(..., B, 3)`` putting the joints on
    ``targets`` ``(..., 21, 3)``, then each joint of ``goals`` (joint -> ``(..., 3)``, e.g.
    an effector's empty) exactly on its goal where a two-bone limb above it allows.

    ``quats`` / ``locations``: the pose to start from; ``orientations``: joint ->
    ``(..., 3, 3)`` rotations their bones must take (see
    :func:`.rotations.positions_to_rotations`). Frames may lead. ``rig_shaped``: the
    targets are a pose the rig can take (the engine's answers with bone lengths fixed), so
    the first pass puts every limb top where the targets have it and the limbs can be
    re-aimed on the targets before it: the same pose in one pass instead of two (a Live
    drag with refinement off re-aims both hands every update). The second pass still
    mends what the first leaves off. A boneless toe is aimed at by its foot bone
    (:func:`with_toe_bones`).
    """
    if mapped.toe_feet:
        extra = len(mapped.toe_feet)
        lead = np.shape(quats)[:-2]
        q = np.concatenate([quats, np.broadcast_to([1.0, 0.0, 0.0, 0.0], (*lead, extra, 4))],
                           axis=-2)
        loc = np.concatenate([locations, np.zeros((*lead, extra, 3))], axis=-2)
        q, loc = solve(with_toe_bones(mapped), q, loc, targets, goals, orientations,
                       rig_shaped=rig_shaped)
        return q[..., :-extra, :], loc[..., :-extra, :]
    orient = dict(orientations or {})
    limbs = {j: limb for j in (goals or {}) if (limb := find_limb(mapped, j, goals)) is not None}
    aimed = None
    if rig_shaped and limbs:
        aimed = np.asarray(targets, dtype=np.float64)
        far = _off(aimed, limbs, _stacked(goals, list(limbs), aimed.shape))
        if far:  # (a refined answer has its limbs on their goals already)
            targets = aimed = reach_limbs(aimed, far, goals)
    q, loc = rotations.positions_to_rotations(mapped.rig, quats, locations, mapped.joint_bones,
                                              targets, orient or None)
    if not limbs:
        return q, loc
    joints, _ = joint_positions(mapped, q, loc)
    # A pose the rig can take (the engine's answers are) is fitted exactly by the first
    # pass: only limbs it leaves off their goals take the second. Re-aimed first, a limb
    # the fit put where it was aimed is done (out of reach, the second would aim it there
    # again).
    ends = list(limbs)
    wanted = _stacked(goals, ends, joints.shape) if aimed is None else aimed[..., ends, :]
    limbs = _off(joints, limbs, wanted)
    if not limbs:
        return q, loc
    adjusted = reach_limbs(joints, limbs, goals)
    # Only the limbs move: solve their joints alone (the top joints stay where they are, and
    # everything above keeps the first pass's rotations). Locations are the first pass's.
    moving = _limb_joints(limbs)
    sub_bones = tuple(b if j in moving else None for j, b in enumerate(mapped.joint_bones))
    sub_orient = {j: o for j, o in orient.items() if j in moving}
    q, _ = rotations.positions_to_rotations(mapped.rig, q, loc, sub_bones, adjusted,
                                            sub_orient or None)
    return q, loc


def _off(joints: np.ndarray, limbs: Mapping[int, tuple[int, int]], wanted: np.ndarray
         ) -> dict[int, tuple[int, int]]:
    """The ``limbs`` whose end in ``joints`` (..., 21, 3) is off ``wanted`` (..., L, 3), in
    any frame, by more than :data:`REACHED` of the limb's length."""
    ends = list(limbs)
    mids, tops = ([limbs[j][k] for j in ends] for k in (0, 1))
    end_at, mid_at = joints[..., ends, :], joints[..., mids, :]
    off = norm(end_at - wanted) > REACHED * (norm(end_at - mid_at)
                                              + norm(mid_at - joints[..., tops, :]))
    off = off.reshape(-1, len(ends)).any(axis=0)
    return {j: limbs[j] for j, o in zip(ends, off, strict=True) if o}


def _limb_joints(limbs: Mapping[int, tuple[int, int]]) -> frozenset[int]:
    """Each limb's top and mid joints, its end and everything below the end."""
    out: set[int] = set()
    for end, (mid, top) in limbs.items():
        out.update((top, mid, end))
        out.update(k for k in range(NUM_JOINTS) if ANCESTORS[k, end])
    return frozenset(out)


def find_limb(mapped: MappedRig, j: int, goals: Mapping[int, object] | Sequence[int]
              ) -> tuple[int, int] | None:
    """(mid, top) joints above ``j`` forming a plain two-bone limb, or None.

    Both must have a bone, a single child in the canonical tree and no goal of their own.
    """
    mid = int(PARENTS[j])
    top = int(PARENTS[mid]) if mid >= 0 else -1
    if top < 0 or mid in goals or top in goals:
        return None
    if any(mapped.joint_bones[k] is None for k in (j, mid, top)):
        return None
    if CHILDREN[mid] != (j,) or CHILDREN[top] != (mid,):
        return None
    return mid, top


def reach_limbs(joints: np.ndarray, limbs: Mapping[int, tuple[int, int]],
                goals: Mapping[int, np.ndarray]) -> np.ndarray:
    """``joints`` (..., 21, 3) with each limb's mid and end joints moved (and what hangs
    below the end, carried along) so that the end reaches its goal from the top joint,
    the limb's lengths kept, bending in the plane of its current bend; as close as it gets
    when out of reach. ``limbs``: end joint -> (mid, top) (:func:`find_limb`), all limbs
    at once (batched)."""
    ends = list(limbs)
    mids = [limbs[j][0] for j in ends]
    s = joints[..., [limbs[j][1] for j in ends], :]
    e, w = joints[..., mids, :], joints[..., ends, :]
    goal = _stacked(goals, ends, w.shape)
    upper, lower, to_goal = e - s, w - e, goal - s
    a, b, d_raw = norm(upper), norm(lower), norm(to_goal)
    u = to_goal / np.maximum(d_raw, _EPS)[..., None]
    d = np.clip(d_raw, np.abs(a - b) + LIMB_SLACK * (a + b), (1.0 - LIMB_SLACK) * (a + b))
    # Bend in the plane of the current elbow/knee; a straight limb keeps its old bend side.
    pole = upper - np.sum(upper * u, axis=-1, keepdims=True) * u
    pole_n = norm(pole)[..., None]
    v = pole / np.maximum(pole_n, _EPS)
    straight = pole_n <= _EPS
    if straight.any():
        v = np.where(straight, any_perpendicular(u), v)
    x = (a * a - b * b + d * d) / (2.0 * d)
    h = np.sqrt(np.maximum(a * a - x * x, 0.0))
    new_end = s + d[..., None] * u
    out = joints.copy()
    out[..., mids, :] = s + x[..., None] * u + h[..., None] * v
    shift = new_end - w
    for n, end in enumerate(ends):
        if _BELOW[end]:
            out[..., _BELOW[end], :] += shift[..., n, None, :]
    out[..., ends, :] = new_end
    return out


def _stacked(goals: Mapping[int, np.ndarray], ends: Sequence[int],
             shape: tuple[int, ...]) -> np.ndarray:
    """The goals of ``ends`` as one array of ``shape`` (..., len(ends), 3)."""
    if len(shape) == 2:  # a single pose (a Live update: 2 us instead of 35)
        return np.array([goals[j] for j in ends], dtype=np.float64).reshape(len(ends), 3)
    return np.stack([np.broadcast_to(np.asarray(goals[j], dtype=np.float64),
                                     (*shape[:-2], 3)) for j in ends], axis=-2)


def any_perpendicular(u: np.ndarray) -> np.ndarray:
    """A unit vector perpendicular to each unit ``u`` (crossed with its smallest axis)."""
    axis = np.zeros_like(u)
    np.put_along_axis(axis, np.argmin(np.abs(u), axis=-1)[..., None], 1.0, axis=-1)
    p = np.cross(u, axis)
    return p / np.maximum(norm(p), _EPS)[..., None]
