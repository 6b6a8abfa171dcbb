"""Joint positions -> local bone rotations of a real rig, pure numpy.

The networks move the 21 canonical joints; a Blender rig has more bones (a root above the
hips, extra spine and neck bones, twist bones, fingers...). :func:`positions_to_rotations`
turns new joint positions into the rig's local pose rotations (and the pelvis location)
so the bpy layer only copies numbers into pose bones.

Glossary (fixed once for this module):

- ``q``: quaternion ``(..., 4)`` in **w, x, y, z** order (Blender's), unit length;
  ``q`` and ``-q`` are the same rotation.
- ``R``: rotation matrix ``(..., 3, 3)`` acting on column vectors (``v' = R @ v``).
- ``p``, ``t``: position / translation ``(..., 3)``; ``l``: a pose bone's ``location``.
- ``rad``: angles in radians.
- *rest frame*: a bone's frame in the rest pose; *local* rotation / location: a pose
  bone's ``rotation_quaternion`` / ``location`` (Blender's ``matrix_basis``).
- *world*: the rig's armature space (whatever axes the rig's rest matrices use: Blender's
  Z up when they come from ``bone.matrix_local``); targets must be in the same space.
- ``T``: frames (any leading batch axes are accepted); ``B``: bones; ``N``: vectors.

Pose evaluation is Blender's (scale ignored)::

    world_R[b] = world_R[p] @ rest_rotations[b] @ R(q[b])
    world_t[b] = world_t[p] + world_R[p] @ (rest_offsets[b] + rest_rotations[b] @ l[b])

with identity / zero for a root's parent. A bone's head is ``world_t``; bones point along
their local +Y, so a bone's direction is ``world_R[..., :, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from .skeleton import NUM_JOINTS

_EPS = 1e-12  # vectors shorter than this have no direction
# Weight (relative to sum |a||b|) pulling a multi-vector fit towards "no change", so a
# degenerate fit (all vectors collinear) keeps the bone's twist like a swing does.
_KABSCH_PRIOR = 1e-9
# Swings within ~0.1 degree of 180 (|a + b|^2 of unit vectors below this) are left to
# swing_quat: the solver's faster halfway-vector form loses digits there.
_HALFWAY_MIN = 1e-6
_AXES = {"X": 0, "Y": 1, "Z": 2}
_IDENTITY_Q = np.array([1.0, 0.0, 0.0, 0.0])
_EYE3 = np.eye(3)
_EYE4 = np.eye(4)
_CACHE_SIZE = 16  # solvers / plans kept per rig (mappings, sets of oriented bones)
# Poses solved at once: enough that numpy's per-call cost fades, few enough that the
# temporaries stay in cache (and in the heap: page faults cost, in VMs above all).
_CHUNK = 256
_FEW = 128  # up to this many, fewer numpy calls beat fewer flops (see _rotations4)
_T = TypeVar("_T")


def _linear_map(rows: int, cols: int, terms: dict[int, str]) -> np.ndarray:
    """The matrix ``(rows * cols, outputs)`` taking a flat ``p`` ``(rows, cols)`` to outputs
    that are sums of its entries: ``terms[o] = "+ab -cd"`` makes output o ``p[a, b] - p[c, d]``.
    """
    out = np.zeros((rows * cols, max(terms) + 1))
    for o, expr in terms.items():
        for t in expr.split():
            out[int(t[1]) * cols + int(t[2]), o] = 1.0 if t[0] == "+" else -1.0
    return out


# quat_to_matrix: |q|^2 [R 0; 0 0] (flat 4x4) and |q|^2 from the flat outer product q q^T
# (w, x, y, z = 0..3).
_QUAT_TO_MATRIX = _linear_map(4, 4, {
    0: "+00 +11 -22 -33", 1: "+12 +21 -03 -30", 2: "+13 +31 +02 +20",
    4: "+12 +21 +03 +30", 5: "+00 -11 +22 -33", 6: "+23 +32 -01 -10",
    8: "+13 +31 -02 -20", 9: "+23 +32 +01 +10", 10: "+00 -11 -22 +33",
    16: "+00 +11 +22 +33",
})  # fmt: skip
_IDENTITY_ROTATION4 = np.append(np.diag([1.0, 1.0, 1.0, 0.0]).ravel(), 1.0)  # that, for q = 1
_EYE4_FLAT = _EYE4.ravel()
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
    n = _norm(q)[..., None]
    return np.where(n > _EPS, q / np.maximum(n, _EPS), _IDENTITY_Q)


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


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """``(..., 4)`` -> ``(..., 3, 3)``. Need not be unit (it is normalized); zero -> identity."""
    return _rotations4(np.asarray(q, dtype=np.float64))[..., :3, :3].copy()


def _rotations4(q: np.ndarray) -> np.ndarray:
    """:func:`quat_to_matrix` as ``(..., 4, 4)`` [R 0; 0 0].

    ``|q|^2 R`` is quadratic in q: for a few quaternions one outer product and one small
    matmul make it (few numpy calls); for many, component by component (fewer flops).
    """
    if q[..., 0].size <= _FEW:
        qq = (q[..., :, None] * q[..., None, :]).reshape(*q.shape[:-1], 16)
        m = qq @ _QUAT_TO_MATRIX  # (..., 17): |q|^2 [R 0; 0 0], |q|^2
        zero = m[..., 16:] <= _EPS * _EPS
        if zero.any():  # the identity
            m = np.where(zero, _IDENTITY_ROTATION4, m)
        return (m[..., :16] / m[..., 16:]).reshape(*q.shape[:-1], 4, 4)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    n2 = w * w + x * x + y * y + z * z
    s = np.where(n2 > _EPS * _EPS, 2.0 / np.maximum(n2, _EPS * _EPS), 0.0)
    xs, ys, zs = x * s, y * s, z * s
    out = np.zeros((*q.shape[:-1], 4, 4))
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
    q = quat_normalize(_shepperd_rows(m))
    return np.where(q[..., :1] < 0.0, -q, q)


def _shepperd_rows(m: np.ndarray) -> np.ndarray:
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


def euler_to_matrix(angles_rad: np.ndarray, order: str) -> np.ndarray:
    """Euler angles ``(..., 3)`` to ``(..., 3, 3)``, BVH's convention.

    ``order`` names the axes of ``angles_rad[..., 0..2]`` (e.g. ``"ZXY"``, a BVH file's
    channel order) and ``R = Rz @ Rx @ Ry``: intrinsic rotations applied in listed order.
    """
    a = np.asarray(angles_rad, dtype=np.float64)
    key = order.upper()
    if len(key) != 3 or any(c not in _AXES for c in key):
        raise ValueError(f"order must be three of the letters X, Y, Z, got {order!r}")
    if a.shape[-1:] != (3,):
        raise ValueError(f"angles must have shape (..., 3), got {a.shape}")
    out = np.broadcast_to(np.eye(3), (*a.shape[:-1], 3, 3))
    for i, axis in enumerate(key):
        c, s = np.cos(a[..., i]), np.sin(a[..., i])
        r = np.zeros((*a.shape[:-1], 3, 3))
        k = _AXES[axis]
        u, v = (k + 1) % 3, (k + 2) % 3  # right-handed: u -> v by +90 degrees about k
        r[..., k, k] = 1.0
        r[..., u, u] = c
        r[..., v, v] = c
        r[..., v, u] = s
        r[..., u, v] = -s
        out = out @ r
    return out


# ------------------------------------------------------------------ vector-to-vector fits


def _norm(v: np.ndarray) -> np.ndarray:
    """Euclidean norm along the last axis (np.linalg.norm, even np.sum, cost more per call)."""
    return np.sqrt(np.add.reduce(v * v, axis=-1))


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross product of ``(..., 3)`` vectors (np.cross costs ~30 us per call)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


def _apply(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``m @ v`` for matrices ``(..., 3, 3)`` and vectors ``(..., 3)``."""
    return (m @ v[..., None])[..., 0]


