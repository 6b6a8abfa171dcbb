"""Inside bpy: Spread Edit as an animator uses it (issue 49), measured on a BVH clip and read
back from the rig Blender evaluates. One implementation for the tests that hold the
figures (``tests/blender/test_spread_edit.py``, ``test_spread_layers.py``) and for
``benchmark-blender``, which publishes them:

- Keys mode on a hand-keyed action (keys every :data:`KEY_STEP` frames, a Breakdown, a
  Linear and a Constant key): keys added or removed, keys whose type, interpolation,
  easing or handle types changed, keys outside the range changed (bit for bit), and how
  far the keyed frames inside are from the weighted edit;
- Layer mode: the action changed (bit for bit), the muted layer against the motion, and
  influence 0.5 against half of every channel's change and against the hand's midpoint;
- Esc during a long Every Frame run: the action changed after the cancel (bit for bit).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import key_edit, mapped_rig, propagation, rig_io, rig_keys
from blender_addon.core.normalize import facing_yaw, rotate_y
from blender_addon.core.skeleton import JOINT_INDEX
from training.blender_side import host, rigs
from training.blender_side.bench_propagation import long_action
from training.blender_side.bench_rig import run_op

MM = 1000.0
CENTER = 41  # the edited frame: a key of the thinned clip
KEY_STEP = 10  # keys on frames 1, 11, 21, ...
BREAKDOWN_FRAME, LINEAR_FRAME, CONSTANT_FRAME = 31, 21, 51
SPREAD_RADIUS = 20
LAYER_RADIUS = 12
HAND_MOVE = 0.10  # m, the right hand towards the chest
LONG_FRAMES = 2000  # the Every Frame run stopped with Esc
HAND = JOINT_INDEX["r_hand"]
HELD = JOINT_INDEX["l_hand"]
Curves = dict[tuple[str, int], dict[str, bytes]]


def curves(obj: bpy.types.Object) -> Curves:
    """Every F-curve of the action, every key attribute, as bytes (bit for bit)."""
    return _keys(rig_keys.channelbag(obj).fcurves)


def action_curves(action: bpy.types.Action) -> Curves:
    """:func:`curves` of an action not assigned to the object (a layer's)."""
    return _keys(action.fcurves if not hasattr(action, "layers") else
                 [fc for layer in action.layers for strip in layer.strips
                  for bag in strip.channelbags for fc in bag.fcurves])


def _keys(fcurves: Iterable[bpy.types.FCurve]) -> Curves:
    out = {}
    for fc in fcurves:
        n = len(fc.keyframe_points)
        row = {}
        for attr, width, dtype in key_edit._KEY_ATTRS:
            a = np.empty(n * width, dtype=dtype)
            fc.keyframe_points.foreach_get(attr, a)
            row[attr] = a.tobytes()
        out[(fc.data_path, fc.array_index)] = row
    return out


def thin(obj: bpy.types.Object) -> None:
    """Keys every KEY_STEP frames only, Bezier; a Breakdown, a Linear and a Constant key."""
    for fc in rig_keys.channelbag(obj).fcurves:
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


def core_joints(obj: bpy.types.Object, frames: np.ndarray) -> np.ndarray:
    """(T, 21, 3) joints as Blender evaluates them, in the engine's space."""
    info = mapped_rig.rig_for(obj)
    mw = rig_io.world_matrix(obj)
    out = []
    for f in frames:
        bpy.context.scene.frame_set(int(f))
        out.append(rig_io.armature_to_core(mw, rig_io.evaluated_joints(obj, info)))
    return np.array(out)


def channels(obj: bpy.types.Object) -> np.ndarray:
    """Every pose bone's Euler angles and location as Blender evaluated them."""
    return np.array([[*pb.rotation_euler, *pb.location] for pb in obj.pose.bones])


def move_hand(obj: bpy.types.Object) -> np.ndarray:
    """The right hand's empty moved HAND_MOVE towards the chest; its target (core space)."""
    heads = rigs.mapped_heads(obj)
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    towards = heads["chest"] - heads["r_hand"]
    hand.location = np.array(hand.location) + HAND_MOVE * towards / np.linalg.norm(towards)
    bpy.context.view_layer.update()
    mw = rig_io.world_matrix(obj)
    world = np.r_[np.array(hand.matrix_world.translation), 1.0]
    return rig_io.armature_to_core(mw, (np.linalg.inv(np.array(obj.matrix_world)) @ world)
                                   [:3][None])[0]


def hand_path(before: np.ndarray, center: int, target: np.ndarray, weight: np.ndarray
              ) -> np.ndarray:
    """(T, 3) where a spread puts the right hand on each frame of ``before`` (T, 21, 3,
    core space): its own place plus ``weight`` (T,) of the move to ``target`` made at
    ``center``, in body space (turned with each frame's facing)."""
    offset = rotate_y(target - before[center, HAND], -facing_yaw(before[center]))
    return before[:, HAND] + rotate_y(offset * weight[:, None], facing_yaw(before))


def keys_mode(obj: bpy.types.Object) -> dict[str, Any]:
    """Keys mode (the default on the thinned action) over +-SPREAD_RADIUS, smooth curve."""
    scene = bpy.context.scene
    thin(obj)
    frames = np.arange(CENTER - SPREAD_RADIUS - 5, CENTER + SPREAD_RADIUS + 6)
    before = core_joints(obj, frames)
    old = curves(obj)
    scene.frame_set(CENTER)
    target = move_hand(obj)
    p = scene.npe.propagation
    p.range_mode, p.radius, p.curve = "RADIUS", SPREAD_RADIUS, "SMOOTH"
    settings = propagation.scene_settings(scene)
    window, w = propagation.weights(scene, settings, obj)
    mode = propagation.resolve_mode(settings, obj, window, w)
    if bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) != {"FINISHED"}:
        raise RuntimeError("npe.spread_edit did not finish")
    new = curves(obj)
    counts = kinds = outside = inside = keys = 0
    for channel, was in old.items():
        now = new[channel]
        n = len(was["co"]) // 8
        keys += n
        counts += int(len(now["co"]) // 8 != n)
        if len(now["co"]) // 8 != n:
            continue
        for attr in ("type", "interpolation", "easing", "handle_left_type",
                     "handle_right_type"):
            a, b = np.frombuffer(was[attr], np.int8), np.frombuffer(now[attr], np.int8)
            kinds += int((a.reshape(n, -1) != b.reshape(n, -1)).any(axis=1).sum())
        x = np.frombuffer(was["co"], np.float32)[0::2]
        out = np.abs(x - CENTER) >= SPREAD_RADIUS  # W = 0 there
        moved = np.zeros(n, dtype=bool)
        for attr in ("co", "handle_left", "handle_right"):
            a = np.frombuffer(was[attr], np.float32).reshape(-1, 2)
            b = np.frombuffer(now[attr], np.float32).reshape(-1, 2)
            moved |= (a.view(np.uint32) != b.view(np.uint32)).any(axis=1)
        outside += int(moved[out].sum())
        inside += int(moved[~out].sum())
    after = core_joints(obj, frames)
    c = int(np.flatnonzero(frames == CENTER)[0])
    weight = np.interp(frames, window, w, left=0.0, right=0.0)
    path = hand_path(before, c, target, weight)
    keyed = ((frames - 1) % KEY_STEP == 0) & (weight > 0)
    return {"mode": mode, "fcurves": len(old), "keys": keys, "keyed_frames_in_range":
            [int(f) for f in frames[keyed]], "fcurves_with_keys_added_or_removed": counts,
            "keys_with_type_or_interpolation_changed": kinds,
            "keys_outside_changed": outside, "keys_inside_changed": inside,
            "hand_off_weighted_edit_mm": float(np.linalg.norm(
                after[keyed, HAND] - path[keyed], axis=-1).max() * MM),
            "held_hand_moved_mm": float(np.linalg.norm(
                after[keyed, HELD] - before[keyed, HELD], axis=-1).max() * MM)}


def layer_mode(obj: bpy.types.Object) -> dict[str, Any]:
    """Layer mode over +-LAYER_RADIUS: the action, the muted layer, influence 0.5."""
    scene = bpy.context.scene
    frames = np.arange(CENTER - 15, CENTER + 16)
    before = core_joints(obj, frames)
    old = curves(obj)
    scene.frame_set(CENTER)
    target = move_hand(obj)
    if bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="LAYER", range_mode="RADIUS",
                               radius=LAYER_RADIUS) != {"FINISHED"}:
        raise RuntimeError("npe.spread_edit did not finish")
    action_same = curves(obj) == old
    anim = obj.animation_data
    track = anim.nla_tracks[-1]
    strip = track.strips[0]
    after = core_joints(obj, frames)
    c = int(np.flatnonzero(frames == CENTER)[0])
    scene.frame_set(CENTER)
    full = channels(obj)
    track.mute = True
    muted = core_joints(obj, frames)
    scene.frame_set(CENTER)
    base = channels(obj)
    track.mute = False
    strip.influence = 0.5
    for fc in strip.fcurves:  # animated influence: its key says 0.5 too
        for kp in fc.keyframe_points:
            kp.co.y = 0.5
    half = core_joints(obj, frames[c:c + 1])[0]
    moved = after[c, HAND] - before[c, HAND]
    return {"blend_type": strip.blend_type, "action_unchanged": bool(action_same),
            "edited_hand_off_target_mm": float(np.linalg.norm(after[c, HAND] - target) * MM),
            "largest_change_mm": float(np.abs(after - before).max() * MM),
            "muted_off_motion_mm": float(np.linalg.norm(muted - before, axis=-1).max() * MM),
            "half_channels_off_rad": float(np.abs(channels(obj)
                                                  - (base + 0.5 * (full - base))).max()),
            "half_hand_share": float(np.linalg.norm(half[HAND] - before[c, HAND])
                                     / np.linalg.norm(moved)),
            "half_hand_off_midpoint_mm": float(np.linalg.norm(
                half[HAND] - (before[c, HAND] + 0.5 * moved)) * MM),
            "hand_move_mm": float(np.linalg.norm(moved) * MM)}


