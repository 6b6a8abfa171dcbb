"""Spread Edit as an animator uses it (issue 49), read back from the rig Blender evaluates:
Keys mode on a hand-keyed action keeps every key's count, type and interpolation and the
keys outside the range bit for bit; Layer mode leaves the action untouched and can be
muted or faded; Esc leaves the action as it was; the redo panel's properties re-run it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import key_edit, mapped_rig, propagation, rig_io, rig_keys  # noqa: E402
from blender_addon.core.normalize import facing_yaw, rotate_y  # noqa: E402
from blender_addon.core.skeleton import JOINT_INDEX  # noqa: E402
from tests.blender import rigs  # noqa: E402

CENTER = 41  # the edited frame: a key of the thinned clip
KEY_STEP = 10  # keys on frames 1, 11, 21, ...
BREAKDOWN_FRAME, LINEAR_FRAME, CONSTANT_FRAME = 31, 21, 51
SPREAD_RADIUS = 20
HAND_MOVE = 0.10  # m, towards the chest
EDIT_TOL = 1e-3  # m: a keyed frame carries the weighted edit within this (the issue)
MUTED_TOL = 1e-4  # m: a muted layer gives back the motion within this (the issue)
HALF_RAD = 1e-5  # influence 0.5: half of each channel's change (radians, metres)
# Influence 0.5 turns each bone half as far: measured, the hand then moves 0.42 of its
# full move (9.8 mm from the straight midpoint of a 10 cm move: rotations about joints do
# not halve positions; the issue asks 1 mm).
HALF_SHARE = (0.38, 0.46)
LONG_FRAMES = 2000  # the Every Frame run stopped with Esc


def _curves(obj: bpy.types.Object) -> dict[tuple[str, int], dict[str, bytes]]:
    """Every F-curve of the action, every key attribute, as bytes (bit for bit)."""
    bag = rig_keys.channelbag(obj)
    out = {}
    for fc in bag.fcurves:
        n = len(fc.keyframe_points)
        row = {}
        for attr, width, dtype in key_edit._KEY_ATTRS:
            a = np.empty(n * width, dtype=dtype)
            fc.keyframe_points.foreach_get(attr, a)
            row[attr] = a.tobytes()
        out[(fc.data_path, fc.array_index)] = row
    return out


def _thin(obj: bpy.types.Object) -> None:
    """Keys every KEY_STEP frames only, Bezier; a BREAKDOWN, a LINEAR and a CONSTANT key."""
    bag = rig_keys.channelbag(obj)
    for fc in bag.fcurves:
        points = fc.keyframe_points
        co = np.empty(2 * len(points), dtype=np.float32)
        points.foreach_get("co", co)
        co = co.reshape(-1, 2)
        kept = co[(np.rint(co[:, 0]) - 1) % KEY_STEP == 0]
        points.clear()
        points.add(len(kept))
        points.foreach_set("co", kept.ravel())
        for kp in points:
            frame = round(kp.co.x)
            kp.interpolation = {LINEAR_FRAME: "LINEAR", CONSTANT_FRAME: "CONSTANT"}.get(
                frame, "BEZIER")
            kp.type = "BREAKDOWN" if frame == BREAKDOWN_FRAME else "KEYFRAME"
            kp.handle_left_type = kp.handle_right_type = "AUTO_CLAMPED"
        fc.update()


def _core_joints(obj: bpy.types.Object, frames: np.ndarray) -> np.ndarray:
    """(T, 21, 3) joints as Blender evaluates them, in the engine's space."""
    info = mapped_rig.rig_for(obj)
    mw = rig_io.world_matrix(obj)
    out = []
    for f in frames:
        bpy.context.scene.frame_set(int(f))
        out.append(rig_io.armature_to_core(mw, rig_io.evaluated_joints(obj, info)))
    return np.array(out)


@pytest.fixture
def clip_rig(scene: bpy.types.Scene, bandai_bvh: Path) -> bpy.types.Object:
    """The 90-frame Bandai clip, mapped, at frame CENTER, with hand effectors."""
    obj = rigs.import_bvh(bandai_bvh)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(CENTER)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    return obj


