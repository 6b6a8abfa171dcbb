"""Keys as Blender makes them: the channels Auto Keying or the active keying set asks for,
the scene's key type, the user's interpolation and handle preferences, and keys that exist
left as the animator shaped them (only their value moves, handles with it).

Blender's own rules, read from the scene and the preferences: with an active keying set,
its channels (a keying set of paths: the paths of these bones; a built-in one: the
channels its name says, "Available" the channels that already have curves); without one,
the channels of ``preferences.edit.key_insert_channels`` (rotation, location, scale) that
the edit changed; "Only Insert Available" and Auto Keying's "Replace" mode key only curves,
or keys, that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import bpy
import numpy as np

from . import rig_controls, rig_keys

FRAME_ATOL = 1e-3  # a key this near the frame is the frame's key
ROTATION_PROPS = ("rotation_quaternion", "rotation_euler", "rotation_axis_angle")
# Built-in keying sets (by ``bl_idname`` words) -> the channels they key.
_BUILTIN_WORDS = (("Loc", "location"), ("Rot", "rotation"), ("Scal", "scale"),
                  ("WholeCharacter", "location"), ("WholeCharacter", "rotation"),
                  ("WholeCharacter", "scale"))
_OTHER_CHANNELS = ("Delta", "BendyBones")  # built-in sets of channels an edit leaves
_INSERT_CHANNELS = {"LOCATION": "location", "ROTATION": "rotation", "SCALE": "scale"}


@dataclass(frozen=True)
class KeyStyle:
    """How new keys look: Blender's key type, interpolation and handle type."""

    keytype: str
    interpolation: str
    handle: str
    only_existing_curves: bool = False
    only_existing_keys: bool = False

    @classmethod
    def of(cls, scene: bpy.types.Scene, auto: bool = False) -> KeyStyle:
        prefs = bpy.context.preferences.edit
        tools = scene.tool_settings
        return cls(tools.keyframe_type, prefs.keyframe_new_interpolation_type,
                   prefs.keyframe_new_handle_type,
                   only_existing_curves=auto and prefs.use_keyframe_insert_available,
                   only_existing_keys=auto and tools.auto_keying_mode == "REPLACE_KEYS")


def auto_keying(scene: bpy.types.Scene) -> bool:
    return bool(scene.tool_settings.use_keyframe_insert_auto)


def rotation_prop(pbone: bpy.types.PoseBone) -> str:
    mode = pbone.rotation_mode
    if mode == "QUATERNION":
        return "rotation_quaternion"
    return "rotation_axis_angle" if mode == "AXIS_ANGLE" else "rotation_euler"


def _kind_props(pbone: bpy.types.PoseBone, kinds: Iterable[str]) -> list[str]:
    return [rotation_prop(pbone) if k == "rotation" else k for k in dict.fromkeys(kinds)]


def keying_set_channels(scene: bpy.types.Scene, obj: bpy.types.Object,
                        bones: Sequence[str]) -> list[tuple[str, str, int | None]] | None:
    """The active keying set's channels of these bones: (bone, property, index or None
    for all); None when no keying set is active."""
    ks = scene.keying_sets_all.active
    if ks is None:
        return None
    wanted = set(bones)
    if len(ks.paths):  # a keying set of paths
        out = []
        for path in ks.paths:
            channel = rig_controls.parse_bone_path(path.data_path)
            if path.id != obj or channel is None or channel[0] not in wanted:
                continue
            out.append((*channel, None if path.use_entire_array else path.array_index))
        return out
    name = ks.bl_idname or ks.bl_label
    if any(word in name for word in _OTHER_CHANNELS):
        return []  # it keys channels an edit does not change
    if "Available" in name:
        return [(b, p, None) for b in bones for p in ("location", *ROTATION_PROPS, "scale")
                if rig_keys.has_curve(obj, b, p)]
    kinds = [kind for word, kind in _BUILTIN_WORDS if word in name]
    pbones = obj.pose.bones
    return [(b, p, None) for b in bones for p in _kind_props(pbones[b], kinds)]


def changed_channels(obj: bpy.types.Object, bones: Sequence[str],
                     moved_location: Iterable[str]) -> list[tuple[str, str, int | None]]:
    """Without a keying set: the preference's channels (``key_insert_channels``) the edit
    changed: rotations of ``bones``, locations of ``moved_location``."""
    chosen = {_INSERT_CHANNELS[c] for c in bpy.context.preferences.edit.key_insert_channels
              if c in _INSERT_CHANNELS}
    moved = set(moved_location)
    pbones = obj.pose.bones
    out = []
    for b in bones:
        kinds = [k for k in ("rotation", "location") if k in chosen
                 and (k == "rotation" or b in moved)]
        out += [(b, p, None) for p in _kind_props(pbones[b], kinds)]
    return out


