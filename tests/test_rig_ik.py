"""Rig-shaped IK by damped least squares (:mod:`blender_addon.core.rig_ik`), on poses made
here."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import fabrik, pipeline, rig_ik, skeleton
from tests.synth import rig_reachable_hand_drags
from tests.test_rigid_branches import BRANCHES, EXACT, branch_shape

TOLERANCE_M = 1e-4  # the engine's reach tolerance on a 1.7 m body
J = skeleton.JOINT_INDEX
# The kernel against the numpy steps: summed in another order, so a step's accept-or-reject
# can differ where both sides are equal to rounding; measured 3e-9 m at most on 200 CMU
# poses (20 steps), 2e-14 median.
AGREES_M = 1e-7
REST_OFFSET_M = np.array([0.02, -0.01, 0.015])


def _shapes(p: np.ndarray) -> list[np.ndarray]:
    return [branch_shape(p, idx) for idx in BRANCHES]


@pytest.fixture(scope="module")
def poses(synthetic_clip: np.ndarray) -> np.ndarray:
    return synthetic_clip[::3]


@pytest.mark.usefixtures("kernel")  # numpy, then the kernel
def test_turns_keep_the_bones_and_the_rigid_branches(poses: np.ndarray) -> None:
    step = np.random.default_rng(0).normal(0.0, 0.4, (len(poses), rig_ik._PARAMS))
    turned = rig_ik._apply(poses, step)
    assert np.abs(turned - poses).max() > 0.3  # it moved
    np.testing.assert_allclose(skeleton.bone_lengths(turned), skeleton.bone_lengths(poses),
                               atol=EXACT)
    for now, was in zip(_shapes(turned), _shapes(poses), strict=True):
        np.testing.assert_allclose(now, was, atol=EXACT)


@pytest.mark.usefixtures("kernel")  # numpy, then the kernel
def test_goals_a_rig_pose_reaches_are_reached_where_rig_shaped_fabrik_stops_short(
        poses: np.ndarray) -> None:
    """A hand dragged where the trunk must bend with the feet (and the head and other
    hand) pinned: every drag is reached to the tolerance, pins held, bones and branches
    kept; rig-shaped FABRIK's iterations leave some short (measured 3 of 600 by over
    1 mm, one by 30 mm)."""
    x, mask, t = rig_reachable_hand_drags(poses, seeds=20)
    goals = mask > 0
    out = rig_ik.solve(x, goals, t, TOLERANCE_M)
    err = np.where(goals, np.linalg.norm(out - t, axis=-1), 0.0).max(axis=1)
    assert (err <= TOLERANCE_M).mean() == 1.0, np.sort(err)[-5:]
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(x),
                               atol=EXACT)
    for now, was in zip(_shapes(out), _shapes(x), strict=True):
        np.testing.assert_allclose(now, was, atol=EXACT)
    fab = fabrik.solve(x, goals, t, skeleton.bone_lengths(x), fabrik.RIG_SHAPED_ITERATIONS,
                       TOLERANCE_M, rig_shaped=True)
    short = np.where(goals, np.linalg.norm(fab - t, axis=-1), 0.0).max(axis=1) > 1e-3
    assert short.sum() >= 2


@pytest.mark.usefixtures("kernel")  # numpy, then the kernel
def test_a_goal_beyond_reach_ends_nearer_and_the_rest_stays_whole(poses: np.ndarray) -> None:
    """A hand 3 m away with the feet pinned: no pose reaches it; the steps bring it nearer
    than it starts and never stretch a bone."""
    goals = np.zeros(poses.shape[:2], dtype=bool)
    goals[:, [J["l_foot"], J["r_foot"], J["l_hand"]]] = True
    t = poses.copy()
    t[:, J["l_hand"]] += np.array([3.0, 0.0, 0.0])
    out = rig_ik.solve(poses, goals, t, TOLERANCE_M)
    before = np.linalg.norm(poses[:, J["l_hand"]] - t[:, J["l_hand"]], axis=-1)
    after = np.linalg.norm(out[:, J["l_hand"]] - t[:, J["l_hand"]], axis=-1)
    assert (after < before - 0.1).all()
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(poses),
                               atol=EXACT)


@pytest.mark.usefixtures("kernel")  # numpy, then the kernel
def test_frozen_joints_keep_their_bend_and_free_ends_go_along(poses: np.ndarray) -> None:
    """The left elbow frozen and only the left hand a goal (with the feet): the hand gets
    there with the elbow's bend as it was, and the head, which carries no goal, keeps its
    place on the chest (its neck's bend unchanged)."""
    x, mask, t = rig_reachable_hand_drags(poses, seeds=2)
    goals = mask > 0
    goals[:, [J["head"], J["r_hand"]]] = False
    frozen = np.zeros_like(goals)
    frozen[:, J["l_forearm"]] = True
    out = rig_ik.solve(x, goals, t, TOLERANCE_M, frozen=frozen)

    def bend(p: np.ndarray, j: int) -> np.ndarray:
        a = p[:, j] - p[:, skeleton.PARENTS[j]]
        b = p[:, skeleton.CHILDREN[j][0]] - p[:, j]
        return np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1)
                                               * np.linalg.norm(b, axis=1))

    np.testing.assert_allclose(bend(out, J["l_forearm"]), bend(x, J["l_forearm"]), atol=1e-9)
    np.testing.assert_allclose(bend(out, J["neck"]), bend(x, J["neck"]), atol=1e-9)
    assert np.abs(out - x).max() > 0.05  # the body moved to get there
    err = np.where(goals, np.linalg.norm(out - t, axis=-1), 0.0).max(axis=1)
    assert (err <= TOLERANCE_M).all(), np.sort(err)[-3:]  # measured: all 60


