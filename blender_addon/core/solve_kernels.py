"""A single solve's start, effector request and end, each in one kernel call.

Around the networks (and the refinement), :meth:`.pipeline.PoseEditor._solve` takes the
start pose into model space and measures what the edit needs of it (which feet are down,
each joint's offset scale, the rig's proportions in model units, how upright it is), turns
the user's effectors into the networks' and the refinement's requests (planted feet held,
targets in model space, the floor shift, the refinement's weights), then takes the answer
back to the rig's space and bone lengths, makes its pelvis and chest rigid, re-aims the
limbs at their goals and measures the effectors' misses: some fifty numpy calls on one
pose, half a single solve's time before these kernels (each numpy call or array handed to
a kernel costs microseconds, more with the caches cold after the networks).
``npe_start``, ``npe_request`` (or ``npe_begin``: the request, the compiled universal edit
and the decoded change in one call) and ``npe_finish`` run the same steps in the same
order (:func:`.normalize.to_model_space_unchecked`, :func:`.normalize.offset_scales`,
:func:`.pipeline._hold_planted_feet`, :func:`.refine.full_body_share`,
:func:`.normalize.from_model_space_unchecked`, :func:`.rigid_branches.keep_rigid`,
:func:`.exact_reach.solve` as ``_solve`` and ``_reach_exactly`` call it,
:func:`.reach_bounds.beyond_reach`); the start writes one record per pose that the later
calls read by its address. With the compiled networks and refinement, ``npe_solve_one``
runs a single solve in one call (its start where the editor keeps none, the request, the
edit, the refinement, the end and the rig IK stage after it) into buffers made once. The
numpy code stays the specification and runs wherever the kernels are off (or
``pipeline.SOLVE_KERNELS`` is).
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

import numpy as np

from . import exact_reach, native, normalize, reach_bounds, refine, rig_ik, rigid_branches, skeleton
from .normalize import BodyFrame
from .skeleton import NUM_JOINTS

_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double


class _StartShape(ctypes.Structure):
    """npe_native.c's ``StartShape``."""
    _fields_ = (("nj", _I), ("chains", _I), ("parents", _P), ("canonical", _P),
                ("leg_bones", _P), ("across", _P), ("chain_weights", _P), ("chain_of", _P),
                ("chained", _P), ("canonical_chains", _P), ("canonical_leg", _D),
                ("feet", _P), ("toe_height", _D), ("ankle_height", _D), ("neck", _I),
                ("familiar_deg", _D), ("unfamiliar_deg", _D), ("rigid_pairs", _P))


class RecordStart:
    """A start pose's preparation as the start kernel made it, read-only, with the same
    attributes as :class:`.pipeline._Start`: which feet are down (B, 2), and views of the
    record made when first read (the model-space pose (B, 21, 3), the frame and turn of
    :func:`.normalize.to_model_space_unchecked`, each joint's offset scale, the rig's lengths
    in model units, the model pose with them, how upright it is, the rigid branches' spans):
    a single solve on the kernels reads none of them, the later kernels read the record by
    ``record`` (one pose's record address; None for a batch, whose views are strided) and
    ``feet_at``. Each view costs microseconds with the caches cold after the networks."""

    def __init__(self, block: np.ndarray, feet_down: np.ndarray, record: int | None,
                 feet_at: int | None) -> None:
        self._block, self.feet_down, self.record, self.feet_at = block, feet_down, record, \
            feet_at

    def __getattr__(self, name: str) -> Any:
        if name not in _VIEWS:
            raise AttributeError(name)
        made = self._block.view(_START_RECORD)
        value = BodyFrame(root=made["root"], yaw=made["yaw"], lengths=made["lengths"],
                          scale=made["scale"]) if name == "frame" else made[name]
        self.__dict__[name] = value
        return value


_VIEWS = frozenset(("model", "frame", "turn", "offset_scales", "rig_lengths", "rig_model",
                    "familiarity", "spans"))


# npe_start's record of each pose, in its order (9 * 21 + 21 float64).
_START_RECORD = np.dtype([
    ("model", np.float64, (NUM_JOINTS, 3)), ("root", np.float64, (3,)), ("yaw", np.float64),
    ("lengths", np.float64, (NUM_JOINTS,)), ("scale", np.float64), ("turn", np.float64, (3, 3)),
    ("offset_scales", np.float64, (NUM_JOINTS,)), ("rig_lengths", np.float64, (NUM_JOINTS,)),
    ("rig_model", np.float64, (NUM_JOINTS, 3)), ("familiarity", np.float64),
    ("spans", np.float64, (6,))])
