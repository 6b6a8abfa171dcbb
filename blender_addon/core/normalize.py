"""Pose normalization (the seed papers' model space), pure numpy.

A pose in *model space* is the pose as the networks see it:

- **translation removed**: the pelvis projected on the floor is the origin, so the
  pelvis sits at ``(0, h, 0)``;
- **yaw removed**: turned about the vertical (+Y) axis so the body faces **+Z** (its left
  at +X), where the forward direction is the horizontal part of ``cross(across, up)`` with
  ``across = unit(l_thigh - r_thigh) + unit(l_upperarm - r_upperarm)`` (hips and shoulders);
- **proportions removed**: every bone keeps its direction and takes its canonical length
  (:data:`~blender_addon.core.skeleton.BONE_LENGTHS`), swept parents before children;
  the pelvis height is multiplied by ``scale = canonical leg / rig leg`` (leg = the
  ``*_shin`` and ``*_foot`` bones, averaged over left and right) so the feet stay near
  the floor.

:func:`to_model_space` returns the model-space pose and a :class:`BodyFrame` holding what
it removed; :func:`from_model_space` puts it back (the rig's own bone lengths, yaw and
floor position). Every function is batched over any leading dimensions (a pose
``(21, 3)``, a clip ``(T, 21, 3)``, a batch of clips ``(B, T, 21, 3)``) and loops over the
21 joints at most, never over frames. Computation is float64 whatever the input dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .skeleton import (
    ANCESTORS,
    BONE_LENGTHS,
    JOINT_INDEX,
    NUM_JOINTS,
    PARENTS,
    ROOT,
)

# Bones are swept in joint order: that is parents-before-children for the canonical skeleton.
assert all(PARENTS[j] < j for j in range(1, NUM_JOINTS)) and ROOT == 0

_EPS = 1e-12
_UP = np.array([0.0, 1.0, 0.0])

_L_THIGH, _R_THIGH = JOINT_INDEX["l_thigh"], JOINT_INDEX["r_thigh"]
_L_UPPERARM, _R_UPPERARM = JOINT_INDEX["l_upperarm"], JOINT_INDEX["r_upperarm"]
# The leg: bone l_shin is thigh -> shin (femur), bone l_foot is shin -> foot (tibia).
_LEG_BONES_L = (JOINT_INDEX["l_shin"], JOINT_INDEX["l_foot"])
_LEG_BONES_R = (JOINT_INDEX["r_shin"], JOINT_INDEX["r_foot"])
# Bone j (1..20) runs from PARENTS[j] to joint j; joints relative to the pelvis are
# _BONE_SUMS @ bone vectors (the root has no bone).
_BONE_PARENTS = PARENTS[1:]
_BONE_SUMS = ANCESTORS[:, 1:]
_ONES3 = np.ones(3)
# The across axis: left minus right hips and shoulders, as joint indices and as rows over
# bone vectors (so the product that rebuilds a pose from its bones gives them too).
_ACROSS_LEFT = np.array([_L_THIGH, _L_UPPERARM])
_ACROSS_RIGHT = np.array([_R_THIGH, _R_UPPERARM])
_SWEEP_ACROSS = np.vstack([_BONE_SUMS, _BONE_SUMS[_ACROSS_LEFT] - _BONE_SUMS[_ACROSS_RIGHT]])
_LEG_WEIGHTS = np.zeros(NUM_JOINTS)  # leg length = lengths @ _LEG_WEIGHTS (mean of sides)
_LEG_WEIGHTS[[*_LEG_BONES_L, *_LEG_BONES_R]] = 0.5
# A moved target enters model space as an offset from its joint (see :func:`offset_scales`),
# scaled by the limb that carries the joint: each hand by its arm (upper arm and forearm),
# each foot and toe by its own leg. The bones of each chain (bone j runs from PARENTS[j] to
# j), and the joints that take each chain's scale.
_OFFSET_CHAINS = (
    (("l_forearm", "l_hand"), ("l_hand",)),
    (("r_forearm", "r_hand"), ("r_hand",)),
    (("l_shin", "l_foot"), ("l_foot", "l_toe")),
    (("r_shin", "r_foot"), ("r_foot", "r_toe")),
)


def _chain_tables() -> tuple[np.ndarray, np.ndarray]:
    """(21, K): each chain's length is ``lengths @`` this; (K, 21): the joints of each."""
    weights = np.zeros((NUM_JOINTS, len(_OFFSET_CHAINS)))
    joints_of = np.zeros((len(_OFFSET_CHAINS), NUM_JOINTS))
    for k, (bones, joints) in enumerate(_OFFSET_CHAINS):
        weights[[JOINT_INDEX[b] for b in bones], k] = 1.0
        joints_of[k, [JOINT_INDEX[j] for j in joints]] = 1.0
    return weights, joints_of


