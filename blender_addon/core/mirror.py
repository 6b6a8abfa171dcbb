"""Mirror Edit's arithmetic: an edit (the pose's change from its base pose) carried to the
other side of the body.

The change of each limb joint of the edited side is reflected across the body's sagittal
plane and applied to the mirror joint (:data:`.skeleton.MIRROR`) of the other side, from
where the base pose has it. The plane is the base pose's own: the vertical plane through
the body's facing (:func:`.normalize.facing_yaw`, hips and shoulders), not the world's
axes, so a character turned any way mirrors as it faces. Only changes are reflected, never
positions: a base pose that is not symmetric keeps its asymmetry, and a lean of the trunk
that carried the edited hand carries the mirrored one the same way.

The edited limbs are those whose own shape changed (:func:`limb_changes`: measured in the
frame of the chest or hips that carries them, so a limb the solve merely carried along or
nudged is not one). A mirror is solved like any edit, from the base pose, so its
:class:`MirrorPlan` gives the joints that take a target (effectors):

- for each edited limb, the other side's wrist / ankle takes the mirrored target at full
  weight, its elbow / knee (and toe) theirs at :data:`SHAPE_WEIGHT`, so the limb takes the
  mirrored shape while the end is placed exactly (a base pose that is not symmetric cannot
  give both exactly);
- the edited limbs' same joints are held where the edit put them (same weights): the other
  side's new goals would otherwise move them;
- the centre line is not mirrored: the solve places it, as it did in the edit.
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
SHAPE_TOL = 0.01  # m: a limb whose own shape changed less than this is not part of the edit
# A limb that changed less than this share of the side's most changed one was adjusted by
# the solve, not edited (a foot lifted 26 cm swings the arms 2 to 3 cm): it is not carried.
CARRIED_SHARE = 0.25
SHAPE_WEIGHT = 0.5  # the weight of the limbs' middle joints and toes: a shape, not a goal
# Each limb: the trunk that carries it (its root joint, the vector up, None for the
# world's, and the vector across: the chest's rigid bones for the arms; the hips for the
# legs, the world's up as the spine bone turns apart from them), its joints by name without
# the side's prefix, and the joints a mirror carries with the weight they take: ends
# exactly, the rest as the shape the limb takes.
_LIMBS: dict[str, tuple[tuple[str, tuple[str, str] | None, tuple[str, str]], tuple[str, ...],
                        dict[str, float]]] = {
    "arm": (("chest", ("chest", "neck"), ("r_clavicle", "l_clavicle")),
            ("clavicle", "upperarm", "forearm", "hand"),
            {"hand": 1.0, "forearm": SHAPE_WEIGHT}),
    "leg": (("pelvis", None, ("r_thigh", "l_thigh")),
            ("thigh", "shin", "foot", "toe"),
            {"foot": 1.0, "shin": SHAPE_WEIGHT, "toe": SHAPE_WEIGHT}),
}
_UP = np.array([0.0, 1.0, 0.0])


class NothingToMirror(ValueError):
    """The pose equals its base on the side asked for: there is no edit to carry."""


@dataclass(frozen=True)
class MirrorPlan:
    """What a mirror asks of the solve, in the space of the poses it was made from."""

    source: str  # "left" or "right": the edited side, carried to the other one
    targets: np.ndarray  # (21, 3) the edited pose with the carried joints' mirrored targets
    moved: tuple[str, ...]  # the other side's joints given a target (``targets``)
    weights: tuple[float, ...]  # each moved joint's effector weight
    held: tuple[str, ...]  # the edited side's joints held where the edit put them
    held_weights: tuple[float, ...]  # each held joint's effector weight
    blocked: tuple[str, ...]  # joints the mirror would move that the caller pinned
    change: float  # m: the largest change of a limb's own shape on the edited side

    def effectors(self) -> list[Effector]:
        """The solve's effectors (from the base pose or the edited one): the moved joints on
        their mirrored targets, the held ones where the edit put them."""
        return [Effector(j, self.targets[JOINT_INDEX[j]].copy(), w)
                for j, w in zip((*self.moved, *self.held), (*self.weights, *self.held_weights),
                                strict=True)]


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
    return np.array([JOINT_INDEX[_PREFIX[side] + n] for _, names, _ in _LIMBS.values()
                     for n in names])


def _trunk_frame(p: np.ndarray, up: tuple[str, str] | None, across: tuple[str, str]
                 ) -> np.ndarray:
    """An orthonormal frame (3, 3), columns across, up, forward, of rigid trunk bones."""
    u = _UP if up is None else p[JOINT_INDEX[up[1]]] - p[JOINT_INDEX[up[0]]]
    u = u / np.linalg.norm(u)
    a = p[JOINT_INDEX[across[1]]] - p[JOINT_INDEX[across[0]]]
    a = a - (a @ u) * u
    a = a / np.linalg.norm(a)
    return np.stack([a, u, np.cross(a, u)], axis=1)


def limb_changes(base: np.ndarray, edited: np.ndarray) -> dict[tuple[str, str], float]:
    """How much each limb's own shape changed (m), keyed (side, limb): its joints' largest
    move in the frame of the trunk bones that carry it, so that a limb the trunk merely
    carried along (a foot's lift turning the chest) counts as unchanged."""
    b, e = _check(base, "base"), _check(edited, "edited")
    out = {}
    for limb, ((root, up, across), names, _) in _LIMBS.items():
        r = JOINT_INDEX[root]
        fb, fe = _trunk_frame(b, up, across), _trunk_frame(e, up, across)
        for side in SIDES:
            joints = [JOINT_INDEX[_PREFIX[side] + n] for n in names]
            shape = (e[joints] - e[r]) @ fe - (b[joints] - b[r]) @ fb
            out[side, limb] = float(np.linalg.norm(shape, axis=1).max())
    return out


def side_changes(base: np.ndarray, edited: np.ndarray) -> dict[str, float]:
    """How much each side's limbs changed their own shapes: the sum over its limbs (m)."""
    changes = limb_changes(base, edited)
    return {side: sum(changes[side, limb] for limb in _LIMBS) for side in SIDES}


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
         pinned: Iterable[str] = (), tolerance: float = SHAPE_TOL) -> MirrorPlan:
    """The mirror of ``edited``'s change from ``base`` (both (21, 3), one space), from
    ``side`` ("left", "right" or "auto": the side whose limbs changed most).

    ``pinned``: joints the mirror must not move (the user's pins): a limb with one on the
    other side is not mirrored, and its pinned joints are listed in ``blocked``. The side's
    limbs whose own shape changed ``tolerance`` or more, and at least
    :data:`CARRIED_SHARE` of the most changed one, are carried (:func:`limb_changes`);
    :class:`NothingToMirror` when none did.
    """
    b, e = _check(base, "base"), _check(edited, "edited")
    if side not in (*SIDES, "auto"):
        raise ValueError(f"side must be one of {(*SIDES, 'auto')}, got {side!r}")
    pinned = tuple(pinned)
    unknown = [j for j in pinned if j not in JOINT_INDEX]
    if unknown:
        raise ValueError(f"unknown pinned joint(s) {unknown}; joints are: {', '.join(JOINTS)}")
    limbs = limb_changes(b, e)
    source = edited_side(b, e) if side == "auto" else side
    other = SIDES[1 - SIDES.index(source)]
    largest = max(limbs[source, limb] for limb in _LIMBS)
    edited_limbs = [limb for limb in _LIMBS
                    if limbs[source, limb] >= max(tolerance, CARRIED_SHARE * largest)]
    if not edited_limbs:
        if side != "auto" and any(limbs[other, limb] >= tolerance for limb in _LIMBS):
            raise NothingToMirror(f"the {source} side has no edit to mirror (the {other} "
                                  "side has one: mirror from that side)")
        raise NothingToMirror(f"nothing to mirror: no arm or leg changed its shape by "
                              f"{tolerance * 1e3:.0f} mm or more from the base pose")
    carried, moved, blocked = [], [], []
    for limb in edited_limbs:  # a limb with a pinned joint on the other side stays
        joints = [(_PREFIX[source] + n, w) for n, w in _LIMBS[limb][2].items()]
        mirrors = [(JOINTS[MIRROR[JOINT_INDEX[j]]], w) for j, w in joints]
        stays = [j for j, _ in mirrors if j in pinned]
        if stays:
            blocked += stays
            continue
        carried += joints
        moved += mirrors
    return MirrorPlan(source, mirrored_targets(b, e, source), tuple(j for j, _ in moved),
                      tuple(w for _, w in moved), tuple(j for j, _ in carried),
                      tuple(w for _, w in carried), tuple(blocked), largest)