def _move_hand(obj: bpy.types.Object) -> np.ndarray:
    """The right hand's empty moved HAND_MOVE towards the chest; its target (core space)."""
    heads = rigs.mapped_heads(obj)
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    start = np.array(hand.location)
    towards = heads["chest"] - heads["r_hand"]
    hand.location = start + HAND_MOVE * towards / np.linalg.norm(towards)
    bpy.context.view_layer.update()
    mw = rig_io.world_matrix(obj)
    world = np.array(hand.matrix_world.translation)
    inv = np.linalg.inv(np.array(obj.matrix_world))
    return rig_io.armature_to_core(mw, (inv @ np.r_[world, 1.0])[:3][None])[0]


def test_keys_mode_keeps_an_animators_keys(clip_rig: bpy.types.Object) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    _thin(obj)
    frames = np.arange(CENTER - SPREAD_RADIUS - 5, CENTER + SPREAD_RADIUS + 6)
    before = _core_joints(obj, frames)
    curves_before = _curves(obj)
    scene.frame_set(CENTER)
    target = _move_hand(obj)
    p = scene.npe.propagation
    p.range_mode, p.radius, p.curve = "RADIUS", SPREAD_RADIUS, "SMOOTH"
    settings = propagation.scene_settings(scene)
    window, w = propagation.weights(scene, settings, obj)
    assert propagation.resolve_mode(settings, obj, window, w) == "KEYS"  # sparse: the default

    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}

    after_curves = _curves(obj)
    assert after_curves.keys() == curves_before.keys()
    changed = 0
    for channel, old in curves_before.items():
        new = after_curves[channel]
        n = len(old["co"]) // 8
        assert len(new["co"]) // 8 == n, channel  # no key added or removed
        for attr in ("type", "interpolation", "easing", "handle_left_type",
                     "handle_right_type"):
            assert new[attr] == old[attr], (channel, attr)
        x = np.frombuffer(old["co"], np.float32)[0::2]
        outside = np.abs(x - CENTER) >= SPREAD_RADIUS  # W = 0 there
        for attr in ("co", "handle_left", "handle_right"):
            a = np.frombuffer(old[attr], np.float32).reshape(-1, 2)
            b = np.frombuffer(new[attr], np.float32).reshape(-1, 2)
            assert a[outside].tobytes() == b[outside].tobytes(), (channel, attr)
            changed += int((a[~outside] != b[~outside]).any())
    assert changed > 0
    # The keyed frames inside carry the weighted edit: the hand on W(t) of its move (body
    # space, turned with the body), the edited frame on its target.
    after = _core_joints(obj, frames)
    hand = JOINT_INDEX["r_hand"]
    c = int(np.flatnonzero(frames == CENTER)[0])
    weight = np.interp(frames, window, w, left=0.0, right=0.0)
    offset = rotate_y(target - before[c, hand], -facing_yaw(before[c]))
    path = before[:, hand] + rotate_y(offset * weight[:, None], facing_yaw(before))
    keyed = ((frames - 1) % KEY_STEP == 0) & (weight > 0)
    assert keyed.sum() == 3  # 31, 41, 51
    miss = np.linalg.norm(after[keyed, hand] - path[keyed], axis=-1)
    assert miss.max() < EDIT_TOL, miss
    # The held left hand stays where it was on the keyed frames.
    held = JOINT_INDEX["l_hand"]
    assert np.linalg.norm(after[keyed, held] - before[keyed, held], axis=-1).max() < EDIT_TOL


def test_to_keys_range_stops_at_the_neighbouring_keys(clip_rig: bpy.types.Object) -> None:
    _thin(clip_rig)
    scene = bpy.context.scene
    scene.frame_set(CENTER + 3)  # between the keys at 41 and 51
    settings = propagation.SpreadSettings(range_mode="TO_KEYS")
    assert propagation.window(scene, settings, clip_rig) == (42, 50, CENTER + 3)
    scene.use_preview_range = True
    scene.frame_preview_start, scene.frame_preview_end = 30, 70
    s = propagation.scene_settings(scene)
    assert (s.frame_start, s.frame_end) == (30, 70)


