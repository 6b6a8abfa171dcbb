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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .skeleton import NUM_JOINTS

_EPS = 1e-12  # vectors shorter than this have no direction
# Weight (relative to sum |a||b|) pulling a multi-vector fit towards "no change", so a
# degenerate fit (all vectors collinear) keeps the bone's twist like a swing does.
_KABSCH_PRIOR = 1e-9
_AXES = {"X": 0, "Y": 1, "Z": 2}
_IDENTITY_Q = np.array([1.0, 0.0, 0.0, 0.0])


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
    q = np.asarray(q, dtype=np.float64)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    n2 = w * w + x * x + y * y + z * z
    s = np.where(n2 > _EPS * _EPS, 2.0 / np.maximum(n2, _EPS * _EPS), 0.0)
    xs, ys, zs = x * s, y * s, z * s
    out = np.empty((*q.shape[:-1], 3, 3))
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

    Each row of the symmetric 4x4 matrix below is ``4 q_i q``; the row with the largest
    diagonal (the largest ``|q_i|``) is normalized, so no division by a small number happens
    even at 180 degrees.
    """
    m = np.asarray(m, dtype=np.float64)
    if m.shape[-2:] != (3, 3):
        raise ValueError(f"rotation matrices must have shape (..., 3, 3), got {m.shape}")
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    k = np.stack(
        [
            np.stack([1.0 + m00 + m11 + m22, m21 - m12, m02 - m20, m10 - m01], axis=-1),
            np.stack([m21 - m12, 1.0 + m00 - m11 - m22, m01 + m10, m02 + m20], axis=-1),
            np.stack([m02 - m20, m01 + m10, 1.0 - m00 + m11 - m22, m12 + m21], axis=-1),
            np.stack([m10 - m01, m02 + m20, m12 + m21, 1.0 - m00 - m11 + m22], axis=-1),
        ],
        axis=-2,
    )
    best = np.argmax(np.diagonal(k, axis1=-2, axis2=-1), axis=-1)
    q = np.take_along_axis(k, best[..., None, None], axis=-2)[..., 0, :]
    q = quat_normalize(q)
    return np.where(q[..., :1] < 0.0, -q, q)


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
    """Euclidean norm along the last axis (np.linalg.norm costs more per call)."""
    return np.sqrt(np.sum(v * v, axis=-1))


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
    v = np.swapaxes(vt, -1, -2)
    ut = np.swapaxes(u, -1, -2)
    d = np.where(np.linalg.det(v @ ut) < 0.0, -1.0, 1.0)
    v = v.copy()
    v[..., :, 2] *= d[..., None]
    return v @ ut


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
    """A rig's bone hierarchy and rest pose, enough to evaluate poses like Blender does."""

    names: list[str]  # bone names, parents before children
    parents: np.ndarray  # (B,) int64, -1 for a root bone
    rest_offsets: np.ndarray  # (B, 3) head in the parent's rest frame (a root: armature space)
    rest_rotations: np.ndarray  # (B, 3, 3) rest frame in the parent's rest frame (root: armature)

    def __post_init__(self) -> None:
        self.names = list(self.names)
        self.parents = np.asarray(self.parents, dtype=np.int64)
        self.rest_offsets = np.asarray(self.rest_offsets, dtype=np.float64)
        self.rest_rotations = np.asarray(self.rest_rotations, dtype=np.float64)
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
        rot = _orthonormalize(m[:, :3, :3])
        head = m[:, :3, 3]
        has_parent = p >= 0
        prot = np.where(has_parent[:, None, None], rot[np.maximum(p, 0)], np.eye(3))
        phead = np.where(has_parent[:, None], head[np.maximum(p, 0)], 0.0)
        prot_t = np.swapaxes(prot, -1, -2)
        rest_rot = prot_t @ rot
        rest_off = np.einsum("bij,bj->bi", prot_t, head - phead)
        return cls(list(names), p, rest_off, rest_rot)


def _orthonormalize(m: np.ndarray) -> np.ndarray:
    """The nearest rotation to each ``(..., 3, 3)`` (polar decomposition), dropping scale."""
    return _rotation_from_covariance(np.swapaxes(m, -1, -2))