def key_channels(obj: bpy.types.Object, frame: int,
                 channels: Sequence[tuple[str, str, int | None]], style: KeyStyle
                 ) -> tuple[int, list[str]]:
    """Key each channel's current value at ``frame`` (the value the action must hold for
    it where NLA tracks under the action change the motion, :func:`_through_layers`);
    returns the keys written, and the locked F-curves left as they are (as Blender's
    keying leaves them)."""
    pbones = obj.pose.bones
    wanted = []
    for bone, prop, index in channels:
        pbone = pbones.get(bone)
        if pbone is None:
            continue
        value = getattr(pbone, prop)
        values = list(value) if hasattr(value, "__len__") else [value]
        indices = range(len(values)) if index is None else [index]
        wanted += [(bone, prop, i, float(values[i])) for i in indices]
    anim = obj.animation_data
    if anim is not None and anim.use_tweak_mode:
        return _in_strip_time(obj, frame, wanted, style)
    if rig_keys.layers_under(obj, frame, frame, {bone for bone, *_ in wanted}):
        wanted = _through_layers(obj, frame, wanted)
    bag = None
    written = 0
    locked = []
    for bone, prop, i, value in wanted:
        fc = rig_keys.find_curve(obj, bone, prop, i)
        if fc is None:
            if style.only_existing_curves or style.only_existing_keys:
                continue
            bag = bag or rig_keys.channelbag(obj, create=True)
            fc = rig_keys.new_curve(bag, bone, prop, i)
        elif fc.lock:
            locked.append(f"{fc.data_path}[{i}]")
            continue
        written += set_key(fc, frame, value, style)
    if written:
        obj.update_tag()
    return written, locked


def _in_strip_time(obj: bpy.types.Object, frame: int,
                   wanted: list[tuple[str, str, int, float]], style: KeyStyle
                   ) -> tuple[int, list[str]]:
    """:func:`key_channels` in the NLA's tweak mode: the action runs in its strip's time
    (offset, scaled, reversed) and is blended over the tracks under it, and Blender's own
    keying (``keyframe_insert``, with the pose on the rig) maps the frame and the values
    through both, with this module's style (a key that exists keeps its type and handle
    types, and its handles move with it, as here). Keyed at the scene's frame in the
    action's time instead, the pose went back to the strip's motion on the next frame
    change."""
    options = set()
    if style.only_existing_curves:
        options.add("INSERTKEY_AVAILABLE")
    if style.only_existing_keys:
        options.add("INSERTKEY_REPLACE")
    pbones = obj.pose.bones
    written, locked = 0, []
    for bone, prop, i, _value in wanted:
        fc = rig_keys.find_curve(obj, bone, prop, i)
        if fc is not None and fc.lock:
            locked.append(f"{fc.data_path}[{i}]")
        elif fc is not None or not (style.only_existing_curves or style.only_existing_keys):
            written += pbones[bone].keyframe_insert(prop, index=i, frame=frame, options=options,
                                                    keytype=style.keytype)
    if written:
        obj.update_tag()
    return written, locked


def _through_layers(obj: bpy.types.Object, frame: int,
                    wanted: list[tuple[str, str, int, float]]
                    ) -> list[tuple[str, str, int, float]]:
    """The values the action must hold at ``frame`` so that, blended over the NLA tracks
    under it, the channels show ``wanted`` (a Spread Edit layer, an animator's own): Blender's
    own keyframing remaps them through the stack (``keyframe_insert``), here into a scratch
    action put in the action's place, so the action's keys keep this module's rules."""
    anim = obj.animation_data
    action = anim.action
    slot = getattr(anim, "action_slot", None)
    scratch = bpy.data.actions.new("NPE keying scratch")
    pbones = obj.pose.bones
    try:
        anim.action = scratch
        for bone, prop, i, _ in wanted:
            pbones[bone].keyframe_insert(prop, index=i, frame=frame)
        out = []
        for bone, prop, i, value in wanted:
            fc = rig_keys.find_curve(obj, bone, prop, i)  # (in the scratch action)
            out.append((bone, prop, i, fc.evaluate(frame) if fc is not None else value))
    finally:
        anim.action = action
        if slot is not None:
            anim.action_slot = slot
        bpy.data.actions.remove(scratch)
    return out


def set_key(fc: bpy.types.FCurve, frame: float, value: float, style: KeyStyle) -> int:
    """One key: the frame's key takes the value (its handles move with it, its type,
    interpolation and handle types stay); else a new key in the style. Returns 0 or 1."""
    points = fc.keyframe_points
    co = np.empty(2 * len(points), dtype=np.float32)
    points.foreach_get("co", co)
    near = np.flatnonzero(np.abs(co[0::2] - frame) < FRAME_ATOL)
    if near.size:
        key = points[int(near[0])]
        delta = value - key.co[1]
        key.co[1] = value
        key.handle_left[1] += delta
        key.handle_right[1] += delta
    elif style.only_existing_keys:
        return 0
    else:
        key = points.insert(frame, value, options={"FAST"}, keyframe_type=style.keytype)
        key.interpolation = style.interpolation
        key.handle_left_type = key.handle_right_type = style.handle
    fc.update()
    return 1
