"""The refinement's pieces on their own: the length-fixing Jacobian against a finite
difference, and the exact-reach pass (limb ends on reachable targets, bone lengths kept)."""

from __future__ import annotations

import numpy as np

from blender_addon.core import exact_reach, skeleton
from blender_addon.core.normalize import set_bone_lengths
from blender_addon.core.refine import _fixed

FD_STEP = 1e-7
JACOBIAN_ATOL = 1e-6
TOLERANCE = 1e-4  # m, the engine's REACH_TOLERANCE
HANDS = skeleton.joint_indices(["l_hand", "r_hand"])


def _poses(synthetic_clip: np.ndarray, n: int) -> np.ndarray:
    return synthetic_clip[:: max(1, len(synthetic_clip) // n)][:n]


def test_fixed_jacobian_matches_a_finite_difference(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    pose = _poses(synthetic_clip, 3) + rng.normal(0, 0.01, (3, 21, 3))  # lengths off a bit
    lengths = skeleton.bone_lengths(synthetic_clip[:3]) * 1.1
    jac = rng.normal(size=(3, 63, 4))  # d pose / d (4 variables)
    fixed, dfixed = _fixed(pose, lengths, jac)
    np.testing.assert_allclose(fixed, set_bone_lengths(pose, lengths), atol=1e-12)
    for k in range(4):
        step = (jac[:, :, k] * FD_STEP).reshape(pose.shape)  # central difference
        fd = (set_bone_lengths(pose + step, lengths) - set_bone_lengths(pose - step, lengths)
              ).reshape(3, 63) / (2 * FD_STEP)
        np.testing.assert_allclose(dfixed[:, :, k], fd, atol=JACOBIAN_ATOL)


def test_exact_reach_puts_limb_ends_on_reachable_targets(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    pose = _poses(synthetic_clip, 20)
    lengths = skeleton.bone_lengths(pose)
    targets = pose.copy()
    targets[:, HANDS] += rng.normal(0, 0.03, (len(pose), 2, 3))  # a few cm: within reach
    goals = np.zeros(pose.shape[:2], dtype=bool)
    goals[:, HANDS] = True
    out = exact_reach.solve(pose, goals, targets, lengths, TOLERANCE, fallback=False)
    reach = np.linalg.norm(out[:, HANDS] - targets[:, HANDS], axis=-1)
    shoulder_to_target = np.linalg.norm(
        targets[:, HANDS] - pose[:, skeleton.joint_indices(["l_upperarm", "r_upperarm"])],
        axis=-1)
    arm = lengths[:, skeleton.joint_indices(["l_forearm", "r_forearm"])] + lengths[:, HANDS]
    reachable = shoulder_to_target < arm
    assert reachable.mean() > 0.5
    assert (reach[reachable] < TOLERANCE).all()
    np.testing.assert_allclose(skeleton.bone_lengths(out), lengths, atol=1e-9)
    untouched = ~np.isin(np.arange(21), skeleton.joint_indices(
        ["l_forearm", "l_hand", "r_forearm", "r_hand"]))
    np.testing.assert_allclose(out[:, untouched], pose[:, untouched], atol=1e-12)