def test_layer_mode_leaves_the_action_and_fades(clip_rig: bpy.types.Object) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    frames = np.arange(CENTER - 15, CENTER + 16)
    before = _core_joints(obj, frames)
    curves_before = _curves(obj)
    scene.frame_set(CENTER)
    target = _move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="LAYER", range_mode="RADIUS",
                                   radius=12) == {"FINISHED"}
    assert _curves(obj) == curves_before  # the action bit for bit
    anim = obj.animation_data
    track = anim.nla_tracks[-1]
    strip = track.strips[0]
    assert strip.blend_type == "COMBINE" and anim.action is not None
    after = _core_joints(obj, frames)
    hand = JOINT_INDEX["r_hand"]
    c = int(np.flatnonzero(frames == CENTER)[0])
    assert np.linalg.norm(after[c, hand] - target) < EDIT_TOL
    assert np.abs(after - before).max() > 0.01
    scene.frame_set(CENTER)
    full = _channels(obj)
    track.mute = True
    muted = _core_joints(obj, frames)
    assert np.linalg.norm(muted - before, axis=-1).max() < MUTED_TOL
    scene.frame_set(CENTER)
    base = _channels(obj)
    track.mute = False
    strip.influence = 0.5
    for fc in strip.fcurves:  # animated influence: its key says 0.5 too
        for kp in fc.keyframe_points:
            kp.co.y = 0.5
    half = _core_joints(obj, frames[c:c + 1])[0]
    # Half of every channel's change (Euler angles and locations add in Combine mode) ...
    np.testing.assert_allclose(_channels(obj), base + 0.5 * (full - base), atol=HALF_RAD)
    # ... is not half of every joint's move: the hand moves HALF_SHARE of its full move.
    share = np.linalg.norm(half[hand] - before[c, hand]) / np.linalg.norm(after[c, hand]
                                                                          - before[c, hand])
    assert HALF_SHARE[0] < share < HALF_SHARE[1], share


def _channels(obj: bpy.types.Object) -> np.ndarray:
    """Every pose bone's Euler angles and location as Blender evaluated them."""
    return np.array([[*pb.rotation_euler, *pb.location] for pb in obj.pose.bones])


def _long_action(obj: bpy.types.Object, frames: int) -> None:
    """Key ``frames`` frames from the clip, played forward then backward."""
    info = mapped_rig.rig_for(obj)
    first, last = (int(v) for v in obj.animation_data.action.frame_range)
    quats, locs, eulers = rig_keys.read_clip(obj, info, np.arange(first, last + 1))
    cycle = np.r_[np.arange(len(quats)), np.arange(len(quats) - 2, 0, -1)]
    idx = np.resize(cycle, frames)
    rig_keys.write_keys(obj, info, np.arange(1, frames + 1), quats[idx], locs[idx],
                        euler_ref=eulers[0])


def test_esc_leaves_the_action_as_it_was(clip_rig: bpy.types.Object) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    _long_action(obj, LONG_FRAMES)
    scene.frame_set(LONG_FRAMES // 2)
    before = _curves(obj)
    pose_before = np.array(list(rigs.mapped_heads(obj).values()))
    _move_hand(obj)
    settings = propagation.SpreadSettings(mode="EVERY_FRAME", range_mode="START_END",
                                          frame_start=1, frame_end=LONG_FRAMES)
    job = propagation.SpreadJob(scene, obj, bpy.context.evaluated_depsgraph_get(), settings)
    steps = []
    while (step := job.step()) is not None and step < propagation.CORRECTING:
        steps.append(step)
    assert step is not None and len(steps) >= 4  # stopped after the keys were written
    assert _curves(obj) != before
    job.cancel()  # what Esc does
    assert _curves(obj) == before
    scene.frame_set(LONG_FRAMES // 2)
    assert np.abs(np.array(list(rigs.mapped_heads(obj).values())) - pose_before).max() < 1e-6


def test_the_redo_panel_shows_and_reruns(clip_rig: bpy.types.Object) -> None:
    op = bpy.types.NPE_OT_spread_edit
    assert {"REGISTER", "UNDO"} <= set(op.bl_options)
    props = bpy.ops.npe.spread_edit.get_rna_type().properties
    for name in ("mode", "range_mode", "radius", "frame_start", "frame_end", "curve",
                 "metric_mode"):
        assert not props[name].is_hidden and not props[name].is_skip_save, name
    scene = bpy.context.scene
    frames = np.arange(CENTER - 15, CENTER + 16)
    before = _core_joints(obj := clip_rig, frames)
    scene.frame_set(CENTER)
    _move_hand(obj)
    name = obj.name
    bpy.ops.ed.undo_push(message="the hand moved")

    def moved() -> np.ndarray:
        now = _core_joints(bpy.data.objects[name], frames)
        return np.linalg.norm(now - before, axis=-1).max(axis=1) > 1e-5

    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                   radius=5) == {"FINISHED"}
    last = bpy.context.window_manager.operator_properties_last("npe.spread_edit")
    assert last.radius == 5 and last.mode == "EVERY_FRAME"
    first = moved()
    assert first.any() and not first[np.abs(frames - CENTER) >= 5].any()
    # F9: the redo panel undoes the run and runs it again with the changed property.
    bpy.ops.ed.undo()
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                   radius=10) == {"FINISHED"}
    second = moved()
    assert second[np.abs(frames - CENTER) >= 5].any()
    assert not second[np.abs(frames - CENTER) >= 10].any()


