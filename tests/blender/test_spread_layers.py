"""Spread Edit's Layer mode over what an animator already has (issue 49), read back from
the rig Blender evaluates: the action untouched, muted or faded; layers stacked; channels
the action does not key; Esc; keys set over a layer; a cycle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from mathutils import Quaternion, Vector  # noqa: E402

from blender_addon import propagation, rig_keys  # noqa: E402
from blender_addon.errors import STATUS  # noqa: E402
from tests.blender import rigs  # noqa: E402
from tests.blender.test_spread_edit import EDIT_TOL, HALF_RAD, MM, MUTED_TOL  # noqa: E402
from training.blender_side import spread_figures  # noqa: E402
from training.blender_side.spread_figures import CENTER, HAND  # noqa: E402

# Influence 0.5 turns each bone half as far: measured, the hand then moves 0.42 of its
# full move (9.8 mm from the straight midpoint of a 10 cm move: rotations about joints do
# not halve positions; the issue asks 1 mm).
HALF_SHARE = (0.38, 0.46)


def test_layer_mode_leaves_the_action_and_fades(clip_rig: bpy.types.Object) -> None:
    got = spread_figures.layer_mode(clip_rig)
    print(f"FIGURES layer mode: {got}")
    assert got["action_unchanged"] and got["blend_type"] == "COMBINE"  # bit for bit
    assert got["edited_hand_off_target_mm"] < EDIT_TOL * MM
    assert got["largest_change_mm"] > 10.0
    assert got["muted_off_motion_mm"] < MUTED_TOL * MM
    # Half of every channel's change (Euler angles and locations add in Combine mode) ...
    assert got["half_channels_off_rad"] < HALF_RAD
    # ... is not half of every joint's move: the hand moves HALF_SHARE of its full move.
    assert HALF_SHARE[0] < got["half_hand_share"] < HALF_SHARE[1]


def test_layer_mode_on_quaternion_channels(scene: bpy.types.Scene, bandai_bvh: Path) -> None:
    """The clip keyed in quaternions (as an FBX import keys them), whose rotations are far
    from the rest pose: the layer's turns compose with the action's as Blender's Combine
    mode does (the edited hand 0.002 mm off its target; composed the other way round,
    49 mm), and muting it gives the motion back."""
    obj = rigs.import_bvh(bandai_bvh, rotate_mode="QUATERNION")
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert all(pb.rotation_mode == "QUATERNION" for pb in obj.pose.bones)
    scene.frame_set(CENTER)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    got = spread_figures.layer_mode(obj)
    print(f"FIGURES layer mode, quaternions: {got}")
    assert got["action_unchanged"] and got["largest_change_mm"] > 10.0
    assert got["edited_hand_off_target_mm"] < EDIT_TOL * MM
    assert got["muted_off_motion_mm"] < MUTED_TOL * MM


def _hand_layer(obj: bpy.types.Object) -> None:
    """The right hand moved at frame CENTER and spread into a Layer over +-12 frames."""
    bpy.context.scene.frame_set(CENTER)
    spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="LAYER", range_mode="RADIUS",
                                   radius=12) == {"FINISHED"}


def test_over_a_layer_keys_are_refused(clip_rig: bpy.types.Object) -> None:
    """Keys and Every Frame write the action, read alone. Where an earlier Layer (an NLA
    track the action is combined over) changes the motion, they are refused, naming the
    track and Layer mode, and change nothing (read as it was, the second hand landed
    21.8 mm off its target); away from that layer's frames they spread as on the bare
    action."""
    obj = clip_rig
    scene = bpy.context.scene
    _hand_layer(obj)
    track = obj.animation_data.nla_tracks[-1].name
    before = spread_figures.curves(obj)
    spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=f"NLA tracks .*{track}.*pick Layer"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME", range_mode="RADIUS",
                                radius=12)
    assert spread_figures.curves(obj) == before and len(obj.animation_data.nla_tracks) == 1
    later = CENTER + 35  # frames 68-82: the first layer (29-53) changes nothing there
    scene.frame_set(later)
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                   range_mode="RADIUS", radius=7) == {"FINISHED"}
    hand = spread_figures.core_joints(obj, np.array([later]))[0, spread_figures.HAND]
    assert np.linalg.norm(hand - target) < EDIT_TOL


@pytest.mark.parametrize("rotate_mode", ["NATIVE", "QUATERNION"])
def test_a_second_layer_goes_over_the_first(scene: bpy.types.Scene, bandai_bvh: Path,
                                           rotate_mode: str) -> None:
    """A second edit inside an earlier Layer's frames spreads into a layer of its own on
    top (Auto mode picks Layer there): the edited hand reaches its target; the action and
    the first layer stay bit for bit; muting the new layer gives back the motion the first
    one showed; at influence 0.5 each channel goes half way from that motion to the edit
    (a quaternion half its turn, an Euler angle or a location half its change)."""
    obj = rigs.import_bvh(bandai_bvh, rotate_mode=rotate_mode)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(CENTER)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    _hand_layer(obj)
    anim = obj.animation_data
    first = anim.nla_tracks[-1].strips[0].action
    frames = np.arange(CENTER - 15, CENTER + 20)
    shown = spread_figures.core_joints(obj, frames)
    action, layer = spread_figures.curves(obj), spread_figures.action_curves(first)
    edited = CENTER + 4  # the first layer's W there: 0.75
    scene.frame_set(edited)
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, range_mode="RADIUS",
                                   radius=10) == {"FINISHED"}
    assert len(anim.nla_tracks) == 2 and anim.nla_tracks[-1].strips[0].action != first
    assert spread_figures.curves(obj) == action
    assert spread_figures.action_curves(first) == layer
    hand = spread_figures.core_joints(obj, np.array([edited]))[0, HAND]
    full = _channels(obj)
    track = anim.nla_tracks[-1]
    track.mute = True
    muted = spread_figures.core_joints(obj, frames)
    scene.frame_set(edited)
    under = _channels(obj)
    track.mute = False
    strip = track.strips[0]
    strip.influence = 0.5
    for fc in strip.fcurves:  # animated influence: its key says 0.5 too
        for kp in fc.keyframe_points:
            kp.co.y = 0.5
    scene.frame_set(edited)
    half = _off_half(under, full, _channels(obj))
    off, back = np.linalg.norm(hand - target), np.linalg.norm(muted - shown, axis=-1).max()
    print(f"FIGURES second layer ({rotate_mode}): edited hand {off * MM:.4f} mm off its "
          f"target; muted, {back * MM:.5f} mm off the first layer's motion; influence 0.5, "
          f"{half:.2e} off each channel's half")
    assert off < EDIT_TOL
    assert back < MUTED_TOL
    assert half < HALF_RAD


def _channels(obj: bpy.types.Object) -> list[tuple]:
    """Each pose bone's rotation and location as the NLA stack shows them now."""
    return [(pb.rotation_quaternion.copy() if pb.rotation_mode == "QUATERNION"
             else pb.rotation_euler.copy(), pb.location.copy()) for pb in obj.pose.bones]


