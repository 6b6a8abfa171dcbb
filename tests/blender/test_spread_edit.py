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

from mathutils import Quaternion, Vector  # noqa: E402

from blender_addon import edits, mapped_rig, propagation, rig_io, rig_keys  # noqa: E402
from blender_addon.core.propagate import weight_curve  # noqa: E402
from blender_addon.errors import STATUS  # noqa: E402
from tests.blender import rigs  # noqa: E402
from training.blender_side import spread_figures  # noqa: E402
from training.blender_side.spread_figures import CENTER, HAND  # noqa: E402

MM = spread_figures.MM

EDIT_TOL = 1e-3  # m: a keyed frame carries the weighted edit within this (the issue)
MUTED_TOL = 1e-4  # m: a muted layer gives back the motion within this (the issue)
HALF_RAD = 1e-5  # influence 0.5: half of each channel's change (radians, metres)
# Influence 0.5 turns each bone half as far: measured, the hand then moves 0.42 of its
# full move (9.8 mm from the straight midpoint of a 10 cm move: rotations about joints do
# not halve positions; the issue asks 1 mm).
HALF_SHARE = (0.38, 0.46)


@pytest.fixture
def clip_rig(scene: bpy.types.Scene, bandai_bvh: Path) -> bpy.types.Object:
    """The 90-frame Bandai clip, mapped, at frame CENTER, with hand effectors."""
    obj = rigs.import_bvh(bandai_bvh)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(CENTER)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    return obj


def test_keys_mode_keeps_an_animators_keys(clip_rig: bpy.types.Object) -> None:
    got = spread_figures.keys_mode(clip_rig)
    print(f"FIGURES keys mode: {got}")
    assert got["mode"] == "KEYS"  # sparse keys: the default
    assert got["fcurves_with_keys_added_or_removed"] == 0
    assert got["keys_with_type_or_interpolation_changed"] == 0
    assert got["keys_outside_changed"] == 0  # bit for bit
    assert got["keys_inside_changed"] > 0
    assert got["keyed_frames_in_range"] == [31, 41, 51]
    # The keyed frames inside carry the weighted edit: the hand on W(t) of its move (body
    # space, turned with the body), the edited frame on its target; the held left hand
    # stays where it was.
    assert got["hand_off_weighted_edit_mm"] < EDIT_TOL * MM
    assert got["held_hand_moved_mm"] < EDIT_TOL * MM


def test_to_keys_range_stops_at_the_neighbouring_keys(clip_rig: bpy.types.Object) -> None:
    spread_figures.thin(clip_rig)
    scene = bpy.context.scene
    scene.frame_set(CENTER + 3)  # between the keys at 41 and 51
    settings = propagation.SpreadSettings(range_mode="TO_KEYS")
    assert propagation.window(scene, settings, clip_rig) == (42, 50, CENTER + 3)
    scene.use_preview_range = True
    scene.frame_preview_start, scene.frame_preview_end = 30, 70
    s = propagation.scene_settings(scene)
    assert (s.frame_start, s.frame_end) == (30, 70)


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
    info = mapped_rig.rig_for(obj)
    arm = [info.names[info.joint_bones[spread_figures.JOINT_INDEX[j]]]
           for j in ("r_upperarm", "r_forearm")]
    bag = rig_keys.channelbag(obj)
    for fc in [fc for fc in bag.fcurves if any(f'"{n}"' in fc.data_path for n in arm)]:
        bag.fcurves.remove(fc)
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


@pytest.mark.parametrize("case,mode,refusal", [
    ("nla-off", "LAYER", "NLA tracks are switched off"),
    ("solo", "EVERY_FRAME", "is solo"),
    ("influence", "KEYS", "plays at influence 0.50"),
])
def test_an_action_the_rig_does_not_show_is_refused(clip_rig: bpy.types.Object, case: str,
                                                    mode: str, refusal: str) -> None:
    """Where the NLA does not show the action as its keys hold it, a spread is refused and
    changes nothing (it had reported an edit the rig did not show: the hand 100 mm off
    with the NLA switched off in Layer mode, 83 mm under another track's solo, 252 mm with
    the action at influence 0.5). With the NLA off, Every Frame spreads as usual."""
    obj = clip_rig
    scene = bpy.context.scene
    anim = obj.animation_data
    if case == "nla-off":
        anim.use_nla = False
    elif case == "solo":
        anim.nla_tracks.new().is_solo = True
    else:
        anim.action_influence = 0.5
    scene.frame_set(CENTER)
    before, tracks = spread_figures.curves(obj), len(anim.nla_tracks)
    target = spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=refusal):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                radius=12)
    assert spread_figures.curves(obj) == before and len(anim.nla_tracks) == tracks
    if case == "nla-off":
        assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                       range_mode="RADIUS", radius=12) == {"FINISHED"}
        hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
        assert np.linalg.norm(hand - target) < EDIT_TOL


