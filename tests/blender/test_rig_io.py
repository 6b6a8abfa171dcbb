"""rig_io against Blender itself: rotation modes, FK vs evaluated pose bones, pose writes in
each bone's own mode, and keyframes through F-curve data (4.5 layered actions, 5.0
channelbags) that leave keys outside the written range alone."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from mathutils import Euler, Quaternion  # noqa: E402

from blender_addon import mapped_rig, rig_io, rig_keys  # noqa: E402
from blender_addon.core import conversions  # noqa: E402
from tests.blender import rigs  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_scene")
EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
ANGLE_TOL = 1e-6


def _random_quats(rng: np.random.Generator, n: int, spread: float = 0.6) -> np.ndarray:
    q = np.concatenate([np.ones((n, 1)), rng.normal(0.0, spread, (n, 3))], axis=1)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _same_rotation(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(np.abs(np.sum(a * b, axis=-1)) - 1.0) < ANGLE_TOL))


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_euler_conversion_matches_mathutils(order: str) -> None:
    rng = np.random.default_rng(0)
    angles = rng.uniform(-np.pi, np.pi, (20, 3))
    ours = conversions.euler_to_quat(angles, order)
    theirs = np.array([tuple(Euler(a, order).to_quaternion()) for a in angles])
    assert _same_rotation(ours, theirs)


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_quat_to_euler_matches_mathutils(order: str) -> None:
    """The same triple as ``Quaternion.to_euler(order[, compat])``, with references far
    from the result (whole turns away) and near gimbal lock."""
    rng = np.random.default_rng(7)
    q = _random_quats(rng, 200, spread=2.0)
    middle = "XYZ".index(order[1])
    locked = rng.uniform(-np.pi, np.pi, (20, 3))
    locked[:, middle] = np.pi / 2 - rng.uniform(0.0, 1e-6, 20)
    q = np.concatenate([q, conversions.euler_to_quat(locked, order)])
    compat = rng.uniform(-10.0, 10.0, (len(q), 3))
    plain = np.array([tuple(Quaternion(v).to_euler(order)) for v in q])
    near = np.array([tuple(Quaternion(v).to_euler(order, Euler(c, order)))
                     for v, c in zip(q, compat, strict=True)])
    assert np.allclose(conversions.quat_to_euler(q, order), plain, atol=1e-4)
    assert np.allclose(conversions.quat_to_euler(q, order, compat), near, atol=1e-4)


def test_euler_keys_match_mathutils_frame_by_frame() -> None:
    """Keys over frames: each frame compatible with the last, as Blender converts."""
    t = np.linspace(0.0, 5.0 * np.pi, 300)
    angles = np.stack([0.4 * np.sin(2.0 * t), t, 0.3 * np.cos(t)], axis=1)
    q = conversions.euler_to_quat(angles, "ZXY")
    ours = conversions.quats_to_eulers(q, "ZXY", np.zeros(3))
    prev = Euler((0.0, 0.0, 0.0), "ZXY")
    theirs = []
    for v in q:
        prev = Quaternion(v).to_euler("ZXY", prev)
        theirs.append(tuple(prev))
    assert np.allclose(ours, theirs, atol=1e-4)


def test_axis_angle_round_trip() -> None:
    rng = np.random.default_rng(1)
    q = _random_quats(rng, 20, spread=2.0)
    aa = conversions.quat_to_axis_angle(q)
    theirs = np.array([tuple(Quaternion(a[1:], a[0])) for a in aa])
    assert _same_rotation(conversions.axis_angle_to_quat(aa), q)
    assert _same_rotation(theirs, q)


def _randomize_pose(obj: bpy.types.Object, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for pb in obj.pose.bones:
        q = Quaternion(_random_quats(rng, 1, 0.3)[0])
        if pb.rotation_mode == "QUATERNION":
            pb.rotation_quaternion = q
        elif pb.rotation_mode == "AXIS_ANGLE":
            axis, angle = q.to_axis_angle()
            pb.rotation_axis_angle = (angle, *axis)
        else:
            pb.rotation_euler = q.to_euler(pb.rotation_mode)
    obj.pose.bones[0].location = rng.normal(0.0, 0.1, 3)


def _assert_kinematics_match_blender(obj: bpy.types.Object, info: rig_io.RigInfo) -> None:
    """The add-on's forward kinematics of the pose on the rig put every joint where
    Blender's evaluation does."""
    pose = rig_io.read_pose(obj, info)
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    mw = rig_io.world_matrix(obj)
    ours = joints @ mw[:3, :3].T + mw[:3, 3]
    theirs = rigs.mapped_heads(obj)
    for j, name in enumerate(rigs.JOINTS):
        assert np.allclose(ours[j], theirs[name], atol=1e-5), name


