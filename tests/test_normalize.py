"""Model-space normalization: invariances, round trips, proportions, batching."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blender_addon.core.normalize import (
    BodyFrame,
    facing_yaw,
    flatten_pose,
    from_model_space,
    from_model_space_unchecked,
    leg_scale,
    rotate_y,
    set_bone_lengths,
    to_model_space,
    to_model_space_unchecked,
    unflatten_pose,
    yaw_matrix,
)
from blender_addon.core.skeleton import (
    BONE_LENGTHS,
    JOINT_INDEX,
    JOINTS,
    NUM_JOINTS,
    PARENTS,
    bone_lengths,
    mirror_pose,
)
from tests.synth import TPOSE_DIRECTIONS

TOL = 1e-9
LEG = 0.5 * sum(BONE_LENGTHS[JOINT_INDEX[n]] for n in ("l_shin", "l_foot", "r_shin", "r_foot"))



def tpose_dirs() -> np.ndarray:
    dirs = np.zeros((NUM_JOINTS, 3))
    for name, d in TPOSE_DIRECTIONS.items():
        dirs[JOINT_INDEX[name]] = d
    return dirs


def fk(dirs: np.ndarray, lengths: np.ndarray, pelvis: np.ndarray) -> np.ndarray:
    """Positions from (unnormalized) bone directions, lengths and the pelvis, batched."""
    dirs = dirs / np.maximum(np.linalg.norm(dirs, axis=-1, keepdims=True), 1e-300)
    batch = np.broadcast_shapes(dirs.shape[:-2], np.shape(lengths)[:-1], np.shape(pelvis)[:-1])
    pos = np.zeros((*batch, NUM_JOINTS, 3))
    pos[..., 0, :] = pelvis
    for j in range(1, NUM_JOINTS):
        pos[..., j, :] = (
            pos[..., PARENTS[j], :] + np.asarray(lengths)[..., j, None] * dirs[..., j, :]
        )
    return pos


def tpose(lengths: np.ndarray = BONE_LENGTHS) -> np.ndarray:
    leg = 0.5 * (lengths[14] + lengths[15] + lengths[18] + lengths[19])
    return fk(tpose_dirs(), lengths, np.array([0.0, leg, 0.0]))


def random_poses(rng: np.random.Generator, shape: tuple[int, ...], noise: float = 0.35):
    """T-pose directions perturbed at random, canonical lengths, pelvis at height LEG."""
    dirs = tpose_dirs() + noise * rng.standard_normal((*shape, NUM_JOINTS, 3))
    return fk(dirs, BONE_LENGTHS, np.array([0.0, LEG, 0.0]))


def synthetic_clip(rng: np.random.Generator, frames: int = 40) -> np.ndarray:
    """A walking-ish clip: smooth joint wobble, the root moving along a curve while turning."""
    t = np.linspace(0.0, 1.0, frames)
    phase = rng.uniform(0, 2 * np.pi, (NUM_JOINTS, 3))
    wobble = 0.3 * np.sin(2 * np.pi * 2 * t[:, None, None] + phase)
    dirs = tpose_dirs() + wobble
    lengths = BONE_LENGTHS * rng.uniform(0.9, 1.1, NUM_JOINTS)  # a rig of its own
    local = fk(dirs, lengths, np.array([0.0, 0.95, 0.0]))
    heading = 1.5 * np.pi * t + 0.3
    pos = rotate_y(local, heading)
    root = np.stack([3 * np.sin(2 * t), 0.05 * np.sin(9 * t), 4 * t - 1.0], axis=-1)
    return pos + root[:, None, :]


def test_tpose_faces_plus_z_and_is_its_own_model_space():
    pose = tpose()
    assert facing_yaw(pose) == pytest.approx(0.0, abs=1e-12)
    model, frame = to_model_space(pose)
    np.testing.assert_allclose(model, pose, atol=1e-12)
    np.testing.assert_allclose(frame.scale, 1.0, atol=1e-12)
    np.testing.assert_allclose(frame.lengths, BONE_LENGTHS, atol=1e-12)
    np.testing.assert_allclose(frame.root, 0.0, atol=1e-12)


@pytest.mark.parametrize("angle", [0.3, -2.0, np.pi / 2, 3.0])
def test_rotate_y_turns_the_facing(angle):
    pose = tpose()
    turned = rotate_y(pose, angle)
    assert np.angle(np.exp(1j * (facing_yaw(turned) - angle))) == pytest.approx(0.0, abs=1e-12)
    # +Z turns towards +X, and the rotation is undone by its opposite.
    np.testing.assert_allclose(
        rotate_y(np.array([0.0, 0.0, 1.0]), angle), [np.sin(angle), 0, np.cos(angle)]
    )
    np.testing.assert_allclose(rotate_y(turned, -angle), pose, atol=1e-12)
    np.testing.assert_allclose(turned[..., 1], pose[..., 1])


def test_rotate_y_batched_angles_align_with_leading_axes():
    rng = np.random.default_rng(0)
    poses = random_poses(rng, (5,))
    angles = rng.uniform(-np.pi, np.pi, 5)
    batched = rotate_y(poses, angles)
    for i in range(5):
        np.testing.assert_allclose(batched[i], rotate_y(poses[i], angles[i]))
    points = rng.standard_normal((5, 3))
    np.testing.assert_allclose(rotate_y(points, angles)[2], rotate_y(points[2], angles[2]))


def test_set_bone_lengths_keeps_directions_and_pelvis():
    rng = np.random.default_rng(1)
    poses = random_poses(rng, (6,)) + rng.standard_normal((6, 1, 3))
    new_lengths = rng.uniform(0.01, 2.0, (6, NUM_JOINTS))
    out = set_bone_lengths(poses, new_lengths)
    np.testing.assert_allclose(bone_lengths(out)[:, 1:], new_lengths[:, 1:], atol=1e-12)
    np.testing.assert_array_equal(out[:, 0], poses[:, 0])
    vec_in = poses - poses[:, np.maximum(PARENTS, 0)]
    vec_out = out - out[:, np.maximum(PARENTS, 0)]
    cos = (
        np.sum(vec_in * vec_out, -1)[:, 1:]
        / (np.linalg.norm(vec_in, axis=-1) * np.linalg.norm(vec_out, axis=-1))[:, 1:]
    )
    np.testing.assert_allclose(cos, 1.0, atol=1e-12)


def test_set_bone_lengths_zero_length_bones_fall_back():
    pose = tpose()
    # Bone l_forearm (shoulder -> elbow) collapsed: it takes its parent bone's direction (+X).
    collapsed = pose.copy()
    collapsed[JOINT_INDEX["l_forearm"]] = collapsed[JOINT_INDEX["l_upperarm"]]
    collapsed[JOINT_INDEX["l_hand"]] = collapsed[JOINT_INDEX["l_forearm"]] + [0, 0, 0.2]
    out = set_bone_lengths(collapsed, BONE_LENGTHS)
    elbow = out[JOINT_INDEX["l_forearm"]] - out[JOINT_INDEX["l_upperarm"]]
    np.testing.assert_allclose(elbow, [BONE_LENGTHS[JOINT_INDEX["l_forearm"]], 0, 0], atol=1e-12)
    # Spine collapsed onto the pelvis: +Y; and its child keeps its own direction.
    collapsed = pose.copy()
    collapsed[JOINT_INDEX["spine"]] = collapsed[0]
    out = set_bone_lengths(collapsed, BONE_LENGTHS)
    np.testing.assert_allclose(out[JOINT_INDEX["spine"]] - out[0], [0, BONE_LENGTHS[1], 0])
    assert np.all(np.isfinite(out))
    # A fully collapsed pose becomes a finite stick standing up.
    out = set_bone_lengths(np.zeros((NUM_JOINTS, 3)), BONE_LENGTHS)
    np.testing.assert_allclose(bone_lengths(out), BONE_LENGTHS, atol=1e-12)


def test_model_space_properties_on_a_clip():
    clip = synthetic_clip(np.random.default_rng(2))
    model, frame = to_model_space(clip)
    assert model.shape == clip.shape and model.dtype == np.float64
    np.testing.assert_allclose(
        bone_lengths(model), np.broadcast_to(BONE_LENGTHS, (40, 21)), atol=TOL
    )
    np.testing.assert_allclose(model[:, 0, [0, 2]], 0.0, atol=TOL)
    np.testing.assert_allclose(facing_yaw(model), 0.0, atol=TOL)
    assert frame.root.shape == (40, 3) and frame.yaw.shape == (40,)
    assert frame.lengths.shape == (40, 21) and frame.scale.shape == (40,)
    np.testing.assert_array_equal(frame.root[:, 1], 0.0)
    np.testing.assert_allclose(frame.root[:, [0, 2]], clip[:, 0, [0, 2]])
    np.testing.assert_allclose(frame.lengths, bone_lengths(clip))
    # Rig -> model -> rig is exact with the rig's own lengths.
    np.testing.assert_allclose(from_model_space(model, frame), clip, atol=TOL)


@settings(max_examples=60, deadline=None)
@given(
    yaw=st.floats(-np.pi, np.pi),
    shift=st.tuples(st.floats(-100, 100), st.just(0.0), st.floats(-100, 100)),
    scale=st.floats(0.01, 100),
    seed=st.integers(0, 2**16),
)
def test_translation_turning_and_scale_leave_model_space_unchanged(yaw, shift, scale, seed):
    """Horizontal moves, turns about +Y and uniform scaling (about the floor) change nothing.

    (A vertical move does: model space keeps the pelvis height above the floor y = 0.)
    """
    rng = np.random.default_rng(seed)
    poses = random_poses(rng, (3,))
    moved = scale * rotate_y(poses, yaw) + np.array(shift)
    model_a, _ = to_model_space(poses)
    model_b, frame_b = to_model_space(moved)
    np.testing.assert_allclose(model_b, model_a, atol=TOL)
    np.testing.assert_allclose(from_model_space(model_b, frame_b), moved, atol=TOL)
    np.testing.assert_allclose(frame_b.scale, 1.0 / scale, rtol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    yaw=st.floats(-np.pi, np.pi),
    shift=st.tuples(st.floats(-50, 50), st.just(0.0), st.floats(-50, 50)),
)
def test_whole_clip_moved_and_turned_gives_the_same_model_clip(yaw, shift):
    clip = synthetic_clip(np.random.default_rng(3))
    moved = rotate_y(clip, yaw) + np.array(shift)
    np.testing.assert_allclose(to_model_space(moved)[0], to_model_space(clip)[0], atol=TOL)


def test_model_to_rig_to_model_round_trips():
    rng = np.random.default_rng(4)
    model, _ = to_model_space(random_poses(rng, (10,)))
    # Some other rig, turned and placed somewhere: its frame takes the model poses there.
    rig_lengths = BONE_LENGTHS * rng.uniform(0.7, 1.3, NUM_JOINTS)
    other = fk(tpose_dirs(), rig_lengths, np.array([0.0, 1.0, 0.0]))
    other = np.broadcast_to(other, (10, NUM_JOINTS, 3))
    other = rotate_y(other, rng.uniform(-np.pi, np.pi, 10)) + rng.normal(0, 5, (10, 1, 3))
    _, frame = to_model_space(other)
    rig = from_model_space(model, frame)
    np.testing.assert_allclose(bone_lengths(rig), frame.lengths, atol=TOL)
    back, frame_back = to_model_space(rig, lengths=frame.lengths)
    np.testing.assert_allclose(back, model, atol=TOL)
    np.testing.assert_allclose(np.angle(np.exp(1j * (frame_back.yaw - frame.yaw))), 0.0, atol=TOL)
    np.testing.assert_allclose(frame_back.root, frame.root, atol=TOL)
    # With default (measured) lengths too.
    np.testing.assert_allclose(to_model_space(rig)[0], model, atol=TOL)


@pytest.mark.parametrize(
    "name, factors",
    [
        ("arms 20% longer", {n: 1.2 for n in ("l_forearm", "l_hand", "r_forearm", "r_hand")}),
        ("whole rig x0.01", {n: 0.01 for n in JOINTS}),
        ("whole rig x100", {n: 100.0 for n in JOINTS}),
        ("long legs short spine", {"l_shin": 1.3, "r_shin": 1.3, "spine": 0.6, "chest": 0.8}),
    ],
)
def test_non_canonical_proportions_map_to_canonical_and_back(name, factors):
    lengths = BONE_LENGTHS.copy()
    for joint, f in factors.items():
        lengths[JOINT_INDEX[joint]] *= f
    rng = np.random.default_rng(5)
    dirs = tpose_dirs() + 0.3 * rng.standard_normal((8, NUM_JOINTS, 3))
    leg = 0.5 * (lengths[14] + lengths[15] + lengths[18] + lengths[19])
    rig = fk(dirs, lengths, np.array([0.0, leg, 0.0]))
    rig = rotate_y(rig, 1.1) + np.array([2.0, 0.0, -3.0]) * lengths[1]
    model, frame = to_model_space(rig, lengths=lengths)
    np.testing.assert_allclose(
        bone_lengths(model), np.broadcast_to(BONE_LENGTHS, (8, 21)), atol=TOL
    )
    np.testing.assert_allclose(facing_yaw(model), 0.0, atol=TOL)
    np.testing.assert_allclose(frame.lengths, np.broadcast_to(lengths, (8, 21)))
    np.testing.assert_allclose(frame.scale, LEG / leg, rtol=1e-12)
    # The pelvis height is scaled by the leg ratio: a pelvis at leg height lands at LEG.
    np.testing.assert_allclose(model[:, 0, 1], LEG, rtol=1e-12)
    back = from_model_space(model, frame)
    np.testing.assert_allclose(bone_lengths(back), np.broadcast_to(lengths, (8, 21)), rtol=1e-9)
    np.testing.assert_allclose(back, rig, atol=TOL)


def test_feet_of_a_standing_rig_stay_on_the_floor():
    for factor in (0.01, 0.8, 1.0, 1.25, 100.0):
        model, _ = to_model_space(tpose(BONE_LENGTHS * factor))
        np.testing.assert_allclose(
            model[[JOINT_INDEX["l_foot"], JOINT_INDEX["r_foot"]], 1], 0.0, atol=1e-12
        )


def test_from_model_space_with_other_lengths_uses_their_leg_ratio():
    model, frame = to_model_space(tpose())
    longer = BONE_LENGTHS * 1.5
    rig = from_model_space(model, frame, lengths=longer)
    np.testing.assert_allclose(bone_lengths(rig), longer, atol=1e-12)
    np.testing.assert_allclose(rig[JOINT_INDEX["l_foot"], 1], 0.0, atol=1e-12)


def test_mirror_of_a_model_space_pose_stays_in_model_space():
    rng = np.random.default_rng(6)
    model, _ = to_model_space(random_poses(rng, (20,)) + rng.normal(0, 1, (20, 1, 3)))
    mirrored = mirror_pose(model)
    np.testing.assert_allclose(facing_yaw(mirrored), 0.0, atol=TOL)
    again, _ = to_model_space(mirrored)
    np.testing.assert_allclose(again, mirrored, atol=TOL)


def test_batches_of_clips_match_clip_by_clip_and_float32_is_accepted():
    rng = np.random.default_rng(7)
    clips = np.stack([synthetic_clip(rng, 12) for _ in range(3)])  # (3, 12, 21, 3)
    model, frame = to_model_space(clips)
    assert model.shape == clips.shape and frame.yaw.shape == (3, 12)
    for b in range(3):
        np.testing.assert_allclose(model[b], to_model_space(clips[b])[0], atol=1e-12)
    np.testing.assert_allclose(from_model_space(model, frame), clips, atol=TOL)
    # A single clip-wide lengths vector broadcasts over the batch.
    m2, f2 = to_model_space(clips, lengths=BONE_LENGTHS)
    assert f2.lengths.shape == (3, 12, 21)
    np.testing.assert_allclose(
        from_model_space(m2, f2), set_bone_lengths(clips, BONE_LENGTHS), atol=TOL
    )
    m32, _ = to_model_space(clips.astype(np.float32))
    assert m32.dtype == np.float64
    np.testing.assert_allclose(m32, model, atol=1e-5)


def test_flatten_and_unflatten():
    rng = np.random.default_rng(8)
    model = rng.standard_normal((2, 5, NUM_JOINTS, 3))
    vec = flatten_pose(model)
    assert vec.shape == (2, 5, 63)
    np.testing.assert_array_equal(vec[..., 3 * 4 : 3 * 4 + 3], model[..., 4, :])
    np.testing.assert_array_equal(unflatten_pose(vec), model)
    assert unflatten_pose(vec[0, 0]).shape == (NUM_JOINTS, 3)
    with pytest.raises(ValueError):
        unflatten_pose(np.zeros(62))
    with pytest.raises(ValueError):
        flatten_pose(np.zeros((20, 3)))


def test_body_frame_is_a_plain_dataclass():
    frame = BodyFrame(
        root=np.zeros(3), yaw=np.array(0.5), lengths=BONE_LENGTHS, scale=np.array(1.0)
    )
    rig = from_model_space(tpose(), frame)
    np.testing.assert_allclose(facing_yaw(rig), -0.5, atol=1e-12)


def test_yaw_matrix_turns_like_rotate_y():
    rng = np.random.default_rng(9)
    poses = random_poses(rng, (6,))
    angles = rng.uniform(-4.0, 4.0, 6)
    np.testing.assert_allclose(poses @ yaw_matrix(angles), rotate_y(poses, angles), atol=1e-15)
    np.testing.assert_allclose(poses[0] @ yaw_matrix(np.float64(0.4)), rotate_y(poses[0], 0.4),
                               atol=1e-15)


def _degenerate_across(rng: np.random.Generator) -> np.ndarray:
    """Poses whose across axis (after the canonical lengths) has a zero half, a half below
    the epsilon, is vertical or is zero; the facing guards of both code paths."""
    poses = random_poses(rng, (5,))
    j = {n: JOINT_INDEX[n] for n in ("chest", "l_thigh", "r_thigh", "l_clavicle", "r_clavicle",
                                     "l_upperarm", "r_upperarm")}
    up = np.array([0.0, 0.1, 0.0])
    poses[0, j["l_thigh"]] = poses[0, j["r_thigh"]]  # no hip vector: the shoulders alone
    poses[1, j["l_thigh"]] = poses[1, j["r_thigh"]] + [1e-14, 0.0, 0.0]  # below the epsilon
    # Vertical: hips and both shoulder chains straight up on the left, down on the right.
    poses[2, [j["l_thigh"], j["r_thigh"]]] = poses[2, 0] + [up, -up]
    poses[2, [j["l_clavicle"], j["r_clavicle"]]] = poses[2, j["chest"]] + [up, -up]
    poses[2, [j["l_upperarm"], j["r_upperarm"]]] = poses[2, j["chest"]] + [2 * up, -2 * up]
    # Zero: left and right hips and shoulders on each other.
    for left, right in (("l_thigh", "r_thigh"), ("l_clavicle", "r_clavicle"),
                        ("l_upperarm", "r_upperarm")):
        poses[3, j[left]] = poses[3, j[right]]
    return poses


@pytest.mark.parametrize("case", ["random", "degenerate"])
def test_a_single_pose_matches_its_batch(case):
    """A batch of one takes the scalar facing path; it must agree with the vectorized one."""
    rng = np.random.default_rng(10)
    poses = random_poses(rng, (30,)) if case == "random" else _degenerate_across(rng)
    turns = rng.uniform(-np.pi, np.pi, len(poses))
    poses = rotate_y(poses, turns) + rng.normal(0, 2, (len(poses), 1, 3))
    model, frame = to_model_space(poses)
    for i in range(len(poses)):
        one, one_frame = to_model_space(poses[i:i + 1])
        np.testing.assert_allclose(one[0], model[i], atol=1e-12)
        np.testing.assert_allclose(np.angle(np.exp(1j * (one_frame.yaw[0] - frame.yaw[i]))), 0.0,
                                   atol=1e-12)


def test_unchecked_conversions_match_the_checked_ones():
    """The pipeline's fast path (checked arrays, cached lengths, the yaw matrix reused)."""
    rng = np.random.default_rng(11)
    lengths = BONE_LENGTHS * rng.uniform(0.8, 1.2, NUM_JOINTS)
    for n in (1, 5):
        poses = random_poses(rng, (n,)) + rng.normal(0, 1, (n, 1, 3))
        batch_lengths = np.repeat(lengths[None], n, axis=0)
        model, frame = to_model_space(poses, lengths)
        fast, fast_frame, turn = to_model_space_unchecked(poses, batch_lengths,
                                                          leg_scale(batch_lengths))
        np.testing.assert_allclose(fast, model, atol=1e-12)
        for key in ("root", "yaw", "lengths", "scale"):
            np.testing.assert_allclose(getattr(fast_frame, key), getattr(frame, key), atol=1e-12)
        np.testing.assert_allclose(turn, yaw_matrix(frame.yaw), atol=1e-15)
        edited = model + rng.normal(0, 0.05, model.shape)
        for fix in (True, False):
            np.testing.assert_allclose(from_model_space_unchecked(edited, fast_frame, fix, turn),
                                       from_model_space(edited, frame, fix_lengths=fix),
                                       atol=1e-12)