@pytest.mark.parametrize("flag,mode", [("mute", "KEYS"), ("mute", "LAYER"),
                                       ("lock", "EVERY_FRAME"), ("lock", "LAYER")])
def test_muted_and_locked_curves(clip_rig: bpy.types.Object, flag: str, mode: str) -> None:
    """The right forearm's F-curves muted or locked. Muted, the rig does not show their
    keys: every mode refuses (written anyway, the hand stayed 95 mm off its target, 111 mm
    in a layer). Locked (an animator's guard), Keys and Every Frame refuse (they had
    rewritten them), and a layer, which leaves them as they are, reaches the target.
    Insert Keyframe keys the rest and says which it left, as Blender's keying does."""
    obj = clip_rig
    info = mapped_rig.rig_for(obj)
    forearm = info.names[info.joint_bones[spread_figures.JOINT_INDEX["r_forearm"]]]
    for fc in rig_keys.channelbag(obj).fcurves:
        if f'"{forearm}"' in fc.data_path:
            setattr(fc, flag, True)
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    before, tracks = spread_figures.curves(obj), len(obj.animation_data.nla_tracks)
    target = spread_figures.move_hand(obj)
    if flag == "mute" or mode != "LAYER":
        said = "are muted" if flag == "mute" else "are locked"
        with pytest.raises(RuntimeError, match=f"F-curve.*{said}"):
            bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                    radius=12)
        assert spread_figures.curves(obj) == before
        assert len(obj.animation_data.nla_tracks) == tracks
        return
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                   radius=12) == {"FINISHED"}
    assert spread_figures.curves(obj) == before
    hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
    assert np.linalg.norm(hand - target) < EDIT_TOL
    outcome = edits.insert_keyframe(scene, obj)
    assert any(n.startswith("3 locked F-curve(s) not keyed") for n in outcome.notes)
    after = spread_figures.curves(obj)
    assert all(after[k] == before[k] for k in before if f'"{forearm}"' in k[0])


HAND_TURN_RAD = 0.5  # the right forearm turned by hand (Blender's own rotate)
HAND_SHARE_TOL = 0.02  # the hand's share of its move against W(t) (measured 0.006)


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "auto-keyed"])
def test_a_pose_turned_by_hand_is_spread(clip_rig: bpy.types.Object, keyed: bool) -> None:
    """The animator turns the right forearm with Blender's own rotate (keyed by Auto
    Keying, or not) and runs Spread Edit without touching an empty: the whole change is
    the edit. The edited frame keeps the pose as turned, the neighbours take W(t) of it,
    the report says so and the effectors sit on the pose spread. (Before: unkeyed, the turn
    was dropped as "nothing to spread"; keyed, the spread turned it back, the hand 109 mm
    off, and pushed the neighbours 55 mm the other way.)"""
    obj = clip_rig
    scene = bpy.context.scene
    info = mapped_rig.rig_for(obj)
    frames = np.arange(CENTER - 12, CENTER + 13)
    before = spread_figures.core_joints(obj, frames)
    scene.frame_set(CENTER)
    forearm = obj.pose.bones[info.names[info.joint_bones[
        spread_figures.JOINT_INDEX["r_forearm"]]]]
    forearm.rotation_euler[0] += HAND_TURN_RAD
    if keyed:
        forearm.keyframe_insert("rotation_euler", frame=CENTER)
    bpy.context.view_layer.update()
    turned = rig_io.armature_to_core(rig_io.world_matrix(obj),
                                     rig_io.evaluated_joints(obj, info))
    settings = propagation.SpreadSettings(mode="EVERY_FRAME", range_mode="RADIUS", radius=10)
    outcome = propagation.propagate_edit(scene, obj, bpy.context.evaluated_depsgraph_get(),
                                         settings=settings)
    assert any("changed outside the add-on" in n for n in outcome.notes)
    empty = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand").matrix_world
    on_hand = np.linalg.norm(np.array(empty.translation) - rigs.mapped_heads(obj)["r_hand"])
    after = spread_figures.core_joints(obj, frames)
    c = CENTER - frames[0]
    w = weight_curve(len(frames), c, 10)
    share = np.linalg.norm(after[:, HAND] - before[:, HAND], axis=-1) \
        / np.linalg.norm(turned[HAND] - before[c, HAND])
    kept = np.linalg.norm(after[c] - turned, axis=-1).max()
    print(f"FIGURES turned by hand ({'auto-keyed' if keyed else 'unkeyed'}): edited frame "
          f"{kept * MM:.4f} mm off the pose turned, hand share off W(t) "
          f"{np.abs(share - w).max():.3f}, empty {on_hand * MM:.4f} mm off the hand")
    assert kept < EDIT_TOL
    assert np.abs(share - w).max() < HAND_SHARE_TOL
    assert on_hand < MUTED_TOL


