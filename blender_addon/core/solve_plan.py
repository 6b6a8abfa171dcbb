"""The solve's index tables for one rig and joint mapping, from the hierarchy alone.

:func:`make_plan` says which bones matter (mapped bones, their next mapped descendants,
the bones whose FK is needed); :func:`make_sweep` orders the bones that change into tree
levels, each level's bones grouped by how they turn, with every gather the solve needs as
an index array (or a slice where one does). :class:`.solver.RotationSolver` builds these
once per mapping and runs them on poses; the per-bone reference (:mod:`.solver_reference`)
is the same algorithm without the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .rig import FkLevels, Rig
from .skeleton import NUM_JOINTS


@dataclass
class Plan:
    """Which bones matter for a joint mapping, derived from the hierarchy alone."""

    joint_of: dict[int, int]  # mapped bone -> canonical joint
    next_mapped: dict[int, list[int]]  # mapped bone -> its next mapped descendants (bones)
    top_level: list[int]  # mapped bones without a mapped ancestor: placed by location
    needed: list[int]  # mapped bones and their ancestors, ascending: the only FK needed


def make_plan(rig: Rig, joint_bones: Sequence[int | None]) -> Plan:
    """:class:`Plan` of a mapping, checked: one bone index (or None) per canonical joint."""
    if len(joint_bones) != NUM_JOINTS:
        raise ValueError(f"joint_bones must have {NUM_JOINTS} entries, got {len(joint_bones)}")
    joint_of: dict[int, int] = {}
    for j, b in enumerate(joint_bones):
        if b is None:
            continue
        if isinstance(b, bool) or not isinstance(b, int | np.integer):
            raise ValueError(f"joint_bones[{j}] must be a bone index or None, got {b!r}")
        if not 0 <= b < rig.num_bones:
            raise ValueError(
                f"joint_bones[{j}] = {b} is out of range for a rig of {rig.num_bones} bones"
            )
        if int(b) in joint_of:
            raise ValueError(f"bone {b} is mapped to two joints ({joint_of[int(b)]} and {j})")
        joint_of[int(b)] = j
    next_mapped: dict[int, list[int]] = {b: [] for b in joint_of}
    top_level: list[int] = []
    needed: set[int] = set()
    for b in sorted(joint_of):
        p = int(rig.parents[b])
        while p >= 0 and p not in joint_of:
            needed.add(p)
            p = int(rig.parents[p])
        needed.add(b)
        if p < 0:
            top_level.append(b)
        else:
            next_mapped[p].append(b)
        while p >= 0:  # the rest of the ancestors
            needed.add(p)
            p = int(rig.parents[p])
    return Plan(joint_of, next_mapped, top_level, sorted(needed))


# How a changed bone turns, in the order a level's slots hold them.
_SWING, _KABSCH, _KEPT, _ORIENTED = range(4)


@dataclass(frozen=True)
class Part:
    """The bones of one kind in a level."""

    index: slice  # their place in the sweep's arrays of that kind
    slots: slice  # their slots
    within: slice  # their place in the level


@dataclass(frozen=True)
class Level:
    """The changed bones of one level: slots ``start + [swings, fits, kept, oriented]``."""

    slots: slice
    ancestors: np.ndarray | slice  # their next changed ancestors' slots (a slice if it can be)
    swing: Part | None
    fit: Part | None
    oriented: Part | None


@dataclass(frozen=True)
class Sweep:
    """The solve's order for one mapping and one set of oriented bones.

    *Changed* bones: mapped bones with a mapped descendant, top-level ones and oriented ones;
    the others keep their local rotation and nothing needs their new frame. A changed bone's
    next changed ancestor is its nearest mapped one; level k holds the changed bones with k
    changed ancestors, solved all at once. Level 0 is the top-level bones.
    """

    bones: np.ndarray  # (C,) changed bone of each slot
    fk: np.ndarray  # (C,) its FK slot
    rest: np.ndarray  # (C, 1, 4, 4) its rest rotation [rest_rotation 0; 0 1]
    # The changed bones whose parent is not their next changed ancestor (a bone between,
    # or an unmapped root above): their slots and their parents' FK slots.
    deep: np.ndarray
    deep_parents_fk: np.ndarray
    levels: tuple[Level, ...]
    top_joints: np.ndarray  # (level 0's size,) the top-level bones' joints
    swings: np.ndarray  # (S,) slots of the swinging bones, level by level
    fits: np.ndarray  # (F,) slots of the Kabsch-fitted bones
    width: int  # D: the most bones a fit aims at
    # What the S swings aim at, then the D each of the F fits does (S + F * D entries):
    aimers: np.ndarray  # the aiming bone's slot
    aims_fk: np.ndarray  # FK slot of the aimed bone, -1 (a zero vector) to pad a fit's
    aim_joints: np.ndarray  # the aimed bone's joint; a fit's padding repeats its first
    kept: np.ndarray  # (K,) slots of the top-level end bones: only their location changes
    oriented: np.ndarray  # (O,) the oriented bones, level by level
    rotated: np.ndarray  # slots of all but the kept bones: their rotation is written


def _as_slice(index: list[int]) -> np.ndarray | slice:
    """``index`` as a slice where one does (a gather costs more): one repeated non-negative
    index broadcasts, a consecutive run is a range."""
    if index[0] >= 0 and all(i == index[0] for i in index):
        return slice(index[0], index[0] + 1)
    if index[0] >= 0 and index == list(range(index[0], index[0] + len(index))):
        return slice(index[0], index[0] + len(index))
    return np.array(index, dtype=np.int64)


def make_sweep(rig: Rig, plan: Plan, fk: FkLevels, oriented: frozenset[int]) -> Sweep:
    """:class:`Sweep` of a plan whose ``oriented`` bones take given orientations; ``fk``:
    the FK levels of ``plan.needed`` (slots for the gathers)."""
    changed = {b for b, ds in plan.next_mapped.items() if ds} | set(plan.top_level) | oriented
    ancestor: dict[int, int] = {}
    level: dict[int, int] = {}
    kind: dict[int, int] = {}
    for b in sorted(changed):
        p = int(rig.parents[b])
        while p >= 0 and p not in plan.joint_of:
            p = int(rig.parents[p])
        ancestor[b] = p
        level[b] = 0 if p < 0 else level[p] + 1
        n_next = len(plan.next_mapped[b])
        kind[b] = (
            _ORIENTED if b in oriented else _SWING if n_next == 1 else _KABSCH if n_next else _KEPT
        )
    order = sorted(changed, key=lambda b: (level[b], kind[b], b))
    slot = {b: i for i, b in enumerate(order)}
    of_kind = {c: [b for b in order if kind[b] == c] for c in range(4)}
    width = max([len(plan.next_mapped[b]) for b in of_kind[_KABSCH]], default=1)

    def padded(b: int, pad: int) -> list[int]:
        """b's next mapped bones, as many as the widest fit's."""
        ds = plan.next_mapped[b]
        return ds + [pad] * (width - len(ds))

    def fit_joints(b: int) -> list[int]:
        return [plan.joint_of[d] for d in padded(b, plan.next_mapped[b][0])]

    def ints(x: list, *shape: int) -> np.ndarray:
        return np.array(x, dtype=np.int64).reshape(-1, *shape)

    def part(group: list[int], c: int) -> Part | None:
        bones = [b for b in group if kind[b] == c]
        if not bones:
            return None
        first = of_kind[c].index(bones[0])
        start = group.index(bones[0])
        return Part(
            slice(first, first + len(bones)),
            slice(slot[bones[0]], slot[bones[0]] + len(bones)),
            slice(start, start + len(bones)),
        )

    levels = []
    for k in range(max(level.values(), default=-1) + 1):
        group = [b for b in order if level[b] == k]
        levels.append(
            Level(
                slots=slice(slot[group[0]], slot[group[0]] + len(group)),
                ancestors=_as_slice([slot.get(ancestor[b], -1) for b in group]),
                swing=part(group, _SWING),
                fit=part(group, _KABSCH),
                oriented=part(group, _ORIENTED),
            )
        )
    aimers = of_kind[_SWING] + [b for b in of_kind[_KABSCH] for _ in range(width)]
    aims = [plan.next_mapped[b][0] for b in of_kind[_SWING]]
    aims += [d for b in of_kind[_KABSCH] for d in padded(b, -1)]
    aim_joints = [plan.joint_of[d] for d in aims[: len(of_kind[_SWING])]]
    aim_joints += [j for b in of_kind[_KABSCH] for j in fit_joints(b)]
    fk_slot = np.append(fk.slot, -1)  # bone -1 (padding): slot -1, the identity
    rest = np.zeros((len(order), 1, 4, 4))
    rest[:, 0, :3, :3] = rig.rest_rotations[order]
    rest[:, 0, 3, 3] = 1.0
    deep = [b for b in order if rig.parents[b] != ancestor[b]]
    return Sweep(
        bones=ints(order),
        fk=fk_slot[order],
        rest=rest,
        deep=ints([slot[b] for b in deep]),
        deep_parents_fk=fk_slot[[int(rig.parents[b]) for b in deep]],
        levels=tuple(levels),
        top_joints=ints([plan.joint_of[b] for b in order if level[b] == 0]),
        swings=ints([slot[b] for b in of_kind[_SWING]]),
        fits=ints([slot[b] for b in of_kind[_KABSCH]]),
        width=width,
        aimers=ints([slot[b] for b in aimers]),
        aims_fk=fk_slot[aims],
        aim_joints=ints(aim_joints),
        kept=ints([slot[b] for b in of_kind[_KEPT]]),
        oriented=ints(of_kind[_ORIENTED]),
        rotated=ints([slot[b] for b in order if kind[b] != _KEPT]),
    )
