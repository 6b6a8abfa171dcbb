"""The settling shift of :mod:`blender_addon.core.exact_reach`, on geometry made here, and
its answers' independence of the batch around them."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import exact_reach, native, skeleton
from blender_addon.core.quaternions import norm

LEG_M, TRUNK_M = 0.8, 0.3
# Hips over their ankles with straight legs, the spine joint above them, and a head goal
# up and 20 cm to the side: the body must shift about 3.5 cm towards it and drop a little
# so the legs still reach (four projection passes left the feet 4.9 mm out).
HIPS = np.array([[0.1, LEG_M, 0.0], [-0.1, LEG_M, 0.0]])
ANKLES = HIPS * np.array([1.0, 0.0, 1.0])
SPINE = np.array([0.0, 0.85, 0.0])
HEAD_GOAL = np.array([0.2, 1.1, 0.0])
LEAST_SHIFT_M = 0.0354  # measured: the points end on their spheres, no deeper
UP_20_CM = np.array([0.0, 0.2, 0.0])
STALLED_PASSES = 12  # measured 11 (_SETTLE_STALL + 1); without the stop, 100
TOLERANCE_M = 1e-4  # the engine's reach tolerance on a 1.7 m body


def test_the_settling_shift_reaches_every_held_point_with_the_least_move() -> None:
    start = np.r_[HIPS, SPINE[None]][None]
    goal = np.r_[ANKLES, HEAD_GOAL[None]][None]
    reach = np.array([[LEG_M, LEG_M, TRUNK_M]])
    shift = exact_reach._least_shift(start, goal, reach, np.ones((1, 3), dtype=bool))
    over = norm(start + shift[:, None] - goal) - reach
    assert (over <= exact_reach._SETTLE_SLACK * reach).all(), over
    assert norm(shift)[0] < LEAST_SHIFT_M


def test_goals_no_shift_reaches_end_the_passes_early(monkeypatch) -> None:
    """A head goal above what straight legs allow: no shift holds all three; the passes
    stop once the overshoot stops shrinking (the caller then settles the feet alone)."""
    start = np.r_[HIPS, SPINE[None]][None]
    goal = np.r_[ANKLES, (HEAD_GOAL + UP_20_CM)[None]][None]
    reach = np.array([[LEG_M, LEG_M, TRUNK_M]])
    norms = []  # one per held point and pass

    def counted(v: np.ndarray) -> np.ndarray:
        norms.append(1)
        return norm(v)

    monkeypatch.setattr(exact_reach, "norm", counted)
    exact_reach._least_shift(start, goal, reach, np.ones((1, 3), dtype=bool))
    assert len(norms) // 3 <= STALLED_PASSES, len(norms) // 3


def test_a_pose_on_its_goals_comes_back_whatever_the_batch(synthetic_clip: np.ndarray
                                                           ) -> None:
    """A pose already on its goals is left alone, even beside a pose of the batch that
    misses: the bent re-aim (arms kept under full reach) had re-aimed a straight arm on
    its goal again when another pose needed work, so an answer changed with its batch."""
    from blender_addon.core import pipeline, skeleton

    hand, shoulder = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["l_upperarm"]
    poses = synthetic_clip[[10, 40]]
    lengths = skeleton.bone_lengths(poses)
    goals = np.zeros(poses.shape[:2], dtype=bool)
    goals[:, hand] = True
    reach = lengths[:, [hand, skeleton.PARENTS[hand]]].sum(axis=1)
    out = poses[:, hand] - poses[:, shoulder]
    targets = poses.copy()
    targets[:, hand] = poses[:, shoulder] + out / norm(out)[:, None] * reach[:, None]
    straight = exact_reach.solve(poses, goals, targets, lengths, TOLERANCE_M)  # arms straight
    assert (norm(straight[:, hand] - targets[:, hand]) < TOLERANCE_M).all()
    targets[1, hand] += [0.0, 0.3, 0.0]  # the second pose's hand moved on
    bent = dict(straightest=pipeline.constants._ARM_STRAIGHTEST, bent=goals)
    batch = exact_reach.solve(straight, goals, targets, lengths, TOLERANCE_M, **bent)
    np.testing.assert_array_equal(batch[0], straight[0])
    alone = exact_reach.solve(straight[1:], goals[1:], targets[1:], lengths[1:], TOLERANCE_M,
                              straightest=pipeline.constants._ARM_STRAIGHTEST, bent=goals[1:])
    np.testing.assert_allclose(batch[1], alone[0], rtol=0, atol=1e-12)  # (float64 rounding)


# Random goals among every joint, near and far targets, each option: every step of the
# solve runs somewhere (settling onto held feet and leaning into a head goal, the trunk
# bent to a far head, the head's re-aim, shrugs, limbs, toes).
AGREEMENT_CASES = ((0.1, 0.01), (0.3, 0.05), (0.5, 0.1), (0.2, 0.2), (0.6, 0.3))
AGREES_M = 1e-12  # measured 3e-17: the same steps in the same order


@pytest.mark.usefixtures("with_kernels")
def test_the_kernel_takes_the_numpy_steps(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(3)
    x = synthetic_clip[::2]
    lengths = skeleton.bone_lengths(x)
    for share, spread in AGREEMENT_CASES:
        goals = rng.uniform(size=(len(x), len(skeleton.PARENTS))) < share
        targets = x[::-1] + rng.normal(scale=spread, size=x.shape)
        bent = goals & (rng.uniform(size=goals.shape) < 0.5)
        for options in ({}, {"straightest": 0.97}, {"bend_trunk": False},
                        {"straightest": 0.99, "bent": bent, "bend_trunk": False},
                        {"straightest": np.linspace(0.9, 1.0, len(skeleton.PARENTS)),
                         "bent": goals, "bend_trunk": False},
                        {"straightest": 0.97, "bent": bent},
                        {"straightest": rng.uniform(0.9, 1.0, size=goals.shape),
                         "bent": goals}):
            got = exact_reach.solve(x, goals, targets, lengths, TOLERANCE_M, **options)
            with native.switched_off():
                want = exact_reach.solve(x, goals, targets, lengths, TOLERANCE_M, **options)
            assert np.abs(want - x).max() > 0.1  # they moved
            np.testing.assert_allclose(got, want, rtol=0, atol=AGREES_M)


@pytest.mark.parametrize("share, beyond", [(0.99, False), (1.01, True)])
def test_a_target_beyond_its_limb_is_named(share: float, beyond: bool) -> None:
    """The write's rule (:func:`.propagate.kept_short`): a hand's target further from its
    shoulder than its arm's two bones reach is beyond its limb; nearer, or any joint that
    is not a limb end, is not."""
    rng = np.random.default_rng(3)
    pose = rng.normal(scale=0.3, size=(skeleton.NUM_JOINTS, 3))
    hand, elbow, shoulder = (skeleton.JOINT_INDEX[j] for j in ("l_hand", "l_forearm",
                                                                "l_upperarm"))
    arm = norm(pose[elbow] - pose[shoulder]) + norm(pose[hand] - pose[elbow])
    way = rng.normal(size=3)
    targets = pose.copy()
    targets[hand] = pose[shoulder] + share * arm * way / norm(way)
    targets[elbow] += 10.0  # not a limb end: never named
    named = exact_reach.beyond_limbs(pose, targets)
    assert named[hand] == beyond
    assert not np.delete(named, hand).any()