def test_keys_mode_names_the_bones_it_could_not_key(clip_rig: bpy.types.Object) -> None:
    """Blocking keyed on some bones only: the forearm the edit bends holds no key in the
    range, so Keys mode (adding none) leaves it as it was and the hand misses; the note
    says which bone and what to do, and no F-curve gains or loses a key (before, the
    report gave the miss alone)."""
    obj = clip_rig
    spread_figures.thin(obj)
    bag = rig_keys.channelbag(obj)
    forearm = mapped_rig.rig_for(obj).joint_bones[spread_figures.JOINT_INDEX["r_forearm"]]
    name = mapped_rig.rig_for(obj).names[forearm]
    for fc in [fc for fc in bag.fcurves if f'"{name}"' in fc.data_path]:
        bag.fcurves.remove(fc)
    counts = {k: len(v["co"]) for k, v in spread_figures.curves(obj).items()}
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    spread_figures.move_hand(obj)
    settings = propagation.SpreadSettings(mode="KEYS", range_mode="RADIUS", radius=20)
    outcome = propagation.propagate_edit(scene, obj, bpy.context.evaluated_depsgraph_get(),
                                         settings=settings)
    print(f"FIGURES keys mode, forearm unkeyed: {outcome.message} {outcome.notes}")
    note = next(n for n in outcome.notes if n.startswith("Keys mode adds no key"))
    assert name in note and "Every Frame or Layer" in note
    assert not any(n.startswith("Nothing to spread") for n in outcome.notes)
    assert {k: len(v["co"]) for k, v in spread_figures.curves(obj).items()} == counts


AUTO_KEY_OVERSHOOT = 1.05  # Keys mode: no frame between keys moves the hand further than
# this share of the edited frame's move (1.31 when the keys' angles were chained through the
# frames between them: a forearm key on another branch of its Euler angles)


@pytest.mark.parametrize("mode", ["EVERY_FRAME", "KEYS", "LAYER"])
def test_an_edit_auto_keying_keyed_is_spread(clip_rig: bpy.types.Object, mode: str) -> None:
    """Auto Keying on, the animator drags the hand and solves (the edited frame keyed),
    then spreads: the neighbours get W(t) of the edit, as without Auto Keying. Read from
    the action, the keyed edit was nothing to spread, and no other frame moved. A layer
    holds the change from the action as it is (the edit keyed there): taken from the pose
    before the edit, the layer added the edit twice, the hand 10.1 mm off its path."""
    obj = clip_rig
    scene = bpy.context.scene
    if mode == "KEYS":
        spread_figures.thin(obj)
    frames = np.arange(CENTER - 20, CENTER + 21)
    before = spread_figures.core_joints(obj, frames)
    scene.frame_set(CENTER)
    scene.tool_settings.use_keyframe_insert_auto = True
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                   radius=20, curve="SMOOTH") == {"FINISHED"}
    after = spread_figures.core_joints(obj, frames)
    c = CENTER - frames[0]
    w = weight_curve(len(frames), c, 20)
    path = spread_figures.hand_path(before, c, target, w)
    checked = w > 0 if mode != "KEYS" else (frames - 1) % spread_figures.KEY_STEP == 0
    off = np.linalg.norm(after[checked, HAND] - path[checked], axis=-1).max()
    moved = np.linalg.norm(after[:, HAND] - before[:, HAND], axis=-1)
    print(f"FIGURES auto-keyed edit spread, {mode}: hand off W(t) path {off * MM:.3f} mm, "
          f"largest move {moved.max() / moved[c]:.3f} of the edited frame's")
    assert off < EDIT_TOL
    assert moved.max() < AUTO_KEY_OVERSHOOT * moved[c]


SUBFRAME_KEY = 33.5  # the thinned clip's key at frame 31 moved here, on every F-curve
SUBFRAME_SHARE_TOL = 0.01  # of the edited frame's move: the hand there against W (0.007)