def _check_batch(x: np.ndarray, tail: tuple[int, ...], name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < len(tail) or x.shape[x.ndim - len(tail) :] != tail:
        shape = ", ".join(["..."] + [str(n) for n in tail])
        raise ValueError(f"{name} must have shape ({shape}), got {x.shape}")
    return x


@dataclass
class _Locals:
    """Per bone (lists indexed by bone, None where not computed), arrays over ``n`` poses."""

    q: list  # (n, 4) unit local rotation
    r: list  # (n, 3, 3) R(q)
    m: list  # (n, 3, 3) pose frame in the parent's pose frame: rest_rot @ R(q)
    off: list  # (n, 3) head in the parent's pose frame: rest_offset + rest_rot @ l


def _locals(rig: Rig, q: np.ndarray, loc: np.ndarray, bones: Sequence[int]) -> _Locals:
    """:class:`_Locals` of ``bones``, computed for all of them at once."""
    rest_r = rig.rest_rotations[bones]
    qn = quat_normalize(q[:, bones])
    r = quat_to_matrix(qn)
    m = rest_r @ r
    off = rig.rest_offsets[bones] + (rest_r @ loc[:, bones, :, None])[..., 0]
    out = _Locals(*([None] * rig.num_bones for _ in range(4)))
    for k, b in enumerate(bones):
        out.q[b], out.r[b], out.m[b], out.off[b] = qn[:, k], r[:, k], m[:, k], off[:, k]
    return out


def _sweep(rig: Rig, m: list, off: list, bones: Sequence[int]) -> tuple[list, list]:
    """FK over ``bones`` (ascending, ancestors included): per-bone world R ``(n, 3, 3)``, t."""
    world_r: list = [None] * rig.num_bones
    world_t: list = [None] * rig.num_bones
    for b in bones:
        p = rig.parents[b]
        if p < 0:
            world_r[b], world_t[b] = m[b], off[b]
        else:
            world_r[b] = world_r[p] @ m[b]
            world_t[b] = world_t[p] + _apply(world_r[p], off[b])
    return world_r, world_t


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
    batch = np.broadcast_shapes(q.shape[:-2], loc.shape[:-2])
    n = int(np.prod(batch))
    q = np.broadcast_to(q, (*batch, nb, 4)).reshape(n, nb, 4)
    loc = np.broadcast_to(loc, (*batch, nb, 3)).reshape(n, nb, 3)
    bones = list(range(nb))
    lo = _locals(rig, q, loc, bones)
    world_r, world_t = _sweep(rig, lo.m, lo.off, bones)
    r = np.stack(world_r, axis=1) if nb else np.zeros((n, 0, 3, 3))
    t = np.stack(world_t, axis=1) if nb else np.zeros((n, 0, 3))
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
    """
    nb = rig.num_bones
    plan = _plan(rig, joint_bones)
    q = _check_batch(quats, (nb, 4), "quats")
    loc = np.zeros((nb, 3)) if locations is None else _check_batch(locations, (nb, 3), "locations")
    tg = _check_batch(targets, (NUM_JOINTS, 3), "targets")
    mapped_joints = sorted(plan.joint_of.values())
    if not np.isfinite(tg[..., mapped_joints, :]).all():
        bad = [j for j in mapped_joints if not np.isfinite(tg[..., j, :]).all()]
        raise ValueError(f"targets of joints {bad} are not finite (NaN or inf)")
    orient: dict[int, np.ndarray] = {}
    for j, o in (orientations or {}).items():
        if not (isinstance(j, int | np.integer) and 0 <= j < NUM_JOINTS):
            raise ValueError(f"orientations keys must be joint indices 0..{NUM_JOINTS - 1}: {j!r}")
        if joint_bones[j] is None:
            raise ValueError(f"orientation given for joint {j}, which has no bone")
        o = _check_batch(o, (3, 3), f"orientations[{j}]")
        if not np.isfinite(o).all():
            raise ValueError(f"orientations[{j}] is not finite (NaN or inf)")
        orient[int(joint_bones[j])] = o

    batch = np.broadcast_shapes(
        q.shape[:-2], loc.shape[:-2], tg.shape[:-2], *(o.shape[:-2] for o in orient.values())
    )
    n = int(np.prod(batch))
    q = np.broadcast_to(q, (*batch, nb, 4)).reshape(n, nb, 4)
    loc = np.broadcast_to(loc, (*batch, nb, 3)).reshape(n, nb, 3)
    tg = np.broadcast_to(tg, (*batch, NUM_JOINTS, 3)).reshape(n, NUM_JOINTS, 3)
    orient = {
        b: _orthonormalize(np.broadcast_to(o, (*batch, 3, 3)).reshape(n, 3, 3))
        for b, o in orient.items()
    }
    new_q = q.copy()
    new_loc = loc.copy()
    if not plan.needed:
        return new_q.reshape(*batch, nb, 4), new_loc.reshape(*batch, nb, 3)

    needed = plan.needed
    lo = _locals(rig, q, loc, needed)
    m, off = lo.m, lo.off
    # Where each next mapped descendant's head sits in its mapped ancestor's posed frame:
    # fixed, since only unmapped bones (which keep their local transforms) lie between.
    old_r, old_t = _sweep(rig, m, off, needed)
    rel = {
        b: np.stack(
            [_apply(np.swapaxes(old_r[b], -1, -2), old_t[d] - old_t[b]) for d in ds], axis=1
        )
        for b, ds in plan.next_mapped.items()
        if ds
    }

    world_r: list = [None] * nb
    world_t: list = [None] * nb
    top_level = set(plan.top_level)
    changed = (set(orient) | set(rel) | top_level) & set(needed)
    eye = np.broadcast_to(np.eye(3), (n, 3, 3))
    for b in needed:
        p = rig.parents[b]
        parent_r = eye if p < 0 else world_r[p]
        if b not in changed:  # keeps its local transform
            world_r[b] = parent_r @ m[b]
            world_t[b] = off[b] if p < 0 else world_t[p] + _apply(parent_r, off[b])
            continue
        a = parent_r @ rig.rest_rotations[b]  # b's parent-rest frame in armature space
        a_t = np.swapaxes(a, -1, -2)
        head = off[b] if p < 0 else world_t[p] + _apply(parent_r, off[b])
        if b in top_level:  # solve base + a @ l = target for the location l
            base = head - _apply(a, loc[:, b])
            new_loc[:, b] = _apply(a_t, tg[:, plan.joint_of[b]] - base)
            head = base + _apply(a, new_loc[:, b])
        world_t[b] = head

        old = lo.q[b]
        if b in orient:
            rot = matrix_to_quat(a_t @ orient[b])
            new = np.where(np.sum(rot * old, axis=-1, keepdims=True) < 0.0, -rot, rot)
        elif b in rel:
            # In b's parent-rest frame: current vectors R(q) @ rel, target vectors a^T @ ...
            cur = rel[b] @ np.swapaxes(lo.r[b], -1, -2)
            goal = tg[:, [plan.joint_of[d] for d in plan.next_mapped[b]]] - head[:, None]
            goal = goal @ a
            if cur.shape[1] == 1:
                change = swing_quat(cur[:, 0], goal[:, 0])
            else:
                h = np.swapaxes(cur, -1, -2) @ goal
                scale = np.sum(_norm(cur) * _norm(goal), axis=-1)
                prior = (_KABSCH_PRIOR * scale)[:, None, None] * np.eye(3)
                change = matrix_to_quat(_rotation_from_covariance(h + prior))
            # w >= 0 for the change, so dot(new, old) = w * |old|^2 >= 0: same hemisphere.
            new = quat_multiply(change, old)
        else:  # a top-level end bone: only its location moves
            new = q[:, b]
        new_q[:, b] = new
        world_r[b] = a @ quat_to_matrix(new)
    return new_q.reshape(*batch, nb, 4), new_loc.reshape(*batch, nb, 3)
