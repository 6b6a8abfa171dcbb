"""Mirror Edit's arithmetic: an edit (the pose's change from its base pose) carried to the
other side of the body.

The change of each limb joint of the edited side is reflected across the body's sagittal
plane and applied to the mirror joint (:data:`.skeleton.MIRROR`) of the other side, from
where the base pose has it. The plane is the base pose's own: the vertical plane through
the body's facing (:func:`.normalize.facing_yaw`, hips and shoulders), not the world's
axes, so a character turned any way mirrors as it faces. Only changes are reflected, never
positions: a base pose that is not symmetric keeps its asymmetry, and a lean of the trunk
that carried the edited hand carries the mirrored one the same way.

A mirror is solved as an edit of the pose shown (the start), so its :class:`MirrorPlan`
says which joints become effectors and which are held:

- the other side's wrist / ankle take the mirrored target at full weight; its elbow / knee
  and toe, where the edited side's moved, take theirs at :data:`SHAPE_WEIGHT`, so the
  limb takes the mirrored shape while the end is placed exactly (a base pose that is not
  symmetric cannot give both exactly);
- the edited side's moved joints and the joints the caller asks for (the user's own
  effectors) are pinned where they are now; the centre line is not mirrored: it keeps its
  edit, the head held at :data:`SHAPE_WEIGHT` (a full pin kept a trunk that leaned
  towards the edited hand from letting the other hand reach: 2.5 cm short).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .normalize import facing_yaw
from .pipeline import Effector
from .skeleton import JOINT_INDEX, JOINTS, MIRROR, NUM_JOINTS

SIDES = ("left", "right")  # the edited side, as the caller names it ("auto": the larger edit)
_PREFIX = {"left": "l_", "right": "r_"}
CHANGE_TOL = 1e-3  # m: a joint that moved less than this from its base pose is unchanged
SHAPE_WEIGHT = 0.5  # the weight of the limbs' middle joints and toes: a shape, not a goal
# The limb joints a mirror carries, by name without the side's prefix, with the weight
# their mirror takes: ends exactly, the rest as the shape the limb takes.
_CARRIED: dict[str, float] = {"hand": 1.0, "forearm": SHAPE_WEIGHT,
                              "foot": 1.0, "shin": SHAPE_WEIGHT, "toe": SHAPE_WEIGHT}
_LIMB_NAMES = ("clavicle", "upperarm", "forearm", "hand", "thigh", "shin", "foot", "toe")
HELD_CENTRE = ("head",)  # the centre line's end, held softly so the trunk keeps its edit


class NothingToMirror(ValueError):
    """The pose equals its base on the side asked for: there is no edit to carry."""


@dataclass(frozen=True)
class MirrorPlan:
    """What a mirror asks of the solve, in the space of the poses it was made from."""

    source: str  # "left" or "right": the edited side, carried to the other one
    targets: np.ndarray  # (21, 3) the edited pose with the carried joints' mirrored targets
    moved: tuple[str, ...]  # the other side's joints given a target (``targets``)
    weights: tuple[float, ...]  # each moved joint's effector weight
    held: tuple[str, ...]  # joints pinned where they are in the edited pose
    held_weights: tuple[float, ...]  # each held joint's weight
    blocked: tuple[str, ...]  # joints the mirror would move that the caller holds
    change: float  # m: the largest change of a joint of the edited side

    def effectors(self) -> list[Effector]:
        """The solve's effectors: the moved joints on their targets, then the pins."""
        return [*(Effector(j, self.targets[JOINT_INDEX[j]].copy(), w)
                  for j, w in zip(self.moved, self.weights, strict=True)),
                *(Effector(j, pin=True, weight=w)
                  for j, w in zip(self.held, self.held_weights, strict=True))]