@pytest.mark.parametrize("kind", ["mixamo", "rigify"])
def test_forward_kinematics_matches_blender(kind: str) -> None:
    obj = rigs.mixamo() if kind == "mixamo" else rigs.rigify()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    _randomize_pose(obj, seed=2)
    _assert_kinematics_match_blender(obj, mapped_rig.rig_for(obj))


def test_write_pose_keeps_each_bones_rotation_mode() -> None:
    obj = rigs.rigify()  # Euler XYZ / ZXY and axis-angle bones among quaternion ones
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    info = mapped_rig.rig_for(obj)
    modes_before = [pb.rotation_mode for pb in obj.pose.bones]
    pose = rig_io.read_pose(obj, info)
    rng = np.random.default_rng(3)
    quats = pose.quats.copy()
    quats[list(info.mapped)] = _random_quats(rng, len(info.mapped))
    locs = pose.locations.copy()
    locs[list(info.roots)] = rng.normal(0.0, 5.0, (len(info.roots), 3))
    written = rig_io.write_pose(obj, info, quats, locs, pose)
    assert [pb.rotation_mode for pb in obj.pose.bones] == modes_before
    after = rig_io.read_pose(obj, info)
    assert rig_io.read_pose(obj, info, written) is written  # the pose as written, exactly
    assert np.array_equal(after.raw, written.raw) and np.array_equal(after.codes, written.codes)
    for name in ("quaternion", "eulers", "axis_angles", "locations"):
        assert np.array_equal(getattr(after, name), getattr(written, name))
    assert _same_rotation(after.quats, written.quats)
    mapped = list(info.mapped)
    assert _same_rotation(after.quats[mapped], quats[mapped])
    assert np.allclose(after.locations[list(info.roots)], locs[list(info.roots)], atol=1e-4)
    unmapped = [b for b in range(len(info.names)) if b not in info.mapped]
    assert np.array_equal(after.quats[unmapped], pose.quats[unmapped])
    euler_bone = obj.pose.bones["DEF-forearm.L"]
    assert euler_bone.rotation_euler != Euler((0, 0, 0))  # written in Euler, not quaternion
    assert tuple(euler_bone.rotation_quaternion) == (1.0, 0.0, 0.0, 0.0)