def _off_half(under: list[tuple], full: list[tuple], now: list[tuple]) -> float:
    """How far ``now`` is from half way between ``under`` and ``full`` (:func:`_channels`),
    channel by channel as Combine blends them: radians of a quaternion's turn, Euler
    angles and locations as numbers."""
    out = 0.0
    for (u_rot, u_loc), (f_rot, f_loc), (n_rot, n_loc) in zip(under, full, now, strict=True):
        if isinstance(u_rot, Quaternion):
            out = max(out, u_rot.slerp(f_rot, 0.5).rotation_difference(n_rot).angle)
        else:
            out = max(out, (Vector(u_rot).lerp(Vector(f_rot), 0.5) - Vector(n_rot)).length)
        out = max(out, (u_loc.lerp(f_loc, 0.5) - n_loc).length)
    return out


def test_a_layer_over_unkeyed_bones_keys_their_pose_once(clip_rig: bpy.types.Object) -> None:
    """Blocking that leaves the right arm unkeyed (the pose holds it), spread into a
    Layer: Combine puts the layer over the action's value, and over the channel's default
    where the action has none, so each such channel the layer changes gets one key of the
    pose's value in the action, and the report says so. The edited hand reaches its target
    and muting gives the motion back (without that key: 343 mm and 568 mm off); the
    action's own F-curves stay bit for bit."""
    obj = clip_rig
    arm = rigs.unkey_bones(obj, ("r_upperarm", "r_forearm"))
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    frames = np.arange(CENTER - 15, CENTER + 16)
    before = spread_figures.core_joints(obj, frames)
    curves = spread_figures.curves(obj)
    scene.frame_set(CENTER)
    target = spread_figures.move_hand(obj)
    settings = propagation.SpreadSettings(mode="LAYER", range_mode="RADIUS", radius=12)
    outcome = propagation.propagate_edit(scene, obj, bpy.context.evaluated_depsgraph_get(),
                                         settings=settings)
    after = spread_figures.curves(obj)
    added = {k: v for k, v in after.items() if k not in curves}
    assert {k: after[k] for k in curves} == curves
    assert added and all(any(f'"{n}"' in path for n in arm) for path, _ in added)
    assert all(np.frombuffer(v["co"], np.float32).size == 2 for v in added.values())  # 1 key
    assert any(n.startswith(f"The action held no key on {len(added)} channel")
               for n in outcome.notes)
    hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
    obj.animation_data.nla_tracks[-1].mute = True
    muted = spread_figures.core_joints(obj, frames)
    off, back = np.linalg.norm(hand - target), np.linalg.norm(muted - before, axis=-1).max()
    print(f"FIGURES layer over an unkeyed arm: {len(added)} channels keyed once; edited hand "
          f"{off * MM:.4f} mm off its target, muted {back * MM:.5f} mm off the motion")
    assert off < EDIT_TOL
    assert back < MUTED_TOL


