"""Joint positions -> local bone rotations of a rig: the fast, index-tabled solver.

:func:`positions_to_rotations` is the algorithm :mod:`.solver_reference` writes bone by
bone (read that one first); here each tree level of changed bones is solved in one
vectorized step, with the index tables of :mod:`.solve_plan` built once per mapping, swings
by a two-reflection shortcut, and what depends on the start pose alone kept for the next
solve. The tests hold it to the reference at 1e-9 on random rigs, mappings and poses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import native
from .quaternions import (
    EPS,
    apply,
    norm,
    orthonormalize,
    rotation_from_covariance,
    shepperd_rows,
    swing_rotation,
)
from .rig import (
    CACHE_SIZE,
    CHUNK,
    EYE4,
    Rig,
    batch_shape,
    check_batch,
    fk_levels,
    flatten_batch,
    local_transforms,
    native_rig_tables,
    world_transforms,
)
from .skeleton import NUM_JOINTS
from .solve_plan import Plan, Sweep, make_plan, make_sweep

# Weight (relative to sum |a||b|) pulling a multi-vector fit towards "no change", so a
# degenerate fit (all vectors collinear) keeps the bone's twist like a swing does.
KABSCH_PRIOR = 1e-9
# Swings within ~0.1 degree of 180 (|a + b|^2 of unit vectors below this) are left to
# swing_quat: the solver's faster halfway-vector form loses digits there.
_HALFWAY_MIN = 1e-6
_EYE3 = np.eye(3)
_NATIVE_WORK = 24  # doubles per bone the kernel works in (old and new posed frames)


@dataclass(frozen=True)
class _NativeTables:
    """The plan as the compiled kernel reads it: per-bone arrays, kept alive with their
    addresses (``native.address``)."""

    arrays: tuple[np.ndarray, ...]  # joint_of, top, next_start, next_bones, needed
    # The rig's parents, rest rotations and offsets, then those: the kernel's argument order.
    addresses: tuple[int, ...]

    @classmethod
    def of(cls, rig: Rig, plan: Plan) -> _NativeTables:
        nb = rig.num_bones
        joint_of = np.full(nb, -1, dtype=np.int64)
        joint_of[list(plan.joint_of)] = list(plan.joint_of.values())
        top = np.zeros(nb, dtype=np.int64)
        top[plan.top_level] = 1
        counts = [len(plan.next_mapped.get(b, ())) for b in range(nb)]
        next_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        next_bones = np.array([d for b in range(nb) for d in plan.next_mapped.get(b, ())] or [0],
                              dtype=np.int64)
        needed = np.zeros(nb, dtype=np.int64)
        needed[plan.needed] = 1
        arrays = (joint_of, top, next_start, next_bones, needed)
        return cls(arrays, (*native_rig_tables(rig), *(native.address(a) for a in arrays)))


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
        self._plan = make_plan(rig, self.joint_bones)
        self._fk = fk_levels(rig, self._plan.needed, frozenset(self._plan.joint_of))
        self._mapped_joints = np.array(sorted(self._plan.joint_of.values()), dtype=np.int64)
        self._sweeps: dict[frozenset[int], Sweep] = {}
        self._last_start: tuple[Sweep, tuple[bytes, bytes], _Start] | None = None
        self._native: _NativeTables | None = None
        self._oriented_slots: dict[tuple[int, ...], np.ndarray] = {}

    def _sweep(self, oriented: frozenset[int]) -> Sweep:
        sweep = self._sweeps.get(oriented)
        if sweep is None:
            if len(self._sweeps) >= CACHE_SIZE:
                self._sweeps.clear()
            sweep = self._sweeps[oriented] = make_sweep(self.rig, self._plan, self._fk, oriented)
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
        q = check_batch(quats, (nb, 4), "quats")
        loc = np.zeros((nb, 3)) if locations is None else locations
        loc = check_batch(loc, (nb, 3), "locations")
        tg = check_batch(targets, (NUM_JOINTS, 3), "targets")
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
            o = check_batch(o, (3, 3), f"orientations[{j}]")
            if not np.isfinite(o).all():
                raise ValueError(f"orientations[{j}] is not finite (NaN or inf)")
            orient[int(joint_bones[j])] = o  # type: ignore[arg-type]

        batch = batch_shape(
            q.shape[:-2], loc.shape[:-2], tg.shape[:-2], *(o.shape[:-2] for o in orient.values())
        )
        n = math.prod(batch)
        q, loc = flatten_batch(q, batch, n), flatten_batch(loc, batch, n)
        tg = flatten_batch(tg, batch, n)
        if self._plan.needed and (kernels := native.kernels()) is not None:
            new_q, new_loc = self._solve_native(kernels, q, loc, tg, orient, batch, n)
            return new_q.reshape(*batch, nb, 4), new_loc.reshape(*batch, nb, 3)
        new_q = q.copy()
        new_loc = loc.copy()
        if self._plan.needed:
            sweep = self._sweep(frozenset(orient))
            oriented = (
                orthonormalize(
                    np.stack([flatten_batch(orient[b], batch, n) for b in sweep.oriented])
                )
                if orient
                else np.empty((0, n, 3, 3))
            )
            for i in range(0, n, CHUNK):
                c = slice(i, i + CHUNK)
                self._solve(sweep, q[c], loc[c], tg[c], oriented[:, c], new_q[c], new_loc[c])
        return new_q.reshape(*batch, nb, 4), new_loc.reshape(*batch, nb, 3)

    def _solve_native(
        self,
        kernels: native.Kernels,
        q: np.ndarray,
        loc: np.ndarray,
        tg: np.ndarray,
        orient: dict[int, np.ndarray],
        batch: tuple[int, ...],
        n: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The solve of flat ``(n, ...)`` arrays by the compiled kernel: the per-bone
        reference's algorithm, pose by pose (one call, no chunks)."""
        nb = self.rig.num_bones
        if self._native is None:
            self._native = _NativeTables.of(self.rig, self._plan)
        bones = tuple(orient)
        slots = self._oriented_slots.get(bones)
        if slots is None:
            slots = np.full(nb, -1, dtype=np.int64)
            slots[list(bones)] = np.arange(len(bones))
            if len(self._oriented_slots) >= CACHE_SIZE:
                self._oriented_slots.clear()
            self._oriented_slots[bones] = slots
        oriented = (
            np.ascontiguousarray(
                orthonormalize(np.stack([flatten_batch(orient[b], batch, n) for b in bones], 1))
            )
            if bones
            else np.empty((n, 0, 3, 3))
        )
        q, loc, tg = (np.ascontiguousarray(x) for x in (q, loc, tg))
        new_q, new_loc = np.empty((n, nb, 4)), np.empty((n, nb, 3))
        work = np.empty(_NATIVE_WORK * nb)
        t = self._native.addresses
        kernels.positions_to_rotations(
            n, nb, *t[:7], native.address(slots), t[7], len(bones),
            KABSCH_PRIOR, native.address(q), native.address(loc), native.address(tg),
            native.address(oriented), native.address(new_q), native.address(new_loc),
            native.address(work),
        )
        return new_q, new_loc

    def _start(self, sweep: Sweep, q: np.ndarray, loc: np.ndarray) -> _Start:
        """:class:`_Start` of a pose (flat ``(n, B, ...)`` arrays), remembered for the last
        single pose: a drag solves from the same one again and again."""
        key = (q.tobytes(), loc.tobytes()) if len(q) == 1 else None
        last = self._last_start
        if key is not None and last is not None and last[0] is sweep and last[1] == key:
            return last[2]
        fk, n = self._fk, len(q)
        q_fk = q.swapaxes(0, 1)[fk.bones]
        basis = local_transforms(q_fk, loc.swapaxes(0, 1)[fk.bones])
        # The pose as it is, each bone relative to its nearest mapped ancestor's posed frame:
        # those transforms stay, as the bones between keep their local transforms.
        posed = world_transforms(fk, basis)
        rot = basis[sweep.fk, :, :3, :3]
        # rel: a and the head, relative to the next changed ancestor. a = the parent's posed
        # frame (the identity when the parent is that ancestor) @ the rest rotation.
        rel = np.empty((len(sweep.bones), n, 4, 4))
        rel[...] = sweep.rest
        if len(sweep.deep):
            rel[sweep.deep] = posed[sweep.deep_parents_fk] @ sweep.rest[sweep.deep]
        rel[..., :3, 3] = posed[sweep.fk, :, :3, 3]
        aim_from = apply(rot[sweep.aimers], posed[sweep.aims_fk, :, :3, 3])
        aim_len = norm(aim_from)
        n_swing, n_fit = len(sweep.swings), len(sweep.fits)
        fit_from, fit_len = (
            x[n_swing:].reshape(n_fit, sweep.width, *x.shape[1:]).swapaxes(1, 2)
            for x in (aim_from, aim_len)
        )
        # The shortcut: a swing from unit u to unit b is the reflection across the plane
        # normal to u, then the one across the plane normal to u + b (the halfway vector);
        # the first applies to R(q) before the solve.
        swing_rot = rot[sweep.swings]
        swing_unit = aim_from[:n_swing] / np.maximum(aim_len[:n_swing], EPS)[..., None]
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
        sweep: Sweep,
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
        new[-1] = EYE4
        for k, level in enumerate(sweep.levels):
            f = rel[level.slots].copy() if k == 0 else new[level.ancestors] @ rel[level.slots]
            a, head = f[..., :3, :3], f[..., :3, 3]
            if k == 0:  # the top-level bones: solve base + a @ l = target for the location l
                base = head - apply(a, loc[:, sweep.bones[level.slots]].swapaxes(0, 1))
                top_loc = apply(np.swapaxes(a, -1, -2), targets[sweep.top_joints] - base)
                head[...] = base + apply(a, top_loc)
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
                    half *= (2.0 / np.maximum(h2, EPS * EPS))[..., None]
                    np.subtract(reflected[s], half[..., :, None] * across, out=out)
            if part := level.fit:
                s, w = part.index, part.within
                goal = (fit_to[s] - head[w, :, None]) @ a[w]
                scale = np.add.reduce(start.fit_len[s] * norm(goal), axis=-1)
                fit = rotation_from_covariance(
                    start.fit_from_t[s] @ goal + (KABSCH_PRIOR * scale)[..., None, None] * _EYE3
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
            (np.minimum(start.swing_len, to_len) > EPS).all()
            and (halfway2 > _HALFWAY_MIN * to_len * to_len).all()
        ):
            self._solve(sweep, q, loc, tg, oriented, new_q, new_loc, careful=True)
            return

        # A turn has w >= 0, so the old rotation times it has dot(new, old) = w * |old|^2 >= 0:
        # in the input's hemisphere, the quaternions are the turns times the old.
        rot = shepperd_rows(turn[sweep.rotated, :, :3, :3])
        dot = np.add.reduce(rot * start.q, axis=-1)
        rot *= np.copysign(1.0 / norm(rot), dot)[..., None]
        new_q[:, sweep.bones[sweep.rotated]] = rot.swapaxes(0, 1)


def _solver(rig: Rig, joint_bones: Sequence[int | None]) -> RotationSolver:
    """The rig's solver for ``joint_bones``, made once (types are part of the key, so
    ``True`` is not taken for bone 1)."""
    try:
        key = ("solver", *((type(b), b) for b in joint_bones))
        hash(key)
    except TypeError:  # not indices at all: let the solver say what is wrong
        return RotationSolver(rig, joint_bones)
    return rig.derived(key, lambda: RotationSolver(rig, joint_bones))


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