_CHAIN_WEIGHTS, _CHAIN_OF = _chain_tables()
_CHAINED = _CHAIN_OF.sum(axis=0) > 0  # (21,) joints with a chain of their own


@dataclass
class BodyFrame:
    """What :func:`to_model_space` removed, so :func:`from_model_space` can put it back.

    ``model = rotate_y(canonicalize(rig) - root, yaw)`` (plus the pelvis-height scaling), so
    ``yaw`` is the *applied* rotation: minus the body's facing yaw in source space.
    """

    root: np.ndarray  # (..., 3) pelvis projected on the floor (y = 0) in source space
    yaw: np.ndarray  # (...,) radians: rotation about +Y that took the body to face +Z
    lengths: np.ndarray  # (..., 21) the rig's bone lengths (index 0 = 0)
    scale: np.ndarray  # (...,) canonical leg length / rig leg length


def _as_positions(positions: np.ndarray, name: str = "positions") -> np.ndarray:
    p = np.asarray(positions, dtype=np.float64)
    if p.ndim < 2 or p.shape[-2:] != (NUM_JOINTS, 3):
        raise ValueError(f"{name} must have shape (..., {NUM_JOINTS}, 3), got {p.shape}")
    return p


def _bone_vectors(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vectors (parent -> joint) of bones 1..20, ``(..., 20, 3)``, and their lengths."""
    vec = p[..., 1:, :] - p.take(_BONE_PARENTS, axis=-2)
    return vec, np.sqrt((vec * vec) @ _ONES3)


def _has_zero_bone(norm: np.ndarray) -> bool:
    """A bone without direction: the vectorized passes cannot rescale it."""
    return np.count_nonzero(norm <= _EPS) > 0


def _facing(across: np.ndarray) -> np.ndarray:
    """Facing yaw from the left-minus-right hip and shoulder vectors ``(..., 2, 3)``.

    Their unit vectors are summed into the across axis; forward is ``cross(across, up)``.
    A degenerate across axis (zero or vertical) gives 0.
    """
    n = np.sqrt((across * across) @ _ONES3)
    inv = (n > _EPS) / np.maximum(n, _EPS)  # 1 / |v|, and 0 for a zero vector
    axis = (inv[..., None, :] @ across)[..., 0, :]
    ax, az = axis[..., 0], axis[..., 2]
    return np.arctan2(-az, ax) * (np.hypot(ax, az) > _EPS)  # atan2(fx, fz)


def _turn_to_front(across: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The yaw that turns a body to face +Z (minus its facing yaw, see :func:`_facing`) and
    its :func:`yaw_matrix`. A single pose, the add-on's drag, takes scalar math: a few
    float operations cost less than the two dozen numpy calls."""
    if across.shape != (1, 2, 3):
        yaw = -_facing(across)
        return yaw, yaw_matrix(yaw)
    ax = az = 0.0
    for x, y, z in across[0].tolist():
        n = math.sqrt(x * x + y * y + z * z)
        if n > _EPS:
            ax, az = ax + x / n, az + z / n
    yaw = -math.atan2(-az, ax) if math.hypot(ax, az) > _EPS else 0.0
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([yaw]), np.array([[[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]]])


def facing_yaw(positions: np.ndarray) -> np.ndarray:
    """Yaw of the body's forward direction, ``atan2(fx, fz)``, shape ``(...,)``.

    0 means facing +Z, +pi/2 facing +X. A body whose across axis is degenerate (zero or
    vertical) gets 0.
    """
    p = _as_positions(positions)
    return _facing(p.take(_ACROSS_LEFT, axis=-2) - p.take(_ACROSS_RIGHT, axis=-2))


def rotate_y(positions: np.ndarray, angle: np.ndarray | float) -> np.ndarray:
    """Rotate points about +Y by ``angle`` radians (right-handed: +Z turns towards +X).

    ``positions`` has shape ``(..., 3)``. ``angle`` is aligned with its *leading* axes
    (padded with trailing singleton axes), so poses ``(T, 21, 3)`` take angles ``(T,)``
    (one per pose), points ``(T, 3)`` take ``(T,)`` too, and a scalar turns everything.
    A direction with yaw ``a`` (see :func:`facing_yaw`) rotated by ``b`` has yaw ``a + b``.
    """
    p = np.asarray(positions, dtype=np.float64)
    a = np.asarray(angle, dtype=np.float64)
    if p.shape[-1:] != (3,):
        raise ValueError(f"positions must have shape (..., 3), got {p.shape}")
    if a.ndim > p.ndim - 1:
        raise ValueError(f"angle shape {a.shape} has more axes than points {p.shape[:-1]}")
    a = a.reshape(a.shape + (1,) * (p.ndim - 1 - a.ndim))
    c, s = np.cos(a), np.sin(a)
    x, z = p[..., 0], p[..., 2]
    out = np.empty((*np.broadcast_shapes(p.shape[:-1], a.shape), 3))
    out[..., 0] = c * x + s * z
    out[..., 1] = p[..., 1]
    out[..., 2] = c * z - s * x
    return out


def yaw_matrix(angle: np.ndarray) -> np.ndarray:
    """Matrices ``(..., 3, 3)`` with ``points @ yaw_matrix(a) == rotate_y(points, a)``.

    One matrix product turns a whole pose, cheaper than :func:`rotate_y` on small batches.
    """
    c, s = np.cos(angle), np.sin(angle)
    r = np.zeros((*np.shape(angle), 3, 3))
    r[..., 0, 0] = r[..., 2, 2] = c
    r[..., 2, 0] = s
    r[..., 0, 2] = -s
    r[..., 1, 1] = 1.0
    return r


def _relative_with_lengths(p: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Joints relative to the pelvis once every bone has its length in ``lengths``."""
    vec, norm = _bone_vectors(p)
    if _has_zero_bone(norm):
        return _set_bone_lengths_sweep(p, lengths) - p[..., ROOT:ROOT + 1, :]
    return _BONE_SUMS @ (vec * (lengths[..., 1:] / norm)[..., None])


def set_bone_lengths(positions: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Give every bone the length in ``lengths`` (``(21,)`` or ``(..., 21)``), keeping its
    direction; the pelvis stays where it is. This is the FABRIK backward pass (seed
    Algorithm 1) that restores a rig's bone lengths after a network's prediction.

    It runs as one product with :data:`~blender_addon.core.skeleton.ANCESTORS` (positions
    are the pelvis plus the sum of the bone vectors above each joint). A zero-length bone
    has no direction: it takes its parent bone's (new) direction, or +Y for a bone hanging
    off the pelvis; that rare case falls back to a sweep over the joints.
    """
    p = _as_positions(positions)
    lengths = np.asarray(lengths, dtype=np.float64)
    if lengths.shape[-1:] != (NUM_JOINTS,):
        raise ValueError(f"lengths must have shape (..., {NUM_JOINTS}), got {lengths.shape}")
    return set_bone_lengths_unchecked(p, lengths)


def set_bone_lengths_unchecked(p: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """:func:`set_bone_lengths` for float64 poses and lengths the caller has checked (the
    refinement's inner loop)."""
    vec, norm = _bone_vectors(p)
    if _has_zero_bone(norm):
        return _set_bone_lengths_sweep(p, lengths)
    bones = vec * (lengths[..., 1:] / norm)[..., None]
    return p[..., ROOT:ROOT + 1, :] + _BONE_SUMS @ bones


def _set_bone_lengths_sweep(p: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Joint-by-joint :func:`set_bone_lengths` for poses with zero-length bones."""
    batch = np.broadcast_shapes(p.shape[:-2], lengths.shape[:-1])
    p = np.broadcast_to(p, (*batch, NUM_JOINTS, 3))
    lengths = np.broadcast_to(lengths, (*batch, NUM_JOINTS))
    out = np.empty_like(p)
    out[..., ROOT, :] = p[..., ROOT, :]
    dirs = np.empty_like(p)  # unit direction of each bone in the output
    dirs[..., ROOT, :] = _UP
    for j in range(1, NUM_JOINTS):
        parent = PARENTS[j]
        vec = p[..., j, :] - p[..., parent, :]
        norm = np.linalg.norm(vec, axis=-1, keepdims=True)
        dirs[..., j, :] = np.where(norm > _EPS, vec / np.maximum(norm, _EPS), dirs[..., parent, :])
        out[..., j, :] = out[..., parent, :] + lengths[..., j, None] * dirs[..., j, :]
    return out


def _leg_length(lengths: np.ndarray) -> np.ndarray:
    return lengths @ _LEG_WEIGHTS


_CANONICAL_LEG = float(_leg_length(BONE_LENGTHS))
_CANONICAL_CHAINS = BONE_LENGTHS @ _CHAIN_WEIGHTS
_CANONICAL_BONES = BONE_LENGTHS[1:]


def leg_scale(lengths: np.ndarray) -> np.ndarray:
    """canonical leg / rig leg (the pelvis-height factor) of float64 lengths ``(..., 21)``;
    1 for a rig without legs (zero length)."""
    leg = _leg_length(lengths)
    scale = _CANONICAL_LEG / np.maximum(leg, _EPS)
    return np.where(leg > _EPS, scale, 1.0) if np.count_nonzero(leg <= _EPS) else scale


def offset_scales(lengths: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(..., 21): what each joint's target offset (target minus joint, rig units) is
    multiplied by to enter model space, for float64 ``lengths`` (..., 21) and their
    :func:`leg_scale` ``scale`` (...,).

    Model space has the canonical body's bone lengths, so an offset is scaled by the limb
    that makes the move: a hand's by canonical arm / rig arm, a foot's (and its toe's) by
    its own leg; any other joint's by the legs (``scale``, the pelvis height's factor).
    Scaled by the legs alone, a long-armed, short-legged character's hand drag asked the
    canonical body for 1.6 times the move its arm makes, and the rest of the body followed
    (one hand dragged 10-25 cm from 150 CMU test poses with cartoon proportions, ad hoc:
    the other joints moved 1.42 cm, 1.26 cm scaled by the arm; classic FABRIK 1.12 cm). The
    head keeps the legs' scale: scaled by the trunk, CMU's own skeleton (a trunk 30 %
    longer than the canonical one) had its real motion's head moves taken for smaller and
    the rest of the body came out further from that motion (ad hoc). A rig of the
    canonical proportions gets the legs' scale everywhere."""
    chains = lengths @ _CHAIN_WEIGHTS  # (..., K)
    per_chain = _CANONICAL_CHAINS / np.maximum(chains, _EPS)
    if np.count_nonzero(chains <= _EPS):  # a rig without that limb: the legs' scale
        per_chain = np.where(chains > _EPS, per_chain, np.asarray(scale)[..., None])
    return np.where(_CHAINED, per_chain @ _CHAIN_OF, np.asarray(scale)[..., None])


def to_model_space(
    positions: np.ndarray, lengths: np.ndarray | None = None
) -> tuple[np.ndarray, BodyFrame]:
    """Rig-space poses ``(..., 21, 3)`` to model space, and the frame to undo it.

    ``lengths`` are the rig's bone lengths to record in the frame (``(21,)`` or
    ``(..., 21)``, e.g. the rest pose's, constant over a clip); by default each pose's own
    measured lengths. They also set ``scale`` (the pelvis-height factor). The facing yaw is
    measured on the pose *after* its bones take canonical lengths, so the model-space pose
    faces +Z exactly even when the rig is asymmetric.
    """
    p = _as_positions(positions)
    rig_lengths = None
    if lengths is not None:
        given = np.asarray(lengths, dtype=np.float64)
        if given.shape[-1:] != (NUM_JOINTS,):
            raise ValueError(f"lengths must have shape (..., {NUM_JOINTS}), got {given.shape}")
        rig_lengths = np.empty((*p.shape[:-2], NUM_JOINTS))
        rig_lengths[...] = given
    model, frame, _ = to_model_space_unchecked(p, rig_lengths)
    return model, frame


def to_model_space_unchecked(
    p: np.ndarray, lengths: np.ndarray | None = None, scale: np.ndarray | None = None
) -> tuple[np.ndarray, BodyFrame, np.ndarray]:
    """:func:`to_model_space` for float64 poses the caller has checked, without copies.

    ``lengths`` must already have the poses' batch shape ``(..., 21)`` (None: measured);
    ``scale`` is their :func:`leg_scale` when the caller keeps it (None: computed). Also
    returns :func:`yaw_matrix` of the frame's yaw, which turns rig offsets into model space.
    """
    vec, norm = _bone_vectors(p)
    if lengths is None:  # measured: the bones' lengths, 0 for the root
        lengths = np.zeros((*p.shape[:-2], NUM_JOINTS))
        lengths[..., 1:] = norm
    if scale is None:
        scale = leg_scale(lengths)
    if _has_zero_bone(norm):
        rel = _set_bone_lengths_sweep(p, BONE_LENGTHS) - p[..., ROOT:ROOT + 1, :]
        across = rel.take(_ACROSS_LEFT, axis=-2) - rel.take(_ACROSS_RIGHT, axis=-2)
    else:  # one product gives the canonical joints and the across vectors
        both = _SWEEP_ACROSS @ (vec * (_CANONICAL_BONES / norm)[..., None])
        rel, across = both[..., :NUM_JOINTS, :], both[..., NUM_JOINTS:, :]
    yaw, turn = _turn_to_front(across)
    model = rel @ turn  # the yaw commutes with the bone-length change
    model[..., 1] += (p[..., ROOT, 1] * scale)[..., None]  # the pelvis height, scaled
    root = p[..., ROOT, :].copy()
    root[..., 1] = 0.0
    return model, BodyFrame(root=root, yaw=yaw, lengths=lengths, scale=scale), turn


def from_model_space(
    model: np.ndarray, frame: BodyFrame, lengths: np.ndarray | None = None,
    fix_lengths: bool = True,
) -> np.ndarray:
    """Model-space poses back to the rig: its bone lengths, pelvis height, yaw and place.

    ``lengths`` default to ``frame.lengths`` (and the pelvis height is divided by
    ``frame.scale``); other lengths given here also set the pelvis-height scale
    (canonical leg / their leg). ``fix_lengths=False`` keeps the model's bones, scaled to the
    rig's size (its leg length).
    """
    m = _as_positions(model, "model")
    if lengths is None:
        rig_lengths = np.asarray(frame.lengths, dtype=np.float64)
        scale = np.asarray(frame.scale, dtype=np.float64)
    else:
        rig_lengths = np.asarray(lengths, dtype=np.float64)
        scale = leg_scale(rig_lengths)
    if rig_lengths.shape[-1:] != (NUM_JOINTS,):
        raise ValueError(f"lengths must have shape (..., {NUM_JOINTS}), got {rig_lengths.shape}")
    checked = BodyFrame(root=np.asarray(frame.root, dtype=np.float64),
                        yaw=np.asarray(frame.yaw, dtype=np.float64), lengths=rig_lengths,
                        scale=scale)
    return from_model_space_unchecked(m, checked, fix_lengths)


def from_model_space_unchecked(m: np.ndarray, frame: BodyFrame, fix_lengths: bool = True,
                               turn: np.ndarray | None = None) -> np.ndarray:
    """:func:`from_model_space` for float64 model poses and a frame of float64 arrays that
    the caller has checked; the rig's lengths and scale are the frame's. ``turn`` is
    ``yaw_matrix(frame.yaw)`` when the caller has it (from :func:`to_model_space_unchecked`).
    """
    rel = (_relative_with_lengths(m, frame.lengths) if fix_lengths
           else (m - m[..., ROOT:ROOT + 1, :]) / np.asarray(frame.scale)[..., None, None])
    # The model's pelvis (its height, and any move along the floor an edit made) back in
    # the rig's units.
    pelvis = m[..., ROOT, :] / np.asarray(frame.scale)[..., None]
    turn_back = yaw_matrix(-frame.yaw) if turn is None else turn.swapaxes(-1, -2)
    return (rel + pelvis[..., None, :]) @ turn_back + frame.root[..., None, :]


def flatten_pose(model: np.ndarray) -> np.ndarray:
    """``(..., 21, 3)`` to the network's pose vector ``(..., 63)``: joint-major, x y z."""
    m = _as_positions(model, "model")
    return m.reshape(*m.shape[:-2], NUM_JOINTS * 3)


def unflatten_pose(vec: np.ndarray) -> np.ndarray:
    """Inverse of :func:`flatten_pose`: ``(..., 63)`` to ``(..., 21, 3)``."""
    v = np.asarray(vec, dtype=np.float64)
    if v.ndim < 1 or v.shape[-1] != NUM_JOINTS * 3:
        raise ValueError(f"pose vectors must have shape (..., {NUM_JOINTS * 3}), got {v.shape}")
    return v.reshape(*v.shape[:-1], NUM_JOINTS, 3)
