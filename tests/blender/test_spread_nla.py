"""Spread Edit over an animator's own NLA (issue 49), read back from the rig Blender
evaluates: a base motion pushed down onto a track, with an action of additive tweaks
combined over it, with no action over it, or with an action replacing only the channels
it keys. A layer goes on top and changes nothing else; what Spread Edit cannot read is
refused and nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import mapped_rig, propagation, rig_keys  # noqa: E402
from tests.blender import rigs  # noqa: E402
from tests.blender.test_panels import _draw_all  # noqa: E402
from tests.blender.test_propagation import solve_a_left_hand_drag  # noqa: E402
from tests.blender.test_spread_edit import EDIT_TOL, MM, MUTED_TOL  # noqa: E402
from tests.blender.test_spread_ik import (  # noqa: E402
    IK_HAND_DRAG,
    _ik_animated_rig,
    _shown,
    layer_offs,
)
from training.blender_side import spread_figures  # noqa: E402
from training.blender_side.spread_figures import CENTER, HAND  # noqa: E402

RADIUS = 10
FRAMES = np.arange(CENTER - RADIUS - 5, CENTER + RADIUS + 6)  # the range and 5 frames beyond
TWEAK_RAD = 0.1  # the head turned by an additive tweak key
IK_LAYER_TOL = 1e-4  # m: the edited frame of a rig in IK from Solve's pose (measured 0.011 mm)


def _push_down(obj: bpy.types.Object, over: str, head: str | None = None
               ) -> tuple[bpy.types.Action, bpy.types.Action]:
    """The clip's action pushed down onto a track "base", and over it: an action of one
    additive tweak on the head (``combine``: Combine, as animation layers are made;
    ``replace``: Blender's default Replace), an empty one in Combine (``empty``: 4.4+ gives
    it no slot yet), or none (``none``). The tweak is keyed as
    Blender keys over the NLA (``keyframe_insert``; ``head``: the bone turned, default the
    mapped head)."""
    anim = obj.animation_data
    base = anim.action
    track = anim.nla_tracks.new()
    track.name = "base"
    track.strips.new("base", int(base.frame_range[0]), base)
    anim.action = None
    tweaks = None
    if over != "none":
        tweaks = bpy.data.actions.new("tweaks")
        anim.action = tweaks
        anim.action_blend_type = "COMBINE" if over == "empty" else over.upper()
    if tweaks is not None and over != "empty":
        info = mapped_rig.rig_for(obj)
        bone = obj.pose.bones[head or info.names[info.joint_bones[
            spread_figures.JOINT_INDEX["head"]]]]
        bpy.context.scene.frame_set(CENTER)
        prop = "rotation_euler" if bone.rotation_mode != "QUATERNION" else "rotation_quaternion"
        getattr(bone, prop)[1] += TWEAK_RAD
        bone.keyframe_insert(prop, frame=CENTER)
    bpy.context.scene.frame_set(CENTER)
    return base, tweaks


def _curves(*actions: bpy.types.Action | None) -> list:
    return [spread_figures.action_curves(a) for a in actions if a is not None]


@pytest.mark.parametrize("over", ["combine", "none", "none, arm unkeyed",
                                  "empty, arm unkeyed", "none, arm muted"])
def test_a_layer_goes_over_the_animators_tracks(clip_rig: bpy.types.Object, over: str
                                                 ) -> None:
    """Auto mode spreads into a layer on top of the animator's tracks: the edited hand
    reaches its target, the base and the tweaks stay bit for bit, frames outside the range
    do not move, and muting the layer gives back the motion. A channel nothing animates
    (the arm keyed nowhere) gets one key of its pose in a new action, which a cancelled
    run takes away again. (Before: over the Combine tweaks the base motion was counted
    twice, the hand 347 mm off and, muted, the hips 1.77 m off; with no action over the
    tracks Spread Edit was refused.) An F-curve muted in the track animates nothing, as
    one the arm was never keyed on. An empty action of the animator's keeps those keys and
    is never taken for one the run made."""
    obj = clip_rig
    scene = bpy.context.scene
    anim = obj.animation_data
    arm = rigs.unkey_bones(obj, ("r_upperarm", "r_forearm"), mute=over.endswith("muted")) \
        if "arm" in over else []
    base, tweaks = _push_down(obj, over.split(",")[0])
    kept = _curves(base, tweaks)
    _draw_all()  # the panels draw over the tracks, and preview the layer Auto picks:
    assert propagation.preview(scene, propagation.SpreadSettings(
        mode="AUTO", range_mode="RADIUS", radius=RADIUS), obj)[0] == "LAYER"
    shown = spread_figures.core_joints(obj, FRAMES)
    actions = len(bpy.data.actions)
    spread_figures.move_hand(obj)

    settings = propagation.SpreadSettings(mode="AUTO", range_mode="RADIUS", radius=RADIUS)
    job = propagation.SpreadJob(scene, obj, bpy.context.evaluated_depsgraph_get(), settings)
    while (step := job.step()) is not None and step < propagation.CORRECTING:
        pass
    job.cancel()  # what Esc does: nothing of the run is left
    assert anim.action == tweaks and len(anim.nla_tracks) == 1 and _curves(base, tweaks) == kept
    assert len(bpy.data.actions) == actions
    scene.frame_set(CENTER)
    target = spread_figures.move_hand(obj)

    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, range_mode="RADIUS",
                                   radius=RADIUS) == {"FINISHED"}
    layer = anim.nla_tracks[-1]
    assert len(anim.nla_tracks) == 2 and layer.name.startswith("Spread Edit")
    now = _curves(base, tweaks)
    assert now[0] == kept[0]  # the base, bit for bit; the tweaks too, but for one key of the
    if tweaks is not None:  # pose on each channel of the unkeyed arm the layer changes
        based = {k: v for k, v in now[1].items() if k not in kept[1]}
        assert {k: now[1][k] for k in kept[1]} == kept[1] and bool(based) == bool(arm)
        assert all(any(f'"{n}"' in path for n in arm) for path, _ in based)
    made = anim.action if tweaks is None else None
    after = spread_figures.core_joints(obj, FRAMES)
    hand = after[FRAMES == CENTER][0, HAND]
    outside = np.abs(FRAMES - CENTER) >= RADIUS
    moved_outside = np.linalg.norm(after[outside] - shown[outside], axis=-1).max()
    layer.mute = True
    muted = np.linalg.norm(spread_figures.core_joints(obj, FRAMES) - shown, axis=-1).max()
    off = np.linalg.norm(hand - target)
    print(f"FIGURES layer over the animator's tracks ({over}): hand {off * MM:.4f} mm off its "
          f"target, frames outside the range {moved_outside * MM:.5f} mm, muted "
          f"{muted * MM:.5f} mm off the motion, action made: {made is not None}")
    assert off < EDIT_TOL
    assert moved_outside < MUTED_TOL and muted < MUTED_TOL
    assert (made is not None) == over.startswith("none, arm")


@pytest.mark.parametrize("mode", ["KEYS", "EVERY_FRAME", "LAYER"])
def test_an_action_replacing_some_channels_is_refused(clip_rig: bpy.types.Object, mode: str
                                                      ) -> None:
    """An action in Replace mode (Blender's default) over a track replaces only the channels
    it keys; the track's show through on the others, which Spread Edit does not read. Every
    mode is refused, naming the track, and nothing changes. (Before: Every Frame's new
    F-curves replaced the base motion outside the range, 125 mm off; Layer set the action
    to Combine, which added the tweak's channels to the base: 1.48 m off.)"""
    obj = clip_rig
    base, tweaks = _push_down(obj, "replace")
    kept = _curves(base, tweaks)
    spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=r"base.*replaces only the channels it keys"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                radius=RADIUS)
    anim = obj.animation_data
    assert _curves(base, tweaks) == kept and len(anim.nla_tracks) == 1
    assert anim.action_blend_type == "REPLACE"


@pytest.mark.parametrize("over", ["combine", "none"])
def test_a_rigify_rig_left_in_ik_layers_over_its_tracks(rigify_rig: bpy.types.Object,
                                                        over: str) -> None:
    """The generated Rigify rig, its limbs left in IK, its motion pushed down onto a track:
    the layer goes on top, the edited frame is Solve's pose and muting the layer gives the
    motion back. The IK controls are placed frame by frame over the motion evaluated
    there, with their F-curves held: the track's too (held in the action alone, the
    track wrote its own values over the controls placed: the hand 248 mm off)."""
    rig = rigify_rig
    scene = bpy.context.scene
    _ik_animated_rig(rig, 1)
    _push_down(rig, over, head="head")
    frames = np.arange(CENTER - RADIUS, CENTER + RADIUS + 1)
    before = np.array([(scene.frame_set(int(f)), _shown(rig))[1] for f in frames])
    scene.frame_set(CENTER)
    solve_a_left_hand_drag(rig, IK_HAND_DRAG)
    solved = _shown(rig)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, range_mode="RADIUS",
                                   radius=RADIUS) == {"FINISHED"}
    anim = rig.animation_data
    assert len(anim.nla_tracks) == 2 and not any(fc.mute for fc in rig_keys.strip_curves(
        anim.nla_tracks[0].strips[0]))  # (held only while placing)
    off, back = layer_offs(rig, CENTER, solved, frames, before)
    print(f"FIGURES rigify in IK over its tracks ({over}): edited frame {off * MM:.3f} mm "
          f"from Solve, muted {back * MM:.4f} mm off the motion")
    assert off < IK_LAYER_TOL
    assert back < MUTED_TOL


