"""Blender's three rotation channels <-> quaternions, in batches, pure numpy (no bpy).

A pose bone keeps its rotation in the channel its ``rotation_mode`` names: a quaternion,
Euler angles in one of six orders, or an angle and an axis. The bpy layer reads and
writes the channels as arrays (``foreach_get`` / ``foreach_set``) and converts them here,
the way Blender's ``mathutils`` does (``tests/blender`` checks that against Blender):

- Euler order ``'XYZ'`` turns about X first, so its matrix is ``Rz @ Ry @ Rx``; angles
  are always ``(x, y, z)`` whatever the order. A BVH channel list is the same turns
  written the other way round (``Zrotation Xrotation Yrotation`` is order ``'YXZ'``);
  :func:`euler_to_quat` (closed form) is the one Euler implementation of the project;
- a rotation has two Euler triples; a conversion with a reference (``compat``) takes the
  one closer to it after moving each angle by whole turns towards it, so Euler keys
  written frame after frame never jump by 360 degrees (without a reference: the triple
  with the smaller angles);
- axis-angle is ``(angle, x, y, z)``; the identity's axis is +Y.

Quaternions are ``(w, x, y, z)``, like everywhere in the project.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from .quaternions import (
    QUAT_QUADRATIC_FORMS,
    norm,
    orthonormalize,
    quat_normalize,
    quat_to_matrix,
)

QUATERNION = "QUATERNION"
AXIS_ANGLE = "AXIS_ANGLE"
EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
# Per Euler order: the axes (i, j, k) and whether the permutation is odd (Shoemake's
# "Euler Angle Conversion", as Blender's math_rotation uses it).
_ORDER_AXES = {
    "XYZ": (0, 1, 2, False), "XZY": (0, 2, 1, True), "YXZ": (1, 0, 2, True),
    "YZX": (1, 2, 0, False), "ZXY": (2, 0, 1, False), "ZYX": (2, 1, 0, True),
}  # fmt: skip
# Below this cos(middle angle), the first and last axes line up (gimbal lock) and the
# last angle is set to zero; Blender's EULER_HYPOT_EPSILON.
_GIMBAL_EPS = 3.75e-5
_TAU = 2.0 * np.pi
_EPS = 1e-12
_Y_AXIS = np.array([0.0, 1.0, 0.0])
_EYE3 = np.eye(3)
# [v]x as a gather of (x, y, z, 0) and signs: rows (0, -z, y), (z, 0, -x), (-y, x, 0).
_CROSS_AT = np.array([[3, 2, 1], [2, 3, 0], [1, 0, 3]])
_CROSS_SIGN = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])


def _check_order(order: str) -> tuple[int, int, int, bool]:
    axes = _ORDER_AXES.get(order)
    if axes is None:
        raise ValueError(f"Euler order must be one of {', '.join(EULER_ORDERS)}, got {order!r}")
    return axes


# ------------------------------------------------------------------------- Euler angles


def euler_to_quat(
    angles: np.ndarray, order: str, *, components_first: bool = False
) -> np.ndarray:
    """Blender Euler angles ``(..., 3)`` (x, y, z, radians) in ``order`` -> ``(..., 4)``.

    The product of the three turns' quaternions in closed form (Blender's ``eulO_to_quat``):
    a few array operations for a whole pose, where composing matrices costs several times
    more; tests check it against products of the three axis matrices. The project's one
    Euler implementation. ``components_first``: ``(3, ...)`` -> ``(4, ...)`` instead, so
    every operation runs on contiguous rows (long batches: the BVH reader).
    """
    i, j, k, odd = _check_order(order)
    a = np.asarray(angles, dtype=np.float64)
    if components_first:
        if a.shape[:1] != (3,):
            raise ValueError(f"angles must have shape (3, ...), got {a.shape}")
        half = 0.5 * a[[i, j, k]]
        q = out = np.empty((4, *a.shape[1:]))
    else:
        if a.shape[-1:] != (3,):
            raise ValueError(f"angles must have shape (..., 3), got {a.shape}")
        half = (0.5 * a[..., [i, j, k]]).T  # components first, as a (cheap) transposed view
        out = np.empty((*a.shape[:-1], 4))
        q = out.T
    if odd:
        half[1] = -half[1]
    (ci, cj, ch), (si, sj, sh) = np.cos(half), np.sin(half)
    cc, cs, sc, ss = ci * ch, ci * sh, si * ch, si * sh
    q[0] = cj * cc + sj * ss
    q[1 + i] = cj * sc - sj * cs
    q[1 + j] = cj * ss + sj * cc
    q[1 + k] = cj * cs - sj * sc
    if odd:
        q[1 + j] = -q[1 + j]
    return out


def euler_to_matrix(
    angles: np.ndarray, order: str, *, components_first: bool = False
) -> np.ndarray:
    """Blender Euler angles ``(..., 3)`` (x, y, z, radians) in ``order`` -> ``(..., 3, 3)``
    (``components_first``: ``(3, ...)`` -> ``(3, 3, ...)``)."""
    q = euler_to_quat(angles, order, components_first=components_first)
    return quat_to_matrix(q, components_first=components_first)


def _quadratic_form(r: int, c: int) -> np.ndarray:
    """``w`` (16,) with ``outer(q, q).ravel() @ w == |q|^2 R(q)[r, c]`` (``r = c = -1``:
    ``|q|^2``), a column of :data:`.quaternions.QUAT_QUADRATIC_FORMS`."""
    return QUAT_QUADRATIC_FORMS[:, 16 if r < 0 else 4 * r + c]


def _euler_forms(order: str) -> np.ndarray:
    """``W`` (16, 11) taking ``outer(q, q).ravel()`` to what :func:`_euler_pair` needs, all
    times ``|q|^2`` (which ``arctan2`` ignores): the first triple's sines (x, y, z order,
    an odd order's sign folded in) and cosines (the middle one left for ``cy``), the
    entries of ``cy`` and of the gimbal-lock angle, and ``|q|^2``. Blender's
    ``mat3_normalized_to_eulo2`` reads ``M[k, j], M[k, i], M[j, i], M[k, k], M[i, i]``."""
    i, j, k, odd = _check_order(order)
    sign = -1.0 if odd else 1.0
    w = np.zeros((16, 11))
    w[:, i] = sign * _quadratic_form(k, j)
    w[:, j] = -sign * _quadratic_form(k, i)
    w[:, k] = sign * _quadratic_form(j, i)
    w[:, 3 + i] = _quadratic_form(k, k)
    w[:, 3 + k] = _quadratic_form(i, i)
    w[:, 6] = _quadratic_form(i, i)
    w[:, 7] = _quadratic_form(j, i)
    w[:, 8] = -sign * _quadratic_form(j, k)
    w[:, 9] = _quadratic_form(j, j)
    w[:, 10] = _quadratic_form(-1, -1)
    return w


def _second_signs(order: str) -> tuple[np.ndarray, np.ndarray]:
    """The second triple's ``arctan2`` argument signs relative to the first, per candidate
    ``(2, 1, 3)`` and ``(2, 1, 1)``: both negated, except the middle angle's sine."""
    i, _j, k, _odd = _check_order(order)
    y = np.ones((2, 1, 3))
    y[1, 0, [i, k]] = -1.0
    return y, np.array([1.0, -1.0])[:, None, None]


