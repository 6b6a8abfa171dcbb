"""The engine API (:class:`PoseEditor`): a solve as named stages, start -> request ->
networks -> refine -> finish -> notes."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import exact_reach, fabrik, refine, rigid_branches, skeleton
from ..models import ModelSet
from ..normalize import (
    BodyFrame,
    from_model_space_unchecked,
    leg_scale,
    set_bone_lengths_unchecked,
    yaw_matrix,
)
from .constants import (
    _CONTACTS,
    _NETWORK_STRAIGHTEST,
    _TRUNK,
    DRAG_REFINE_STEPS,
    METRIC_STEPS,
    MISS_NOTE_M,
    MOVED_M,
    REACH_TOLERANCE,
    ROOT,
    START_CACHE_SIZE,
)
from .contacts import _Contacts
from .finish import _reach_exactly, limbs_straightest
from .networks import _Networks
from .notes import _reach_notes
from .request import _hold_planted_feet, _moved, _shift3, effector_errors
from .sliders import _metric_rows, _Sliders
from .start import _Start
from .types import EditResult, Effector, SolveOptions, _check_positions


class PoseEditor(_Contacts, _Networks, _Sliders):
    """Edits poses of one rig (its bone lengths) with one model set. One thread at a time:
    the solves share the kernels' buffers (made once; the add-on solves on Blender's main
    thread)."""

    def __init__(self, models: ModelSet | None, lengths: np.ndarray | None = None) -> None:
        self.models = models
        self._starts: dict[bytes, _Start] = {}
        self.lengths = lengths
        self._universal = self._fused = None
        if models is not None:
            self._universal = next(iter(models.by_role("ik_universal")), None)
            self._fused = next(iter(models.by_role("ik_universal_fused")), None)
            self._groups = models.groups
            self._metrics = models.metrics

    @property
    def lengths(self) -> np.ndarray | None:
        """The rig's bone lengths (21,) (read-only), or None: each pose's own, measured."""
        return self._lengths

    @lengths.setter
    def lengths(self, lengths: np.ndarray | None) -> None:
        value = None if lengths is None else np.array(lengths, dtype=np.float64)
        if value is not None and value.shape != (skeleton.NUM_JOINTS,):
            raise ValueError(f"lengths must have shape ({skeleton.NUM_JOINTS},), "
                             f"got {value.shape}")
        if value is not None:
            value.flags.writeable = False  # the cached batch below must not go stale
        self._lengths = value
        # As a batch of one with its pelvis-height scale, made once: every solve shares them.
        self._rig_lengths = None if value is None else value[None]
        self._rig_scale = None if value is None else np.ascontiguousarray(
            leg_scale(self._rig_lengths), dtype=np.float64)
        self._rig_scale_value = None if value is None else float(self._rig_scale[0])
        self._ordinary_poses: dict[bytes, bool] = {}  # (their answers hold for this rig)
        self._starts.clear()

    def _start(self, p: np.ndarray) -> _Start:
        """The start pose's :class:`_Start` on this editor's rig; a single pose's is kept
        (the last :data:`START_CACHE_SIZE`), keyed by its coordinates."""
        lengths, scale = self._rig_lengths, self._rig_scale
        if len(p) != 1:
            if lengths is not None:
                lengths, scale = np.repeat(lengths, len(p), axis=0), np.repeat(scale, len(p))
            return _Start.of(p, lengths, scale)
        key = p.tobytes()
        start = self._starts.get(key)
        if start is None:
            start = _Start.of(p, lengths, scale)
            self._keep_start(key, start)
        return start

    def _keep_start(self, key: bytes, start: _Start) -> None:
        if len(self._starts) >= START_CACHE_SIZE:
            self._starts.pop(next(iter(self._starts)))
        self._starts[key] = start

    def solve(self, positions: np.ndarray, effectors: Sequence[Effector] = (),
              metrics: dict[str, float] | None = None,
              options: SolveOptions | None = None, drag: bool = False) -> EditResult:
        """One pose (21, 3) edited with effector objects and metric requests.

        The add-on's call on every drag: everything is checked once here, then the edit
        runs on the checked arrays. ``drag``: an update in the middle of a drag, which must
        stay interactive: a goal the refined pose leaves out of reach is not handed to
        full-body FABRIK, and no note says which targets are beyond reach (the drag's pause
        solves again without ``drag``).
        """
        options = options or SolveOptions()
        options.check()
        pose = _check_positions(np.asarray(positions, dtype=np.float64)[None])
        mask, targets, weights = self.effector_arrays(pose, effectors)
        values = self.check_metrics(
            {k: np.array([v], dtype=np.float64) for k, v in metrics.items()}, 1
        ) if metrics else {}
        return self._solve(pose, mask, targets, weights, values, options, drag=drag)

    def settle(self, poses: np.ndarray, start: np.ndarray, mask: np.ndarray,
               targets: np.ndarray, weights: np.ndarray, metric_names: Sequence[str] = (),
               options: SolveOptions | None = None) -> np.ndarray:
        """Poses (B, 21, 3) near answers of :meth:`solve_arrays` from ``start`` (a
        propagation's frames after their changes were smoothed over time) made poses the
        rig can take again: its bone lengths, a rigid pelvis and chest, and the full-weight
        effectors and planted feet re-aimed onto their targets, then rig IK from there (the
        least change) where a goal stays short that a rig pose reaches; no FABRIK, whose
        answers from the start pose differ from frame to frame. Without the rig IK, smoothed
        frames left a hand up to 14.7 mm off its path (both hands: 144 mm).
        ``metric_names``: the metrics the edit asked for (legs' ones free the planted feet,
        as in the solve)."""
        options = options or SolveOptions()
        p = _check_positions(start)
        mask = np.asarray(mask, dtype=np.float64)
        t = np.where(mask[..., None] > 0, targets, p)
        w = np.asarray(weights, dtype=np.float64) * mask
        start_pose = self._start(p)
        frame = start_pose.frame
        tolerance = REACH_TOLERANCE / np.asarray(frame.scale)
        user_mask = mask
        if self._plants_feet(options, metric_names):
            mask, t, w = _hold_planted_feet(start_pose.feet_down, p, mask, t, w, tolerance)
        out = set_bone_lengths_unchecked(np.asarray(poses, dtype=np.float64), frame.lengths)
        out = rigid_branches.keep_rigid(out, p, user_mask[:, ROOT] > 0)
        return _reach_exactly(out, p, mask, t, w, frame.lengths, tolerance,
                              use_fabrik=False)

    @staticmethod
    def effector_arrays(positions: np.ndarray, effectors: Sequence[Effector]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Effector objects -> (mask, targets, weights) arrays for a batch of one pose.

        Targets are checked where they are set; weights are 0 off the effectors.
        """
        mask = np.zeros((1, skeleton.NUM_JOINTS))
        targets = np.array(positions, dtype=np.float64, copy=True)
        weights = np.zeros((1, skeleton.NUM_JOINTS))
        for e in effectors:
            j = skeleton.JOINT_INDEX.get(e.joint)
            if j is None:
                raise ValueError(f"effector on unknown joint {e.joint!r}; joints are: "
                                 f"{', '.join(skeleton.JOINTS)}")
            if not (math.isfinite(e.weight) and 0.0 < e.weight <= 1.0):
                raise ValueError(f"effector {e.joint!r}: weight must be in (0, 1], "
                                 f"got {e.weight}")
            mask[0, j] = 1.0
            weights[0, j] = e.weight
            if not e.pin:  # (scalar checks: a few targets' numpy reduces cost more)
                try:
                    t = np.asarray(e.target, dtype=np.float64)
                    ok = t.shape == (3,) and all(map(math.isfinite, t.tolist()))
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise ValueError(f"effector {e.joint!r}: target must be 3 finite numbers, "
                                     f"got {e.target!r}")
                targets[0, j] = t
        return mask, targets, weights

    def solve_arrays(self, positions: np.ndarray, mask: np.ndarray, targets: np.ndarray,
                     weights: np.ndarray | None = None,
                     metrics: dict[str, np.ndarray] | None = None,
                     options: SolveOptions | None = None, each_pose: bool = True
                     ) -> EditResult:
        """Batched edit. positions/targets (B, 21, 3), mask/weights (B, 21), metric values (B,).

        ``each_pose=False`` (clip propagation): metric requests keep one Jacobian and the
        option's step count, instead of re-linearizing as a single pose does (ten times
        cheaper on a long clip; effectors are exact either way)."""
        options = options or SolveOptions()
        options.check()
        p = _check_positions(positions)
        mask = np.broadcast_to(np.asarray(mask, dtype=np.float64), p.shape[:2])
        t = _check_positions(np.where(mask[..., None] > 0, targets, p), "targets")
        w = mask if weights is None else np.asarray(weights, dtype=np.float64) * mask
        metrics = self.check_metrics(metrics or {}, len(p))
        return self._solve(p, mask, t, w, metrics, options, each_pose)

    def _solve(self, p: np.ndarray, mask: np.ndarray, t: np.ndarray, w: np.ndarray,
               metrics: dict[str, np.ndarray], options: SolveOptions, each_pose: bool = True,
               drag: bool = False) -> EditResult:
        """The edit on checked float64 arrays: targets equal the pose off the effectors and
        weights are 0 there; metric requests are in the rig's units. Poses whose held
        contacts (hands, knees on the floor) keep an effector over :data:`MISS_NOTE_M` off
        its target are solved again without them: a contact holds what the user leaves
        alone, not against what they ask (a crawling body's head dragged up)."""
        first = self._solve_once(p, mask, t, w, metrics, options, each_pose, drag)
        if metrics or not options.keep_planted_feet or options.solver == "classic" \
                or not options.refine_steps:
            return first  # (the networks' answer alone is no exact reach to let go for)
        if self._ordinary(p):
            return first  # (a single pose with nothing on the floor: kept from the solve)
        scale = self._scale(p)
        worst = first.effector_error.max(axis=1)
        missed = worst > MISS_NOTE_M / scale
        if missed.any():  # of those, the poses that held a contact
            held, _, _ = self._hold_contacts(p, mask, t, w)
            missed &= (held[:, _CONTACTS] > mask[:, _CONTACTS]).any(axis=1)
        if not missed.any():
            return first
        rows = np.flatnonzero(missed)
        again = self._solve_once(p[rows], mask[rows], t[rows], w[rows], metrics, options,
                                 each_pose, drag, contacts=False)
        # (kept where letting go gets nearer: a target beyond reach anyway keeps them)
        better = again.effector_error.max(axis=1) < worst[rows] - REACH_TOLERANCE / scale[rows]
        if not better.any():
            return first
        if len(p) == 1:
            return again
        out, errors = first.positions.copy(), first.effector_error.copy()
        out[rows[better]] = again.positions[better]
        errors[rows[better]] = again.effector_error[better]
        return EditResult(out, None, errors, first.notes)

    def _solve_once(self, p: np.ndarray, mask: np.ndarray, t: np.ndarray, w: np.ndarray,
                    metrics: dict[str, np.ndarray], options: SolveOptions,
                    each_pose: bool = True, drag: bool = False, unfamiliar: bool = True,
                    contacts: bool = True) -> EditResult:
        """:meth:`_solve` once: with the contacts held where ``contacts`` (and the poses
        the mocap hardly holds by the least change where ``unfamiliar``)."""
        if options.solver == "classic":
            if metrics:
                raise ValueError("metric requests need the neural solver, not classic FABRIK")
            lengths = self.lengths if self.lengths is not None else skeleton.bone_lengths(p)
            out = fabrik.solve(p, mask > 0, t, lengths)
            errors = effector_errors(out, t, mask)
            notes = [] if drag else _reach_notes(p, mask > 0, t, errors)
            return EditResult(out, None, errors, notes)
        if self.models is None:
            raise ValueError("no model set loaded: only solver='classic' is available")
        user_mask = mask
        if contacts and not metrics and options.keep_planted_feet and not self._ordinary(p):
            mask, t, w = self._hold_contacts(p, mask, t, w)
            if unfamiliar and options.refine_steps and options.fix_lengths \
                    and options.solver != "classic":
                odd = self._unfamiliar(p, (mask > 0) & (user_mask <= 0))
                if odd.any():
                    return self._least_change_of(odd, p, mask, t, w, user_mask, options,
                                                 each_pose, drag)
        # The stages: start -> request -> networks -> refine -> finish -> notes.
        start = self._start(p)
        notes: list[str] = []
        mask, t, w, requests, t_net, shift = self._request(p, start, mask, t, w, metrics,
                                                           options, notes)
        if not mask.any() and not requests:
            return EditResult(p.copy(), None, np.zeros(mask.shape), notes)
        shifted = bool(shift.any())
        # A request that turns the clavicles is met by the refinement's own clavicle turns
        # (refine.SHRUG_PRIOR), from the pose as it stands: a latent that never saw a shrug
        # answered it by lowering the arms and bending the trunk.
        turns = {name for name in requests if refine.moves_shoulders(self._metrics[name].metric)}
        asked = {name: r for name, r in requests.items() if name not in turns} \
            if options.refine_steps else requests
        z_new, edited, unmoved = self._networks(start.model, mask, t_net, w, asked, options,
                                                notes)
        # The decoded change on top of the input (or the decoded pose alone): requests
        # that ask for nothing new change nothing.
        offset = start.model - unmoved if options.keep_details else np.zeros_like(start.model)
        pose = offset + edited
        if options.refine_steps:
            z_new, pose, shift = self._refine(p, start, mask, t, w, requests, z_new, offset,
                                              shift, turns, asked, options, each_pose, drag)
        out = self._finish(p, start, pose, shift, shifted, mask, t, w, user_mask, options,
                           drag)
        errors = effector_errors(out, t, user_mask)
        if not drag:  # a drag's pause says it (the notes of its updates go unread)
            notes.extend(_reach_notes(p, (mask > 0) & (w >= 1.0), t, errors, user_mask,
                                       refined=options.refine_steps > 0))
        return EditResult(out, z_new, errors, notes)

    def _request(self, p: np.ndarray, start: _Start, mask: np.ndarray, t: np.ndarray,
                 w: np.ndarray, metrics: dict[str, np.ndarray], options: SolveOptions,
                 notes: list[str]) -> tuple:
        """The request stage: the planted feet held, the metric requests in model units,
        the targets in model space for the networks and the pelvis's floor shift taken out
        of them. (mask, targets, weights, metric requests, network targets, shift (B, 2))."""
        if self._plants_feet(options, metrics):
            mask, t, w = _hold_planted_feet(start.feet_down, p, mask, t, w,
                                            REACH_TOLERANCE / np.asarray(start.frame.scale))
        model = start.model
        requests = self._metric_requests(p, model, start.frame, metrics, notes) if metrics \
            else {}
        # The networks are asked for each limb's own move (offsets scaled by that limb);
        # the refinement works on the rig's proportions with its exact targets.
        t_model = self.targets_to_model(p, t, model, start.frame, start.turn,
                                        start.offset_scales)
        # Model space keeps the pelvis over its origin: a dragged pelvis's move along
        # the floor is a shift of the whole body, and the networks see the targets
        # without it.
        shift = (t_model[:, ROOT] - model[:, ROOT])[:, [0, 2]] * (
            mask[:, ROOT:ROOT + 1] > 0)
        t_net = t_model - _shift3(shift)[:, None] if shift.any() else t_model
        return mask, t, w, requests, t_net, shift

    def _refine(self, p: np.ndarray, start: _Start, mask: np.ndarray, t: np.ndarray,
                w: np.ndarray, requests: dict, z_new: np.ndarray, offset: np.ndarray,
                shift: np.ndarray, turns: set[str], asked: dict, options: SolveOptions,
                each_pose: bool, drag: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The refine stage (:func:`.refine.refine`) on the rig's own proportions in model
        units, where its targets are exact (a canonical-length pose put on a rig with
        shorter arms would leave the hand short): the latent, the model pose without the
        floor shift, the shift."""
        rig_lengths, rig_model = start.rig_lengths, start.rig_model
        t_rig = self.targets_to_model(p, t, rig_model, start.frame, start.turn)
        moved = _moved(mask, t_rig, rig_model)
        moving = moved.any(axis=1)
        rows = _metric_rows(requests, self._metrics, moving, rig_model,
                            options.fix_lengths)
        share = refine.full_body_share(mask, t_rig, rig_model)
        # Body follow is how much the body joins a drag of a limb, up to all of it
        # for a request that describes the whole body (as its effectors' weight, see
        # refine.full_body_share) or moves the trunk (a dragged pelvis or head
        # carries the body: held back, the pelvis fell 10 cm short where it fell 3
        # cm short); a slider-only edit keeps the rest of the pose (and takes more
        # steps: metric rows are strongly curved).
        whole = np.where(moved[:, _TRUNK].any(axis=1), 1.0, share)
        body_follow = options.body_follow
        if body_follow and (moving & (whole < 1.0)).any():
            body_follow = body_follow * start.familiarity
        follow = np.where(moving, body_follow + (1.0 - body_follow) * whole, 0.0)
        effector_weight = refine.effector_weights(share)
        least_change = refine.least_change_weights(share)
        relinearize = rows is not None and each_pose
        steps = max(options.refine_steps, METRIC_STEPS) if relinearize \
            else min(options.refine_steps, DRAG_REFINE_STEPS) if drag \
            else options.refine_steps
        z_new, pose, shift = refine.refine(self.models, z_new, offset, rig_model, t_rig, w,
                                           rows, follow, steps, shift, rig_lengths,
                                           relinearize, effector_weight, least_change,
                                           start.spans if options.fix_lengths
                                           and rows is None else None,
                                           bool(turns), bool(turns) and not asked)
        return z_new, pose - _shift3(shift)[:, None], shift

    def _finish(self, p: np.ndarray, start: _Start, pose: np.ndarray, shift: np.ndarray,
                shifted: bool, mask: np.ndarray, t: np.ndarray, w: np.ndarray,
                user_mask: np.ndarray, options: SolveOptions, drag: bool) -> np.ndarray:
        """The finish stage: the model pose back in the rig's space (the floor shift
        added), its lengths, rigid pelvis and chest, and the goals reached exactly
        (:mod:`.finish`); or the networks' answer re-aimed, refinement off."""
        model = start.model
        moves = bool(options.refine_steps) or shifted  # the floor shift moves the answer
        tolerance = REACH_TOLERANCE / np.asarray(start.frame.scale)  # in the rig's units
        frame, turn, move = start.frame, start.turn, 0.0
        if moves:
            move = ((_shift3(shift) / np.asarray(frame.scale)[:, None])[:, None]
                    @ turn.swapaxes(-1, -2))
        out = from_model_space_unchecked(pose, frame, options.fix_lengths, turn) + move
        if options.fix_lengths:  # a pose the rig can take: its pelvis and chest are rigid
            out = rigid_branches.keep_rigid(out, p, user_mask[:, ROOT] > 0)
        if options.fix_lengths and options.refine_steps:
            out = _reach_exactly(out, p, mask, t, w, frame.lengths, tolerance,
                                 fallback=not drag)
        elif options.fix_lengths:
            # The networks' own answer for each moved limb end, in the rig's units: restoring
            # the bone lengths (directions kept) would pull a hand the decoded change
            # stretched an arm to reach back by centimetres; the limbs are re-aimed there
            # instead (keeping a bend), then those of full-weight pins and planted feet to
            # where they are held.
            answer = p + ((pose - model) / start.offset_scales[..., None]
                          ) @ turn.swapaxes(-1, -2) + move
            moved = _moved(mask, t, p, MOVED_M / np.asarray(frame.scale)[:, None])
            held = (mask > 0) & (w >= 1.0) & ~moved
            straightest = limbs_straightest(p, moved, moved, t, frame.lengths, tolerance,
                                            _NETWORK_STRAIGHTEST)
            out = exact_reach.solve(out, moved | held, np.where(moved[..., None], answer, t),
                                    frame.lengths, tolerance, straightest=straightest,
                                    bend_trunk=False, bent=moved)
        return out

    @staticmethod
    def targets_to_model(p: np.ndarray, t: np.ndarray, model: np.ndarray, frame: BodyFrame,
                         turn: np.ndarray | None = None, scales: np.ndarray | None = None
                         ) -> np.ndarray:
        """Rig-space targets to model space, as offsets from each joint's current place.

        Offsets turn with the body and scale with it (by the legs, or per joint by
        ``scales`` (B, 21), :func:`.normalize.offset_scales`), so a target reached on a rig
        with other proportions asks the canonical body for the same motion of the joint.
        ``turn`` is ``yaw_matrix(frame.yaw)`` when the caller has it.
        """
        if turn is None:
            turn = yaw_matrix(np.asarray(frame.yaw, dtype=np.float64))
        factor = np.asarray(frame.scale)[..., None, None] if scales is None \
            else scales[..., None]
        return model + (t - p) @ turn * factor