assert _START_RECORD.itemsize == (9 * NUM_JOINTS + 21) * 8
# What npe_finish reads of a start, in its order.
_END_FIELDS = ("model", "root", "lengths", "scale", "turn", "offset_scales")
_END_OFFSETS = tuple(_START_RECORD.fields[name][1] for name in _END_FIELDS)


class SolveStart:
    """The start kernel with the pipeline's planted-feet constants (given by the pipeline,
    which owns them)."""

    def __init__(self, ankles: np.ndarray, toes: np.ndarray, toe_height: float,
                 ankle_height: float) -> None:
        joint = skeleton.JOINT_INDEX
        self._keep = [np.ascontiguousarray(a, dtype=t) for a, t in (
            (skeleton.BONE_LENGTHS, np.float64),
            ([joint[b] for b in ("l_shin", "l_foot", "r_shin", "r_foot")], np.int64),
            ([joint[j] for j in ("l_thigh", "r_thigh", "l_upperarm", "r_upperarm")], np.int64),
            (normalize._CHAIN_WEIGHTS, np.float64), (normalize._CHAIN_OF, np.float64),
            (normalize._CHAINED, np.int64), (normalize._CANONICAL_CHAINS, np.float64),
            (np.r_[ankles, toes], np.int64), (refine._RIGID_PAIRS, np.int64))]
        at = [native.address(a) for a in self._keep]
        self._shape = _StartShape(
            NUM_JOINTS, normalize._CHAIN_WEIGHTS.shape[1], native.address(native.SKELETON_PARENTS),
            *at[:7], normalize._CANONICAL_LEG, at[7], toe_height, ankle_height,
            joint["neck"], 0.0, 0.0, at[8])
        self._at = ctypes.addressof(self._shape)

    def run(self, kernels: native.Kernels, p: np.ndarray, lengths: np.ndarray | None,
            scale: np.ndarray | None, tilts: tuple[float, float]) -> RecordStart:
        """The start of a solve of float64 rig poses ``p`` (B, 21, 3); ``lengths`` (B, 21)
        and their ``scale`` (B,) the rig's, or None: each pose's own; ``tilts``: the
        familiar and unfamiliar tilts (degrees) of :func:`.pipeline.familiarity`."""
        p, n = np.ascontiguousarray(p, dtype=np.float64), len(p)
        block = np.empty(n * _START_RECORD.itemsize // 8)  # (its address is quicker found)
        feet = np.empty((n, 2), dtype=np.bool_)  # (numpy's bools: bytes of 0 or 1, as in C)
        given = [None if a is None else np.ascontiguousarray(a, dtype=np.float64)
                 for a in (lengths, scale)]  # kept through the call
        base, feet_at = native.address(block), native.address(feet)
        status = kernels.start(self.shape(tilts), n, native.address(p),
                               *(None if a is None else native.address(a) for a in given),
                               base, feet_at)
        if status != 0:
            raise RuntimeError(f"npe_start refused a skeleton of {NUM_JOINTS} joints")
        start = RecordStart(block, feet, base if n == 1 else None, feet_at if n == 1 else None)
        self.made(start)
        return start

    def shape(self, tilts: tuple[float, float]) -> int:
        """The kernel's shape (its address) with ``tilts`` (as :meth:`run` takes them)."""
        self._shape.familiar_deg, self._shape.unfamiliar_deg = tilts
        return self._at

    @staticmethod
    def unmade() -> RecordStart:
        """One pose's record, not made yet: :meth:`SolveRequest.solve` has the solve's
        kernel make it (then :meth:`made`)."""
        block = np.empty(_START_RECORD.itemsize // 8)
        feet = np.empty((1, 2), dtype=np.bool_)
        return RecordStart(block, feet, native.address(block), native.address(feet))

    @staticmethod
    def made(start: RecordStart) -> None:
        """The record made, read-only from now on (and so every field's view: it is kept
        between solves)."""
        start._block.flags.writeable = False
        start.feet_down.flags.writeable = False


class _RequestShape(ctypes.Structure):
    """npe_native.c's ``RequestShape``."""
    _fields_ = (("nj", _I), ("feet", _P), ("ends", _P), ("n_ends", _I), ("min_ends", _I),
                ("trunk", _P), ("n_trunk", _I), ("reach_tolerance", _D), ("moved_m", _D),
                ("full_body_move", _D), ("effector_weight", _D),
                ("full_body_effector_weight", _D), ("least_change", _D),
                ("full_body_least_change", _D))


class Request(NamedTuple):
    """What :meth:`SolveRequest.run` leaves (one pose): the mask, targets and weights with
    the planted feet held, the networks' targets (model space, the floor shift taken out),
    the shift (1, 2), the targets on the rig's proportions, the refinement's body follow,
    effector weight and least change (1,) and the reach tolerance in rig units (1,)."""
    mask: np.ndarray
    targets: np.ndarray
    weights: np.ndarray
    network_targets: np.ndarray
    shift: np.ndarray
    rig_targets: np.ndarray
    follow: np.ndarray
    effector_weight: np.ndarray
    least_change: np.ndarray
    tolerance: np.ndarray


_REQUEST_SIZE = 11 * NUM_JOINTS + 6  # npe_request's out


class Begun(NamedTuple):
    """What :meth:`SolveRequest.begin` and :meth:`~SolveRequest.solve` leave: the request,
    the edited (or refined) latents (1, L), the networks' model-space pose (1, 21, 3), the
    offset added to the decoded one, and the end (:meth:`SolveEnd.run`'s, where the same
    call ran it) or None."""
    request: Request
    latent: np.ndarray
    pose: np.ndarray
    offset: np.ndarray
    ends: Ends | None


class SolveRequest:
    """The request kernel with the pipeline's and the refinement's constants (given by the
    pipeline, which owns them)."""

    def __init__(self, ankles: np.ndarray, toes: np.ndarray, trunk: np.ndarray,
                 reach_tolerance: float, moved_m: float) -> None:
        self._keep = [np.ascontiguousarray(a, dtype=np.int64)
                      for a in (np.r_[ankles, toes], refine._ENDS, trunk)]
        self._shape = _RequestShape(
            NUM_JOINTS, native.address(self._keep[0]), native.address(self._keep[1]),
            len(refine._ENDS), refine.FULL_BODY_MIN_ENDS, native.address(self._keep[2]),
            len(trunk), reach_tolerance, moved_m, refine.FULL_BODY_MOVE,
            refine.EFFECTOR_WEIGHT, refine.FULL_BODY_EFFECTOR_WEIGHT, refine.LEAST_CHANGE,
            refine.FULL_BODY_LEAST_CHANGE)
        self._at = ctypes.addressof(self._shape)
        self._buffers: dict[int, _SolveBuffers] = {}  # by the networks' latent size

    def run(self, kernels: native.Kernels, start: Any, p: np.ndarray, mask: np.ndarray,
            targets: np.ndarray, weights: np.ndarray, plant: bool, refined: bool,
            body_follow: float) -> Request:
        """The effector request on one rig pose ``p`` (1, 21, 3) whose ``start`` (a
        :class:`.pipeline._Start`) the start kernel made: ``mask``, ``targets`` and
        ``weights`` the user's; ``plant``: hold the planted feet; ``refined``: the
        refinement's targets and weights too."""
        out = np.empty(_REQUEST_SIZE)
        arrays = _float64(p, mask, targets, weights)
        kernels.request(self._at, start.record, start.feet_at, *map(native.address, arrays),
                        int(plant), int(refined), body_follow, native.address(out))
        return self._read(out)

    def begin(self, kernels: native.Kernels, networks: Any, start: Any, p: np.ndarray,
              mask: np.ndarray, targets: np.ndarray, weights: np.ndarray, plant: bool,
              refined: bool, body_follow: float, keep_details: bool) -> Begun | None:
        """:meth:`run`, then the universal solver's fused edit on its answer (``networks``,
        a :class:`.compiled_networks.CompiledUniversal`) and the decoded change on the input
        (``keep_details``; else the decoded pose alone), in one call. None where no effector
        is left (nothing else run)."""
        out = _SolveBuffers(networks.latent_size, end=False)  # its own: the caller keeps it
        arrays = _float64(p, mask, targets, weights)
        status = kernels.begin(self._at, *self._head(networks, start, arrays, plant),
                               int(refined), body_follow, int(keep_details), *out.begun_at)
        if status < 0:
            raise RuntimeError(f"npe_begin refused the networks ({status})")
        if status == 1:
            return None
        return Begun(out.request, out.latent, out.pose, out.offset, None)

    def solve(self, kernels: native.Kernels, networks: Any, refinement: Any, steps: int,
              end: SolveEnd, start: Any, p: np.ndarray, mask: np.ndarray, targets: np.ndarray,
              weights: np.ndarray, user_mask: np.ndarray, plant: bool, body_follow: float,
              keep_details: bool, drag: bool,
              make: tuple[int, int | None, int | None] | None = None) -> Begun | None:
        """A single solve in one call (``npe_solve_one``): :meth:`begin`, then the
        refinement (``refinement``, a :class:`.refine.RefineRun`, at most ``steps``; None:
        unrefined) and ``end``'s (:meth:`SolveEnd.run`: ``user_mask`` the user's effectors;
        the notes' reach bound unless a ``drag`` update), refined with the rig IK stage of
        :func:`.pipeline._reach_rest` where the re-aims leave a goal short (not a ``drag``
        update: the ends' ``left`` then flags a pose that still needs its FABRIK stage), into
        buffers made once: the answer's views hold until the next call
        (the caller copies what it keeps). Its ``ends`` are None where the refinement left
        the pose to numpy (a bone without direction): the request and the networks' answer
        are there. None where no effector is left. ``make``: the start
        record is made in the same call (``start`` from :meth:`SolveStart.unmade`): the
        start kernel's shape and the rig's lengths and scale (addresses, or None: the
        pose's own), as :meth:`SolveStart.run` takes them."""
        buffers = self._buffers.get(networks.latent_size)
        if buffers is None:
            buffers = self._buffers[networks.latent_size] = _SolveBuffers(
                networks.latent_size)
        arrays = _float64(p, mask, targets, weights, user_mask)
        status = kernels.solve_one(
            self._at, *self._head(networks, start, arrays[:4], plant), body_follow,
            int(keep_details), *buffers.begun_at,
            None if refinement is None else refinement.address, steps, end._at,
            native.address(arrays[4]), *buffers.end_at[not drag], int(not drag),
            *(make or (None,) * 3))
        if status == 1:
            return None
        if status < 0 and not (status == -1 and refinement is not None):
            raise RuntimeError(f"npe_solve_one refused the networks ({status})")
        done = status == 0
        return Begun(buffers.request, refinement.latent if done and refinement is not None
                     else buffers.latent, buffers.pose, buffers.offset,
                     buffers.ends[not drag] if done else None)

    @staticmethod
    def _head(networks: Any, start: Any, arrays: list[np.ndarray], plant: bool) -> tuple:
        """npe_begin's and npe_solve_one's arguments after the shape, up to ``plant``
        (``arrays``: the pose, mask, targets and weights, contiguous float64, kept by the
        caller through the call)."""
        return (*networks.addresses, networks.cache_address, start.record, start.feet_at,
                *map(native.address, arrays), int(plant))

    @staticmethod
    def _read(out: np.ndarray) -> Request:
        j = NUM_JOINTS
        poses = out[2 * j:11 * j].reshape(3, 1, j, 3)
        return Request(out[:j].reshape(1, j), poses[0], out[j:2 * j].reshape(1, j), poses[1],
                       out[11 * j:11 * j + 2].reshape(1, 2), poses[2], *(
                           out[k:k + 1] for k in range(11 * j + 2, 11 * j + 6)))


class _FinishShape(ctypes.Structure):
    """npe_native.c's ``FinishShape``."""
    _fields_ = (("nj", _I), ("parents", _P), ("rigid_layout", _P), ("pelvis_weights", _P),
                ("held_pelvis_weight", _D), ("carry_pelvis", _P), ("carry_chest", _P),
                ("reach_layout", _P), ("reach_masks", _P), ("slack", _D),
                ("settle_slack", _D), ("reach_margin", _D), ("settle_passes", _I),
                ("settle_stall", _I), ("network_straightest", _P), ("hand_goals", _P),
                ("arm_straightest", _D), ("moved_m", _D), ("moved_per_tolerance", _D),
                ("reach_pairs", _P), ("reach_segments", _P), ("n_reach_pairs", _I),
                ("reach_width", _I), ("miss_note", _D), ("pivot_of", _P), ("pivots", _P),
                ("carried", _P), ("hand_arm", _P), ("moved_limbs", _P), ("stance", _P),
                ("hold", _P), ("n_pivots", _I), ("steps", _I),
                *((name, _D) for name in (
                    "stay", "stay_decay", "stay_floor", "floor_near", "initial_damping",
                    "damping_down", "damping_up", "min_damping", "max_damping", "min_scale",
                    "miss_per_tolerance")),
                ("pull_passes", _I))


class Ends(NamedTuple):
    """What :meth:`SolveEnd.run` leaves: the rig pose made rigid before any re-aim, the
    hands' bent re-aim (refined only), the answer, its effectors' misses (B, 21), which
    poses still need :func:`.pipeline._reach_exactly`'s rig IK stage (B,: 1, else 0), and
    the reach bound the notes read (:func:`.reach_bounds.beyond_reach` of the start pose towards the
    full-weight goals, where an effector misses by over ``miss_note``; zero elsewhere)."""
    rigid: np.ndarray
    bent: np.ndarray
    out: np.ndarray
    errors: np.ndarray
    left: np.ndarray
    reach: tuple[np.ndarray, np.ndarray] | None  # beyond_reach's (B, 21) pair, with ``reach``


class SolveEnd:
    """The kernel with the pipeline's re-aim constants (given by the pipeline, which owns
    them)."""

    def __init__(self, network_straightest: np.ndarray, hand_goals: np.ndarray,
                 arm_straightest: float, moved_m: float, reach_tolerance: float,
                 miss_note: float, hand_arm: np.ndarray, moved_limbs: np.ndarray,
                 stance: np.ndarray, hold: np.ndarray, least_change_steps: int,
                 least_change_stay_decay: float) -> None:
        self._keep = [np.ascontiguousarray(a, dtype=t) for a, t in (
            (network_straightest, np.float64), (hand_goals, np.int64),
            (rig_ik._PIVOTS, np.int64), (rig_ik._CARRIED, np.int64), (hand_arm, np.int64),
            (moved_limbs, np.int64), (stance, np.int64), (hold, np.float64))]
        tables = rigid_branches._NATIVE_ARRAYS
        self._shape = _FinishShape(
            NUM_JOINTS, native.address(native.SKELETON_PARENTS), native.address(tables[0]),
            native.address(tables[1]), rigid_branches._HELD_PELVIS_WEIGHT,
            native.address(tables[2]), native.address(tables[3]),
            native.address(exact_reach._NATIVE_LAYOUT), native.address(exact_reach._NATIVE_MASKS),
            exact_reach._SLACK, exact_reach._SETTLE_SLACK, exact_reach._REACH_MARGIN,
            exact_reach._SETTLE_PASSES, exact_reach._SETTLE_STALL,
            native.address(self._keep[0]), native.address(self._keep[1]), arm_straightest,
            moved_m, moved_m / reach_tolerance, *reach_bounds._NATIVE_TABLES,
            len(reach_bounds._NATIVE_PAIRS), reach_bounds._NATIVE_SEGMENTS.shape[1],
            miss_note, native.address(rig_ik._NATIVE_PIVOT_OF),
            *(native.address(a) for a in self._keep[2:]), len(rig_ik._PIVOTS),
            least_change_steps, rig_ik.STAY_WEIGHT, least_change_stay_decay,
            rig_ik.STAY_FLOOR,
            rig_ik.FLOOR_NEAR, rig_ik._INITIAL_DAMPING, rig_ik._DAMPING_DOWN,
            rig_ik._DAMPING_UP, rig_ik._MIN_DAMPING, rig_ik._MAX_DAMPING, rig_ik._MIN_SCALE,
            miss_note / reach_tolerance, reach_bounds.PULL_PASSES)
        self._at = ctypes.addressof(self._shape)

    def run(self, kernels: native.Kernels, refined: bool, pose: np.ndarray,
            p: np.ndarray, start: Any, shift: np.ndarray, moves: bool, targets: np.ndarray,
            mask: np.ndarray, weights: np.ndarray, user_mask: np.ndarray,
            tolerance: np.ndarray, reach: bool = False) -> Ends:
        """The end of a solve of the float64 model-space answer ``pose`` (B, 21, 3) from the
        rig poses ``p``, prepared as ``start`` (a :class:`.pipeline._Start`: its model, frame,
        turn and offset scales, read from its record where the start kernel made one pose's);
        ``shift`` (B, 2) the floor shift in model units, added where ``moves`` (refined or
        shifted), as ``_solve`` does; ``targets``, ``mask`` and ``weights``
        with the planted feet held, ``user_mask`` the user's effectors; ``tolerance`` (B,)
        in rig units; ``reach``: the notes' reach bound too. (Each array passed costs a
        conversion and an address, a few microseconds with the caches cold after the
        networks: a single start's are read from its record.)"""
        n = len(pose)
        block = self.block(n)
        arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in (
            pose, p, shift, targets, mask, weights, user_mask, tolerance)]  # kept for the call
        fields = None if start.record is None or n != 1 \
            else tuple(start.record + at for at in _END_OFFSETS)
        if fields is None:
            frame = start.frame
            arrays += [np.ascontiguousarray(a, dtype=np.float64) for a in (
                start.model, frame.root, frame.lengths, frame.scale, start.turn,
                start.offset_scales)]
            fields = tuple(map(native.address, arrays[8:]))
        at = list(map(native.address, arrays[:8]))
        status = kernels.finish(self._at, n, int(refined), at[0], *fields[:1], at[1],
                                *fields[1:], at[2], int(moves), *at[3:],
                                *self.outputs(block, n, reach))
        if status != 0:
            raise RuntimeError(f"npe_finish refused a skeleton of {NUM_JOINTS} joints")
        return self.read(block, n, reach)

    @staticmethod
    def block(n: int) -> np.ndarray:
        """npe_finish's outputs for ``n`` poses: the three poses, the errors, the left flags,
        then the reach bound's excess and goals."""
        return np.empty(n * (9 * NUM_JOINTS + NUM_JOINTS + 1 + 2 * NUM_JOINTS))

    @staticmethod
    def outputs(block: np.ndarray, n: int, reach: bool) -> tuple[int | None, ...]:
        """The addresses npe_finish writes its outputs to in ``block``."""
        base, nj = native.address(block), NUM_JOINTS
        size, tail = n * nj * 3 * 8, n * (9 * nj + nj + 1) * 8
        return (base, base + size, base + 2 * size, base + 3 * size, tail - n * 8 + base,
                base + tail if reach else None, base + tail + n * nj * 8 if reach else None)

    @staticmethod
    def read(block: np.ndarray, n: int, reach: bool) -> Ends:
        """:class:`Ends` out of the block npe_finish wrote."""
        nj = NUM_JOINTS
        size, tail = 3 * n * nj, n * (9 * nj + nj + 1)
        poses = block[:3 * size].reshape(3 * n, nj, 3)
        return Ends(poses[:n], poses[n:2 * n], poses[2 * n:],
                    block[3 * size:tail - n].reshape(n, nj),
                    block[tail - n:tail].view(np.int64),
                    (block[tail:tail + n * nj].reshape(n, nj),
                     block[tail + n * nj:].view(np.int64).reshape(n, nj)) if reach else None)


def _float64(*arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays as a kernel reads them (contiguous float64; copies only where they are
    not), in a list the caller keeps through the call."""
    return [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]


class _SolveBuffers:
    """npe_begin's outputs for one pose and a latent size (the request, the edited poses,
    the latent, the pose and its offset) with their addresses and views, and with ``end``
    npe_finish's (:meth:`SolveEnd.block`, its addresses and views with the reach bound and
    without): npe_solve_one's, made once (a few dozen microseconds of a single solve were
    making them)."""

    def __init__(self, latent_size: int, end: bool = True) -> None:
        j = NUM_JOINTS
        self.block = np.empty(_REQUEST_SIZE + 6 * j)  # the request, then the pose and offset
        self.decoded = np.empty(2 * 3 * j + latent_size, dtype=np.float32)
        base, at = native.address(self.block), native.address(self.decoded)
        self.begun_at = (base, at, at + 6 * j * 4, base + _REQUEST_SIZE * 8,
                         base + (_REQUEST_SIZE + 3 * j) * 8)
        self.request = SolveRequest._read(self.block[:_REQUEST_SIZE])
        self.pose, self.offset = self.block[_REQUEST_SIZE:].reshape(2, 1, j, 3)
        self.latent = self.decoded[6 * j:].reshape(1, -1)
        if end:
            self.end = SolveEnd.block(1)
            self.end_at = {reach: SolveEnd.outputs(self.end, 1, reach)
                           for reach in (False, True)}
            self.ends = {reach: SolveEnd.read(self.end, 1, reach) for reach in (False, True)}