def esc_run(obj: bpy.types.Object) -> dict[str, Any]:
    """A LONG_FRAMES-frame Every Frame run stopped after its keys were written, then
    cancelled as Esc does: the action and the pose against what they were."""
    scene = bpy.context.scene
    long_action(obj, LONG_FRAMES)
    scene.frame_set(LONG_FRAMES // 2)
    old = curves(obj)
    pose_before = np.array(list(rigs.mapped_heads(obj).values()))
    move_hand(obj)
    settings = propagation.SpreadSettings(mode="EVERY_FRAME", range_mode="START_END",
                                          frame_start=1, frame_end=LONG_FRAMES)
    job = propagation.SpreadJob(scene, obj, bpy.context.evaluated_depsgraph_get(), settings)
    steps = 0
    while (step := job.step()) is not None and step < propagation.CORRECTING:
        steps += 1
    written = curves(obj) != old
    job.cancel()  # what Esc does
    same = curves(obj) == old
    scene.frame_set(LONG_FRAMES // 2)
    pose = np.array(list(rigs.mapped_heads(obj).values()))
    return {"frames": LONG_FRAMES, "steps_before_esc": steps, "keys_written_before_esc":
            bool(written), "action_unchanged_after_esc": bool(same),
            "pose_off_mm": float(np.abs(pose - pose_before).max() * MM)}


def _clip_rig(models: Path, clip: Path) -> bpy.types.Object:
    """A fresh scene with ``clip`` imported and mapped, at CENTER, hand effectors."""
    host.new_scene(models)
    obj = rigs.import_bvh(clip)
    rigs.select_only(obj)
    run_op(bpy.ops.npe.map_rig, preset="auto")
    bpy.context.scene.frame_set(CENTER)
    run_op(bpy.ops.npe.add_effectors, preset="HANDS")
    return obj


def spread_benchmark(models: Path, clip: Path) -> dict[str, Any]:
    """The three scenarios, each on a fresh import of ``clip`` (benchmark-blender)."""
    host.progress("spread edit: keys mode, layer mode, Esc")
    return {"clip": clip.name, "keys": keys_mode(_clip_rig(models, clip)),
            "layer": layer_mode(_clip_rig(models, clip)),
            "esc": esc_run(_clip_rig(models, clip))}
