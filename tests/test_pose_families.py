"""Poses the mocap hardly holds (issue 47): the pose-family classifier, contacts (hands and
knees on the floor) held as planted feet are, and the least change taking such drags."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import pipeline, skeleton
from blender_addon.core.normalize import to_model_space
from blender_addon.core.pipeline import PoseEditor, SolveOptions
from training.evaluation import pose_families

CALM_DEG = 5.0  # the synthetic clip's joint swing: a near T-pose, arms out
HELD_M = 1e-4
TRUNK_HEIGHT_M = 0.1  # a body lying down: its trunk's joints this far over the floor
_TRUNK = skeleton.joint_indices(["pelvis", "spine", "chest", "neck", "head"])
_HANDS = skeleton.joint_indices(["l_hand", "r_hand"])
# A head goal this far over the pelvis: within the trunk's 0.48 m reach, beyond what arms
# out on the floor let the shoulders rise to.
SIT_UP_M = 0.45  # a held contact stays this close (the engine's reach tolerance)
REACHED_M = 1e-3


@pytest.fixture(scope="module")
def calm_clip() -> np.ndarray:
    """A near T-pose clip (every joint swinging 5 degrees), rig space, metres."""
    from tests.synth import synthetic_bvh
    from training.data.dataset import canonical_clip

    return canonical_clip("calm.bvh", synthetic_bvh(frames=60, seed=3,
                                                    amplitude_deg=CALM_DEG))[0]


def _turned(clip: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """The clip facing +Z (model space), turned by ``turn`` (3, 3) about its pelvis, its
    lowest trunk joint :data:`TRUNK_HEIGHT_M` over the floor (a limb may go through it)."""
    model = to_model_space(clip)[0]
    out = (model - model[:, :1]) @ turn.T
    low = out[:, _TRUNK, 1].min(axis=-1) - TRUNK_HEIGHT_M
    return out - low[:, None, None] * np.array([0.0, 1.0, 0.0])


_ABOUT_X = {90: np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]),
            -90: np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]),
            180: np.diag([1.0, -1.0, -1.0])}
_ABOUT_Z_90 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


@pytest.mark.parametrize(("turn", "family"), [
    (_ABOUT_X[-90], "lying on the back"), (_ABOUT_X[90], "lying on the front"),
    (_ABOUT_Z_90, "lying on the side"), (_ABOUT_X[180], "upside down")])
def test_turned_bodies_are_sorted_into_their_family(calm_clip: np.ndarray,
                                                     turn: np.ndarray, family: str) -> None:
    standing = calm_clip - np.array([0.0, calm_clip[..., 1].min(), 0.0])
    assert (pose_families.classify(standing) == "").all()  # upright, hands up
    labels = pose_families.classify(_turned(calm_clip, turn))
    assert (labels == family).mean() > 0.9, np.unique(labels, return_counts=True)


def test_hands_and_knees_on_the_floor_are_held(shipped_models, kernel: str,
                                               synthetic_clip: np.ndarray) -> None:
    """A body lying on its back, one hand dragged: the hand and knees on the floor stay as
    planted feet do (Keep Planted Feet), and move without that option."""
    lying = _turned(synthetic_clip[::3], _ABOUT_X[-90])
    hand, other = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["r_hand"]
    lying = lying[lying[:, other, 1] < pipeline.CONTACT_HEIGHT * 0.5]  # its right hand down
    assert len(lying) >= 5
    rng = np.random.default_rng(0)
    mask = np.zeros(lying.shape[:2])
    mask[:, hand] = 1.0
    targets = lying.copy()
    targets[:, hand] += rng.normal(size=(len(lying), 3)) * 0.03 + np.array([0.0, 0.05, 0.0])
    touching = pose_families.contacts(lying, mask > 0)
    assert touching[:, other].all()
    editor = PoseEditor(shipped_models)
    held = editor.solve_arrays(lying, mask, targets)
    moved = np.linalg.norm(held.positions - lying, axis=-1)
    assert moved[touching].max() < HELD_M
    assert held.effector_error[:, hand].max() < REACHED_M
    free = editor.solve_arrays(lying, mask, targets,
                               options=SolveOptions(keep_planted_feet=False)).positions
    assert np.linalg.norm(free - lying, axis=-1)[:, other].max() > 10 * HELD_M


def test_a_contact_gives_way_to_a_goal_it_blocks(shipped_models,
                                                 calm_clip: np.ndarray) -> None:
    """A head dragged up from a body lying on its back, further than the trunk reaches with
    both hands held on the floor: the contacts let go and the head arrives."""
    lying = _turned(calm_clip[::6], _ABOUT_X[-90])
    head = skeleton.JOINT_INDEX["head"]
    mask = np.zeros(lying.shape[:2])
    mask[:, head] = 1.0
    targets = lying.copy()
    pelvis = lying[:, skeleton.ROOT]
    targets[:, head] = pelvis + np.array([0.0, SIT_UP_M, 0.0])  # sitting up
    classic = PoseEditor(shipped_models).solve_arrays(
        lying, mask, targets, options=SolveOptions(solver="classic"))
    reachable = (classic.effector_error[:, head] < REACHED_M) \
        & pose_families.contacts(lying, mask > 0)[:, _HANDS].any(axis=1)  # a hand down
    assert reachable.sum() >= 3
    x = lying[reachable]
    out = PoseEditor(shipped_models).solve_arrays(x, mask[reachable], targets[reachable])
    assert out.effector_error[:, head].max() < REACHED_M
    assert np.linalg.norm(out.positions - x, axis=-1)[:, _HANDS].max() > 0.01  # let go


def test_the_least_change_takes_unusual_poses(shipped_models,
                                              synthetic_clip: np.ndarray) -> None:
    """Lying or crouching, a refined hand drag moves the other joints no more than classic
    FABRIK does, where the networks moved them more; standing poses keep the networks."""
    editor = PoseEditor(shipped_models)
    standing = synthetic_clip[::3] - np.array([0.0, synthetic_clip[..., 1].min(), 0.0])
    lying = _turned(synthetic_clip[::3], _ABOUT_X[-90])
    none = np.zeros(standing.shape[:2], dtype=bool)
    assert not editor._unfamiliar(standing, none).any()
    assert editor._unfamiliar(lying, none).all()
    low = standing - np.array([0.0, 0.5, 0.0])  # the whole body lowered: a low pelvis
    assert editor._unfamiliar(low, none).all()


@pytest.mark.parametrize("rig_lengths", [False, True])
def test_the_single_pose_check_agrees_with_the_batched_one(synthetic_clip: np.ndarray,
                                                           rig_lengths: bool) -> None:
    """A drag update's plain-float check (nothing to hold, nothing unusual) says what the
    batched contacts and least-change tests say, lowered through every case."""
    editor = PoseEditor(None, skeleton.bone_lengths(synthetic_clip[0]) if rig_lengths
                        else None)
    seen = set()
    for drop in np.linspace(0.0, 0.9, 10):
        q = synthetic_clip - np.array([0.0, drop, 0.0])
        none = np.zeros(q.shape[:2])
        held, _, _ = editor._hold_contacts(q, none, q, none)
        batched = ~(editor._unfamiliar(q, held > 0) | (held > 0).any(axis=1))
        single = np.array([editor._ordinary(q[i:i + 1]) for i in range(len(q))])
        np.testing.assert_array_equal(single, batched)
        seen |= set(single.tolist())
    assert seen == {True, False}
