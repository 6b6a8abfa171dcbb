"""The last millimetres: put full-weight effectors exactly on their targets, from a pose the
refinement has brought within reach, keeping every bone length.

Hands and ankles are placed by an analytic two-bone re-aim of the two bones above them
(upper arm and forearm, thigh and shin) from where the limb starts, bending in the limb's
current plane; a toe is turned about its ankle; what hangs below a moved joint follows it
rigidly. Every move keeps the pelvis and chest the rigid bones a rig has
(:mod:`.rigid_branches`): where a held ankle is beyond its straight leg's reach, or a head
goal beyond the whole trunk's from the spine joint, the whole body settles onto its feet or
leans into the head goal by the least shift; a hand beyond its arm's reach first turns
its clavicle towards the goal; the head's two bones are the chest's (chest -> neck) and the
neck's, the first turning the whole chest branch before the arms are re-aimed, and a head
goal beyond the neck's reach from the chest first bends the trunk at the spine joint.
A goal still off after this (another effector joint: a pelvis, a spine, an elbow; or a
limb end beyond its limb's reach) is the caller's: the engine runs rig-shaped FABRIK for
those poses and this re-aim once more (``pipeline.finish._reach_exactly``).
Everything is batched over poses; the loop runs over the few limb types.
"""

from __future__ import annotations

import numpy as np

from . import native
from .quaternions import norm
from .skeleton import ANCESTORS, END_JOINTS, JOINT_INDEX, PARENTS

_EPS = 1e-12
_SLACK = 1e-9  # of a limb's length: how far from fully straight or folded a limb stays
_LIMB_ENDS = tuple(JOINT_INDEX[j] for j in END_JOINTS)
_TOE_OF = {JOINT_INDEX["l_foot"]: JOINT_INDEX["l_toe"], JOINT_INDEX["r_foot"]: JOINT_INDEX["r_toe"]}