def _check(positions: np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(positions, dtype=np.float64)
    if p.shape != (NUM_JOINTS, 3):
        raise ValueError(f"{name} must have shape ({NUM_JOINTS}, 3), got {p.shape}")
    if not np.isfinite(p).all():
        bad = [JOINTS[j] for j in np.flatnonzero(~np.isfinite(p).all(axis=1))]
        raise ValueError(f"{name}: non-finite values at joint(s) {bad}")
    return p


def sagittal_normal(base: np.ndarray) -> np.ndarray:
    """The unit normal (3,) of the body's sagittal plane: its left, horizontal (core space,
    Y up), from the facing of ``base`` (21, 3)."""
    yaw = float(facing_yaw(_check(base, "base")))
    return np.array([np.cos(yaw), 0.0, -np.sin(yaw)])  # up x forward


def reflect(vectors: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Vectors (..., 3) reflected across the plane through the origin with unit ``normal``."""
    v = np.asarray(vectors, dtype=np.float64)
    return v - 2.0 * (v @ normal)[..., None] * normal


def side_joints(side: str) -> np.ndarray:
    """Indices of one side's limb joints (arm and leg, clavicle to toe)."""
    return np.array([JOINT_INDEX[_PREFIX[side] + n] for n in _LIMB_NAMES])


def side_changes(base: np.ndarray, edited: np.ndarray) -> dict[str, float]:
    """How much each side's limbs changed: the sum of their joints' moves (m)."""
    moves = np.linalg.norm(_check(edited, "edited") - _check(base, "base"), axis=1)
    return {side: float(moves[side_joints(side)].sum()) for side in SIDES}


def edited_side(base: np.ndarray, edited: np.ndarray) -> str:
    """The side whose limbs changed most from the base (the one the user edited)."""
    changes = side_changes(base, edited)
    return max(SIDES, key=lambda s: changes[s])


def mirrored_targets(base: np.ndarray, edited: np.ndarray, source: str) -> np.ndarray:
    """The edited pose (21, 3) with every joint of the other side moved from its base place
    by the reflected change of its mirror joint on ``source``; the rest as edited."""
    b, e = _check(base, "base"), _check(edited, "edited")
    normal = sagittal_normal(b)
    src = side_joints(source)
    dst = MIRROR[src]
    out = e.copy()
    out[dst] = b[dst] + reflect(e[src] - b[src], normal)
    return out


def plan(base: np.ndarray, edited: np.ndarray, side: str = "auto",
         hold: Iterable[str] = (), pinned: Iterable[str] = (),
         tolerance: float = CHANGE_TOL) -> MirrorPlan:
    """The mirror of ``edited``'s change from ``base`` (both (21, 3), one space), from
    ``side`` ("left", "right" or "auto": the side whose limbs changed most).

    ``hold``: joints pinned where they are unless the mirror moves them (the user's
    effectors); ``pinned``: joints pinned that the mirror must not move (the user's pins):
    one it would move is listed in ``blocked``. Raises :class:`NothingToMirror` when no
    limb joint of the side moved ``tolerance`` or more.
    """
    b, e = _check(base, "base"), _check(edited, "edited")
    if side not in (*SIDES, "auto"):
        raise ValueError(f"side must be one of {(*SIDES, 'auto')}, got {side!r}")
    hold, pinned = tuple(hold), tuple(pinned)
    unknown = [j for j in (*hold, *pinned) if j not in JOINT_INDEX]
    if unknown:
        raise ValueError(f"unknown joint(s) to hold {unknown}; joints are: {', '.join(JOINTS)}")
    changes = side_changes(b, e)
    source = edited_side(b, e) if side == "auto" else side
    moves = np.linalg.norm(e - b, axis=1)
    src = side_joints(source)
    largest = float(moves[src].max())
    if largest < tolerance:
        other = SIDES[1 - SIDES.index(source)]
        if side != "auto" and changes[other] >= tolerance:
            raise NothingToMirror(f"the {source} side has no edit to mirror (the {other} "
                                  "side has one: mirror from that side)")
        raise NothingToMirror(f"nothing to mirror: no limb joint moved {tolerance * 1e3:.0f} "
                              "mm or more from the base pose")
    targets = mirrored_targets(b, e, source)
    prefix = _PREFIX[source]
    carried = [(prefix + n, w) for n, w in _CARRIED.items()
               if moves[JOINT_INDEX[prefix + n]] >= tolerance]
    wanted = [(JOINTS[MIRROR[JOINT_INDEX[j]]], w) for j, w in carried]
    blocked = tuple(j for j, _ in wanted if j in pinned)
    moved = [(j, w) for j, w in wanted if j not in pinned]
    held = {j: SHAPE_WEIGHT for j in HELD_CENTRE}
    held.update((j, 1.0) for j in (*(j for j, _ in carried), *hold, *pinned))
    for j, _ in moved:
        held.pop(j, None)
    return MirrorPlan(source, targets, tuple(j for j, _ in moved), tuple(w for _, w in moved),
                      tuple(held), tuple(held.values()), blocked, largest)