def test_offset_scales_follow_each_limb() -> None:
    """A target's offset scales by the limb that moves it: on canonical proportions (or a
    rig scaled as a whole) every joint takes the legs' scale; arms made longer shrink the
    hands' offsets by as much, and nothing else's."""
    from blender_addon.core.normalize import leg_scale, offset_scales
    from blender_addon.core.skeleton import BONE_LENGTHS, JOINT_INDEX

    for k in (1.0, 0.01, 2.0):
        lengths = BONE_LENGTHS[None] * k
        np.testing.assert_allclose(offset_scales(lengths, leg_scale(lengths)),
                                   np.full((1, 21), 1.0 / k), rtol=1e-12)
    lengths = BONE_LENGTHS.copy()
    arm = [JOINT_INDEX[j] for j in ("l_forearm", "l_hand", "r_forearm", "r_hand")]
    lengths[arm] *= 1.25
    scales = offset_scales(lengths[None], leg_scale(lengths[None]))[0]
    hands = [JOINT_INDEX["l_hand"], JOINT_INDEX["r_hand"]]
    np.testing.assert_allclose(scales[hands], 1.0 / 1.25, rtol=1e-12)
    np.testing.assert_allclose(np.delete(scales, hands), 1.0, rtol=1e-12)
    lengths[JOINT_INDEX["l_shin"]] *= 0.5  # the left thigh: the left foot's and toe's scale
    scales = offset_scales(lengths[None], leg_scale(lengths[None]))[0]
    left = BONE_LENGTHS[JOINT_INDEX["l_shin"]] + BONE_LENGTHS[JOINT_INDEX["l_foot"]]
    short = 0.5 * BONE_LENGTHS[JOINT_INDEX["l_shin"]] + BONE_LENGTHS[JOINT_INDEX["l_foot"]]
    for j in ("l_foot", "l_toe"):
        assert scales[JOINT_INDEX[j]] == pytest.approx(left / short)
    assert scales[JOINT_INDEX["r_foot"]] == pytest.approx(1.0)