_FORMS = {order: _euler_forms(order) for order in EULER_ORDERS}
_SECOND = {order: _second_signs(order) for order in EULER_ORDERS}


def _euler_pair(q: np.ndarray, order: str) -> np.ndarray:
    """Both Euler triples ``(2, ..., 3)`` of quaternions ``(..., 4)`` (need not be unit):
    Blender's ``mat3_normalized_to_eulo2`` (the same in gimbal lock), on the matrix
    entries it reads, computed straight from the quaternions."""
    i, j, k, _odd = _check_order(order)
    q = np.asarray(q, dtype=np.float64)
    lead = q.shape[:-1]
    vals = (q[..., :, None] * q[..., None, :]).reshape(-1, 16) @ _FORMS[order]
    cy = np.hypot(vals[:, 6], vals[:, 7])
    x = vals[:, 3:6]
    x[:, j] = cy
    y_signs, x_signs = _SECOND[order]
    pair = np.arctan2(vals[:, :3] * y_signs, x * x_signs)  # (2, n, 3)
    locked = cy <= _GIMBAL_EPS * vals[:, 10]  # cos(middle angle) of the unit quaternion
    if locked.any():  # the first and last axes line up: the last angle is zero
        pair[:, locked, i] = np.arctan2(vals[locked, 8], vals[locked, 9])
        pair[:, locked, k] = 0.0
        pair[1, locked, j] = pair[0, locked, j]
    return pair.reshape(2, *lead, 3)