def test_a_key_between_frames_takes_its_share(clip_rig: bpy.types.Object) -> None:
    """Keys mode on a key between frames (a retimed key): it takes W there of the edit,
    the value between the two frames around it (written from the keyed frames alone, it
    was left out: 0.0 mm)."""
    obj = clip_rig
    spread_figures.thin(obj)
    for fc in rig_keys.channelbag(obj).fcurves:
        for kp in fc.keyframe_points:
            if round(kp.co.x) == SUBFRAME_KEY - 2.5:
                for attr in ("co", "handle_left", "handle_right"):
                    getattr(kp, attr).x += 2.5
        fc.update()
    scene = bpy.context.scene
    info, mw = mapped_rig.rig_for(obj), rig_io.world_matrix(obj)

    def hand_at(frame: float) -> np.ndarray:
        scene.frame_set(int(frame), subframe=frame % 1.0)
        bpy.context.view_layer.update()
        return rig_io.armature_to_core(mw, rig_io.evaluated_joints(obj, info))[HAND]

    was, was_center = hand_at(SUBFRAME_KEY), hand_at(CENTER)
    spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="KEYS", range_mode="RADIUS",
                                   radius=20, curve="SMOOTH") == {"FINISHED"}
    share = np.linalg.norm(hand_at(SUBFRAME_KEY) - was) \
        / np.linalg.norm(hand_at(CENTER) - was_center)
    w = 0.5 * (1.0 + np.cos(np.pi * (CENTER - SUBFRAME_KEY) / 20))
    print(f"FIGURES key at frame {SUBFRAME_KEY}: hand share {share:.4f}, W {w:.4f}")
    assert abs(share - w) < SUBFRAME_SHARE_TOL


def test_a_spread_after_insert_keyframe_says_there_is_nothing_to_spread(
        clip_rig: bpy.types.Object) -> None:
    """The add-on's Insert Keyframe makes the keyed pose the start of the next edit: a
    spread right after it has nothing to spread, and says so and what to do (it reported
    a spread over the range)."""
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    spread_figures.move_hand(clip_rig)
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    outcome = propagation.propagate_edit(scene, clip_rig, bpy.context.evaluated_depsgraph_get(),
                                         settings=propagation.SpreadSettings(radius=10))
    print(f"FIGURES spread after Insert Keyframe: {outcome.notes}")
    assert any(n.startswith(f"Nothing to spread at frame {CENTER}") for n in outcome.notes)


def test_an_nla_strip_in_tweak_mode_is_refused(clip_rig: bpy.types.Object) -> None:
    """The action tweaked in an NLA strip (Tab) is in the strip's time: Spread Edit says to
    leave tweak mode and changes nothing (it said to mute the strip's own track)."""
    obj = clip_rig
    anim = obj.animation_data
    strip = anim.nla_tracks.new().strips.new("clip", 1, anim.action)
    anim.action = None
    strip.select = True
    anim.use_tweak_mode = True
    assert anim.use_tweak_mode and anim.action is not None
    before = spread_figures.curves(obj)
    spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match="tweak mode: leave it"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="KEYS", radius=12)
    assert spread_figures.curves(obj) == before


def test_esc_leaves_the_action_as_it_was(clip_rig: bpy.types.Object) -> None:
    got = spread_figures.esc_run(clip_rig)
    print(f"FIGURES Esc: {got}")
    assert got["steps_before_esc"] >= 4 and got["keys_written_before_esc"]
    assert got["action_unchanged_after_esc"]  # bit for bit
    assert got["pose_off_mm"] < 1e-3


def test_the_redo_panel_shows_and_reruns(clip_rig: bpy.types.Object) -> None:
    op = bpy.types.NPE_OT_spread_edit
    assert {"REGISTER", "UNDO"} <= set(op.bl_options)
    props = bpy.ops.npe.spread_edit.get_rna_type().properties
    for name in ("mode", "range_mode", "radius", "frame_start", "frame_end", "curve",
                 "metric_mode"):
        assert not props[name].is_hidden and not props[name].is_skip_save, name
    scene = bpy.context.scene
    frames = np.arange(CENTER - 15, CENTER + 16)
    before = spread_figures.core_joints(obj := clip_rig, frames)
    scene.frame_set(CENTER)
    spread_figures.move_hand(obj)
    name = obj.name
    bpy.ops.ed.undo_push(message="the hand moved")

    def moved() -> np.ndarray:
        now = spread_figures.core_joints(bpy.data.objects[name], frames)
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
    spread_figures.thin(clip_rig)
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


def test_the_timeline_overlay_is_registered_and_shapes_bars(addon: None) -> None:
    from blender_addon import spread_overlay

    assert len(spread_overlay._handles) == 1  # one dope sheet / timeline draw handler
    verts = spread_overlay.bars(np.array([10.0, 20.0]), np.array([1.0, 0.5]))
    assert verts.shape == (12, 2)
    assert verts[:6, 1].max() == spread_overlay.BAR_HEIGHT_PX
    assert verts[6:, 1].max() == 0.5 * spread_overlay.BAR_HEIGHT_PX
    assert np.allclose(verts[6:, 0].mean(), 20.0)


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