@pytest.mark.usefixtures("kernel")  # numpy, then the kernel
def test_a_stance_held_harder_moves_less_and_the_goals_are_still_met(poses: np.ndarray
                                                                      ) -> None:
    """The engine's least change: the pelvis and legs held STANCE_HOLD times harder (and
    longer, at its decay) move less to reach the same hand goals, every goal still met."""
    x, mask, t = rig_reachable_hand_drags(poses, seeds=2)
    goals = mask > 0
    stance = pipeline.constants._STANCE & ~goals
    moved = {}
    for name, scale in (("even", None), ("stance", pipeline.constants._LEAST_CHANGE_HOLD)):
        out = rig_ik.solve(x, goals, t, TOLERANCE_M, pipeline.LEAST_CHANGE_STEPS,
                           stay_decay=pipeline.LEAST_CHANGE_STAY_DECAY, rest=x,
                           stay_scale=scale)
        err = np.where(goals, np.linalg.norm(out - t, axis=-1), 0.0).max(axis=1)
        assert (err <= TOLERANCE_M).all(), np.sort(err)[-3:]  # measured: all 60
        moved[name] = np.linalg.norm(out - x, axis=-1)[stance].mean()
    # measured 0.78 -> 0.44 cm
    assert moved["stance"] < STANCE_SHARE * moved["even"], moved


STANCE_SHARE = 0.7


@pytest.mark.usefixtures("with_kernels")
def test_the_kernel_takes_the_numpy_steps(poses: np.ndarray) -> None:
    """The same poses, goals and options through the compiled kernel and the numpy code,
    one pose at a time and all at once: the same answers to rounding."""
    from blender_addon.core import native

    starts, goals, targets = rig_reachable_hand_drags(poses, 6)
    frozen = np.zeros(goals.shape, dtype=bool)
    frozen[::2, J["l_forearm"]] = True
    # ... and as the least change holds the body: towards another pose (here the start moved
    # by REST_OFFSET_M), the stance harder
    rest, scale = starts + REST_OFFSET_M, pipeline.constants._LEAST_CHANGE_HOLD
    for iterations, stay, held in ((20, rig_ik.STAY_WEIGHT, {}), (rig_ik.ITERATIONS, 0.0, {}),
                                   (pipeline.LEAST_CHANGE_STEPS, rig_ik.STAY_WEIGHT,
                                    {"rest": rest, "stay_scale": scale})):
        got = rig_ik.solve(starts, goals, targets, TOLERANCE_M, iterations, stay,
                           frozen=frozen, **held)
        with native.switched_off():
            want = rig_ik.solve(starts, goals, targets, TOLERANCE_M, iterations, stay,
                                frozen=frozen, **held)
        assert np.abs(got - starts).max() > 0.05  # they moved
        np.testing.assert_allclose(got, want, rtol=0, atol=AGREES_M)