@pytest.mark.parametrize("blend", ["REPLACE", "COMBINE"])
def test_a_track_off_the_channels_read_leaves_keys_to_the_action(
        clip_rig: bpy.types.Object, blend: str) -> None:
    """A track that animates no channel the rig's joints are read from (here the head's
    scale), under the action (Replace or Combine): nothing of it shows on the joints, so
    Every Frame spreads into the action as on a bare one, the track untouched. (It was
    refused for the track's channel.)"""
    obj = clip_rig
    scene = bpy.context.scene
    anim = obj.animation_data
    anim.action_blend_type = blend
    info = mapped_rig.rig_for(obj)
    head = info.names[info.joint_bones[spread_figures.JOINT_INDEX["head"]]]
    base = bpy.data.actions.new("head scale")
    track = anim.nla_tracks.new()
    strip = track.strips.new("head scale", 1, base)
    curves = base.fcurves if not hasattr(base, "layers") else \
        base.layers.new("Layer").strips.new(type="KEYFRAME").channelbag(
            base.slots.new(id_type="OBJECT", name=obj.name), ensure=True).fcurves
    if hasattr(base, "layers"):
        strip.action_slot = base.slots[0]
    curves.new(rig_keys.bone_path(head, "scale"), index=0).keyframe_points.insert(1, 1.0)
    assert rig_keys.layers_under(obj, 1, 90)  # (a track there, its channel not read)
    settings = propagation.SpreadSettings(mode="AUTO", range_mode="RADIUS", radius=RADIUS)
    assert propagation.preview(scene, settings, obj)[0] == "EVERY_FRAME"  # (not Layer)
    kept = _curves(base)
    shown = spread_figures.core_joints(obj, FRAMES)
    scene.frame_set(CENTER)
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                   range_mode="RADIUS", radius=RADIUS) == {"FINISHED"}
    after = spread_figures.core_joints(obj, FRAMES)
    outside = np.abs(FRAMES - CENTER) >= RADIUS
    off = np.linalg.norm(after[FRAMES == CENTER][0, HAND] - target)
    moved = np.linalg.norm(after[outside] - shown[outside], axis=-1).max()
    assert _curves(base) == kept and len(anim.nla_tracks) == 1
    assert off < EDIT_TOL and moved < MUTED_TOL, (off, moved)