def _pick(pair: np.ndarray, compat: np.ndarray | None) -> np.ndarray:
    """Of the two triples, the one closer to ``compat`` (L1) after moving each angle by
    whole turns to within half a turn of it; without ``compat``, the one with the smaller
    angles; the first on a tie. Blender's ``compatible_eul`` and choice, batched (its
    second step, one more turn for an axis still over half a turn off while the others
    are near, can only act on rounding; ties at exactly half a turn may round the other
    way)."""
    if compat is None:
        dist = np.abs(pair).sum(axis=-1)
        return np.where((dist[0] > dist[1])[..., None], pair[1], pair[0])
    d = pair - compat
    d -= np.round(d * (1.0 / _TAU)) * _TAU
    off = np.abs(d)
    if (off > np.pi).any():
        small = off < 0.5 * np.pi
        others_small = np.sum(small, axis=-1, keepdims=True) - small == 2
        d -= np.where((off > np.pi) & others_small, np.sign(d) * _TAU, 0.0)
        off = np.abs(d)
    dist = off.sum(axis=-1)
    return compat + np.where((dist[0] > dist[1])[..., None], d[1], d[0])


def quat_to_euler(q: np.ndarray, order: str, compat: np.ndarray | None = None) -> np.ndarray:
    """Quaternions ``(..., 4)`` (need not be unit) -> Blender Euler angles ``(..., 3)``.

    ``compat`` (broadcast to ``(..., 3)``): the angles to stay close to (e.g. the bone's
    current ``rotation_euler``), like ``Quaternion.to_euler(order, compat)``.
    """
    ref = None if compat is None else np.asarray(compat, dtype=np.float64)
    return _pick(_euler_pair(q, order), ref)


def quats_to_eulers(quats: np.ndarray, order: str, compat: np.ndarray) -> np.ndarray:
    """Frames of quaternions ``(T, ..., 4)`` -> Euler angles ``(T, ..., 3)``, each frame
    compatible with the one before and the first with ``compat`` (``(..., 3)``).

    The two triples of every frame are computed at once; only the choice runs frame by
    frame (it depends on the previous frame's).
    """
    pairs = _euler_pair(quats, order)  # (2, T, ..., 3)
    out = np.empty(pairs.shape[1:])
    prev = np.broadcast_to(np.asarray(compat, dtype=np.float64), out.shape[1:])
    for t in range(out.shape[0]):
        prev = out[t] = _pick(pairs[:, t], prev)
    return out


# ------------------------------------------------------------------------- axis-angle


def axis_angle_to_quat(aa: np.ndarray) -> np.ndarray:
    """Blender's ``rotation_axis_angle`` ``(..., 4)`` = (angle, x, y, z) -> ``(..., 4)``;
    a zero axis is no rotation."""
    aa = np.asarray(aa, dtype=np.float64)
    norm = np.linalg.norm(aa[..., 1:], axis=-1, keepdims=True)
    turns = norm > _EPS
    half = np.where(turns, 0.5 * aa[..., :1], 0.0)
    axis = aa[..., 1:] / np.where(turns, norm, 1.0)
    return np.concatenate([np.cos(half), np.sin(half) * axis], axis=-1)