def test_settings_are_stored_without_tagging_the_rig() -> None:
    """``store_settings`` writes what ``foreach_set`` would (read back through RNA, for items
    that stored a value before and a new one that never did), and leaves the armature
    untagged: Blender's next update evaluates nothing."""
    obj = rigs.mixamo()
    items = obj.npe.base_pose
    for name in ("a", "b"):
        items.add().bone = name
    items[0].written = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
    items[1].written = (0.5,) * 7
    view_layer = bpy.context.view_layer
    view_layer.update()
    updated: list[str] = []

    def collect(_scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
        updated.extend(u.id.name for u in depsgraph.updates)

    rows = np.arange(14, dtype=np.float64).reshape(2, 7) / 3.0
    bpy.app.handlers.depsgraph_update_post.append(collect)
    try:
        rig_io.store_settings(obj, "base_pose", "written", rows)
        view_layer.update()
    finally:
        bpy.app.handlers.depsgraph_update_post.remove(collect)
    assert obj.name not in updated
    assert np.array_equal([tuple(i.written) for i in items], rows.astype(np.float32))
    items.add().bone = "c"  # never stored: written through RNA instead
    rows = np.ones((3, 7)) / 7.0
    rig_io.store_settings(obj, "base_pose", "written", rows)
    assert np.array_equal([tuple(i.written) for i in items], rows.astype(np.float32))


def test_write_keys_merges_with_existing_keys() -> None:
    obj = rigs.rigify()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    info = mapped_rig.rig_for(obj)
    # Keys made the ordinary way first (a user's animation), every 5 frames.
    for frame in range(1, 41, 5):
        obj.pose.bones["DEF-spine.001"].rotation_quaternion = \
            Quaternion((1.0, 0.01 * frame, 0.0, 0.0)).normalized()
        obj.pose.bones["DEF-spine.001"].keyframe_insert("rotation_quaternion", frame=frame)
    before = rigs.keys(obj)
    pose = rig_io.read_pose(obj, info)
    frames = np.arange(10, 21)
    rng = np.random.default_rng(4)
    quats = np.repeat(pose.quats[None], len(frames), axis=0)
    quats[:, list(info.mapped)] = _random_quats(rng, len(frames) * len(info.mapped)
                                                ).reshape(len(frames), -1, 4)
    locs = np.repeat(pose.locations[None], len(frames), axis=0)
    n = rig_keys.write_keys(obj, info, frames, quats, locs)
    assert n > 0
    after = rigs.keys(obj)
    path = rig_keys.bone_path("DEF-spine.001", "rotation_quaternion")
    for i in range(4):
        old, new = before[(path, i)], after[(path, i)]
        outside = (old[:, 0] < 10) | (old[:, 0] > 20)
        new_outside = (new[:, 0] < 10) | (new[:, 0] > 20)
        assert np.array_equal(old[outside], new[new_outside])  # untouched
        assert np.array_equal(new[~new_outside, 0], frames)  # ours, one per frame
    # Written values evaluate back to the rotations (per frame, sign-agnostic).
    bag = rig_keys.channelbag(obj)
    b = info.names.index("DEF-spine.001")
    got = np.array([[bag.fcurves.find(path, index=i).evaluate(float(f)) for i in range(4)]
                    for f in frames])
    assert _same_rotation(got / np.linalg.norm(got, axis=1, keepdims=True), quats[:, b])
    # An Euler bone is keyed on rotation_euler, an axis-angle one on rotation_axis_angle.
    assert (rig_keys.bone_path("DEF-forearm.L", "rotation_euler"), 0) in after
    assert (rig_keys.bone_path("DEF-upper_arm.R", "rotation_axis_angle"), 0) in after
    assert (rig_keys.bone_path("DEF-spine", "location"), 2) in after  # the root bone


def test_write_keys_on_an_object_without_animation() -> None:
    obj = rigs.mixamo()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    info = mapped_rig.rig_for(obj)
    pose = rig_io.read_pose(obj, info)
    rig_keys.write_keys(obj, info, [7], pose.quats[None], pose.locations[None])
    anim = obj.animation_data
    assert anim.action is not None
    if hasattr(anim.action, "slots"):  # 4.4+: layered actions
        assert anim.action_slot is not None
    keys = rigs.keys(obj)
    assert len(keys) == 4 * len(info.mapped) + 3 * len(info.roots)
    assert all(k.shape == (1, 2) and k[0, 0] == 7 for k in keys.values())


def test_a_rig_without_toe_bones_uses_the_foot_tails() -> None:
    bones = [b for b in rigs.mixamo_bones() if "Toe" not in b[0]]
    obj = rigs.build_armature("NoToes", bones)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert "l_toe" not in mapped_rig.mapping_dict(obj.data)
    _randomize_pose(obj, seed=5)
    info = mapped_rig.rig_for(obj)
    pose = rig_io.read_pose(obj, info)
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    bpy.context.view_layer.update()
    for side in ("Left", "Right"):
        tail = np.array(obj.pose.bones[f"mixamorig:{side}Foot"].tail)
        assert np.allclose(joints[rigs.JOINTS.index(f"{side[0].lower()}_toe")], tail, atol=1e-5)


def _with_org_shoulder(influence: float) -> bpy.types.Object:
    """The Mixamo test rig made a control rig's way: the left arm hangs from
    ``ORG-LeftShoulder`` (a copy of the clavicle, under the chest), which copies the
    clavicle's transforms (world to world) with ``influence``."""
    bones = []
    for name, parent, head, tail in rigs.mixamo_bones():
        if name == "mixamorig:LeftShoulder":  # made first: it comes before its source
            bones.append(("ORG-LeftShoulder", parent, head, tail))
        bones.append((name, "ORG-LeftShoulder" if name == "mixamorig:LeftArm" else parent,
                      head, tail))
    obj = rigs.build_armature("org_rig", bones)
    copy = obj.pose.bones["ORG-LeftShoulder"].constraints.new("COPY_TRANSFORMS")
    copy.target, copy.subtarget, copy.influence = obj, "mixamorig:LeftShoulder", influence
    return obj


@pytest.mark.parametrize("influence", [1.0, 0.5])
def test_a_bone_that_copies_a_mapped_one_carries_its_children_with_it(
        influence: float) -> None:
    """With the whole copy, the rig the solve models hangs the arm from the clavicle, and
    its forward kinematics match Blender's evaluation (the hierarchy alone leaves the arm
    on the chest); half a copy is not modelled (the bone keeps its own parent)."""
    obj = _with_org_shoulder(influence)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    # By topology the clavicle is the arm's parent, the ORG bone: the user picks the
    # control in Rig Mapping > Joints instead.
    item = next(i for i in obj.data.npe_mapping.joints if i.joint == "l_clavicle")
    item.bone = "mixamorig:LeftShoulder"
    _randomize_pose(obj, seed=3)
    obj.pose.bones["ORG-LeftShoulder"].rotation_quaternion = (1.0, 0.0, 0.0, 0.0)  # unposed
    info = mapped_rig.rig_for(obj)
    assert mapped_rig.mapping_dict(obj.data)["l_clavicle"] == "mixamorig:LeftShoulder"
    assert info.names.index("ORG-LeftShoulder") < info.names.index("mixamorig:LeftShoulder")
    org = list(info.needed).index(info.names.index("ORG-LeftShoulder"))
    parent = info.names[info.needed[int(info.rig.parents[org])]]
    if influence < 1.0:
        assert parent == "mixamorig:Spine2"
        return
    assert parent == "mixamorig:LeftShoulder"
    _assert_kinematics_match_blender(obj, info)
