"""The solve's end steps in the rig's space: re-aims, exact reach, the least change (rig
IK) and full-body FABRIK where a goal stays short."""

from __future__ import annotations

import numpy as np

from .. import exact_reach, fabrik, reach_bounds, rig_ik
from ..normalize import (
    set_bone_lengths_unchecked,
)
from ..skeleton import NUM_JOINTS
from .constants import (
    _ARM_FULL_REACH,
    _ARM_STRAIGHTEST,
    _HAND_ARM_BONES,
    _HAND_GOALS,
    _LEAST_CHANGE_HOLD,
    _MOVED_LIMBS,
    _REFINED_STRAIGHTEST,
    _STANCE,
    CLASSIC_TOLERANCE,
    LEAST_BEND_DRAG_M,
    LEAST_CHANGE_STAY_DECAY,
    LEAST_CHANGE_STEPS,
    MISS_NOTE_M,
    MOVED_M,
    PAST_REACH_SPAN,
    REACH_TOLERANCE,
)
from .request import _moved, effector_errors


def _reaim_bent(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                lengths: np.ndarray, tolerance: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """:func:`.exact_reach.solve` with each hand goal's elbow bent by at least
    :data:`ELBOW_MIN_BEND_DEG` where the goal allows, then straighter where a hand goal
    lies beyond that (a dragged one, of ``moved`` (B, 21), bending again as its target
    lies past the arm's length: :func:`_past_reach`)."""
    return _reaim_both(pose, goals, targets, lengths, tolerance, moved)[1]


def _reaim_both(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                lengths: np.ndarray, tolerance: np.ndarray, moved: np.ndarray,
                straightest: float | np.ndarray = _ARM_STRAIGHTEST
                ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_reaim_bent`'s two passes: the elbows bent (``bent`` limits the hands' arms
    alone; ``straightest``, or per pose and joint (B, 21)), then the answer."""
    hands = goals & _HAND_GOALS
    bent = exact_reach.solve(pose, goals, targets, lengths, tolerance,
                             straightest=straightest, bent=hands)
    if not hands.any():  # (two arrays: a caller writes into the answer)
        return bent, bent.copy()
    dragged = hands & moved
    return bent, exact_reach.solve(bent, goals, targets, lengths, tolerance,
                                   straightest=_past_reach(bent, dragged, targets, lengths),
                                   bent=dragged)


def _past_reach(pose: np.ndarray, dragged: np.ndarray, targets: np.ndarray,
                lengths: np.ndarray) -> float | np.ndarray:
    """(B, 21) how straight each ``dragged`` hand's arm may go: fully where its target is
    within the arm's length of the shoulder in ``pose``, then less the further past that
    it lies, down to :data:`FULL_REACH_BEND_DEG` at :data:`PAST_REACH_SPAN` of the arm
    past it (a bend that appeared at the arm's length would snap the elbow out); 1 where
    no hand is dragged."""
    hands = exact_reach._HANDS
    if not dragged[:, hands].any():
        return 1.0
    past = _arm_shares(targets[:, hands], pose, lengths) - 1.0
    out = np.ones(dragged.shape)
    out[:, hands] = 1.0 - np.clip(past, 0.0, PAST_REACH_SPAN) * _BEND_PER_PAST
    return out


_BEND_PER_PAST = (1.0 - _ARM_FULL_REACH) / PAST_REACH_SPAN


def _arm_shares(points: np.ndarray, pose: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(B, 2) each arm's shoulder in ``pose`` to ``points`` (B, 2, 3) (its hand, or its
    hand's target) as a share of the arm's length (0 for an arm without bones)."""
    arm = lengths @ exact_reach._ARM_REACH
    to_points = points - pose[:, exact_reach._SHOULDERS]
    reach = np.sqrt(np.add.reduce(to_points * to_points, -1))
    return np.divide(reach, arm, out=np.zeros_like(reach), where=arm > 0.0)


def limbs_straightest(start: np.ndarray, goals: np.ndarray, moved: np.ndarray,
                      targets: np.ndarray, lengths: np.ndarray, tolerance: np.ndarray,
                      least: np.ndarray) -> float | np.ndarray:
    """How straight a bent re-aim may leave each two-bone limb of the ``goals`` (B, 21)
    whose least bend is ``least`` (21,), as a share of its length: that, or (B, 21) where
    the limb is straighter in ``start``: a held one as straight as it is, a dragged one
    (of ``moved``) less so the further its target (B, 21, 3) lies from where its end was,
    down to ``least`` at :data:`LEAST_BEND_DRAG_M` (model metres; ``tolerance`` (B,), rig
    units, gives the scale)."""
    asked = goals[:, _LIMB_ENDS]
    if not asked.any():
        return least
    to_end = start.swapaxes(1, 2) @ _LIMB_VECTORS  # (B, 3, limbs): start -> end
    span = lengths @ _LIMB_SPANS
    own = np.sqrt(np.add.reduce(to_end * to_end, axis=1)) / np.where(span > 0.0, span, np.inf)
    limit = least[_LIMB_ENDS]
    if not (asked & (own > limit)).any():  # (bent as much already: the rule as it is)
        return least
    own = np.maximum(own, limit)
    drag = np.sqrt(np.add.reduce((targets[:, _LIMB_ENDS] - start[:, _LIMB_ENDS]) ** 2,
                                 axis=-1)) * (REACH_TOLERANCE / tolerance)[:, None]
    share = np.minimum(drag / LEAST_BEND_DRAG_M, 1.0)
    # (in bend angles, a share being the cosine of half the bend: the least bend grows
    # in step with the drag)
    bend = 2.0 * np.arccos(np.minimum(own, 1.0))
    bend += (2.0 * np.arccos(limit) - bend) * share
    out = np.repeat(least[None], len(start), axis=0)
    out[:, _LIMB_ENDS] = np.where(moved[:, _LIMB_ENDS], np.cos(0.5 * bend), own)
    return out


_LIMB_ENDS = exact_reach._END[exact_reach._LIMBS]  # hands and ankles
_LIMB_MIDS = exact_reach._MID[exact_reach._LIMBS]
_LIMB_STARTS = exact_reach._START[exact_reach._LIMBS]
_LIMB_SPANS = exact_reach._sums(*np.stack([_LIMB_MIDS, _LIMB_ENDS], axis=1))  # (21, limbs)
_LIMB_VECTORS = np.zeros((NUM_JOINTS, len(_LIMB_ENDS)))  # pose.T @ it: each limb's start -> end
_LIMB_VECTORS[_LIMB_ENDS, np.arange(len(_LIMB_ENDS))] = 1.0
_LIMB_VECTORS[_LIMB_STARTS, np.arange(len(_LIMB_ENDS))] = -1.0


def _reach_exactly(out: np.ndarray, start: np.ndarray, mask: np.ndarray, t: np.ndarray,
                   w: np.ndarray, lengths: np.ndarray, tolerance: np.ndarray,
                   fallback: bool = True, use_fabrik: bool = True) -> np.ndarray:
    """The full-weight effectors and pins exactly on their targets (to ``tolerance`` (B,),
    in rig units) from the refined pose, keeping the rig's bone lengths (a hand goal's
    elbow bent by :data:`ELBOW_MIN_BEND_DEG` where the goal allows). A pose whose goals
    stay out of reach from there is finished by :func:`.rig_ik.solve` from the re-aim, the
    least change, which a Live drag update (``fallback=False``) runs too, so the pose it
    shows is the one its pause keeps: FABRIK's answers from elsewhere jumped when the
    drag paused (the latency suite's CMU drags: 9 of 60 by over 5 mm, 3-6 cm, the update
    before showing a hand 0.4-2.9 cm short, while rig IK finished misses under 1 mm only;
    1 of 60 now). Where its steps stop over 1 mm short, the pause takes rig-shaped
    FABRIK's answer from the refined pose (its bends carry over), or classic FABRIK's
    from the start pose where that one reaches closer, then rig IK's last millimetres:
    where some pose of the rig reaches every goal, the edit never reaches less than
    classic IK. Where none does
    (goals further apart than the rig's bones stretched in line,
    :func:`.reach_bounds.beyond_reach`, by over :data:`MISS_NOTE_M` on the models' body:
    the targets the notes name), rig IK leans towards those targets pulled back onto the
    bound (:func:`.reach_bounds.pulled_within`), taken where it holds the held goals and
    comes nearer the moved ones than the re-aim, the re-aimed pose otherwise; FABRIK does
    not run there: it would only strain the whole body towards a goal it cannot reach
    either. A dragged hand that only the
    straightened re-aim reaches (its elbow straighter than :data:`ELBOW_MIN_BEND_DEG`)
    takes rig IK's lean from the bent re-aim too, where that reaches: the elbow does not
    straighten and then re-bend where rig IK begins. ``use_fabrik=False``: rig IK alone,
    as a drag update (a propagation's smoothed frames: FABRIK from the start pose twisted
    a chest 40 degrees where a neighbouring frame's stayed), its goals re-aimed plainly: the
    elbows' bent re-aim turned a clavicle towards a hand a smoothed frame left a millimetre
    off, and the elbow kinked against the edited frame's (spread edits on CMU and Bandai
    Namco test clips over 1.1x their clip's largest acceleration: 18 of 120, 6 since)."""
    full = (mask > 0) & (w >= 1.0)
    if not full.any():
        return out
    moved = full & _moved(full, t, start, (tolerance * (MOVED_M / REACH_TOLERANCE))[:, None])
    if use_fabrik:
        bent, reaimed = _reaim_both(out, full, t, lengths, tolerance, moved,
                                    limbs_straightest(start, full, moved, t, lengths, tolerance,
                                                      _REFINED_STRAIGHTEST))
    else:  # a settled frame: its elbows are its solve's, smoothed; a plain re-aim keeps them
        # (a dragged arm no straighter than in the solve)
        dragged = moved & _HAND_GOALS
        reaimed = exact_reach.solve(out, full, t, lengths, tolerance,
                                    straightest=_past_reach(out, dragged, t, lengths),
                                    bent=dragged)
        bent = reaimed.copy()
    return _reach_rest(out, bent, reaimed, start, full, moved, t, lengths, tolerance,
                       fallback, use_fabrik)


def _reach_rest(out: np.ndarray, bent: np.ndarray, reaimed: np.ndarray, start: np.ndarray,
                full: np.ndarray, moved: np.ndarray, t: np.ndarray, lengths: np.ndarray,
                tolerance: np.ndarray, fallback: bool = True, use_fabrik: bool = True
                ) -> np.ndarray:
    """:func:`_reach_exactly` after its re-aims (``bent``, the hands' elbows bent, and
    ``reaimed``, written into) of ``out``, for the goals ``full`` (B, 21), of which
    ``moved`` are off their joints in ``start``."""
    errors = effector_errors(reaimed, t, full)
    reaim_miss = errors.max(axis=1)
    dragged_hands = moved & _HAND_GOALS
    # A dragged hand the bent re-aim leaves short and the straightened one reaches: rig IK
    # leans with its elbow kept there too, as where the straightened one falls short (a
    # hand dragged out of a Rigify A-pose straightened its arm, then re-bent the elbow 18
    # degrees where rig IK began: a 40 mm step between two drag updates). A propagation's
    # settled frame (``use_fabrik=False``) keeps the straightened re-aim where it reaches:
    # rig IK from the bent one put neighbouring frames' elbows centimetres apart (spread
    # edits on CMU and Bandai Namco test clips: 22 of 120 over 1.1x their clip's largest
    # acceleration, 20 since).
    straightened = use_fabrik & (reaim_miss <= tolerance) & (
        effector_errors(bent, t, dragged_hands) > tolerance[:, None]).any(axis=1)
    left = np.flatnonzero((reaim_miss > tolerance) | straightened)
    if left.size:  # the least change first: a drag update and its pause take it alike
        goals, targets, tol = full[left], t[left], tolerance[left]
        near = tol * (MISS_NOTE_M / REACH_TOLERANCE)
        # Targets beyond the rig's reach from the other goals (by over the notes'
        # threshold): it leans towards them as far as the bound allows, their aims pulled
        # back onto it (dropping the lean there, a hand dragged out straightened the body
        # back up in one update).
        reach = reach_bounds.beyond_reach(start[left], goals, targets)
        beyond = reach[0].max(axis=1) > near
        aims = reach_bounds.pulled_within(start[left], goals, targets, tol, reach=reach) \
            if beyond.any() else targets
        # From the elbows' bent re-aim, a dragged hand's elbow kept: rig IK from the
        # straightened arm (or free to straighten it) reached a T-pose's far target with
        # the arm locked straight, where FABRIK's answer leaned with the elbow bent.
        # (A dragged hand's arm bones: its elbow's bend kept; its wrist turns nothing.)
        # The stance is held where the edit started from, or, for a propagation's settled
        # frame, where the smoothing put it: held at the clip's own pose, a settled
        # neighbour's pelvis went back a centimetre from the edited frame's and the hips
        # jumped there (Bandai Namco's BVH clips, every end held: 8.3x a still clip's own
        # largest acceleration, 5.0x since).
        polished = rig_ik.solve(bent[left], goals, aims, tol,
                                LEAST_CHANGE_STEPS if use_fabrik else rig_ik.ITERATIONS,
                                stay_decay=LEAST_CHANGE_STAY_DECAY,
                                frozen=dragged_hands[left] @ _HAND_ARM_BONES > 0,
                                rest=np.where((_STANCE & (moved[left] @ _MOVED_LIMBS == 0))
                                              [..., None], (start if use_fabrik else out)[left],
                                              bent[left]),
                                stay_scale=_LEAST_CHANGE_HOLD)
        polished = _reaim_bent(polished, goals, targets,
                               np.broadcast_to(lengths, full.shape)[left], tol, moved[left])
        polished_errors = effector_errors(polished, targets, goals)
        miss = polished_errors.max(axis=1)
        # Taken where it stops within the notes' threshold (a step short of the tolerance
        # is no reason for FABRIK's pose centimetres away: one pose of the units test
        # stopped a step short in metres and not in centimetres); a drag update shows its
        # steps' pose wherever nearer than the re-aim's (the pause's steps are the same).
        # Where the straightened re-aim reaches, both take the steps' pose only where it
        # reaches too, and keep the re-aim's otherwise (no FABRIK). Beyond reach, both
        # take it where it holds the held goals and comes nearer the moved ones than the
        # re-aim; FABRIK would only strain the whole body towards goals it cannot reach
        # either.
        held = goals & ~moved[left]
        leans = beyond & (np.where(held, polished_errors, 0.0).max(axis=1) <= tol) & (
            np.where(moved[left], polished_errors, 0.0).max(axis=1)
            < np.where(moved[left], errors[left], 0.0).max(axis=1))
        taken = np.where(beyond, leans, (miss <= near) if fallback
                         else (miss < reaim_miss[left]) | (miss <= near))
        reaimed[left[taken]] = polished[taken]
        left = left[(miss > near) & ~straightened[left] & ~beyond]
    if not left.size or not (fallback and use_fabrik):
        return reaimed
    return _fabrik_stage(out, reaimed, start, full, moved, t, lengths, tolerance, left)


def _fabrik_stage(out: np.ndarray, reaimed: np.ndarray, start: np.ndarray, full: np.ndarray,
                  moved: np.ndarray, t: np.ndarray, lengths: np.ndarray,
                  tolerance: np.ndarray, left: np.ndarray) -> np.ndarray:
    """:func:`_reach_rest`'s last stage for the poses ``left`` (indices) its least change
    leaves over the notes' threshold short: FABRIK's answers, then rig IK's last
    millimetres (``reaimed`` written into)."""
    miss = _fabrik_answers(reaimed, out, start, full, moved, t, lengths, tolerance, left)
    # Rig-shaped FABRIK converges slowly where the trunk must bend to reach with the feet
    # held: Gauss-Newton steps on the rig's bone turns take the last millimetres. Their
    # answer is taken where it reaches every goal to within the note's threshold; where
    # no rig pose reaches them all, the steps' least-squares answer leaves the held goals
    # (pins, planted feet) off too: those are re-aimed onto theirs, and that answer is
    # taken where it holds them and comes nearer the others.
    short = np.flatnonzero(miss > tolerance[left])
    if short.size:
        rows = left[short]
        goals, targets, tol = full[rows], t[rows], tolerance[rows]
        polished = rig_ik.solve(reaimed[rows], goals, targets, tol)
        errors = effector_errors(polished, targets, goals)
        near = np.minimum(miss[short], tol * (MISS_NOTE_M / REACH_TOLERANCE))
        taken = errors.max(axis=1) < near
        off = np.flatnonzero(~taken)
        if off.size:
            polished[off] = _reaim_bent(polished[off], goals[off], targets[off],
                                        np.broadcast_to(lengths, full.shape)[rows[off]],
                                        tol[off], moved[rows[off]])
            errors = effector_errors(polished[off], targets[off], goals[off])
            held = goals[off] & ~moved[rows[off]]
            taken[off] = ((np.where(held, errors, 0.0).max(axis=1) <= tol[off])
                          & (errors.max(axis=1) < miss[short[off]]))
        reaimed[rows[taken]] = polished[taken]
    return reaimed


def _fabrik_answers(reaimed: np.ndarray, out: np.ndarray, start: np.ndarray,
                    full: np.ndarray, moved: np.ndarray, t: np.ndarray, lengths: np.ndarray,
                    tolerance: np.ndarray, left: np.ndarray) -> np.ndarray:
    """:func:`_reach_exactly`'s FABRIK stage for its ``left`` rows, in ``reaimed`` (in
    place): the (B,) largest miss of each answer taken."""
    # Both FABRIK runs in one batch (rows are independent): from the refined pose before
    # the re-aim (a limb pulled straight at a target out of its reach would stay straight
    # through FABRIK; the refined bend carries over), to its own tolerance; from the start
    # pose, to FABRIK's own tolerance. Rig-shaped, as a rig's pelvis and chest are rigid:
    # classic FABRIK moves the rest of the body less (one hand dragged 10-25 cm, 300 CMU
    # test poses: other joints 1.66 cm against 1.87) but a rig cannot take its answers (as
    # a rig shows them, 20 % of those drags missed by over 1 mm, 1 % here). The last
    # millimetres are put right by the analytic re-aim.
    k = len(left)
    twice = lambda a: np.concatenate([a[left], a[left]])  # noqa: E731 - local shorthand
    goals, targets = twice(full), twice(t)
    rig_lengths = twice(np.broadcast_to(lengths, full.shape))
    tol = np.concatenate([tolerance[left], tolerance[left] * CLASSIC_TOLERANCE])
    # A hand goal's arm goes into FABRIK as long as it reaches with its elbow bent (the
    # trunk bends the rest of the way), gets its own lengths back, and is re-aimed with
    # that bend, straighter only where the goal lies beyond it, as above. With full-length
    # arms FABRIK pulled them straight: both hands dragged 10-25 cm (300 CMU test poses,
    # a third of them ending here) left 31 % of poses with a joint angle out of the data's
    # range, classic FABRIK 31 %; 19 % now, the other joints moving 2.44 -> 2.52 cm.
    bent_arms = np.where(goals @ _HAND_ARM_BONES > 0, _ARM_STRAIGHTEST, 1.0)
    first = fabrik.solve(np.concatenate([out[left], start[left]]), goals, targets,
                         rig_lengths * bent_arms, fabrik.RIG_SHAPED_ITERATIONS, tol,
                         rig_shaped=True)
    both = _reaim_bent(set_bone_lengths_unchecked(first, rig_lengths), goals, targets,
                       rig_lengths, twice(tolerance), twice(moved))
    miss = effector_errors(both, targets, goals).max(axis=1)
    refined, classic = both[:k], both[k:]
    take = (miss[:k] > tolerance[left]) & (miss[k:] < miss[:k])
    reaimed[left] = np.where(take[:, None, None], classic, refined)
    return np.where(take, miss[k:], miss[:k])
