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

from dataclasses import dataclass

import numpy as np

from .skeleton import (
    ANCESTORS,
    BONE_LENGTHS,
    JOINT_INDEX,
    NUM_JOINTS,
    PARENTS,
    ROOT,
    bone_lengths,
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


def _unit(v: np.ndarray) -> np.ndarray:
    """Unit vectors along the last axis; zero vectors stay zero."""
    n = np.sqrt(np.einsum("...i,...i->...", v, v))[..., None]
    return np.where(n > _EPS, v / np.maximum(n, _EPS), 0.0)


def facing_yaw(positions: np.ndarray) -> np.ndarray:
    """Yaw of the body's forward direction, ``atan2(fx, fz)``, shape ``(...,)``.

    0 means facing +Z, +pi/2 facing +X. A body whose across axis is degenerate (zero or
    vertical) gets 0.
    """
    p = _as_positions(positions)
    across = _unit(p[..., _L_THIGH, :] - p[..., _R_THIGH, :]) + _unit(
        p[..., _L_UPPERARM, :] - p[..., _R_UPPERARM, :]
    )
    fx, fz = -across[..., 2], across[..., 0]  # cross(across, up), horizontal already
    degenerate = np.hypot(fx, fz) <= _EPS
    return np.where(degenerate, 0.0, np.arctan2(fx, fz))


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
    vec = p - p[..., PARENTS.clip(min=0), :]
    norm = np.sqrt(np.einsum("...i,...i->...", vec, vec))[..., None]
    if (norm[..., 1:, :] <= _EPS).any():
        return _set_bone_lengths_sweep(p, lengths)
    norm[..., ROOT, :] = 1.0
    bones = vec * (lengths[..., None] / norm)
    return p[..., ROOT:ROOT + 1, :] + ANCESTORS @ bones


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
    left = lengths[..., _LEG_BONES_L[0]] + lengths[..., _LEG_BONES_L[1]]
    right = lengths[..., _LEG_BONES_R[0]] + lengths[..., _LEG_BONES_R[1]]
    return 0.5 * (left + right)


_CANONICAL_LEG = float(_leg_length(BONE_LENGTHS))


def _scale_for(lengths: np.ndarray) -> np.ndarray:
    """canonical leg / rig leg; 1 for a rig without legs (zero length)."""
    leg = _leg_length(lengths)
    return np.where(leg > _EPS, _CANONICAL_LEG / np.maximum(leg, _EPS), 1.0)


def _shift_y(positions: np.ndarray, dy: np.ndarray) -> np.ndarray:
    out = positions.copy()
    out[..., 1] += dy[..., None]
    return out


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
    batch = p.shape[:-2]
    if lengths is None:
        rig_lengths = bone_lengths(p)
    else:
        rig_lengths = np.asarray(lengths, dtype=np.float64)
        if rig_lengths.shape[-1:] != (NUM_JOINTS,):
            raise ValueError(
                f"lengths must have shape (..., {NUM_JOINTS}), got {rig_lengths.shape}"
            )
        rig_lengths = np.broadcast_to(rig_lengths, (*batch, NUM_JOINTS)).copy()

    root = p[..., ROOT, :].copy()
    root[..., 1] = 0.0
    centered = p - root[..., None, :]
    canonical = set_bone_lengths(centered, BONE_LENGTHS)  # commutes with the yaw rotation
    yaw = -facing_yaw(canonical)
    model = rotate_y(canonical, yaw)
    scale = _scale_for(rig_lengths)
    height = model[..., ROOT, 1]
    model = _shift_y(model, height * (scale - 1.0))
    return model, BodyFrame(root=root, yaw=yaw, lengths=rig_lengths, scale=scale)


def from_model_space(
    model: np.ndarray, frame: BodyFrame, lengths: np.ndarray | None = None,
    fix_lengths: bool = True,
) -> np.ndarray:
    """Model-space poses back to the rig: its bone lengths, pelvis height, yaw and place.

    ``lengths`` default to ``frame.lengths`` (and the pelvis height is divided by
    ``frame.scale``); other lengths given here also set the pelvis-height scale
    (canonical leg / their leg). ``fix_lengths=False`` keeps the model's bone lengths.
    """
    m = _as_positions(model, "model")
    if lengths is None:
        rig_lengths = np.asarray(frame.lengths, dtype=np.float64)
        scale = np.asarray(frame.scale, dtype=np.float64)
    else:
        rig_lengths = np.asarray(lengths, dtype=np.float64)
        scale = _scale_for(rig_lengths)
    rig = set_bone_lengths(m, rig_lengths) if fix_lengths else m
    height = rig[..., ROOT, 1]
    rig = _shift_y(rig, height * (1.0 / scale - 1.0))
    rig = rotate_y(rig, -np.asarray(frame.yaw, dtype=np.float64))
    return rig + np.asarray(frame.root, dtype=np.float64)[..., None, :]


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