def test_esc_in_layer_mode_removes_the_layer(clip_rig: bpy.types.Object) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    before = spread_figures.curves(obj)
    actions = {a.name for a in bpy.data.actions}
    spread_figures.move_hand(obj)
    settings = propagation.SpreadSettings(mode="LAYER", radius=12)
    job = propagation.SpreadJob(scene, obj, bpy.context.evaluated_depsgraph_get(), settings)
    while (step := job.step()) is not None and step < propagation.CORRECTING:
        pass
    assert step is not None and len(obj.animation_data.nla_tracks) == 1
    job.cancel()
    anim = obj.animation_data
    assert not len(anim.nla_tracks) and anim.action_blend_type == "REPLACE"
    assert {a.name for a in bpy.data.actions} == actions
    assert spread_figures.curves(obj) == before


@pytest.mark.parametrize("auto", [False, True], ids=["insert-keyframe", "auto-keying"])
def test_a_pose_keyed_over_a_layer_stays_as_solved(clip_rig: bpy.types.Object,
                                                   auto: bool) -> None:
    """Inside a Layer's frames the action is combined over the layer: a pose solved there
    and keyed (Insert Keyframe, or Auto Keying) keeps its hand on its target once the frame
    is read again, as Blender's own keying remaps a value through the NLA stack (keyed as
    shown, the layer counted twice: 168 mm off)."""
    obj = clip_rig
    scene = bpy.context.scene
    _hand_layer(obj)
    frame = CENTER + 3  # the layer turns the arm here (W 0.9)
    scene.frame_set(frame)
    scene.tool_settings.use_keyframe_insert_auto = auto
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    if not auto:
        assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    STATUS.pop(obj.name, None)
    hand = spread_figures.core_joints(obj, np.array([frame + 1, frame]))[1, spread_figures.HAND]
    assert "not keyed" not in STATUS.get(obj.name, "")  # (the action's values are not the
    # pose shown there: the timeline does not take them for an edit dropped)
    print(f"FIGURES keyed over a layer ({'auto' if auto else 'insert'}): "
          f"{np.linalg.norm(hand - target) * MM:.4f} mm off the target")
    assert np.linalg.norm(hand - target) < EDIT_TOL


CYCLE = 24  # frames of the walk-like cycle the clip is cut to


def test_a_cycle_is_layered_not_keyed_over(clip_rig: bpy.types.Object) -> None:
    """The clip cut to a cycle of frames 1-25 that a Cycles modifier repeats (a walk
    cycle), edited at frame 41, in its second pass: Every Frame would key frames past the
    cycle's keys, which changes every pass after it (frames past the range moved up to
    16 mm): it is refused, naming a curve, and changes nothing. Layer mode edits the range
    alone, every other frame within 0.1 mm."""
    obj = clip_rig
    scene = bpy.context.scene
    for fc in rig_keys.channelbag(obj).fcurves:
        points = fc.keyframe_points
        for k in range(len(points) - 1, -1, -1):
            frame = points[k].co[0]
            if frame > CYCLE + 1 or (frame - 1) % 4:
                points.remove(points[k], fast=True)
        points[-1].co[1] = points[0].co[1]  # a closed cycle
        fc.modifiers.new("CYCLES")
        fc.update()
    frames = np.arange(CENTER - 11, CENTER + 19)
    before = spread_figures.core_joints(obj, frames)
    keys = spread_figures.curves(obj)
    scene.frame_set(CENTER)
    target = spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=r"modifiers, e\.g\. .*\(Cycles\).*Layer mode"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                range_mode="RADIUS", radius=6)
    assert spread_figures.curves(obj) == keys
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="LAYER", range_mode="RADIUS",
                                   radius=6) == {"FINISHED"}
    after = spread_figures.core_joints(obj, frames)
    moved = np.linalg.norm(after - before, axis=-1).max(axis=1)
    outside = np.abs(frames - CENTER) >= 6
    assert moved[outside].max() < MUTED_TOL, moved[outside].max()
    edited = after[frames == CENTER][0, spread_figures.HAND]
    assert np.linalg.norm(edited - target) < EDIT_TOL
