"""Targets no pose of a rig can reach: the span bound, and the solve's note naming them."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import fabrik, reach_bounds, rigid_branches, skeleton
from blender_addon.core.pipeline import (
    MISS_NOTE_M,
    SHORT_MARK,
    Effector,
    PoseEditor,
    SolveOptions,
)
from blender_addon.core.pipeline.notes import _reach_notes

J = skeleton.JOINT_INDEX
ENDS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
SPAN_SLACK = 1e-9  # m: a distance never exceeds its span, to rounding
HEAD_MISS_M = 1e-3  # m: the held head's own miss, at most
HAIR_M = 1e-5  # m: how far a held goal's target may sit off its joint (float32 empties)


def test_the_spans_of_a_few_joints_are_those_of_the_whole_table(
        synthetic_clip: np.ndarray) -> None:
    joints = np.array(skeleton.joint_indices(list(ENDS)))
    whole = reach_bounds.max_spans(synthetic_clip[:3])
    np.testing.assert_allclose(reach_bounds.max_spans(synthetic_clip[:3], joints),
                               whole[:, joints][:, :, joints], rtol=1e-12)


def test_no_pose_the_rig_takes_exceeds_its_spans(synthetic_clip: np.ndarray) -> None:
    """Every pose with the clip's bone lengths and rigid pelvis and chest keeps every two
    joints within the spans read off another such pose; FABRIK kept rig-shaped, pulling
    the ends far away, too."""
    spans = reach_bounds.max_spans(synthetic_clip[:1])[0]
    poses = rigid_branches.keep_rigid(synthetic_clip, np.repeat(synthetic_clip[:1],
                                                                len(synthetic_clip), 0))
    lengths = skeleton.bone_lengths(synthetic_clip[:1])
    goals = np.zeros(poses.shape[:2], dtype=bool)
    goals[:, skeleton.joint_indices(list(ENDS))] = True
    rng = np.random.default_rng(0)
    far = poses + np.where(goals[..., None], rng.normal(scale=1.0, size=poses.shape), 0.0)
    pulled = fabrik.solve(poses, goals, far, np.repeat(lengths, len(poses), 0),
                          fabrik.RIG_SHAPED_ITERATIONS, 1e-4, rig_shaped=True)
    for p in (poses, pulled):
        apart = np.linalg.norm(p[:, :, None] - p[:, None, :], axis=-1)
        assert (apart <= spans + SPAN_SLACK).all()
    # FABRIK stretched towards targets a metre off comes close to the spans somewhere.
    apart = np.linalg.norm(pulled[:, :, None] - pulled[:, None, :], axis=-1)
    assert (apart / np.maximum(spans, 1e-9)).max() > 0.95


def test_a_straight_chain_spans_exactly_its_length() -> None:
    """The head, neck, a clavicle and its arm in one line: the head-to-hand span is their
    distance, the neck-to-clavicle span crossing the chest at its fixed size."""
    pose = np.zeros((1, skeleton.NUM_JOINTS, 3))
    for k, joint in enumerate(("head", "neck", "l_clavicle", "l_upperarm", "l_forearm",
                               "l_hand")):
        pose[0, J[joint], 0] = float(k)
    pose[0, J["chest"]] = [1.5, -0.5, 0.0]
    spans = reach_bounds.max_spans(pose)[0]
    assert spans[J["head"], J["l_hand"]] == pytest.approx(5.0)
    assert spans[J["l_hand"], J["head"]] == pytest.approx(5.0)


def test_targets_beyond_the_rig_are_named(synthetic_clip: np.ndarray) -> None:
    pose = synthetic_clip[:1]
    goals = np.zeros((1, skeleton.NUM_JOINTS), dtype=bool)
    goals[0, skeleton.joint_indices(list(ENDS))] = True
    spans = reach_bounds.max_spans(pose)[0]
    targets = pose.copy()
    away = pose[0, J["l_hand"]] - pose[0, J["head"]]
    gap = spans[J["l_hand"], J["head"]]
    targets[0, J["l_hand"]] = pose[0, J["head"]] + away / np.linalg.norm(away) * (gap + 0.1)
    # The held head's target a hair off its joint, as an empty read back in float32 is:
    # the pair still counts against the hand, the one the user moved.
    targets[0, J["head"], 0] += HAIR_M
    over, other = reach_bounds.beyond_reach(pose, goals, targets)
    assert over[0, J["l_hand"]] >= 0.1 - HAIR_M  # that far beyond the held head, to its hair
    assert np.count_nonzero(over) == 1 and other[0, J["l_hand"]] == J["head"]
    targets[0, J["l_hand"]] = pose[0, J["head"]] + away / np.linalg.norm(away) * (gap - 0.01)
    assert not reach_bounds.beyond_reach(pose, goals, targets)[0].any()


def test_a_solve_that_cannot_reach_says_which_target_and_why(shipped_models,
                                                             synthetic_clip) -> None:
    """Hands, feet and head held, one hand pulled 30 cm past its reach from the held
    head: the solve misses and the note names that hand and the head; a reachable pull
    has no such note."""
    editor = PoseEditor(shipped_models)
    pose = synthetic_clip[0]
    spans = reach_bounds.max_spans(pose[None])[0]
    away = pose[J["l_hand"]] - pose[J["head"]]
    away /= np.linalg.norm(away)
    for extra, beyond in ((0.3, True), (-0.5, False)):
        target = pose[J["head"]] + away * (spans[J["l_hand"], J["head"]] + extra)
        effs = [Effector(j, target if j == "l_hand" else pose[J[j]]) for j in ENDS]
        for options in (SolveOptions(), SolveOptions(solver="classic")):
            result = editor.solve(pose, effs, options=options)
            said = [n for n in result.notes if reach_bounds.NOTE_MARK in n]
            assert bool(said) == beyond, (extra, options.solver, result.notes)
            if beyond:
                assert said[0].startswith("l_hand:") and "head goal" in said[0]
        # The neural solve's answer is a pose the rig takes: the hand misses by the excess.
        miss = editor.solve(pose, effs).effector_error[0, J["l_hand"]]
        assert (miss > extra - HEAD_MISS_M) if beyond else (miss < HEAD_MISS_M)


# Every end held and one moved where no pose the engine finds reaches it without letting a
# held one go, though the pairwise span bound passes (found by a search of drags on the
# synthetic clip; a hand pulled a metre up over a planted foot, and a foot lifted half a
# metre with every end held, were such cases until the engine's last resort converged:
# core/rig_ik.py reaches them).
PINNED_FRAME, PINNED_PULL = 12, (-0.02, 0.103, -0.134)  # l_hand, 17 cm
LIFT_FRAME, LIFT_M = 41, (0.064, -0.096, -0.082)  # l_foot, 14 cm
PLANTED_FRAME = 22  # the synthetic clip's right foot is on the floor here (planted)
SHORT_M = 0.02


def _every_end_held(pose: np.ndarray, joint: str, move: tuple[float, ...]) -> list[Effector]:
    return [Effector(j, pose[J[j]] + (np.array(move) if j == joint else 0.0)) for j in ENDS]


def test_an_effector_left_short_is_said_with_what_held_the_body(
        shipped_models, synthetic_clip: np.ndarray) -> None:
    """A hand dragged 17 cm with every other end pinned passes the pairwise span bound but
    stays short: the note says by how much (as the effector error reads) and names the
    pins and how to free them; with Refinement at 0 that the networks' answer stands; a
    drag half as far is reached and says nothing."""
    editor = PoseEditor(shipped_models)
    pose = synthetic_clip[PINNED_FRAME]
    for scale in (1.0, 0.5):
        effs = _every_end_held(pose, "l_hand", tuple(np.array(PINNED_PULL) * scale))
        for options, why in ((SolveOptions(), "while holding the head, r_hand, l_foot, r_foot "
                              "goals: move it nearer, or free one of them"),
                             (SolveOptions(refine_steps=0), "networks' answer")):
            result = editor.solve(pose, effs, options=options)
            miss = result.effector_error[0, J["l_hand"]]
            said = [n for n in result.notes if SHORT_MARK in n]
            assert not any(reach_bounds.NOTE_MARK in n for n in result.notes)
            assert bool(said) == (miss > MISS_NOTE_M), (scale, options, miss, result.notes)
            if scale == 1.0:
                assert said, (options, miss)
                assert said[0].startswith(f"l_hand: {miss * 100:.1f} cm {SHORT_MARK}")
                assert why in said[0], said[0]
            elif options.refine_steps:
                assert not said, result.notes  # within reach: reached, nothing said


def test_a_note_names_the_planted_feet_that_held_the_body(synthetic_clip: np.ndarray) -> None:
    """Held by the planted feet the user did not pin, a note names them and the option that
    frees them; held by nothing, where the body stands."""
    p = synthetic_clip[PLANTED_FRAME][None]
    t = p.copy()
    t[0, J["l_hand"]] += np.array([0.0, 0.1, 0.0])
    errors = np.zeros((1, skeleton.NUM_JOINTS))
    errors[0, J["l_hand"]] = SHORT_M
    user = np.zeros((1, skeleton.NUM_JOINTS))
    user[0, J["l_hand"]] = 1.0
    feet = user > 0
    feet[0, [J["r_foot"], J["r_toe"]]] = True
    short = f"l_hand: {SHORT_M * 100:.1f} cm {SHORT_MARK}: no pose was found that reaches it "
    assert _reach_notes(p, feet, t, errors, user) == [
        short + "while holding the planted feet: move it nearer, or turn Keep Planted Feet off"]
    assert _reach_notes(p, user > 0, t, errors, user) == [
        short + "from where the body stands: move it nearer"]


def test_a_held_goal_pulled_off_by_the_others_points_at_the_moved_ones(
        shipped_models, synthetic_clip: np.ndarray) -> None:
    """With every end held, a foot dragged 14 cm leaves a held hand off its place: the note
    for that hand names the other goals and asks for the moved targets nearer (the user
    never moved the hand)."""
    editor = PoseEditor(shipped_models)
    pose = synthetic_clip[LIFT_FRAME]
    result = editor.solve(pose, _every_end_held(pose, "l_foot", LIFT_M))
    off = np.flatnonzero(result.effector_error[0] > MISS_NOTE_M)
    said = [n for n in result.notes if SHORT_MARK in n]
    assert len(off) and len(said) == len(off), result.notes
    for j, note in zip(off, said, strict=True):
        assert note.startswith(f"{skeleton.JOINTS[j]}:")
        if skeleton.JOINTS[j] != "l_foot":
            assert "move the moved targets nearer" in note and "l_foot" in note


def test_targets_beyond_reach_are_pulled_onto_it_and_the_others_stay(
        synthetic_clip: np.ndarray) -> None:
    """pulled_within leaves targets within reach bit-identical and pulls one beyond it back
    towards the goal it is held against, onto the span less the margin: the aims move
    continuously as a dragged hand crosses the bound, and none is beyond it after."""
    pose = synthetic_clip[:1]
    goals = np.zeros((1, skeleton.NUM_JOINTS), dtype=bool)
    goals[:, skeleton.joint_indices(list(ENDS))] = True
    hand, head = J["l_hand"], J["head"]
    span = reach_bounds.max_spans(pose)[0, hand, head]
    out = pose[0, hand] - pose[0, head]
    out /= np.linalg.norm(out)
    margin = np.array([1e-4])
    pulled, previous = 0, None
    for share in np.linspace(0.9, 1.3, 81):  # the hand's target from the head, of the span
        targets = pose.copy()
        targets[0, hand] = pose[0, head] + out * share * span
        aim = reach_bounds.pulled_within(pose, goals, targets, margin)
        given = reach_bounds.beyond_reach(pose, goals, targets)  # the caller's, passed in
        np.testing.assert_array_equal(
            reach_bounds.pulled_within(pose, goals, targets, margin, reach=given), aim)
        over, _ = reach_bounds.beyond_reach(pose, goals, aim)
        assert over.max() <= SPAN_SLACK
        if reach_bounds.beyond_reach(pose, goals, targets)[0].max() == 0.0:
            np.testing.assert_array_equal(aim, targets)
        else:
            np.testing.assert_array_equal(np.delete(aim, hand, axis=1),
                                          np.delete(targets, hand, axis=1))
            assert np.linalg.norm(aim[0, hand] - aim[0, head]) == pytest.approx(
                span - margin[0], abs=SPAN_SLACK)
            pulled += 1
        if previous is not None:  # no step larger than the target's own (0.005 spans)
            assert np.linalg.norm(aim - previous) <= 0.005 * span + SPAN_SLACK
        previous = aim
    assert 30 < pulled < 81  # the target crossed the bound


def test_a_single_pose_is_bounded_as_in_a_batch(kernel: str) -> None:
    """One pose's check runs over its goals' pairs alone (in scalar math, or the kernel):
    the batch's answer, for any number of goals, targets near and far."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        pose = rng.normal(scale=0.5, size=(1, skeleton.NUM_JOINTS, 3))
        goals = rng.random((1, skeleton.NUM_JOINTS)) < rng.random()
        targets = pose + rng.normal(scale=rng.choice([0.05, 0.5, 2.0]), size=pose.shape)
        over, other = reach_bounds.beyond_reach(pose, goals, targets)
        batch = reach_bounds.beyond_reach(*(np.repeat(a, 2, axis=0)
                                            for a in (pose, goals, targets)))
        np.testing.assert_allclose(over, batch[0][:1], rtol=0, atol=SPAN_SLACK)
        np.testing.assert_array_equal(other, batch[1][:1])