def _clip(v: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """np.clip without its overhead (a few microseconds a call on these small arrays)."""
    return np.minimum(np.maximum(v, low), high)


_END = np.array(_LIMB_ENDS)
_MID = PARENTS[_END]
_START = PARENTS[_MID]
_TOE = np.array([_TOE_OF.get(int(e), -1) for e in _END])  # the toe below an ankle, or -1
_SPINE, _CHEST, _NECK, _HEAD = (JOINT_INDEX[j]
                              for j in ("spine", "chest", "neck", "head"))
_LIMBS = np.flatnonzero(_END != _HEAD)  # the limb types re-aimed by two bones of their own
_LEG_ENDS = np.array([JOINT_INDEX["l_foot"], JOINT_INDEX["r_foot"]])
_LEG_MIDS, _LEG_STARTS = PARENTS[_LEG_ENDS], PARENTS[PARENTS[_LEG_ENDS]]
_CLAVICLES, _SHOULDERS, _ELBOWS, _HANDS = (
    np.array([JOINT_INDEX[f"{side}_{j}"] for side in "lr"])
    for j in ("clavicle", "upperarm", "forearm", "hand"))
_ARM_INNER = np.stack([_CLAVICLES, _SHOULDERS, _ELBOWS], axis=-1)  # (2, 3): goals there fix it
_ARM_JOINTS = tuple(np.flatnonzero(ANCESTORS[:, s] > 0) for s in _SHOULDERS)  # what a shrug moves
# Goals on these joints fix the body's place themselves: no settling onto the feet then.
_BODY = np.array(sorted(set(range(len(PARENTS))) - set(_LIMB_ENDS) - set(_TOE_OF.values())
                        - {JOINT_INDEX["pelvis"]}))
_SETTLE_SLACK = 1e-6  # of a leg's length: the settled hip stays this far inside its reach
# The settling shift: alternating projections until every held point is within reach (to
# half the slack), at most _SETTLE_PASSES passes, each pose stopping early where its largest
# overshoot has not halved in _SETTLE_STALL passes (goals no shift reaches together: a far
# head over held feet). Four passes for the whole batch had left a foot millimetres out
# where a lean pulls against it (a head dragged 13 cm sideways over planted feet on Bandai
# Namco's skeleton: 5.2 mm after 4 passes, 0.7 after 10, 0 after 50), so the lean was
# dropped and the head stopped 3.6 cm short. Drag benchmark, head dragged 5-40 cm, reached:
# CMU test poses 51.7 -> 58.0 % (48.3 -> 55.3 % with the other ends held), Bandai Namco's
# BVH skeleton 49.5 -> 54.8 % (39.5 -> 43.0 %); most of the rest lift the head above what
# straight legs allow. Over-relaxed steps reached a little more but leaned further than
# needed (5.9 cm where 3.5 cm did).
_SETTLE_PASSES = 100
_SETTLE_STALL = 10
_TRUNK = np.flatnonzero(ANCESTORS[:, _CHEST] > 0)  # the chest and all it carries
_TRUNK_BONES = np.array([_CHEST, _NECK, _HEAD])  # spine -> chest -> neck -> head
# What _settle holds with the head: the ankles and the head, reached from the hips and the
# spine joint (made once: np.r_ costs tens of microseconds a call).
_HELD_ENDS, _HELD_FROMS = np.r_[_LEG_ENDS, _HEAD], np.r_[_LEG_STARTS, _SPINE]


def _sums(*groups: np.ndarray) -> np.ndarray:
    """(21, K): column k sums the bone lengths of ``groups[k]``; ``lengths @ it`` gives
    every reach in one product (the checks below run on every solve, mostly to find
    nothing to do: gathers cost microseconds each)."""
    out = np.zeros((len(PARENTS), len(groups)))
    for k, bones in enumerate(groups):
        out[bones, k] = 1.0
    return out


_LEG_REACH = _sums(*np.stack([_LEG_MIDS, _LEG_ENDS], axis=1))  # thigh -> ankle, each leg
_HELD_REACH = np.concatenate([_LEG_REACH, _sums(_TRUNK_BONES)], axis=1)  # and spine -> head
_ARM_REACH = _sums(*np.stack([_ELBOWS, _HANDS], axis=1))  # shoulder -> wrist, each arm
_NECK_REACH = _sums(np.array([_NECK, _HEAD]))[:, 0]  # chest -> head
_ABOVE_CHEST = _TRUNK[_TRUNK != _CHEST]  # neck, head, clavicles and arms
_YZX, _ZXY = np.array([1, 2, 0]), np.array([2, 0, 1])  # cross products by index
_DIAG = np.arange(3)
_REACH_MARGIN = 1e-6  # m: a goal this close to the neck's full reach counts as beyond it


def _bend(s: np.ndarray, a: np.ndarray, target: np.ndarray, l1: np.ndarray, l2: np.ndarray,
          straightest: float | np.ndarray = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Two segments, start ``s`` -> middle ``a`` (length ``l1``) -> end (``l2``), re-aimed
    from ``s`` so the end reaches ``target`` as near as their lengths allow (and no
    straighter than ``straightest``), bending in the plane of their current bend: the new
    middle and end (B, 3) each."""
    to_t = target - s
    d = norm(to_t)
    u = to_t / np.maximum(d, _EPS)[:, None]
    # Never straighter than asked, never shorter than the shortest reach |l1 - l2|: with a
    # zero-length bone (a neck on the chest) that reach is the whole range, which the slack
    # and a straightness bound would otherwise stretch or shrink the other bone to.
    shortest = np.abs(l1 - l2)
    high = np.maximum((l1 + l2) * np.minimum(1.0 - _SLACK, straightest), shortest)
    d = _clip(d, np.minimum(shortest + _SLACK * (l1 + l2), high), high)
    # The bend direction: the middle joint's offset from the start-target line (any
    # perpendicular when the limb is straight along it).
    side = (a - s) - u * np.add.reduce((a - s) * u, -1, keepdims=True)
    side_n = norm(side)
    straight = side_n < _SLACK * l1
    if straight.any():
        side[straight] = np.stack([np.zeros(straight.sum()), u[straight, 2], -u[straight, 1]], 1)
        side_n = norm(side)
    side /= np.maximum(side_n, _EPS)[:, None]
    cos_a = _clip((l1 * l1 + d * d - l2 * l2) / np.maximum(2.0 * l1 * d, _EPS * _EPS),
                  -1.0, 1.0)
    new_a = s + l1[:, None] * (cos_a[:, None] * u + np.sqrt(1.0 - cos_a * cos_a)[:, None] * side)
    return new_a, s + u * d[:, None]


def _two_bone(p: np.ndarray, rows: np.ndarray, limb: np.ndarray, target: np.ndarray,
              lengths: np.ndarray, straightest: float | np.ndarray = 1.0) -> None:
    """Re-aim the two bones above each (row, limb end) pair in place to put the end on its
    target; a toe below a moved ankle goes along."""
    end, mid, start = _END[limb], _MID[limb], _START[limb]
    g = p[rows, end]
    new_a, new_g = _bend(p[rows, start], p[rows, mid], target, lengths[rows, mid],
                         lengths[rows, end], straightest)
    p[rows, mid] = new_a
    p[rows, end] = new_g
    toe = _TOE[limb]
    below = toe >= 0
    if below.any():
        p[rows[below], toe[below]] += (new_g - g)[below]


def _rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(B, 3, 3) the smallest rotations taking the directions of ``a`` to those of ``b``
    (B, 3): ``I + [v]x + [v]x^2 / (1 + c)`` with ``v = a x b``, ``c = a . b`` (the turns
    here are small; opposite directions would have no smallest one). A zero vector has no
    direction (a zero-length bone: CMU's ASF-converted skeletons put the neck and the
    clavicles on the chest): the identity, as turning such a bone moves nothing."""
    na, nb = norm(a), norm(b)
    flat = (na <= _EPS) | (nb <= _EPS)
    if flat.any():
        a, b = a.copy(), b.copy()
        a[flat] = b[flat] = (1.0, 0.0, 0.0)
        na, nb = np.where(flat, 1.0, na), np.where(flat, 1.0, nb)
    a = a / na[:, None]
    b = b / nb[:, None]
    v = a[:, _YZX] * b[:, _ZXY] - a[:, _ZXY] * b[:, _YZX]
    cos = np.add.reduce(a * b, axis=-1)
    # [v]x^2 = v v^T - |v|^2 I, and |v|^2 = 1 - c^2: I + [v]x + [v]x^2 / (1 + c)
    # = c I + [v]x + v v^T / (1 + c).
    out = v[:, :, None] * (v / np.maximum(1.0 + cos, _EPS)[:, None])[:, None, :]
    out[:, _DIAG, _DIAG] += cos[:, None]
    out[:, _ZXY, _YZX] += v
    out[:, _YZX, _ZXY] -= v
    return out


def _turn_about(p: np.ndarray, rows: np.ndarray, pivot: int, joints: np.ndarray,
                old: np.ndarray, new: np.ndarray) -> None:
    """Turn ``joints`` of ``rows`` about the ``pivot`` joint, in place, by the smallest
    rotation taking the direction ``old`` to ``new`` (B, 3) each."""
    centre = p[rows, pivot][:, None]
    turn = _rotation(old, new)
    turned = (p[rows][:, joints] - centre) @ turn.transpose(0, 2, 1)
    p[rows[:, None], joints[None]] = centre + turned


def _bend_spine_to_head(p: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                        lengths: np.ndarray) -> bool:
    """Where the head's goal lies beyond the neck's reach from the chest (a neck is nearly
    straight), bend the trunk at the spine joint, in place: the spine -> chest and
    chest -> head segments, each rigid, re-aimed as a two-bone limb from the spine joint
    (the chest and all it carries turn about the spine joint, then about the chest). The
    pelvis and hips stay, so held feet stay in reach. The head's re-aim then has the last
    millimetres to do. True where it bent a trunk."""
    head_goal = goals[:, _HEAD]
    if not head_goal.any():
        return False
    far = head_goal & (norm(targets[:, _HEAD] - p[:, _CHEST])
                       > lengths @ _NECK_REACH - _REACH_MARGIN)
    if not far.any():
        return False
    rows = np.flatnonzero(far)
    spine, chest, head = p[rows, _SPINE], p[rows, _CHEST], p[rows, _HEAD]
    goal = targets[rows, _HEAD]
    new_chest, _ = _bend(spine, chest, goal, norm(chest - spine), norm(head - chest))
    _turn_about(p, rows, _SPINE, _TRUNK, chest - spine, new_chest - spine)
    chest, head = p[rows, _CHEST], p[rows, _HEAD]
    _turn_about(p, rows, _CHEST, _ABOVE_CHEST, head - chest, goal - chest)
    return True


def _least_shift(start: np.ndarray, goal: np.ndarray, reach: np.ndarray, held: np.ndarray
                 ) -> np.ndarray:
    """(B, 3) a small shift bringing each held ``start`` point (B, K, 3) within ``reach``
    (B, K) of its ``goal`` where one does (see :data:`_SETTLE_PASSES`; two or three
    constraints). Each pose stops on its own: one whose goals no shift reaches does not
    hold back the others of a batch."""
    shift = np.zeros((len(start), 3))
    done = 0.5 * _SETTLE_SLACK * reach
    going = np.ones(len(start), dtype=bool)
    history: list[np.ndarray] = []
    for _ in range(_SETTLE_PASSES):
        worst = np.full(len(start), -np.inf)
        for k in range(start.shape[1]):
            away = start[:, k] + shift - goal[:, k]
            d = norm(away)
            over = np.where(held[:, k] & going, np.maximum(d - reach[:, k], 0.0), 0.0)
            shift -= away * (over / np.maximum(d, _EPS))[:, None]
            worst = np.maximum(worst, over - done[:, k])
        going &= worst > 0.0  # a pose with every point within reach is done
        if len(history) >= _SETTLE_STALL:  # and one whose overshoot has not halved
            going &= worst <= 0.5 * history[-_SETTLE_STALL]
        if not going.any():
            break
        history.append(worst)
    return shift


def _settle(p: np.ndarray, goals: np.ndarray, targets: np.ndarray, lengths: np.ndarray,
            straightest: float, head: bool) -> None:
    """Where a held ankle's goal lies beyond its leg's reach from the hip (a straight leg of
    a rest pose, with a pelvis the solve lifted by millimetres), or (with ``head``) the
    head's goal beyond the reach of the trunk from the spine joint (spine -> chest, neck
    and head bones in line), move the whole body, in place, by the least shift that brings
    them all within reach: the body settles onto its feet, or leans into a head goal a
    full-body request put a few millimetres beyond the refined trunk, instead of FABRIK
    pulling the hips out of the pelvis's shape or moving every joint (hands, feet and head
    pairs, CMU + Bandai set on Bandai Namco poses: 23 % of them ended in FABRIK for a head
    about 1 mm beyond the trunk). Held feet come first: a lean that would take a foot out
    of its leg's reach (a head dragged far over planted feet) is not made, and the head
    stops short of its goal as before. Only poses whose other goals are limb ends
    (re-aimed after this) or the pelvis move: held feet come before a dragged pelvis,
    which a rig cannot reach with them anyway."""
    ends = _HELD_ENDS if head else _LEG_ENDS
    froms = _HELD_FROMS if head else _LEG_STARTS
    held = goals[:, ends]
    if not held.any():
        return
    reach = (lengths @ (_HELD_REACH if head else _LEG_REACH)) \
        * min(1.0 - _SETTLE_SLACK, straightest)
    far = held & (norm(p[:, froms] - targets[:, ends]) > reach)
    if not far.any():  # the common case, checked first: every held goal within reach
        return
    rows = np.flatnonzero(far.any(axis=1) & ~goals[:, _BODY].any(axis=1))
    if not rows.size:
        return
    start, goal, reach, held = p[rows][:, froms], targets[rows][:, ends], reach[rows], held[rows]
    shift = _least_shift(start, goal, reach, held)
    if head:
        legs = len(_LEG_ENDS)
        off = held[:, :legs] & (norm(start[:, :legs] + shift[:, None] - goal[:, :legs])
                                > reach[:, :legs] * (1.0 + _SETTLE_SLACK))
        bad = off.any(axis=1)
        if bad.any():
            shift[bad] = _least_shift(start[bad, :legs], goal[bad, :legs],
                                      reach[bad, :legs], held[bad, :legs])
    moved = np.abs(shift).max(axis=1) > 0.0
    if moved.any():
        p[rows[moved]] += shift[moved, None]


def _shrug_to_hands(p: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                    lengths: np.ndarray, straightest: np.ndarray) -> None:
    """Where a hand's goal lies beyond its arm's reach from the shoulder, turn the clavicle
    (its own bone, from its start on the rigid chest) towards the goal by the least angle
    that brings the shoulder within reach, or as near as it gets, in place; the arm goes
    along. Only the arm moves, so this comes before anything that moves the body."""
    hands = goals[:, _HANDS] & ~goals[:, _ARM_INNER].any(axis=-1)
    if not hands.any():
        return
    reach = (lengths @ _ARM_REACH) * np.minimum(1.0 - _SETTLE_SLACK, straightest[:, _HANDS])
    to_goal = targets[:, _HANDS] - p[:, _SHOULDERS]
    rows, arm = np.nonzero(hands & (norm(to_goal) > reach))
    if not rows.size:
        return
    pivot, at = p[rows, _CLAVICLES[arm]], p[rows, _SHOULDERS[arm]]
    goal, reach = targets[rows, _HANDS[arm]], reach[rows, arm]
    radius = np.maximum(norm(at - pivot), _EPS)
    to_goal = goal - pivot
    dist = np.maximum(norm(to_goal), _EPS)
    u_goal = to_goal / dist[:, None]
    # The shoulder on its sphere about the clavicle's start, at the angle phi from the
    # goal's direction where it is exactly ``reach`` from the goal (law of cosines).
    cos_phi = _clip((radius * radius + dist * dist - reach * reach) / (2.0 * radius * dist),
                    -1.0, 1.0)
    u_now = (at - pivot) / radius[:, None]
    side = u_now - u_goal * np.add.reduce(u_now * u_goal, -1, keepdims=True)
    side /= np.maximum(norm(side), _EPS)[:, None]
    u_new = cos_phi[:, None] * u_goal + np.sqrt(1.0 - cos_phi * cos_phi)[:, None] * side
    for k in (0, 1):  # each side's arm joints (a fixed set per side)
        on = arm == k
        if on.any():
            _turn_about(p, rows[on], int(_CLAVICLES[k]), _ARM_JOINTS[k], u_now[on], u_new[on])


def _reaim_head(p: np.ndarray, rows: np.ndarray, target: np.ndarray, lengths: np.ndarray,
                straightest: float | np.ndarray = 1.0) -> None:
    """The head's two-bone re-aim from the chest, in place: the chest -> neck bone turns
    the whole chest branch (neck, clavicles, arms) as the rig's chest bone would, then the
    neck -> head bone takes the head to its target."""
    chest, neck = p[rows, _CHEST], p[rows, _NECK]
    new_neck, new_head = _bend(chest, neck, target, lengths[rows, _NECK],
                               lengths[rows, _HEAD], straightest)
    _turn_about(p, rows, _CHEST, _ABOVE_CHEST, neck - chest, new_neck - chest)
    p[rows, _NECK] = new_neck  # exact (the turn is the smallest one taking old to new)
    p[rows, _HEAD] = new_head


def beyond_limbs(pose: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(21,) the limb ends (hands, feet, the head) whose ``targets`` (21, 3) lie beyond
    their two bones' reach from the limb's start in ``pose`` (21, 3): a re-aim there would
    lock the limb straight and still fall short."""
    reach = norm(pose[_MID] - pose[_START]) + norm(pose[_END] - pose[_MID])
    out = np.zeros(len(PARENTS), dtype=bool)
    out[_END] = norm(targets[_END] - pose[_START]) > reach
    return out


def solve(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray, lengths: np.ndarray,
          tolerance: float | np.ndarray, straightest: float | np.ndarray = 1.0,
          bend_trunk: bool = True, bent: np.ndarray | None = None) -> np.ndarray:
    """``pose`` (B, 21, 3) with the ``goals`` (B, 21) joints on ``targets``, lengths kept,
    as near as the analytic re-aims get. ``straightest``: a two-bone limb's end stays
    within this share of the limb's length from its start (below 1: the elbow or knee
    keeps a bend, as real ones do; a hand's also bounds its clavicle's shrug), or per
    goal joint (21,) or per pose and joint (B, 21) with ``bent``; for the goals in
    ``bent`` (B, 21) if given (the others may straighten fully);
    ``bend_trunk=False``: a far head goal leaves the trunk, and a far hand the clavicle,
    as they are."""
    p = np.array(pose, dtype=np.float64)
    if lengths.shape != goals.shape:
        lengths = np.broadcast_to(lengths, goals.shape)
    tol = tolerance if isinstance(tolerance, np.ndarray) and tolerance.shape == goals.shape[:1] \
        else np.broadcast_to(np.asarray(tolerance, dtype=np.float64), goals.shape[:1])
    if (kernels := native.kernels()) is not None and (
            np.ndim(straightest) == 0 or bent is not None):
        return _solve_native(kernels, p, goals, targets, lengths, tol, straightest,
                             bend_trunk, bent)
    err = np.where(goals, norm(p - targets), 0.0)
    need = np.flatnonzero(err.max(axis=1, initial=0.0) > tol)
    if not need.size:
        return p
    if need.size < len(p):  # poses on their goals stay as they are, whatever the batch
        p[need] = solve(p[need], goals[need], targets[need], lengths[need], tol[need],
                        straightest if np.ndim(straightest) < 2 else straightest[need],
                        bend_trunk, None if bent is None else bent[need])
        return p
    straight = np.where(goals if bent is None else bent, straightest, 1.0)  # (B, 21)
    _settle(p, goals, targets, lengths, 1.0 if bent is not None else straightest, bend_trunk)
    if bend_trunk and _bend_spine_to_head(p, goals, targets, lengths):
        err = np.where(goals, norm(p - targets), 0.0)
    rows = np.flatnonzero(goals[:, _HEAD] & (err[:, _HEAD] > tol))
    if rows.size:
        _reaim_head(p, rows, targets[rows, _HEAD], lengths, straight[rows, _HEAD])
        err = np.where(goals, norm(p - targets), 0.0)
    if bend_trunk:
        _shrug_to_hands(p, goals, targets, lengths, straight)
    rows, limb = np.nonzero(goals[:, _END[_LIMBS]] & (err[:, _END[_LIMBS]] > tol[:, None]))
    if rows.size:
        limb = _LIMBS[limb]
        _two_bone(p, rows, limb, targets[rows, _END[limb]], lengths, straight[rows, _END[limb]])
    for ankle, toe in _TOE_OF.items():
        rows = np.flatnonzero(goals[:, toe])
        if rows.size:
            aim = targets[rows, toe] - p[rows, ankle]
            p[rows, toe] = p[rows, ankle] + aim * (lengths[rows, toe]
                                                   / np.maximum(norm(aim), _EPS))[:, None]
    return p


# The joints as the compiled kernel reads them (npe_native.c's L_* and M_* order).
_NATIVE_LAYOUT = np.ascontiguousarray(np.r_[
    _END[_LIMBS], _MID[_LIMBS], _START[_LIMBS], _TOE[_LIMBS], _SPINE, _CHEST, _NECK, _HEAD,
    _LEG_ENDS, _LEG_STARTS, _LEG_MIDS, _CLAVICLES, _SHOULDERS, _ELBOWS, _HANDS,
    [_TOE_OF[int(a)] for a in _LEG_ENDS]], dtype=np.int64)
_NATIVE_MASKS = np.zeros((5, len(PARENTS)), dtype=np.int64)
for _k, _joints in enumerate((_TRUNK, _ABOVE_CHEST, *_ARM_JOINTS, _BODY)):
    _NATIVE_MASKS[_k, _joints] = 1


def _solve_native(kernels: native.Kernels, p: np.ndarray, goals: np.ndarray,
                  targets: np.ndarray, lengths: np.ndarray, tol: np.ndarray,
                  straightest: float | np.ndarray, bend_trunk: bool,
                  bent: np.ndarray | None) -> np.ndarray:
    """:func:`solve` by the compiled kernel, pose by pose (the same steps in the same
    order)."""
    straight = np.where(goals if bent is None else bent, straightest, 1.0)
    scalar = float(straightest) if np.ndim(straightest) == 0 else 1.0
    arrays = [np.ascontiguousarray(a, dtype=t) for a, t in (
        (goals, np.int64), (np.broadcast_to(targets, p.shape), np.float64),
        (lengths, np.float64), (tol, np.float64), (straight, np.float64))]
    status = kernels.exact_reach(
        len(p), len(PARENTS), native.address(_NATIVE_LAYOUT), native.address(_NATIVE_MASKS),
        native.address(p), *(native.address(a) for a in arrays),
        1.0 if bent is not None else scalar, int(bend_trunk), _SLACK, _SETTLE_SLACK,
        _REACH_MARGIN, _SETTLE_PASSES, _SETTLE_STALL)
    if status != 0:
        raise RuntimeError(f"the exact-reach kernel refused a skeleton of {len(PARENTS)} joints")
    return p
