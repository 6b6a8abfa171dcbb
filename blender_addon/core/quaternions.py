"""Quaternion and rotation-matrix algebra: small pure functions over batches, pure numpy.

Notation (the glossary of :mod:`.rotations`): ``q`` quaternions ``(..., 4)`` in **w, x, y,
z** order (Blender's), ``q`` and ``-q`` the same rotation; ``R`` rotation matrices
``(..., 3, 3)`` acting on column vectors (``v' = R @ v``); leading axes are batches (frames,
bones) and broadcast. The public helpers (``quat_*``, :func:`matrix_to_quat`, swings, fits)
serve everyone; :func:`quat_to_matrix4`, :func:`shepperd_rows`, :func:`norm`,
:func:`apply` and :func:`rotation_from_covariance` are the cheap forms the solver's hot loop
calls directly.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-12  # vectors shorter than this have no direction
IDENTITY_Q = np.array([1.0, 0.0, 0.0, 0.0])
IDENTITY_Q.flags.writeable = False
_FEW = 128  # up to this many, fewer numpy calls beat fewer flops (see quat_to_matrix4)


def _linear_map(rows: int, cols: int, terms: dict[int, str]) -> np.ndarray:
    """The matrix ``(rows * cols, outputs)`` taking a flat ``p`` ``(rows, cols)`` to outputs
    that are sums of its entries: ``terms[o] = "+ab -cd"`` makes output o ``p[a, b] - p[c, d]``.
    """
    out = np.zeros((rows * cols, max(terms) + 1))
    for o, expr in terms.items():
        for t in expr.split():
            out[int(t[1]) * cols + int(t[2]), o] = 1.0 if t[0] == "+" else -1.0
    return out


# The entries of a rotation matrix are quadratic in its quaternion: the flat outer product
# q q^T (w, x, y, z = 0..3) times this is |q|^2 [R 0; 0 0] (flat 4x4), then |q|^2 (column 16).
QUAT_QUADRATIC_FORMS = _linear_map(4, 4, {
    0: "+00 +11 -22 -33", 1: "+12 +21 -03 -30", 2: "+13 +31 +02 +20",
    4: "+12 +21 +03 +30", 5: "+00 -11 +22 -33", 6: "+23 +32 -01 -10",
    8: "+13 +31 -02 -20", 9: "+23 +32 +01 +10", 10: "+00 -11 -22 +33",
    16: "+00 +11 +22 +33",
})  # fmt: skip
QUAT_QUADRATIC_FORMS.flags.writeable = False
_IDENTITY_ROTATION4 = np.append(np.diag([1.0, 1.0, 1.0, 0.0]).ravel(), 1.0)  # that, for q = 1
_EYE4_FLAT = np.eye(4).ravel()
# matrix_to_quat: Shepperd's flat k - I from the flat rotation matrix m (rows 0..2).
_SHEPPERD = _linear_map(3, 3, {
    0: "+00 +11 +22", 1: "+21 -12", 2: "+02 -20", 3: "+10 -01",
    4: "+21 -12", 5: "+00 -11 -22", 6: "+01 +10", 7: "+02 +20",
    8: "+02 -20", 9: "+01 +10", 10: "-00 +11 -22", 11: "+12 +21",
    12: "+10 -01", 13: "+02 +20", 14: "+12 +21", 15: "-00 -11 +22",
})  # fmt: skip


# --------------------------------------------------------------------------- quaternions


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternions along the last axis; a zero quaternion becomes the identity."""
    q = np.asarray(q, dtype=np.float64)
    n = norm(q)[..., None]
    return np.where(n > EPS, q / np.maximum(n, EPS), IDENTITY_Q)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b`` (apply ``b`` first, then ``a``), broadcast over ``...``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = aw * bw - ax * bx - ay * by - az * bz
    out[..., 1] = aw * bx + ax * bw + ay * bz - az * by
    out[..., 2] = aw * by - ax * bz + ay * bw + az * bx
    out[..., 3] = aw * bz + ax * by - ay * bx + az * bw
    return out


def quat_to_matrix(q: np.ndarray, *, components_first: bool = False) -> np.ndarray:
    """``(..., 4)`` -> ``(..., 3, 3)``. Need not be unit (it is normalized); zero -> identity.

    ``components_first``: ``(4, ...)`` -> ``(3, 3, ...)``, every operation on contiguous rows.
    """
    q = np.asarray(q, dtype=np.float64)
    if components_first:
        out = np.empty((3, 3, *q.shape[1:]))
        _rotations_by_component(np.moveaxis(q, 0, -1), np.moveaxis(out, (0, 1), (-2, -1)))
        return out
    if q[..., 0].size <= _FEW:
        return quat_to_matrix4(q)[..., :3, :3].copy()
    return _rotations_by_component(q, np.empty((*q.shape[:-1], 3, 3)))


