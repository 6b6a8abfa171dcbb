"""The pelvis and chest a rig carries rigidly: shapes as the start pose's, lengths kept,
nothing moved where the shape already holds, a pelvis with a goal left where it is."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import native, rigid_branches, skeleton
from blender_addon.core.normalize import set_bone_lengths

PELVIS = skeleton.joint_indices(["pelvis", "spine", "l_thigh", "r_thigh"])
CHEST = skeleton.joint_indices(["chest", "neck", "l_clavicle", "r_clavicle"])
BRANCHES = (PELVIS, CHEST)
EXACT = 1e-12


def branch_shape(p: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The distances between the ``idx`` joints of poses ``p`` (..., 21, 3): a branch's
    shape, whatever its place and turn."""
    return np.linalg.norm(p[..., idx, None, :] - p[..., None, idx, :], axis=-1)


def _bent(synthetic_clip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start poses and the same poses with every bone turned a little (branches bent)."""
    start = synthetic_clip[::4]
    lengths = skeleton.bone_lengths(start)
    noise = np.random.default_rng(3).normal(0.0, 0.01, start.shape)
    return start, set_bone_lengths(start + noise, lengths)


@pytest.mark.usefixtures("kernel")
def test_the_branches_take_the_start_shapes_and_lengths_stay(synthetic_clip) -> None:
    start, bent = _bent(synthetic_clip)
    assert np.abs(branch_shape(bent, PELVIS) - branch_shape(start, PELVIS)).max() > 1e-3
    out = rigid_branches.keep_rigid(bent, start)
    for idx in BRANCHES:
        np.testing.assert_allclose(branch_shape(out, idx), branch_shape(start, idx), atol=1e-9)
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(start),
                               atol=1e-9)
    # The hips count most: they stay nearer their solved places than the spine does.
    hips, spine = skeleton.joint_indices(["l_thigh", "r_thigh"]), skeleton.JOINT_INDEX["spine"]
    hip_move = np.linalg.norm(out[:, hips] - bent[:, hips], axis=-1).mean()
    assert hip_move < np.linalg.norm(out[:, spine] - bent[:, spine], axis=-1).mean()


@pytest.mark.usefixtures("kernel")
def test_a_rigid_pose_is_left_alone_and_a_held_pelvis_stays(synthetic_clip) -> None:
    start, bent = _bent(synthetic_clip)
    moved = start + np.array([0.1, 0.0, -0.2])  # the same shapes, elsewhere
    np.testing.assert_allclose(rigid_branches.keep_rigid(moved, start), moved,
                               atol=EXACT)
    held = np.ones(len(start), dtype=bool)
    out = rigid_branches.keep_rigid(bent, start, held)
    np.testing.assert_allclose(out[:, skeleton.ROOT], bent[:, skeleton.ROOT], atol=1e-5)


KERNEL_AGREES = 1e-12  # measured 2e-14 on CMU poses: the fits by Horn's quaternion, not SVD


@pytest.mark.usefixtures("with_kernels")
def test_the_kernel_keeps_the_branches_as_numpy_does(synthetic_clip) -> None:
    """Solved poses near and far from their starts, pelvis held or not: the compiled kernel's
    answers are numpy's to rounding."""
    rng = np.random.default_rng(4)
    start = synthetic_clip[::2]
    held = rng.uniform(size=len(start)) < 0.3
    for spread in (0.0, 0.02, 0.1):
        pose = start[::-1] + rng.normal(scale=spread, size=start.shape)
        for held_pelvis in (None, held):
            got = rigid_branches.keep_rigid(pose, start, held_pelvis)
            with native.switched_off():
                want = rigid_branches.keep_rigid(pose, start, held_pelvis)
            assert spread == 0.0 or np.abs(want - pose).max() > 0.01  # it moved
            np.testing.assert_allclose(got, want, rtol=0, atol=KERNEL_AGREES)