def cross_matrix(v: np.ndarray) -> np.ndarray:
    """(..., 3, 3) [v]x, the matrix taking w to ``v x w``, for vectors (..., 3)."""
    padded = np.concatenate([v, np.zeros((*v.shape[:-1], 1))], axis=-1)
    return padded[..., _CROSS_AT] * _CROSS_SIGN


def axis_angle_to_matrix(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotations by ``angle`` (...) radians about ``axis`` (..., 3), which need
    not be unit; a zero axis is no rotation. Rodrigues' formula, cos I + sin [u]x +
    (1 - cos) u u^T for the unit axis u, in a few array operations (rig IK turns every
    pivot of the skeleton with it on each of its steps)."""
    length = norm(axis)
    turns = length > _EPS
    u = axis / np.where(turns, length, 1.0)[..., None]
    angle = np.where(turns, angle, 0.0)
    sin, cos = np.sin(angle)[..., None, None], np.cos(angle)[..., None, None]
    return (cos * _EYE3 + sin * cross_matrix(u)
            + (1.0 - cos) * (u[..., :, None] * u[..., None, :]))


def quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """``(..., 4)`` -> (angle, x, y, z), angle in [0, 2 pi]; the identity's axis is +Y."""
    q = quat_normalize(q)
    s = np.linalg.norm(q[..., 1:], axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    axis = np.where(s > _EPS, q[..., 1:] / np.maximum(s, _EPS), _Y_AXIS)
    return np.concatenate([angle, axis], axis=-1)


# ------------------------------------------------------------------------- by mode


def _groups(modes: Sequence[str]) -> dict[str, list[int]]:
    """Bone indices by rotation mode (the same few rigs' modes come back at every read of
    a pose: 0.5 ms of Python a read on the generated Rigify rig's 706 bones)."""
    return _grouped(tuple(modes))


@lru_cache(maxsize=16)
def _grouped(modes: tuple[str, ...]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for b, mode in enumerate(modes):
        groups.setdefault(mode, []).append(b)
    return groups


def to_quats(modes: Sequence[str], quats: np.ndarray, eulers: np.ndarray,
             axis_angles: np.ndarray) -> np.ndarray:
    """Each bone's rotation as a quaternion, read from the channel its mode uses.

    ``quats`` (..., B, 4), ``eulers`` (..., B, 3), ``axis_angles`` (..., B, 4): the raw
    values of the three channels (frames may lead); ``modes``: B rotation modes.
    """
    out = np.array(quats, dtype=np.float64, copy=True)
    for mode, idx in _groups(modes).items():
        if mode == AXIS_ANGLE:
            out[..., idx, :] = axis_angle_to_quat(axis_angles[..., idx, :])
        elif mode != QUATERNION:
            out[..., idx, :] = euler_to_quat(eulers[..., idx, :], mode)
    return out


def from_quats(modes: Sequence[str], rotations: np.ndarray, eulers: np.ndarray
               ) -> dict[str, tuple[list[int], np.ndarray]]:
    """The inverse of :func:`to_quats` for one pose: each bone's rotation (``rotations``
    (B, 4)) in the channel its mode uses, as ``{"quaternion" | "euler" | "axis_angle":
    (bones, values)}``; Euler angles stay compatible with the current ones (``eulers``
    (B, 3))."""
    out: dict[str, tuple[list[int], np.ndarray]] = {}
    for mode, idx in _groups(modes).items():
        if mode == QUATERNION:
            channel, values = "quaternion", rotations[idx]
        elif mode == AXIS_ANGLE:
            channel, values = "axis_angle", quat_to_axis_angle(rotations[idx])
        else:
            channel, values = "euler", quat_to_euler(rotations[idx], mode, eulers[idx])
        if channel in out:  # Euler bones of another order
            done, before = out[channel]
            idx, values = done + idx, np.concatenate([before, values])
        out[channel] = (idx, values)
    return out


# ------------------------------------------------------------------------- matrices


def orthonormal(m: np.ndarray) -> np.ndarray:
    """The rotation nearest to each ``(..., 3, 3)`` matrix with scale (one implementation:
    :func:`.quaternions.orthonormalize`)."""
    return orthonormalize(np.asarray(m, dtype=np.float64))