def quat_to_matrix4(q: np.ndarray) -> np.ndarray:
    """:func:`quat_to_matrix` as ``(..., 4, 4)`` [R 0; 0 0] (float64 ``q``, not checked).

    ``|q|^2 R`` is quadratic in q: for a few quaternions one outer product and one small
    matmul make it (few numpy calls); for many, component by component (fewer flops).
    """
    if q[..., 0].size <= _FEW:
        qq = (q[..., :, None] * q[..., None, :]).reshape(*q.shape[:-1], 16)
        m = qq @ QUAT_QUADRATIC_FORMS  # (..., 17): |q|^2 [R 0; 0 0], |q|^2
        zero = m[..., 16:] <= EPS * EPS
        if zero.any():  # the identity
            m = np.where(zero, _IDENTITY_ROTATION4, m)
        return (m[..., :16] / m[..., 16:]).reshape(*q.shape[:-1], 4, 4)
    return _rotations_by_component(q, np.zeros((*q.shape[:-1], 4, 4)))


def _rotations_by_component(q: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` ``(..., 3 or 4, 3 or 4)`` with ``R(q)`` written in its top-left 3x3."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    n2 = w * w + x * x + y * y + z * z
    s = np.where(n2 > EPS * EPS, 2.0 / np.maximum(n2, EPS * EPS), 0.0)
    xs, ys, zs = x * s, y * s, z * s
    xx, yy, zz = x * xs, y * ys, z * zs
    out[..., 0, 0] = 1.0 - yy - zz
    out[..., 1, 1] = 1.0 - xx - zz
    out[..., 2, 2] = 1.0 - xx - yy
    xy, xz, yz = x * ys, x * zs, y * zs
    wx, wy, wz = w * xs, w * ys, w * zs
    out[..., 0, 1] = xy - wz
    out[..., 1, 0] = xy + wz
    out[..., 0, 2] = xz + wy
    out[..., 2, 0] = xz - wy
    out[..., 1, 2] = yz - wx
    out[..., 2, 1] = yz + wx
    return out


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """``(..., 3, 3)`` -> unit ``(..., 4)`` with ``w >= 0``, by Shepperd's method.

    Each row of the symmetric 4x4 matrix ``k`` (linear in ``m``: :data:`_SHEPPERD`) is
    ``4 q_i q``; the row with the largest diagonal (the largest ``|q_i|``) is normalized, so
    no division by a small number happens even at 180 degrees.
    """
    m = np.asarray(m, dtype=np.float64)
    if m.shape[-2:] != (3, 3):
        raise ValueError(f"rotation matrices must have shape (..., 3, 3), got {m.shape}")
    q = quat_normalize(shepperd_rows(m))
    return np.where(q[..., :1] < 0.0, -q, q)


def shepperd_rows(m: np.ndarray) -> np.ndarray:
    """:func:`matrix_to_quat`'s rows ``4 q_i q`` ``(..., 4)``: any sign, not normalized (k's
    trace is 4, so the row's length is at least 1)."""
    k = (m.reshape(-1, 9) @ _SHEPPERD + _EYE4_FLAT).reshape(-1, 4, 4)
    best = np.argmax(k.reshape(-1, 16)[:, ::5], axis=-1)  # the diagonal
    return k[np.arange(len(k)), best].reshape(*m.shape[:-2], 4)


def quat_make_continuous(q: np.ndarray, axis: int = 0) -> np.ndarray:
    """Flip signs along ``axis`` (frames) so consecutive quaternions have a positive dot.

    ``q`` and ``-q`` are the same rotation, but Blender interpolates keyframes component-wise,
    so a sign jump between two keys makes a bone spin the long way round.
    """
    q = np.moveaxis(np.asarray(q, dtype=np.float64), axis, 0)
    if q.shape[0] < 2:
        return np.moveaxis(q.copy(), 0, axis)
    dots = np.sum(q[1:] * q[:-1], axis=-1)
    flips = np.cumprod(np.where(dots < 0.0, -1.0, 1.0), axis=0)
    out = q.copy()
    out[1:] *= flips[..., None]
    return np.moveaxis(out, 0, axis)


# ------------------------------------------------------------------------------ vectors


def norm(v: np.ndarray) -> np.ndarray:
    """Euclidean norm along the last axis (np.linalg.norm, even np.sum, cost more per call)."""
    return np.sqrt(np.add.reduce(v * v, axis=-1))


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross product of ``(..., 3)`` vectors (np.cross costs ~30 us per call)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


def apply(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``m @ v`` for matrices ``(..., 3, 3)`` and vectors ``(..., 3)``."""
    return (m @ v[..., None])[..., 0]


def _unit(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors and a mask of the non-zero ones; zero vectors stay zero."""
    n = norm(v)[..., None]
    ok = n > EPS
    return np.where(ok, v / np.maximum(n, EPS), 0.0), ok[..., 0]


def _perpendicular(a: np.ndarray) -> np.ndarray:
    """Some unit vector perpendicular to each unit ``a``: crossed with its smallest axis."""
    e = np.zeros_like(a)
    np.put_along_axis(e, np.argmin(np.abs(a), axis=-1)[..., None], 1.0, axis=-1)
    return _unit(_cross(a, e))[0]


# ------------------------------------------------------------------ vector-to-vector fits


def swing_quat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotation taking direction ``a`` to direction ``b`` (``(..., 3)`` each),
    as a quaternion ``(..., 4)`` with ``w >= 0``.

    It turns in the plane of ``a`` and ``b`` about their normal, so a bone keeps its twist.
    Antiparallel vectors turn 180 degrees about some perpendicular axis; a zero vector gives
    the identity, as do exactly parallel ones (an exact identity, not 1e-16s).
    """
    a, a_ok = _unit(np.asarray(a, dtype=np.float64))
    b, b_ok = _unit(np.asarray(b, dtype=np.float64))
    a, b = np.broadcast_arrays(a, b)
    c = np.sum(a * b, axis=-1)
    # u: b's part perpendicular to a, orthogonalized twice so the result maps a to b even
    # when a and b are nearly antiparallel (u's direction is then noise, but |u| ~ sin).
    u = b - c[..., None] * a
    u -= np.sum(u * a, axis=-1, keepdims=True) * a
    s = norm(u)
    degenerate = s <= EPS
    u /= np.maximum(s, EPS)[..., None]
    if degenerate.any():
        u = np.where(degenerate[..., None], _perpendicular(a), u)
    # Turn by atan2(s, c) about the unit normal a x u: a -> c a + s u = b.
    half = 0.5 * np.arctan2(s, c)
    q = np.empty((*c.shape, 4))
    q[..., 0] = np.cos(half)
    q[..., 1:] = np.sin(half)[..., None] * _cross(a, u)
    identity = ~(a_ok & b_ok) | (degenerate & (c > 0.0))
    if identity.any():
        q[identity] = IDENTITY_Q
    return q


def swing_rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`swing_quat` as a rotation matrix ``(..., 3, 3)``."""
    return quat_to_matrix(swing_quat(a, b))


def rotation_from_covariance(h: np.ndarray) -> np.ndarray:
    """The proper rotation R maximising ``trace(R @ h)`` (h = sum w a b^T), by SVD."""
    u, _, vt = np.linalg.svd(h)
    r = np.swapaxes(vt, -1, -2) @ np.swapaxes(u, -1, -2)
    flip = np.linalg.det(r) < 0.0
    if flip.any():  # a reflection: turn the least significant axis round
        fixed = r - 2.0 * vt[..., 2, :, None] * u[..., None, :, 2]
        r = np.where(flip[..., None, None], fixed, r)
    return r


def best_rotation(a: np.ndarray, b: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Kabsch / Wahba: the proper rotation R minimising ``sum_i w_i |R a_i - b_i|^2``.

    ``a``, ``b``: ``(..., N, 3)`` vectors (not centred: there is no translation);
    ``weights``: ``(..., N)``, default 1. A rank-deficient problem (all vectors on one
    line) has many solutions; one of them is returned.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape[-1:] != (3,) or b.shape[-1:] != (3,) or a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"a and b must have shape (..., N, 3), got {a.shape} and {b.shape}")
    w = np.ones(a.shape[-2]) if weights is None else np.asarray(weights, dtype=np.float64)
    h = np.einsum("...n,...ni,...nj->...ij", w, a, b)
    return rotation_from_covariance(h)


def orthonormalize(m: np.ndarray) -> np.ndarray:
    """The nearest rotation to each ``(..., 3, 3)`` (polar decomposition), dropping scale;
    a mirror becomes a rotation by flipping the least significant axis."""
    return rotation_from_covariance(np.swapaxes(m, -1, -2))
