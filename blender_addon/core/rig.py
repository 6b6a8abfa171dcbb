"""A rig's bone hierarchy and rest pose, and Blender's pose evaluation (forward kinematics).

Notation: the glossary of :mod:`.rotations`. Pose evaluation is Blender's (scale ignored)::

    world_R[b] = world_R[p] @ rest_rotations[b] @ R(q[b])
    world_t[b] = world_t[p] + world_R[p] @ (rest_offsets[b] + rest_rotations[b] @ l[b])

with identity / zero for a root's parent. A bone's head is ``world_t``; bones point along
their local +Y, so a bone's direction is ``world_R[..., :, 1]``. FK runs one vectorized step
per tree depth (:class:`FkLevels`), which the solver (:mod:`.solver`) reuses on the bones
it needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from . import native
from .quaternions import orthonormalize, quat_to_matrix4

CACHE_SIZE = 16  # derived objects kept per rig (solvers, plans: mappings, oriented bones)
# Poses evaluated at once: enough that numpy's per-call cost fades, few enough that the
# temporaries stay in cache (and in the heap: page faults cost, in VMs above all).
CHUNK = 256
EYE4 = np.eye(4)
EYE4.flags.writeable = False
_T = TypeVar("_T")


@dataclass
class Rig:
    """A rig's bone hierarchy and rest pose, enough to evaluate poses like Blender does.

    Its arrays are read-only copies: what the solvers derive from them is built once per rig
    (see :meth:`derived`) and must not go stale.
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

    def derived(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """``build()``, made once per ``key`` for these arrays (a solve plan, an FK order)."""
        source = (self.parents, self.rest_offsets, self.rest_rotations)
        hit = self._cache.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], source, strict=True)):
            return hit[1]
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        value = build()
        self._cache[key] = (source, value)
        return value


def _read_only(x: np.ndarray, dtype: type) -> np.ndarray:
    """A read-only copy (the caller's array stays as it was)."""
    out = np.array(x, dtype=dtype)
    out.flags.writeable = False
    return out


# ------------------------------------------------------------------ batches of poses


def check_batch(x: np.ndarray, tail: tuple[int, ...], name: str) -> np.ndarray:
    """``x`` as float64, checked to end in ``tail`` (``name`` says which argument is wrong)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < len(tail) or x.shape[x.ndim - len(tail) :] != tail:
        shape = ", ".join(["..."] + [str(n) for n in tail])
        raise ValueError(f"{name} must have shape ({shape}), got {x.shape}")
    return x


def batch_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """np.broadcast_shapes, without its cost when the shapes agree (a single pose)."""
    if all(s == shapes[0] for s in shapes):
        return shapes[0]
    return np.broadcast_shapes(*shapes)


def flatten_batch(x: np.ndarray, batch: tuple[int, ...], n: int) -> np.ndarray:
    """``x`` ``(..., *tail)`` (2 tail axes) broadcast to ``batch``, flat: ``(n, *tail)``."""
    tail = x.shape[x.ndim - 2 :]
    if x.shape[: x.ndim - 2] != batch:
        x = np.broadcast_to(x, (*batch, *tail))
    return x.reshape(n, *tail)


# ------------------------------------------------------------------ FK level by level


@dataclass(frozen=True)
class FkLevels:
    """FK over a set of bones closed under parents (up to anchors), one vectorized step per
    tree depth. Arrays are bone-major (``(S, n, ...)``, S slots): a level's are contiguous.
    """

    bones: np.ndarray  # (S,) the bone in each slot: by depth, then by index
    slot: np.ndarray  # (B,) each bone's slot, -1 where not in the set
    rest: np.ndarray  # (S, 4, 4) rest transforms [rest_rotation | rest_offset]
    steps: tuple[tuple[slice, np.ndarray], ...]  # depth 1...: its slots, their parents' slots


def fk_levels(rig: Rig, bones: Sequence[int], anchors: frozenset[int] = frozenset()) -> FkLevels:
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
    return FkLevels(np.array(order, dtype=np.int64), slot, rest, tuple(steps))


def local_transforms(q: np.ndarray, loc: np.ndarray) -> np.ndarray:
    """Local pose transforms ``(..., 4, 4)`` [R(q) | l] (Blender's ``matrix_basis``)."""
    out = quat_to_matrix4(q)
    out[..., :3, 3] = loc
    out[..., 3, 3] = 1.0
    return out


def world_transforms(levels: FkLevels, basis: np.ndarray) -> np.ndarray:
    """Posed transforms ``(S + 1, n, 4, 4)`` of the slots from their ``basis`` ``(S, n, 4, 4)``
    (relative to their anchor, if any); the extra last slot (-1) is the identity."""
    world = np.empty((len(basis) + 1, *basis.shape[1:]))
    np.matmul(levels.rest[:, None], basis, out=world[:-1])  # depth 0 done
    world[-1] = EYE4
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
    q = check_batch(quats, (nb, 4), "quats")
    loc = np.zeros((nb, 3)) if locations is None else check_batch(locations, (nb, 3), "locations")
    batch = batch_shape(q.shape[:-2], loc.shape[:-2])
    n = math.prod(batch)
    q, loc = flatten_batch(q, batch, n), flatten_batch(loc, batch, n)
    if (kernels := native.kernels()) is not None:
        r, t = native_forward_kinematics(kernels, rig, q, loc)
        return r.reshape(*batch, nb, 3, 3), t.reshape(*batch, nb, 3)
    levels = rig.derived("fk", lambda: fk_levels(rig, range(nb)))
    r, t = np.empty((n, nb, 3, 3)), np.empty((n, nb, 3))
    for i in range(0, n, CHUNK):
        c = slice(i, i + CHUNK)
        basis = local_transforms(
            q[c].swapaxes(0, 1)[levels.bones], loc[c].swapaxes(0, 1)[levels.bones]
        )
        world = world_transforms(levels, basis)[levels.slot].swapaxes(0, 1)  # (n, B, 4, 4)
        r[c], t[c] = world[..., :3, :3], world[..., :3, 3]
    return r.reshape(*batch, nb, 3, 3), t.reshape(*batch, nb, 3)


def native_forward_kinematics(
    kernels: native.Kernels, rig: Rig, q: np.ndarray, loc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`forward_kinematics` of flat ``(n, B, ...)`` arrays by the compiled kernel."""
    n, nb = len(q), rig.num_bones
    q, loc = np.ascontiguousarray(q), np.ascontiguousarray(loc)
    r, t = np.empty((n, nb, 3, 3)), np.empty((n, nb, 3))
    kernels.forward_kinematics(n, nb, *native_rig_tables(rig), native.address(q),
                               native.address(loc), native.address(r), native.address(t))
    return r, t


def native_rig_tables(rig: Rig) -> tuple[int, int, int]:
    """The addresses of the rig's parents, rest rotations and rest offsets, as every kernel
    of a rig reads them (the rig's own read-only, contiguous arrays; taken once)."""
    return rig.derived("native", lambda: tuple(
        native.address(a) for a in (rig.parents, rig.rest_rotations, rig.rest_offsets)))
