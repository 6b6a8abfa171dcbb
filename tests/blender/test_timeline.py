"""A shot, not a frame: each frame's edit starts from that frame, keyed frames stay as
keyed, unkeyed edits are dropped with a warning, and two characters never share their
requests (read back from Blender's evaluated rig)."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_addon import live  # noqa: E402
from blender_addon.errors import STATUS  # noqa: E402
from tests.blender import rigs  # noqa: E402

KEYED_FRAME = 10
OTHER_FRAME = 40
MOVE_10 = np.array([0.05, -0.10, 0.08])  # world metres, the frame-10 drag (14 cm)
MOVE_40 = np.array([0.0, -0.09, 0.12])  # the frame-40 drag (15 cm)
SAME_POSE_M = 1e-3  # the bar: the frame-40 edit equals a fresh session's
KEYED_M = 1e-4  # a keyed frame stays as keyed
FOLLOW_M = 1e-4  # an effector snapped onto the frame's joint
OTHER_CHARACTER_M = 1e-4


def _heads(obj: bpy.types.Object) -> np.ndarray:
    heads = rigs.mapped_heads(obj)
    return np.array([heads[j] for j in sorted(heads)])


def _drag(obj: bpy.types.Object, joint: str, move: np.ndarray, use_live: bool) -> None:
    """Move the joint's empty and solve: the Solve button, or Live (its pause too)."""
    empty = rigs.effector_empty(obj, joint)
    empty.location = np.array(empty.location) + move
    bpy.context.view_layer.update()  # Live: the depsgraph handler solves here
    if use_live:
        live.drag_paused()
    else:
        rigs.select_only(obj)
        assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}


def _mapped_bvh(rig_of_kind) -> bpy.types.Object:
    obj = rig_of_kind("bvh")
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    return obj


@pytest.mark.parametrize("use_live", [False, True], ids=["solve", "live"])
def test_an_edit_on_another_frame_starts_from_that_frame(scene: bpy.types.Scene,
                                                        rig_of_kind, use_live: bool) -> None:
    obj = _mapped_bvh(rig_of_kind)
    scene.frame_set(KEYED_FRAME)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    scene.npe.live = use_live
    _drag(obj, "r_hand", MOVE_10, use_live)
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    keyed = _heads(obj)

    scene.frame_set(OTHER_FRAME)
    clip = rigs.mapped_heads(obj)  # the clip's own frame 40
    for joint in ("l_hand", "r_hand"):  # the empties followed the frame
        empty = np.array(rigs.effector_empty(obj, joint).location)
        assert np.linalg.norm(empty - clip[joint]) < FOLLOW_M
    _drag(obj, "r_hand", MOVE_40, use_live)
    edited = _heads(obj)
    left = rigs.mapped_heads(obj)["l_hand"]
    assert np.linalg.norm(left - clip["l_hand"]) < SAME_POSE_M

    # The same drag in a fresh session at frame 40: another import of the clip.
    fresh = _mapped_bvh(rig_of_kind)
    scene.frame_set(OTHER_FRAME)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    _drag(fresh, "r_hand", MOVE_40, use_live)
    gap = np.linalg.norm(_heads(fresh) - edited, axis=1).max()
    assert gap < SAME_POSE_M, f"frame {OTHER_FRAME} is {gap * 1e3:.2f} mm from a fresh edit"

    scene.npe.live = False
    scene.frame_set(KEYED_FRAME)  # the keyed edit is still there
    drift = np.linalg.norm(_heads(obj) - keyed, axis=1).max()
    assert drift < KEYED_M
    print(f"\nFIGURES live={use_live}: frame {OTHER_FRAME} vs a fresh session "
          f"{gap * 1e3:.4f} mm, left hand vs the clip "
          f"{np.linalg.norm(left - clip['l_hand']) * 1e3:.4f} mm, frame {KEYED_FRAME} vs "
          f"its keys {drift * 1e3:.4f} mm")


def test_an_unkeyed_edit_is_dropped_with_a_warning(scene: bpy.types.Scene,
                                                  rig_of_kind) -> None:
    obj = _mapped_bvh(rig_of_kind)
    scene.frame_set(KEYED_FRAME)
    clip = _heads(obj)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    _drag(obj, "r_hand", MOVE_10, use_live=False)
    assert np.linalg.norm(_heads(obj) - clip, axis=1).max() > 0.05
    STATUS.pop(obj.name, None)
    scene.frame_set(OTHER_FRAME)
    assert "not keyed" in STATUS.get(obj.name, "")
    scene.frame_set(KEYED_FRAME)  # Blender's keys are back
    assert np.linalg.norm(_heads(obj) - clip, axis=1).max() < KEYED_M


def test_a_request_stays_on_its_frame(scene: bpy.types.Scene, rig_of_kind) -> None:
    obj = _mapped_bvh(rig_of_kind)
    scene.frame_set(KEYED_FRAME)
    knee = obj.npe.metrics["l_knee_bend"]
    knee.enabled = True
    knee.set_requested(knee.measured + 25.0)
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(OTHER_FRAME)
    clip = _heads(obj)
    assert not knee.enabled  # back to the measured value, off
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    _drag(obj, "r_hand", MOVE_40, use_live=False)
    knees = [sorted(rigs.mapped_heads(obj)).index(j) for j in ("l_shin", "l_foot")]
    assert np.linalg.norm(_heads(obj)[knees] - clip[knees], axis=1).max() < 0.01


def test_two_characters_never_share_requests_or_options(scene: bpy.types.Scene) -> None:
    a, b = rigs.mixamo(), rigs.mixamo()
    b.location.x = 2.0
    for obj in (a, b):
        rigs.select_only(obj)
        assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    _drag(b, "r_hand", MOVE_40, use_live=False)
    alone = _heads(b)
    assert bpy.ops.npe.reset_edits("EXEC_DEFAULT", True) == {"FINISHED"}

    reset = _heads(b)
    rigs.select_only(a)
    knee = a.npe.metrics["l_knee_bend"]
    knee.enabled = True
    knee.set_requested(knee.measured + 25.0)  # bends A's knee
    a.npe.body_follow = 1.0
    assert np.linalg.norm(_heads(b) - reset, axis=1).max() < OTHER_CHARACTER_M
    _drag(b, "r_hand", MOVE_40, use_live=False)
    assert not any(m.enabled for m in b.npe.metrics)
    gap = np.linalg.norm(_heads(b) - alone, axis=1).max()
    assert gap < OTHER_CHARACTER_M, f"A's request moved B by {gap * 1e3:.3f} mm"
    print(f"\nFIGURES two characters: A's request moved B by {gap * 1e3:.6f} mm")
    assert np.linalg.norm(reset - _heads(b), axis=1).max() > 0.05  # B was dragged
