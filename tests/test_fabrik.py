"""Classic full-body FABRIK: reaches reachable targets, keeps lengths, pelvis and unlisted
branches where they belong."""

from __future__ import annotations

import numpy as np

from blender_addon.core import fabrik, skeleton
from tests.test_rigid_branches import BRANCHES, branch_shape
from training.evaluation.plausibility import ANGLE_NAMES, joint_angles

END_JOINTS = ["l_hand", "r_hand", "l_foot", "r_foot", "head"]


def _pairs(clip: np.ndarray, offset: int = 12) -> tuple[np.ndarray, np.ndarray]:
    x, x2 = clip[:-offset].copy(), clip[offset:].copy()
    x2 += x[:, :1] - x2[:, :1]  # same pelvis: FABRIK's base is fixed
    return x, x2


def test_reaches_reachable_end_effectors_and_keeps_lengths(synthetic_clip: np.ndarray) -> None:
    x, x2 = _pairs(synthetic_clip)
    mask = np.zeros(x.shape[:2], bool)
    mask[:, skeleton.joint_indices(END_JOINTS)] = True
    out = fabrik.solve(x, mask, x2, iterations=60)
    err = np.linalg.norm(out - x2, axis=-1)[mask]
    before = np.linalg.norm(x - x2, axis=-1)[mask]
    assert np.median(err) < 1e-3 and err.mean() < 0.1 * before.mean()
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(x), atol=1e-9)
    np.testing.assert_array_equal(out[:, 0], x[:, 0])


def test_intermediate_joint_and_untouched_branches(synthetic_clip: np.ndarray) -> None:
    x, x2 = _pairs(synthetic_clip)
    elbow = skeleton.JOINT_INDEX["l_forearm"]
    mask = np.zeros(x.shape[:2], bool)
    mask[:, elbow] = True
    out = fabrik.solve(x, mask, x2)
    assert np.linalg.norm(out[:, elbow] - x2[:, elbow], axis=-1).max() < 1e-3
    legs = skeleton.joint_indices(["l_thigh", "l_shin", "l_foot", "r_thigh", "r_foot"])
    np.testing.assert_allclose(out[:, legs], x[:, legs], atol=1e-12)  # no effector below


def test_no_effector_is_identity_and_batch_equals_single(synthetic_clip: np.ndarray) -> None:
    x, x2 = _pairs(synthetic_clip)
    np.testing.assert_allclose(fabrik.solve(x, np.zeros(x.shape[:2], bool), x2), x, atol=1e-12)
    rng = np.random.default_rng(0)
    mask = rng.random(x.shape[:2]) < 0.2
    batch = fabrik.solve(x[:5], mask[:5], x2[:5])
    single = np.stack([fabrik.solve(x[i], mask[i], x2[i]) for i in range(5)])
    np.testing.assert_allclose(batch, single, atol=1e-12)


def test_rig_shaped_keeps_the_pelvis_and_chest_a_rig_can_take(synthetic_clip: np.ndarray
                                                              ) -> None:
    """``rig_shaped``: the pelvis (spine, hips) and chest (neck, clavicles) branches keep
    the start's shape, which classic FABRIK averages apart, and the ends still arrive."""
    x, x2 = _pairs(synthetic_clip)
    mask = np.zeros(x.shape[:2], bool)
    mask[:, skeleton.joint_indices(END_JOINTS)] = True
    out = fabrik.solve(x, mask, x2, iterations=60, rig_shaped=True)
    classic = fabrik.solve(x, mask, x2, iterations=60)
    for idx in BRANCHES:
        np.testing.assert_allclose(branch_shape(out, idx), branch_shape(x, idx), atol=1e-9)
        # what the option is for
        assert np.abs(branch_shape(classic, idx) - branch_shape(x, idx)).max() > 1e-3
    err = np.linalg.norm(out - x2, axis=-1)[mask]
    assert np.median(err) < 1e-3
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(x), atol=1e-9)


def _neck_bend(p: np.ndarray) -> np.ndarray:
    return joint_angles(p)[:, ANGLE_NAMES.index("neck bend")]


def test_rig_shaped_carries_a_head_with_no_goal_with_the_chest(synthetic_clip: np.ndarray
                                                               ) -> None:
    """Hands pulled far: the chest turns, and a head with no goal turns with it as a rig's
    neck carries it (kept in its world direction, the neck bent by the chest's turn)."""
    x, x2 = _pairs(synthetic_clip)
    hands = skeleton.joint_indices(["l_hand", "r_hand"])
    x2[:, hands] += np.array([0.0, 0.1, 0.3])  # forward and up, beyond the arms
    mask = np.zeros(x.shape[:2], bool)
    mask[:, hands] = True
    out = fabrik.solve(x, mask, x2, iterations=60, rig_shaped=True)
    np.testing.assert_allclose(_neck_bend(out), _neck_bend(x), atol=1e-6)
    neck = skeleton.JOINT_INDEX["neck"]
    was, now = (p[:, neck] - p[:, skeleton.JOINT_INDEX["chest"]] for p in (x, out))
    turn = np.degrees(np.arccos(np.clip((was * now).sum(-1) / (
        np.linalg.norm(was, axis=-1) * np.linalg.norm(now, axis=-1)), -1.0, 1.0)))
    assert turn.max() > 5.0  # the chest did turn
