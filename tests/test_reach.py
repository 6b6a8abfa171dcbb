"""The exact-reach pass (core.reach) on synthetic rigs: full-weight effectors land exactly
where a two-bone limb allows, nothing else moves, bone lengths and bend planes are kept."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import reach
from blender_addon.core.reach import MappedRig
from blender_addon.core.rotations import positions_to_rotations, quat_normalize, quat_to_matrix
from blender_addon.core.skeleton import JOINT_INDEX, NUM_JOINTS
from tests.test_rotations import production_rig, random_quats

J = JOINT_INDEX
EXACT = 1e-9  # m: a goal within reach is met to rounding
HANDS_FEET = (J["l_hand"], J["r_hand"], J["l_foot"], J["r_foot"])
BEND = 0.9  # radians: elbows and knees of the target pose


def _problem(seed: int, frames: tuple[int, ...] = ()) -> tuple:
    """A rig, a start pose, and targets the rig cannot take exactly: a pose of the rig
    (elbows and knees bent, so the goals stay within reach) with the chest and pelvis
    targets pushed a centimetre or two (so the rigid fit leaves the limb starts off), and
    goals at the targets of hands and feet. Unmapped bones start as in that pose."""
    rig, joint_bones = production_rig(seed=seed)
    mapped = MappedRig(rig, tuple(joint_bones))
    rng = np.random.default_rng(seed)
    nb = rig.num_bones
    q_target = random_quats(rng, (*frames, nb), angle=0.5)
    for name in ("l_forearm", "r_forearm", "l_shin", "r_shin"):
        phi = rng.uniform(0.0, 2.0 * np.pi, frames)  # about an axis across the bone (+Y)
        axis = np.stack([np.cos(phi), np.zeros_like(phi), np.sin(phi)], axis=-1)
        q_target[..., joint_bones[J[name]], :] = np.concatenate(
            [np.full((*frames, 1), np.cos(BEND / 2)), np.sin(BEND / 2) * axis], axis=-1)
    loc = np.zeros((*frames, nb, 3))
    targets, _ = reach.joint_positions(mapped, q_target, loc)
    for j in ("chest", "neck", "l_clavicle", "r_clavicle", "l_thigh", "r_thigh"):
        targets[..., J[j], :] += rng.normal(scale=0.01, size=(*frames, 3))
    start_q = q_target.copy()
    mapped_bones = [b for b in joint_bones if b is not None]
    start_q[..., mapped_bones, :] = random_quats(rng, (*frames, len(mapped_bones)), angle=0.3)
    goals = {j: targets[..., j, :].copy() for j in HANDS_FEET}
    return mapped, start_q, loc, targets, goals


def _lengths(joints: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.array([np.linalg.norm(joints[..., a, :] - joints[..., b, :], axis=-1)
                     for a, b in pairs])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_goals_are_reached_and_nothing_else_moves(seed: int) -> None:
    mapped, q0, loc0, targets, goals = _problem(seed)
    fit_q, fit_loc = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones, targets)
    fit, _ = reach.joint_positions(mapped, fit_q, fit_loc)
    misses = [np.linalg.norm(fit[j] - g) for j, g in goals.items()]
    assert max(misses) > 1e-3  # the rigid fit alone misses: there is something to fix

    q, loc = reach.solve(mapped, q0, loc0, targets, goals)
    joints, _ = reach.joint_positions(mapped, q, loc)
    for j, goal in goals.items():
        assert np.linalg.norm(joints[j] - goal) < EXACT, j
    limbs = {J[n] for side in "lr" for n in (f"{side}_forearm", f"{side}_shin",
                                            f"{side}_hand", f"{side}_foot", f"{side}_toe")}
    still = [j for j in range(NUM_JOINTS) if j not in limbs]
    assert np.allclose(joints[still], fit[still], atol=EXACT)  # the limb tops included
    assert np.array_equal(loc, fit_loc)  # rotations only: every bone keeps its length
    limb_bones = [(J[f"{s}_upperarm"], J[f"{s}_forearm"]) for s in "lr"] + \
        [(J[f"{s}_forearm"], J[f"{s}_hand"]) for s in "lr"] + \
        [(J[f"{s}_thigh"], J[f"{s}_shin"]) for s in "lr"]
    assert np.allclose(_lengths(joints, limb_bones), _lengths(fit, limb_bones), atol=EXACT)
    assert np.allclose(np.linalg.norm(q, axis=-1), 1.0)


def test_the_limb_bends_in_its_own_plane() -> None:
    mapped, q0, loc0, targets, goals = _problem(3)
    fit_q, fit_loc = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones, targets)
    fit, _ = reach.joint_positions(mapped, fit_q, fit_loc)
    joints, _ = reach.joint_positions(mapped, *reach.solve(mapped, q0, loc0, targets, goals))
    for top, mid, end in (("l_upperarm", "l_forearm", "l_hand"),
                          ("r_thigh", "r_shin", "r_foot")):
        s = fit[J[top]]
        normal = np.cross(fit[J[mid]] - s, goals[J[end]] - s)
        normal /= np.linalg.norm(normal)
        assert abs(np.dot(joints[J[mid]] - s, normal)) < 1e-9


def test_the_second_pass_equals_a_full_refit() -> None:
    """Solving only the limbs gives what fitting every joint to the adjusted ones does."""
    mapped, q0, loc0, targets, goals = _problem(4)
    q, loc = reach.solve(mapped, q0, loc0, targets, goals)
    fit_q, fit_loc = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones, targets)
    fit, _ = reach.joint_positions(mapped, fit_q, fit_loc)
    adjusted = reach.reach_limbs(fit, {j: reach.find_limb(mapped, j, goals) for j in goals},
                                 goals)
    full_q, full_loc = positions_to_rotations(mapped.rig, fit_q, fit_loc, mapped.joint_bones,
                                              adjusted)
    ours, _ = reach.joint_positions(mapped, q, loc)
    full, _ = reach.joint_positions(mapped, full_q, full_loc)
    assert np.allclose(ours, full, atol=1e-9)


def test_unreachable_goal_points_the_straightened_limb_at_it() -> None:
    mapped, q0, loc0, targets, _ = _problem(5)
    fit_q, fit_loc = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones, targets)
    fit, _ = reach.joint_positions(mapped, fit_q, fit_loc)
    s = fit[J["l_upperarm"]]
    a = np.linalg.norm(fit[J["l_forearm"]] - s)
    b = np.linalg.norm(fit[J["l_hand"]] - fit[J["l_forearm"]])
    direction = np.array([0.3, 0.2, -0.9]) / np.linalg.norm([0.3, 0.2, -0.9])
    goal = s + 3.0 * (a + b) * direction
    joints, _ = reach.joint_positions(
        mapped, *reach.solve(mapped, q0, loc0, targets, {J["l_hand"]: goal}))
    reach_out = joints[J["l_hand"]] - s
    assert np.isclose(np.linalg.norm(reach_out), (1.0 - reach.LIMB_SLACK) * (a + b))
    assert np.allclose(reach_out / np.linalg.norm(reach_out), direction, atol=1e-6)


def test_orientation_of_the_end_bone_is_kept() -> None:
    mapped, q0, loc0, targets, goals = _problem(6)
    rng = np.random.default_rng(6)
    want = random_quats(rng, (1,), angle=2.0)[0]
    orientation = quat_to_matrix(want)
    hand = J["r_hand"]
    q, loc = reach.solve(mapped, q0, loc0, targets, goals, {hand: orientation})
    joints, world_r = reach.joint_positions(mapped, q, loc)
    assert np.linalg.norm(joints[hand] - goals[hand]) < EXACT
    assert np.allclose(world_r[mapped.joint_bones[hand]], orientation, atol=1e-9)


def test_goals_without_a_plain_limb_are_left_to_the_fit() -> None:
    mapped, q0, loc0, targets, _ = _problem(7)
    fit = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones, targets)
    head = J["head"]  # the chest above has three children: no two-bone limb
    assert reach.find_limb(mapped, head, {head: 0}) is None
    goals = {J["l_hand"]: targets[J["l_hand"]], J["l_forearm"]: targets[J["l_forearm"]]}
    assert reach.find_limb(mapped, J["l_hand"], goals) is None  # its elbow has a goal
    q, loc = reach.solve(mapped, q0, loc0, targets, {head: targets[head] + 0.5})
    assert np.array_equal(q, fit[0]) and np.array_equal(loc, fit[1])
    no_toes = MappedRig(mapped.rig, tuple(None if j == J["l_toe"] else b
                                          for j, b in enumerate(mapped.joint_bones)))
    assert reach.find_limb(no_toes, J["l_toe"], {}) is None


def test_batched_frames_equal_single_poses() -> None:
    mapped, q0, loc0, targets, goals = _problem(8, frames=(3,))
    q, loc = reach.solve(mapped, q0, loc0, targets, goals)
    for t in range(3):
        q_t, loc_t = reach.solve(mapped, q0[t], loc0[t], targets[t],
                                 {j: g[t] for j, g in goals.items()})
        assert np.allclose(quat_normalize(q[t]), quat_normalize(q_t), atol=1e-9)
        assert np.allclose(loc[t], loc_t, atol=1e-12)


def test_a_boneless_toe_sits_at_its_foot_tail() -> None:
    rig, joint_bones = production_rig(seed=9, toes=False)
    foot = joint_bones[J["l_foot"]]
    lengths = np.full(rig.num_bones, 0.12)
    mapped = MappedRig(rig, tuple(joint_bones), {J["l_toe"]: foot}, lengths)
    rng = np.random.default_rng(9)
    q = random_quats(rng, (2, rig.num_bones))
    joints, world_r = reach.joint_positions(mapped, q, np.zeros((2, rig.num_bones, 3)))
    tail = joints[:, J["l_foot"]] + 0.12 * world_r[:, foot, :, 1]
    assert np.allclose(joints[:, J["l_toe"]], tail)
    assert np.array_equal(joints[:, J["r_toe"]], np.zeros((2, 3)))  # unmapped: zero
    with pytest.raises(ValueError, match="lengths"):
        MappedRig(rig, tuple(joint_bones), {J["l_toe"]: foot})
    with pytest.raises(ValueError, match="21"):
        MappedRig(rig, tuple(joint_bones[:5]))


def test_a_straight_limb_bends_to_reach_a_nearer_goal() -> None:
    """The elbow on the line to the goal has no bend plane: the limb bends sideways."""
    joints = np.zeros((2, NUM_JOINTS, 3))
    top, mid, end = J["l_upperarm"], J["l_forearm"], J["l_hand"]
    joints[:, top] = (0.0, 0.0, 0.0)
    joints[:, mid] = (0.3, 0.0, 0.0)
    joints[:, end] = (0.55, 0.0, 0.0)
    goals = {end: np.array([[0.4, 0.0, 0.0], [0.0, 0.3, 0.2]])}  # on the line; elsewhere
    out = reach.reach_limbs(joints, {end: (mid, top)}, goals)
    assert np.allclose(out[:, end], goals[end], atol=1e-12)
    assert np.allclose(np.linalg.norm(out[:, mid] - out[:, top], axis=-1), 0.3)
    assert np.allclose(np.linalg.norm(out[:, end] - out[:, mid], axis=-1), 0.25)
    assert np.linalg.norm(np.cross(out[0, mid], [1.0, 0.0, 0.0])) > 0.1  # off the line
    others = [k for k in range(NUM_JOINTS) if k not in (mid, end)]
    assert np.array_equal(out[:, others], joints[:, others])


def test_rig_shaped_targets_are_reached_in_one_pass() -> None:
    """Targets the rig can take (the engine's answers): the limbs re-aimed on them before
    the fit give the two-pass answer, and that first fit already puts the goals exactly."""
    mapped, q0, loc0, _, _ = _problem(10, frames=(3,))
    rng = np.random.default_rng(10)
    q_pose = q0.copy()
    q_pose[..., list(filter(None, mapped.joint_bones)), :] = random_quats(
        rng, (3, sum(b is not None for b in mapped.joint_bones)), angle=0.4)
    targets, _ = reach.joint_positions(mapped, q_pose, loc0)  # a pose of the rig
    # Goals the limbs can reach: where the hands and feet go with the limbs bent otherwise.
    limb_bones = [mapped.joint_bones[J[f"{s}_{n}"]] for s in "lr"
                  for n in ("upperarm", "forearm", "thigh", "shin")]
    q_goal = q_pose.copy()
    q_goal[..., limb_bones, :] = random_quats(rng, (3, len(limb_bones)), angle=0.4)
    moved, _ = reach.joint_positions(mapped, q_goal, loc0)
    goals = {j: moved[..., j, :] for j in HANDS_FEET}
    limbs = {j: reach.find_limb(mapped, j, goals) for j in goals}
    one = positions_to_rotations(mapped.rig, q0, loc0, mapped.joint_bones,
                                 reach.reach_limbs(targets, limbs, goals))
    first, _ = reach.joint_positions(mapped, *one)
    for j, goal in goals.items():
        assert np.linalg.norm(first[..., j, :] - goal, axis=-1).max() < EXACT, j
    shaped, _ = reach.joint_positions(
        mapped, *reach.solve(mapped, q0, loc0, targets, goals, rig_shaped=True))
    two_pass, _ = reach.joint_positions(mapped, *reach.solve(mapped, q0, loc0, targets, goals))
    assert np.allclose(shaped, first, atol=1e-12)
    assert np.allclose(shaped, two_pass, atol=EXACT)


def test_a_boneless_toe_is_aimed_at_by_its_foot_bone() -> None:
    """A toe at its foot bone's tail (no toe bone) is reached like any joint: the foot bone
    turns to aim its tail at the toe's target (left to keep its local turn, it pitched
    with the shin)."""
    rig, joint_bones = production_rig(seed=11, toes=False)
    toes = {J["l_toe"]: joint_bones[J["l_foot"]], J["r_toe"]: joint_bones[J["r_foot"]]}
    mapped = MappedRig(rig, tuple(joint_bones), toes, np.full(rig.num_bones, 0.12))
    rng = np.random.default_rng(11)
    q_target = random_quats(rng, (2, rig.num_bones), angle=0.5)
    loc = np.zeros((2, rig.num_bones, 3))
    targets, _ = reach.joint_positions(mapped, q_target, loc)  # toes at the foot tails
    start = q_target.copy()
    mapped_bones = [b for b in joint_bones if b is not None]
    start[:, mapped_bones] = random_quats(rng, (2, len(mapped_bones)), angle=0.3)
    q, out_loc = reach.solve(mapped, start, loc, targets)
    assert q.shape == start.shape and out_loc.shape == loc.shape
    joints, _ = reach.joint_positions(mapped, q, out_loc)
    assert np.allclose(joints[:, list(toes)], targets[:, list(toes)], atol=EXACT)
