"""Keys as Blender makes them: Auto Keying keys what a solve changed (Live too), on the
active keying set when there is one, in the scene's key type and the user's
interpolation; keys that exist keep their types and handles."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_addon import live, rig_controls, rig_keys  # noqa: E402
from tests.blender import rigs  # noqa: E402

FRAME = 12
HAND_MOVE = np.array([0.08, -0.12, 0.10])  # m, world
TURNED = 1e-6  # 1 - |dot|: a bone turned this much by a solve gets a key


@pytest.fixture
def keyed_rig(mixamo_rig: bpy.types.Object) -> Iterator[bpy.types.Object]:
    """The Mixamo-style rig with its rest pose keyed at frames 1 and 24 (an animation),
    Auto Keying's and the preferences' settings restored afterwards."""
    scene = bpy.context.scene
    prefs = bpy.context.preferences.edit
    kept = (prefs.keyframe_new_interpolation_type, prefs.keyframe_new_handle_type,
            prefs.use_keyframe_insert_available)
    for frame in (1, 24):
        scene.frame_set(frame)
        assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(FRAME)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    yield mixamo_rig
    scene.tool_settings.use_keyframe_insert_auto = False
    scene.keying_sets_all.active = None
    (prefs.keyframe_new_interpolation_type, prefs.keyframe_new_handle_type,
     prefs.use_keyframe_insert_available) = kept


def _drag(obj: bpy.types.Object, use_live: bool = False) -> None:
    empty = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    empty.location = np.array(empty.location) + HAND_MOVE
    bpy.context.view_layer.update()
    if use_live:
        live.drag_paused()
    else:
        rigs.select_only(obj)
        assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}


def _rotations(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    return {pb.name: np.array(pb.rotation_quaternion) for pb in obj.pose.bones}


def _keys_at(obj: bpy.types.Object, frame: int) -> dict[str, bpy.types.Keyframe]:
    bag = rig_keys.channelbag(obj)
    return {f"{fc.data_path}[{fc.array_index}]": k for fc in bag.fcurves
            for k in fc.keyframe_points if abs(k.co[0] - frame) < 1e-3}


@pytest.mark.parametrize("use_live", [False, True], ids=["solve", "live"])
def test_auto_keying_keys_the_changed_bones_as_blender_would(keyed_rig: bpy.types.Object,
                                                            use_live: bool) -> None:
    scene = bpy.context.scene
    prefs = bpy.context.preferences.edit
    scene.tool_settings.use_keyframe_insert_auto = True
    scene.tool_settings.keyframe_type = "BREAKDOWN"
    prefs.keyframe_new_interpolation_type = "LINEAR"
    prefs.keyframe_new_handle_type = "VECTOR"
    scene.npe.live = use_live
    assert not _keys_at(keyed_rig, FRAME)
    before = _rotations(keyed_rig)
    _drag(keyed_rig, use_live)
    scene.npe.live = False
    turn = {n: 1.0 - abs(q @ before[n]) for n, q in _rotations(keyed_rig).items()}
    keys = _keys_at(keyed_rig, FRAME)
    keyed = {rig_controls.parse_bone_path(k.rsplit("[", 1)[0])[0] for k in keys}
    assert {n for n, t in turn.items() if t > TURNED} <= keyed  # what turned is keyed
    assert keyed <= {n for n, t in turn.items() if t > 0.0}  # and nothing else
    assert {"mixamorig:RightArm", "mixamorig:RightForeArm"} <= keyed
    assert len(keyed) < len(turn)  # the bones the edit left alone have no key
    for key in keys.values():
        assert key.type == "BREAKDOWN" and key.interpolation == "LINEAR"
        assert key.handle_left_type == key.handle_right_type == "VECTOR"
    shown = rigs.pose_matrices(keyed_rig)
    scene.frame_set(FRAME + 1)
    scene.frame_set(FRAME)  # the keys give the solved pose back
    assert np.allclose(rigs.pose_matrices(keyed_rig), shown, atol=1e-5)


def test_keys_that_exist_keep_their_type_and_handles(keyed_rig: bpy.types.Object) -> None:
    scene = bpy.context.scene
    scene.frame_set(24)
    for key in _keys_at(keyed_rig, 24).values():
        key.type = "EXTREME"
        key.interpolation = "CONSTANT"
        key.handle_left_type = key.handle_right_type = "FREE"
    before = len(rig_keys.channelbag(keyed_rig).fcurves)
    scene.tool_settings.use_keyframe_insert_auto = True
    _drag(keyed_rig)
    keys = _keys_at(keyed_rig, 24)
    assert len(rig_keys.channelbag(keyed_rig).fcurves) == before  # no channel added
    for key in keys.values():
        assert (key.type, key.interpolation, key.handle_left_type) == \
            ("EXTREME", "CONSTANT", "FREE")
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    assert all(k.type == "EXTREME" for k in _keys_at(keyed_rig, 24).values())


@pytest.mark.parametrize(("keying_set", "props"), [
    ("Rotation", {"rotation_quaternion"}),
    ("LocRotScale", {"rotation_quaternion", "location", "scale"}),
])
def test_auto_keying_uses_the_active_keying_set(keyed_rig: bpy.types.Object,
                                                keying_set: str, props: set[str]) -> None:
    scene = bpy.context.scene
    scene.tool_settings.use_keyframe_insert_auto = True
    scene.keying_sets_all.active = next(k for k in scene.keying_sets_all
                                        if k.bl_idname == keying_set)
    _drag(keyed_rig)
    keys = _keys_at(keyed_rig, FRAME)
    keyed = {rig_controls.parse_bone_path(k.rsplit("[", 1)[0])[1] for k in keys}
    assert keyed == props


def test_insert_keyframe_takes_the_scenes_key_type(keyed_rig: bpy.types.Object) -> None:
    scene = bpy.context.scene
    scene.tool_settings.keyframe_type = "JITTER"
    _drag(keyed_rig)
    assert not _keys_at(keyed_rig, FRAME)  # Auto Keying off: the solve keys nothing
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    keys = _keys_at(keyed_rig, FRAME)
    assert keys and all(k.type == "JITTER" for k in keys.values())


STRIP_START, STRIP_SCALE = 101, 2.0  # the action's frame 1 at frame 101, played half speed


@pytest.mark.parametrize("use_live", [False, True], ids=["solve", "live"])
def test_keys_in_a_tweaked_strip_land_in_its_time(keyed_rig: bpy.types.Object,
                                                  use_live: bool) -> None:
    """The action pushed down into an NLA strip that starts at frame 101 and plays at half
    speed, tweaked (Tab): Auto Keying and Insert Keyframe key the action in the strip's
    time, as Blender's keying does, so a frame change gives the solved pose back. (They
    were refused: "leave tweak mode".)"""
    obj = keyed_rig
    scene = bpy.context.scene
    anim = obj.animation_data
    action = anim.action
    track = anim.nla_tracks.new()
    strip = track.strips.new("clip", STRIP_START, action)
    strip.scale = STRIP_SCALE
    anim.action = None
    anim.nla_tracks.active = track
    strip.select = True
    anim.use_tweak_mode = True
    assert anim.use_tweak_mode and anim.action == action
    scene.frame_end = 200
    at = int(STRIP_START + (FRAME - 1) * STRIP_SCALE)  # the action's FRAME
    scene.frame_set(at)
    scene.tool_settings.use_keyframe_insert_auto = True
    scene.npe.live = use_live
    _drag(obj, use_live)
    scene.npe.live = False
    keys = _keys_at(obj, FRAME)
    assert {"mixamorig:RightArm", "mixamorig:RightForeArm"} <= {
        rig_controls.parse_bone_path(k.rsplit("[", 1)[0])[0] for k in keys}
    assert not _keys_at(obj, at)
    shown = rigs.pose_matrices(obj)
    scene.frame_set(at + 1)
    scene.frame_set(at)
    assert np.allclose(rigs.pose_matrices(obj), shown, atol=1e-5)
    scene.tool_settings.use_keyframe_insert_auto = False
    later = at + 2 * int(STRIP_SCALE)  # the action's FRAME + 2
    scene.frame_set(later)
    _drag(obj)
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    assert _keys_at(obj, FRAME + 2) and not _keys_at(obj, later)
    shown = rigs.pose_matrices(obj)
    scene.frame_set(at)
    scene.frame_set(later)
    assert np.allclose(rigs.pose_matrices(obj), shown, atol=1e-5)
    anim.use_tweak_mode = False