def _unit(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors and a mask of the non-zero ones; zero vectors stay zero."""
    n = _norm(v)[..., None]
    ok = n > _EPS
    return np.where(ok, v / np.maximum(n, _EPS), 0.0), ok[..., 0]


def _perpendicular(a: np.ndarray) -> np.ndarray:
    """Some unit vector perpendicular to each unit ``a``: crossed with its smallest axis."""
    e = np.zeros_like(a)
    np.put_along_axis(e, np.argmin(np.abs(a), axis=-1)[..., None], 1.0, axis=-1)
    return _unit(_cross(a, e))[0]


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
    s = _norm(u)
    degenerate = s <= _EPS
    u /= np.maximum(s, _EPS)[..., None]
    if degenerate.any():
        u = np.where(degenerate[..., None], _perpendicular(a), u)
    # Turn by atan2(s, c) about the unit normal a x u: a -> c a + s u = b.
    half = 0.5 * np.arctan2(s, c)
    q = np.empty((*c.shape, 4))
    q[..., 0] = np.cos(half)
    q[..., 1:] = np.sin(half)[..., None] * _cross(a, u)
    identity = ~(a_ok & b_ok) | (degenerate & (c > 0.0))
    if identity.any():
        q[identity] = _IDENTITY_Q
    return q


def swing_rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`swing_quat` as a rotation matrix ``(..., 3, 3)``."""
    return quat_to_matrix(swing_quat(a, b))


def _rotation_from_covariance(h: np.ndarray) -> np.ndarray:
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
    return _rotation_from_covariance(h)


# ------------------------------------------------------------------------------- the rig


@dataclass
class Rig:
    """A rig's bone hierarchy and rest pose, enough to evaluate poses like Blender does.

    Its arrays are read-only copies: what the solvers derive from them is built once per rig
    (see :meth:`_derived`) and must not go stale.
    """

    names: list[str]  # bone names, parents before children
    parents: np.ndarray  # (B,) int64, -1 for a root bone
    rest_offsets: np.ndarray  # (B, 3) head in the parent's rest frame (a root: armature space)
    rest_rotations: np.ndarray  # (B, 3, 3) rest frame in the parent's rest frame (root: armature)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.names = list(self.names)
        self.parents = _read_only(self.parents, np.int64)
        self.rest_offsets = _read_only(self.rest_offsets, np.float64)
        self.rest_rotations = _read_only(self.rest_rotations, np.float64)
        b = len(self.names)
        if self.parents.shape != (b,):
            raise ValueError(f"parents must have shape ({b},), got {self.parents.shape}")
        if self.rest_offsets.shape != (b, 3):
            raise ValueError(
                f"rest_offsets must have shape ({b}, 3), got {self.rest_offsets.shape}"
            )
        if self.rest_rotations.shape != (b, 3, 3):
            raise ValueError(
                f"rest_rotations must have shape ({b}, 3, 3), got {self.rest_rotations.shape}"
            )
        bad = [
            self.names[i]
            for i, p in enumerate(self.parents)
            if not (p == -1 or 0 <= p < i)
        ]  # fmt: skip
        if bad:
            raise ValueError(f"bones must come after their parent (parent -1 for a root): {bad}")

    @property
    def num_bones(self) -> int:
        return len(self.names)

    @classmethod
    def from_rest_matrices(
        cls, names: Sequence[str], parents: Sequence[int] | np.ndarray, matrices_local: np.ndarray
    ) -> Rig:
        """From armature-space rest matrices ``(B, 4, 4)`` (Blender's ``bone.matrix_local``).

        ``M_rel = parent_local^-1 @ local``. Rotations are re-orthonormalized (Blender stores
        float32), so a rig read from Blender evaluates without drift.
        """
        m = np.asarray(matrices_local, dtype=np.float64)
        p = np.asarray(parents, dtype=np.int64)
        if m.shape != (len(names), 4, 4):
            raise ValueError(f"matrices_local must have shape ({len(names)}, 4, 4), got {m.shape}")
        rot = orthonormalize(m[:, :3, :3])
        head = m[:, :3, 3]
        has_parent = p >= 0
        prot = np.where(has_parent[:, None, None], rot[np.maximum(p, 0)], np.eye(3))
        phead = np.where(has_parent[:, None], head[np.maximum(p, 0)], 0.0)
        prot_t = np.swapaxes(prot, -1, -2)
        rest_rot = prot_t @ rot
        rest_off = np.einsum("bij,bj->bi", prot_t, head - phead)
        return cls(list(names), p, rest_off, rest_rot)

    def _derived(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, made once per ``key`` for these arrays (a solve plan, an FK order)."""
        source = (self.parents, self.rest_offsets, self.rest_rotations)
        hit = self._cache.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], source, strict=True)):
            return hit[1]
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        value = build()
        self._cache[key] = (source, value)
        return value


def _read_only(x: np.ndarray, dtype: type) -> np.ndarray:
    """A read-only copy (the caller's array stays as it was)."""
    out = np.array(x, dtype=dtype)
    out.flags.writeable = False
    return out


def orthonormalize(m: np.ndarray) -> np.ndarray:
    """The nearest rotation to each ``(..., 3, 3)`` (polar decomposition), dropping scale;
    a mirror becomes a rotation by flipping the least significant axis."""
    return _rotation_from_covariance(np.swapaxes(m, -1, -2))


def _check_batch(x: np.ndarray, tail: tuple[int, ...], name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < len(tail) or x.shape[x.ndim - len(tail) :] != tail:
        shape = ", ".join(["..."] + [str(n) for n in tail])
        raise ValueError(f"{name} must have shape ({shape}), got {x.shape}")
    return x


def _batch_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes, without its cost when the shapes agree (a single pose)."""
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    return np.broadcast_shapes(*shapes)


def _flat(x: np.ndarray, batch: tuple[int, ...], n: int) -> np.ndarray:
    """``x`` ``(..., *tail)`` broadcast to ``batch`` and flattened to ``(n, *tail)``."""
    tail = x.shape[x.ndim - 2 :]
    if x.shape[: x.ndim - 2] != batch:
        x = np.broadcast_to(x, (*batch, *tail))
    return x.reshape(n, *tail)


@dataclass(frozen=True)
class _Levels:
    """FK over a set of bones closed under parents (up to anchors), one vectorized step per
    tree depth. Arrays are bone-major (``(S, n, ...)``, S slots): a level's are contiguous.
    """

    bones: np.ndarray  # (S,) the bone in each slot: by depth, then by index
    slot: np.ndarray  # (B,) each bone's slot, -1 where not in the set
    rest: np.ndarray  # (S, 4, 4) rest transforms [rest_rotation | rest_offset]
    steps: tuple[tuple[slice, np.ndarray], ...]  # depth 1...: its slots, their parents' slots


def _levels(rig: Rig, bones: Sequence[int], anchors: frozenset[int] = frozenset()) -> _Levels:
    """The FK order of ``bones``. A bone whose parent is an anchor (or none) is at depth 0:
    its transform is then relative to that parent's posed frame."""
    depth: dict[int, int] = {}
    for b in sorted(bones):
        p = int(rig.parents[b])
        depth[b] = 0 if p < 0 or p in anchors else depth[p] + 1
    order = sorted(depth, key=lambda b: (depth[b], b))
    slot = np.full(rig.num_bones, -1, dtype=np.int64)
    slot[order] = np.arange(len(order))
    rest = np.zeros((len(order), 4, 4))
    rest[:, :3, :3] = rig.rest_rotations[order]
    rest[:, :3, 3] = rig.rest_offsets[order]
    rest[:, 3, 3] = 1.0
    steps = []
    start = sum(depth[b] == 0 for b in order)
    for d in range(1, max(depth.values(), default=0) + 1):
        group = [b for b in order if depth[b] == d]
        parents = np.array([slot[rig.parents[b]] for b in group], dtype=np.int64)
        steps.append((slice(start, start + len(group)), parents))
        start += len(group)
    return _Levels(np.array(order, dtype=np.int64), slot, rest, tuple(steps))


def _basis(q: np.ndarray, loc: np.ndarray) -> np.ndarray:
    """Local pose transforms ``(..., 4, 4)`` [R(q) | l] (Blender's ``matrix_basis``)."""
    out = _rotations4(q)
    out[..., :3, 3] = loc
    out[..., 3, 3] = 1.0
    return out


def _world(levels: _Levels, basis: np.ndarray) -> np.ndarray:
    """Posed transforms ``(S + 1, n, 4, 4)`` of the slots from their ``basis`` ``(S, n, 4, 4)``
    (relative to their anchor, if any); the extra last slot (-1) is the identity."""
    world = np.empty((len(basis) + 1, *basis.shape[1:]))
    np.matmul(levels.rest[:, None], basis, out=world[:-1])  # depth 0 done
    world[-1] = _EYE4
    for slots, parents in levels.steps:
        np.matmul(world[parents], world[slots], out=world[slots])
    return world


def forward_kinematics(
    rig: Rig, quats: np.ndarray, locations: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """World (armature-space) rotations ``(..., B, 3, 3)`` and heads ``(..., B, 3)``.

    ``quats``: local rotations ``(..., B, 4)``; ``locations``: local ``(..., B, 3)``, default
    zero. Leading axes (frames) are optional and broadcast.
    """
    nb = rig.num_bones
    q = _check_batch(quats, (nb, 4), "quats")
    loc = np.zeros((nb, 3)) if locations is None else _check_batch(locations, (nb, 3), "locations")
    batch = _batch_shape(q.shape[:-2], loc.shape[:-2])
    n = math.prod(batch)
    q, loc = _flat(q, batch, n), _flat(loc, batch, n)
    levels = rig._derived("fk", lambda: _levels(rig, range(nb)))
    r, t = np.empty((n, nb, 3, 3)), np.empty((n, nb, 3))
    for i in range(0, n, _CHUNK):
        c = slice(i, i + _CHUNK)
        basis = _basis(q[c].swapaxes(0, 1)[levels.bones], loc[c].swapaxes(0, 1)[levels.bones])
        world = _world(levels, basis)[levels.slot].swapaxes(0, 1)  # (n, B, 4, 4), bone order
        r[c], t[c] = world[..., :3, :3], world[..., :3, 3]
    return r.reshape(*batch, nb, 3, 3), t.reshape(*batch, nb, 3)


# ------------------------------------------------------------------- positions -> rotations


@dataclass
class _Plan:
    """Which bones matter for a joint mapping, derived from the hierarchy alone."""

    joint_of: dict[int, int]  # mapped bone -> canonical joint
    next_mapped: dict[int, list[int]]  # mapped bone -> its next mapped descendants (bones)
    top_level: list[int]  # mapped bones without a mapped ancestor: placed by location
    needed: list[int]  # mapped bones and their ancestors, ascending: the only FK needed


def _plan(rig: Rig, joint_bones: Sequence[int | None]) -> _Plan:
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
    return _Plan(joint_of, next_mapped, top_level, sorted(needed))


# How a changed bone turns, in the order a level's slots hold them.
_SWING, _KABSCH, _KEPT, _ORIENTED = range(4)


@dataclass(frozen=True)
class _Part:
    """The bones of one kind in a level."""

    index: slice  # their place in the sweep's arrays of that kind
    slots: slice  # their slots
    within: slice  # their place in the level


@dataclass(frozen=True)
class _Level:
    """The changed bones of one level: slots ``start + [swings, fits, kept, oriented]``."""

    slots: slice
    ancestors: np.ndarray | slice  # their next changed ancestors' slots (a slice if it can be)
    swing: _Part | None
    fit: _Part | None
    oriented: _Part | None


@dataclass(frozen=True)
class _Sweep:
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
    levels: tuple[_Level, ...]
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


def _sweep(rig: Rig, plan: _Plan, fk: _Levels, oriented: frozenset[int]) -> _Sweep:
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

    def part(group: list[int], c: int) -> _Part | None:
        bones = [b for b in group if kind[b] == c]
        if not bones:
            return None
        first = of_kind[c].index(bones[0])
        start = group.index(bones[0])
        return _Part(
            slice(first, first + len(bones)),
            slice(slot[bones[0]], slot[bones[0]] + len(bones)),
            slice(start, start + len(bones)),
        )

    levels = []
    for k in range(max(level.values(), default=-1) + 1):
        group = [b for b in order if level[b] == k]
        levels.append(
            _Level(
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
    return _Sweep(
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


@dataclass(frozen=True)
class _Start:
    """What the solve takes from the pose it starts from, before any target. Bone-major
    arrays ``(bones, n, ...)``; ``a``: a changed bone's parent-rest frame (posed = a @ R(q))."""

    q: np.ndarray  # (rotated, n, 4) the quaternions of the bones whose rotation is written
    rot: np.ndarray  # (C, n, 3, 3) R(q)
    rel: np.ndarray  # (C, n, 4, 4) a and the head, relative to the next changed ancestor
    turn: np.ndarray  # (C, n, 4, 4) [R 0; 0 1], R(q) for the kept bones: the solve fills in
    # The vectors to the next mapped heads in a (R(q) @ them in the bone's posed frame), and
    # their lengths: the swings' (S, n, ...), the fits' (F, n, D, ...).
    swing_from: np.ndarray
    swing_len: np.ndarray
    fit_from_t: np.ndarray  # transposed: (F, n, 3, D)
    fit_len: np.ndarray
    swing_unit: np.ndarray  # (S, n, 3) the swings', unit
    reflected: np.ndarray  # (S, n, 3, 3) R(q) reflected across the plane normal to those


class RotationSolver:
    """:func:`positions_to_rotations` for one rig and joint mapping.

    What depends on those alone (which bones matter, the solve order, index arrays) is
    worked out once, so a single pose costs a few hundred small numpy calls; what depends on
    the start pose alone is kept for the last single pose (a drag solves from the same one
    again and again). :func:`positions_to_rotations` keeps one per mapping on the rig.
    """

    def __init__(self, rig: Rig, joint_bones: Sequence[int | None]) -> None:
        self.rig = rig
        self.joint_bones = tuple(joint_bones)
        self._plan = _plan(rig, self.joint_bones)
        self._fk = _levels(rig, self._plan.needed, frozenset(self._plan.joint_of))
        self._mapped_joints = np.array(sorted(self._plan.joint_of.values()), dtype=np.int64)
        self._sweeps: dict[frozenset[int], _Sweep] = {}
        self._last_start: tuple[_Sweep, tuple[bytes, bytes], _Start] | None = None

    def _sweep(self, oriented: frozenset[int]) -> _Sweep:
        sweep = self._sweeps.get(oriented)
        if sweep is None:
            if len(self._sweeps) >= _CACHE_SIZE:
                self._sweeps.clear()
            sweep = self._sweeps[oriented] = _sweep(self.rig, self._plan, self._fk, oriented)
        return sweep

    def solve(
        self,
        quats: np.ndarray,
        locations: np.ndarray | None,
        targets: np.ndarray,
        orientations: dict[int, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`positions_to_rotations` with this solver's rig and ``joint_bones``."""
        rig, joint_bones = self.rig, self.joint_bones
        nb = rig.num_bones
        q = _check_batch(quats, (nb, 4), "quats")
        loc = np.zeros((nb, 3)) if locations is None else locations
        loc = _check_batch(loc, (nb, 3), "locations")
        tg = _check_batch(targets, (NUM_JOINTS, 3), "targets")
        if not np.isfinite(tg[..., self._mapped_joints, :]).all():
            bad = [j for j in self._mapped_joints if not np.isfinite(tg[..., j, :]).all()]
            raise ValueError(f"targets of joints {bad} are not finite (NaN or inf)")
        orient: dict[int, np.ndarray] = {}
        for j, o in (orientations or {}).items():
            if not (isinstance(j, int | np.integer) and 0 <= j < NUM_JOINTS):
                raise ValueError(
                    f"orientations keys must be joint indices 0..{NUM_JOINTS - 1}: {j!r}"
                )
            if joint_bones[j] is None:
                raise ValueError(f"orientation given for joint {j}, which has no bone")
            o = _check_batch(o, (3, 3), f"orientations[{j}]")
            if not np.isfinite(o).all():
                raise ValueError(f"orientations[{j}] is not finite (NaN or inf)")
            orient[int(joint_bones[j])] = o  # type: ignore[arg-type]

        batch = _batch_shape(
            q.shape[:-2], loc.shape[:-2], tg.shape[:-2], *(o.shape[:-2] for o in orient.values())
        )
        n = math.prod(batch)
        q, loc, tg = _flat(q, batch, n), _flat(loc, batch, n), _flat(tg, batch, n)
        new_q = q.copy()
        new_loc = loc.copy()
        if self._plan.needed:
            sweep = self._sweep(frozenset(orient))
            oriented = (
                orthonormalize(np.stack([_flat(orient[b], batch, n) for b in sweep.oriented]))
                if orient
                else np.empty((0, n, 3, 3))
            )
            for i in range(0, n, _CHUNK):
                c = slice(i, i + _CHUNK)
                self._solve(sweep, q[c], loc[c], tg[c], oriented[:, c], new_q[c], new_loc[c])
        return new_q.reshape(*batch, nb, 4), new_loc.reshape(*batch, nb, 3)

    def _start(self, sweep: _Sweep, q: np.ndarray, loc: np.ndarray) -> _Start:
        """:class:`_Start` of a pose (flat ``(n, B, ...)`` arrays), remembered for the last
        single pose: a drag solves from the same one again and again."""
        key = (q.tobytes(), loc.tobytes()) if len(q) == 1 else None
        last = self._last_start
        if key is not None and last is not None and last[0] is sweep and last[1] == key:
            return last[2]
        fk, n = self._fk, len(q)
        q_fk = q.swapaxes(0, 1)[fk.bones]
        basis = _basis(q_fk, loc.swapaxes(0, 1)[fk.bones])
        # The pose as it is, each bone relative to its nearest mapped ancestor's posed frame:
        # those transforms stay, as the bones between keep their local transforms.
        posed = _world(fk, basis)
        rot = basis[sweep.fk, :, :3, :3]
        # rel: a and the head, relative to the next changed ancestor. a = the parent's posed
        # frame (the identity when the parent is that ancestor) @ the rest rotation.
        rel = np.empty((len(sweep.bones), n, 4, 4))
        rel[...] = sweep.rest
        if len(sweep.deep):
            rel[sweep.deep] = posed[sweep.deep_parents_fk] @ sweep.rest[sweep.deep]
        rel[..., :3, 3] = posed[sweep.fk, :, :3, 3]
        aim_from = _apply(rot[sweep.aimers], posed[sweep.aims_fk, :, :3, 3])
        aim_len = _norm(aim_from)
        n_swing, n_fit = len(sweep.swings), len(sweep.fits)
        fit_from, fit_len = (
            x[n_swing:].reshape(n_fit, sweep.width, *x.shape[1:]).swapaxes(1, 2)
            for x in (aim_from, aim_len)
        )
        # The shortcut: a swing from unit u to unit b is the reflection across the plane
        # normal to u, then the one across the plane normal to u + b (the halfway vector);
        # the first applies to R(q) before the solve.
        swing_rot = rot[sweep.swings]
        swing_unit = aim_from[:n_swing] / np.maximum(aim_len[:n_swing], _EPS)[..., None]
        reflected = swing_rot - 2.0 * swing_unit[..., :, None] * (
            swing_unit[..., None, :] @ swing_rot
        )
        turn = np.zeros((len(sweep.bones), n, 4, 4))
        turn[..., 3, 3] = 1.0
        turn[sweep.kept, :, :3, :3] = rot[sweep.kept]
        start = _Start(
            q_fk[sweep.fk[sweep.rotated]],
            rot,
            rel,
            turn,
            aim_from[:n_swing],
            aim_len[:n_swing],
            np.swapaxes(fit_from, -1, -2),
            fit_len,
            swing_unit,
            reflected,
        )
        if key is not None:
            self._last_start = (sweep, key, start)
        return start

    def _solve(
        self,
        sweep: _Sweep,
        q: np.ndarray,
        loc: np.ndarray,
        tg: np.ndarray,
        oriented: np.ndarray,
        new_q: np.ndarray,
        new_loc: np.ndarray,
        careful: bool = False,
    ) -> None:
        """The solve on flat ``(n, ...)`` arrays, writing ``new_q`` / ``new_loc``.

        Bone-major arrays ``(bones, n, ...)``; 4x4 transforms [R | t]. ``a``: a changed bone's
        parent-rest frame, where its local rotation acts (``posed R = a @ R(q)``). Swings
        take a shortcut unless ``careful``; where it fails (zero or antiparallel vectors,
        checked once at the end), the solve runs again, carefully.
        """
        n = q.shape[0]
        start = self._start(sweep, q, loc)
        rot_old, rel = start.rot, start.rel
        swing_from, swing_unit, reflected = start.swing_from, start.swing_unit, start.reflected
        # The targets the aims should point at: the swings', then the fits'.
        targets = tg.swapaxes(0, 1)  # (21, n, 3)
        aim_to = targets[sweep.aim_joints]
        n_swing, n_fit = len(sweep.swings), len(sweep.fits)
        swing_to = aim_to[:n_swing]
        fit_to = aim_to[n_swing:].reshape(n_fit, sweep.width, n, 3).swapaxes(1, 2)
        # The shortcut's |target vector| and |u + b|^2, checked at the end.
        to_len, halfway2 = np.empty(start.swing_len.shape), np.empty(start.swing_len.shape)

        # The new local rotations, as [R | 0] (new posed = rel @ turn), and posed frames.
        turn = start.turn.copy()
        new = np.empty((len(sweep.bones) + 1, n, 4, 4))
        new[-1] = _EYE4
        for k, level in enumerate(sweep.levels):
            f = rel[level.slots].copy() if k == 0 else new[level.ancestors] @ rel[level.slots]
            a, head = f[..., :3, :3], f[..., :3, 3]
            if k == 0:  # the top-level bones: solve base + a @ l = target for the location l
                base = head - _apply(a, loc[:, sweep.bones[level.slots]].swapaxes(0, 1))
                top_loc = _apply(np.swapaxes(a, -1, -2), targets[sweep.top_joints] - base)
                head[...] = base + _apply(a, top_loc)
                new_loc[:, sweep.bones[level.slots]] = top_loc.swapaxes(0, 1)
            if part := level.swing:  # in a: the current vector R(q) @ rel -> the target's
                s, w = part.index, part.within
                to = ((swing_to[s] - head[w])[..., None, :] @ a[w])[..., 0, :]
                out = turn[part.slots, :, :3, :3]
                if careful:  # swing_quat's care with zero and (nearly) antiparallel vectors
                    np.matmul(swing_rotation(swing_from[s], to), rot_old[part.slots], out=out)
                else:  # unit u -> t / |t|: across u + t / |t|, or t + |t| u
                    length = np.sqrt(np.add.reduce(to * to, axis=-1), out=to_len[s])
                    half = to + length[..., None] * swing_unit[s]
                    h2 = np.add.reduce(half * half, axis=-1, out=halfway2[s])
                    across = half[..., None, :] @ reflected[s]
                    half *= (2.0 / np.maximum(h2, _EPS * _EPS))[..., None]
                    np.subtract(reflected[s], half[..., :, None] * across, out=out)
            if part := level.fit:
                s, w = part.index, part.within
                goal = (fit_to[s] - head[w, :, None]) @ a[w]
                scale = np.add.reduce(start.fit_len[s] * _norm(goal), axis=-1)
                fit = _rotation_from_covariance(
                    start.fit_from_t[s] @ goal + (_KABSCH_PRIOR * scale)[..., None, None] * _EYE3
                )
                np.matmul(fit, rot_old[part.slots], out=turn[part.slots, :, :3, :3])
            if part := level.oriented:
                np.matmul(
                    np.swapaxes(a[part.within], -1, -2),
                    oriented[part.index],
                    out=turn[part.slots, :, :3, :3],
                )
            np.matmul(f, turn[level.slots], out=new[level.slots])
        if not careful and not (
            (np.minimum(start.swing_len, to_len) > _EPS).all()
            and (halfway2 > _HALFWAY_MIN * to_len * to_len).all()
        ):
            self._solve(sweep, q, loc, tg, oriented, new_q, new_loc, careful=True)
            return

        # A turn has w >= 0, so the old rotation times it has dot(new, old) = w * |old|^2 >= 0:
        # in the input's hemisphere, the quaternions are the turns times the old.
        rot = _shepperd_rows(turn[sweep.rotated, :, :3, :3])
        dot = np.add.reduce(rot * start.q, axis=-1)
        rot *= np.copysign(1.0 / _norm(rot), dot)[..., None]
        new_q[:, sweep.bones[sweep.rotated]] = rot.swapaxes(0, 1)


def _solver(rig: Rig, joint_bones: Sequence[int | None]) -> RotationSolver:
    """The rig's solver for ``joint_bones``, made once (types are part of the key, so
    ``True`` is not taken for bone 1)."""
    try:
        key = ("solver", *((type(b), b) for b in joint_bones))
        hash(key)
    except TypeError:  # not indices at all: let the solver say what is wrong
        return RotationSolver(rig, joint_bones)
    return rig._derived(key, lambda: RotationSolver(rig, joint_bones))


def positions_to_rotations(
    rig: Rig,
    quats: np.ndarray,
    locations: np.ndarray | None,
    joint_bones: Sequence[int | None],
    targets: np.ndarray,
    orientations: dict[int, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """New local rotations ``(..., B, 4)`` and locations ``(..., B, 3)`` that put the mapped
    bones' heads on ``targets``.

    ``quats`` / ``locations``: the current pose (locations default to zero);
    ``joint_bones[j]``: the bone whose head is canonical joint ``j``, or None (e.g. a
    synthesized toe); ``targets``: ``(..., 21, 3)`` in armature space (entries of unmapped
    joints are ignored); ``orientations[j]``: ``(..., 3, 3)`` armature-space rotation joint
    ``j``'s bone must take (an effector's "use rotation"). Leading axes broadcast; ``(B, 4)``
    and ``(21, 3)`` give a single pose.

    Parents before children, in the pose as it is so far, each mapped bone turns by:

    - its ``orientations`` entry, when given (exact; then its descendants may miss);
    - else the smallest rotation (a swing, keeping its twist) pointing it at its one next
      mapped descendant (``head(d) - head(b) -> targets[d] - head(b)``), or with several
      (pelvis: spine and thighs; chest: neck and clavicles) the best rotation (Kabsch) of
      all those vectors;
    - else (an end bone) nothing: it keeps its local rotation.

    A mapped bone without a mapped ancestor (the pelvis) also takes the ``location`` that
    puts its head exactly on its target. Unmapped bones (roots above the pelvis, extra
    spine/neck bones, twist bones, fingers) keep their local rotation and location, and
    quaternions stay in the input's hemisphere (``dot(new, old) >= 0``).

    The plan for ``(rig, joint_bones)`` is cached on the rig (:class:`RotationSolver`), and
    each tree level is solved in one vectorized step.
    """
    return _solver(rig, joint_bones).solve(quats, locations, targets, orientations)