def test_sampling_a_baked_curve_reads_its_keys(clip_rig: bpy.types.Object) -> None:
    """The clip read from the keys of a baked curve is what evaluating it gives, exactly;
    a thinned curve (frames between keys) is evaluated."""
    bag = rig_keys.channelbag(clip_rig)
    frames = np.arange(5, 60)
    for fc in list(bag.fcurves)[:12]:
        want = np.array([fc.evaluate(float(f)) for f in frames])
        assert np.array_equal(rig_keys.sample(fc, frames), want)
    _thin(clip_rig)
    for fc in list(bag.fcurves)[:12]:
        want = np.array([fc.evaluate(float(f)) for f in frames])
        assert np.array_equal(rig_keys.sample(fc, frames), want)


ROTATION_TOL = 1e-3  # the hand bone's orientation at the edited frame (matrix entries)
ROTATION_SHARE = (0.49, 0.51)  # its turn at W = 0.5, of the empty's (measured 0.500)


def test_an_empty_rotation_is_spread(clip_rig: bpy.types.Object) -> None:
    from mathutils import Euler

    obj = clip_rig
    scene = bpy.context.scene
    item = next(e for e in obj.npe.effectors if e.joint == "l_hand")
    bone = obj.pose.bones[mapped_rig.mapping_dict(obj.data)["l_hand"]]

    def orientation(frame: int) -> np.ndarray:
        scene.frame_set(frame)
        return np.array((obj.matrix_world @ bone.matrix).to_3x3().normalized())

    radius = 12
    half = CENTER + radius // 2  # smooth curve: W = 0.5
    before = orientation(half)
    scene.frame_set(CENTER)
    start = np.array(item.empty.matrix_world.to_3x3().normalized())
    item.use_rotation = True
    item.empty.rotation_euler.rotate(Euler((0.4, -0.3, 0.5)))
    bpy.context.view_layer.update()
    want = np.array(item.empty.matrix_world.to_3x3().normalized())
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME", radius=radius,
                                   curve="SMOOTH") == {"FINISHED"}
    assert np.allclose(orientation(CENTER), want, atol=ROTATION_TOL)

    def angle(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.arccos(np.clip((np.trace(a.T @ b) - 1.0) / 2.0, -1.0, 1.0)))

    share = angle(before, orientation(half)) / angle(start, want)
    assert ROTATION_SHARE[0] < share < ROTATION_SHARE[1], share


def test_esc_in_layer_mode_removes_the_layer(clip_rig: bpy.types.Object) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    before = _curves(obj)
    actions = {a.name for a in bpy.data.actions}
    _move_hand(obj)
    settings = propagation.SpreadSettings(mode="LAYER", radius=12)
    job = propagation.SpreadJob(scene, obj, bpy.context.evaluated_depsgraph_get(), settings)
    while (step := job.step()) is not None and step < propagation.CORRECTING:
        pass
    assert step is not None and len(obj.animation_data.nla_tracks) == 1
    job.cancel()
    anim = obj.animation_data
    assert not len(anim.nla_tracks) and anim.action_blend_type == "REPLACE"
    assert {a.name for a in bpy.data.actions} == actions
    assert _curves(obj) == before


def test_the_timeline_overlay_is_registered_and_shapes_bars(addon: None) -> None:
    from blender_addon import spread_overlay

    assert len(spread_overlay._handles) == 1  # one dope sheet / timeline draw handler
    verts = spread_overlay.bars(np.array([10.0, 20.0]), np.array([1.0, 0.5]))
    assert verts.shape == (12, 2)
    assert verts[:6, 1].max() == spread_overlay.BAR_HEIGHT_PX
    assert verts[6:, 1].max() == 0.5 * spread_overlay.BAR_HEIGHT_PX
    assert np.allclose(verts[6:, 0].mean(), 20.0)