def test_a_solo_track_of_the_motion_is_refused(clip_rig: bpy.types.Object) -> None:
    """The motion in a track alone, that track solo: the rig shows it alone, so a new layer
    would not show. Spread Edit is refused and nothing changes (it reported the spread
    done with the hand 100 mm off its target)."""
    obj = clip_rig
    base, _ = _push_down(obj, "none")
    anim = obj.animation_data
    anim.nla_tracks[0].is_solo = True
    kept = _curves(base)
    spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match="base is solo, so the rig shows it alone"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, range_mode="RADIUS", radius=RADIUS)
    assert _curves(base) == kept and len(anim.nla_tracks) == 1 and anim.action is None


def test_keys_in_a_tweaked_strip_go_through_the_track_under_it(clip_rig: bpy.types.Object
                                                               ) -> None:
    """The tweaks pushed down too, onto a strip in Combine over the base track, and tweaked
    (Tab): Auto Keying keys the tweaks through the track under them, as Blender's keying
    does, so a frame change gives the solved pose back. (Keying was refused in tweak
    mode.)"""
    obj = clip_rig
    scene = bpy.context.scene
    _, tweaks = _push_down(obj, "combine")
    anim = obj.animation_data
    track = anim.nla_tracks.new()
    strip = track.strips.new("tweaks", 1, tweaks)
    strip.blend_type = "COMBINE"
    anim.action = None
    anim.nla_tracks.active = track
    strip.select = True
    anim.use_tweak_mode = True
    assert anim.use_tweak_mode and anim.action == tweaks
    scene.tool_settings.use_keyframe_insert_auto = True
    try:
        target = spread_figures.move_hand(obj)
        assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
        solved = spread_figures.core_joints(obj, np.array([CENTER]))[0]
        back = spread_figures.core_joints(obj, np.array([CENTER + 3, CENTER]))[1]
    finally:
        scene.tool_settings.use_keyframe_insert_auto = False
    assert np.linalg.norm(solved[HAND] - target) < EDIT_TOL
    assert np.abs(back - solved).max() < MUTED_TOL
