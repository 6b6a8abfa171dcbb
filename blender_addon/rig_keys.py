"""Actions: the F-curve container of an armature's action, reading a clip and writing keys.

All through F-curve data (``keyframe_points.foreach_get/set``), never ``keyframe_insert``
per key; 4.4+ layered actions (slots, layers, strips, channelbags) and 4.2's plain actions
alike. Poses are in :class:`.rig_io.RigInfo` bone order, as :mod:`.rig_io` gives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import bpy
import numpy as np

from .core import conversions, rotations
from .core.conversions import AXIS_ANGLE, QUATERNION
from .errors import EditError
from .rig_io import POSE_FIELD, Pose, RigInfo, read_pose


def channelbag(obj: bpy.types.Object, create: bool = False) -> bpy.types.bpy_struct | None:
    """The F-curve container of the object's action slot (4.4+ layered actions, 5.0 too).

    With ``create``: makes the action, slot, layer, strip and channelbag that are missing,
    reusing what exists. Without it: None when there is none. Both kinds of container
    answer ``fcurves.find/new`` and ``groups.new`` alike (before 4.4 it is the action).
    """
    anim = obj.animation_data
    if anim is None:
        if not create:
            return None
        anim = obj.animation_data_create()
    action = anim.action
    if action is None:
        if not create:
            return None
        action = bpy.data.actions.new(f"{obj.name}Action")
        anim.action = action
    if not hasattr(action, "layers"):  # Blender 4.2/4.3: the action holds the F-curves
        return action
    slot = anim.action_slot
    if slot is None:
        if not create:
            return None
        slot = action.slots.new(id_type="OBJECT", name=obj.name)
        anim.action_slot = slot
    if not action.layers:
        if not create:
            return None
        action.layers.new("Layer")
    layer = action.layers[0]
    if not layer.strips:
        if not create:
            return None
        layer.strips.new(type="KEYFRAME")
    return layer.strips[0].channelbag(slot, ensure=create)


def refuse_tweak_mode(obj: bpy.types.Object, to: str) -> None:
    """An EditError where ``obj``'s NLA is in tweak mode: its action is a strip's, in the
    strip's time, and cannot be swapped for another while tweaked."""
    anim = obj.animation_data
    if anim is not None and anim.use_tweak_mode:
        raise EditError(f"{obj.name}'s NLA is in tweak mode: leave it (Tab in the NLA "
                        f"editor) to {to}")


def refuse_linked_action(obj: bpy.types.Object, to: str, instead: str = "") -> None:
    """An EditError where ``obj``'s action is linked from a library (a production
    character's, overridden): its keys cannot change here, and a change written anyway is
    lost when the file is opened again (a spread reported done, the hand 111 mm off its
    target, and nothing of it after a reload)."""
    anim = obj.animation_data
    action = anim.action if anim is not None else None
    if action is not None and not action.is_editable:
        where = f" from {action.library.filepath}" if action.library is not None else ""
        raise EditError(f"{obj.name}'s action {action.name} is linked{where}, so its keys "
                        f"cannot change here: {instead}make it local (Object > Relations > "
                        f"Make Local) or give the character an action of its own to {to}")


def refuse_hidden_action(obj: bpy.types.Object) -> None:
    """An EditError where the NLA does not show ``obj``'s action as its keys hold it: at
    an influence under 1 it is blended towards the channels' defaults, and a solo track
    is shown instead of it, and of a new layer; reading and writing its keys does not see
    either (a spread left the hand 252 mm and 83 mm off its target there; with the motion
    in a solo track alone, the layer's edit did not show: 100 mm)."""
    anim = obj.animation_data
    if anim is None or not anim.use_nla:
        return
    if solo := [t.name for t in anim.nla_tracks if t.is_solo]:
        raise EditError(f"{obj.name}'s NLA track {solo[0]} is solo, so the rig shows it "
                        "alone, not the action or a new layer: turn the solo off to spread "
                        "an edit")
    if anim.action is not None and anim.action_influence < 1.0:
        raise EditError(f"{obj.name}'s action plays at influence {anim.action_influence:.2f} "
                        "(the NLA editor's action line): set it to 1 to spread an edit")


def layers_under(obj: bpy.types.Object, first: float, last: float,
                 bones: Iterable[str] | None = None) -> list[str]:
    """The NLA tracks that change the motion the action shows somewhere in frames
    ``first``-``last`` (unmuted, with a strip there, its extrapolation counted, under an
    action blended over them, or in tweak mode, or under no action at all; under an action
    replacing them, where it does not key the channel), on a channel of ``bones`` (default:
    any channel): what :func:`read_clip`, which reads the action alone, would miss there."""
    return list(_strips_under(obj, first, last, bones))


def curves_below(obj: bpy.types.Object, first: float, last: float) -> set[tuple[str, int]]:
    """(data path, index) of the F-curves that the strips of :func:`layers_under` animate
    in frames ``first``-``last`` (muted ones do not): an action combined over them shows
    their value on those channels where it has no F-curve of its own (not the channel's
    default)."""
    out = set()
    for strips in _strips_under(obj, first, last).values():
        for strip in strips:
            out.update((fc.data_path, fc.array_index) for fc in strip_curves(strip)
                       if not fc.mute)
    return out


def _strips_under(obj: bpy.types.Object, first: float, last: float,
                  bones: Iterable[str] | None = None) -> dict[str, list[bpy.types.NlaStrip]]:
    """:func:`layers_under`'s tracks, by name, with their strips that show in
    ``first``-``last``."""
    anim = obj.animation_data
    if anim is None or not anim.use_nla:
        return {}
    replaced = None  # the channels an action replacing the tracks at full influence keys
    if anim.action is not None and anim.action_blend_type == "REPLACE" \
            and anim.action_influence >= 1.0 and not anim.use_tweak_mode:
        bag = channelbag(obj)
        replaced = {(fc.data_path, fc.array_index) for fc in bag.fcurves} \
            if bag is not None else set()
    read = None if bones is None else {bone_path(b, prop) for b in bones
                                       for prop in POSE_FIELD}

    def shows(strip: bpy.types.NlaStrip) -> bool:
        start = -np.inf if strip.extrapolation == "HOLD" else strip.frame_start
        end = strip.frame_end if strip.extrapolation == "NOTHING" else np.inf
        if strip.mute or start > last or end < first:
            return False
        return strip.type != "CLIP" or any(  # (a meta strip or a transition: counted)
            not fc.mute and (read is None or fc.data_path in read)
            and (replaced is None or (fc.data_path, fc.array_index) not in replaced)
            for fc in strip_curves(strip))

    out = {}
    for track in anim.nla_tracks:
        strips = [s for s in track.strips if shows(s)]
        if not track.mute and strips:
            out[track.name] = strips
    return out


def strip_curves(strip: bpy.types.NlaStrip) -> Iterable[bpy.types.FCurve]:
    """The F-curves an NLA strip's action gives it (4.4+: its slot's channelbag)."""
    action = strip.action
    if action is None:
        return ()
    if not hasattr(action, "layers"):
        return action.fcurves
    slot = strip.action_slot  # (none: the strip animates nothing)
    return [fc for layer in action.layers for keyed in layer.strips
            if slot is not None and (bag := keyed.channelbag(slot)) is not None
            for fc in bag.fcurves]


def combined_over(obj: bpy.types.Object) -> bool:
    """Whether the action is combined, at full influence, over the NLA tracks under it
    (as a Spread Edit layer leaves it), or there is no action over them: what they show
    is its values combined with theirs, which another layer on top can change
    (:mod:`.spread_layer`)."""
    anim = obj.animation_data
    return anim is not None and not anim.use_tweak_mode and (anim.action is None or (
        anim.action_blend_type == "COMBINE" and anim.action_influence >= 1.0))


def flagged_curves(obj: bpy.types.Object, paths: Sequence[tuple[str, int]], flag: str
                   ) -> list[str]:
    """Of the action's F-curves at ``paths`` (data path, index), those with ``flag`` set
    ("mute": not evaluated, "lock": guarded by the animator), as ``path[index]``."""
    bag = channelbag(obj)
    found = (bag.fcurves.find(path, index=index) if bag is not None else None
             for path, index in paths)
    return [f"{fc.data_path}[{fc.array_index}]" for fc in found
            if fc is not None and getattr(fc, flag)]


def modified_curves(obj: bpy.types.Object, paths: Sequence[tuple[str, int]]) -> list[str]:
    """Of the action's F-curves at ``paths`` (data path, index), those an unmuted modifier
    changes (a Cycles modifier repeating a walk, Noise): a key written there is not the
    value shown, and a key past a cycle's keys changes every cycle."""
    bag = channelbag(obj)
    out = []
    for path, index in paths:
        fc = bag.fcurves.find(path, index=index) if bag is not None else None
        if fc is not None and any(not m.mute for m in fc.modifiers):
            out.append(f"{path}[{index}] ({', '.join(m.type.title() for m in fc.modifiers)})")
    return out


@contextmanager
def held(obj: bpy.types.Object, paths: Iterable[str]) -> Iterator[None]:
    """While set, the F-curves of the channels ``paths`` (data paths) are muted, the
    action's and its NLA strips' (the motion in a track under the action wrote its own
    values over the pose written: a Rigify rig's IK controls, the hand 248 mm off): a
    frame change evaluates the rest of the animation over the values written on those
    channels, one evaluation of the rig for a frame with a pose written where a frame
    change and then the pose took two. Unmuted as they were after (Esc and errors
    included)."""
    bag = channelbag(obj)
    anim = obj.animation_data
    strips = [strip for track in anim.nla_tracks for strip in track.strips] \
        if anim is not None else []
    wanted = set(paths)
    curves = [fc for source in (() if bag is None else bag.fcurves,
                                *(strip_curves(strip) for strip in strips))
              for fc in source if fc.data_path in wanted and not fc.mute]
    try:
        for fc in curves:
            fc.mute = True
        yield
    finally:
        for fc in curves:
            fc.mute = False


def bone_path(name: str, prop: str) -> str:
    return f'pose.bones["{bpy.utils.escape_identifier(name)}"].{prop}'


def find_curve(obj: bpy.types.Object, bone: str, prop: str, index: int
               ) -> bpy.types.FCurve | None:
    """The F-curve of one bone channel in the object's action, or None."""
    bag = channelbag(obj)
    return None if bag is None else bag.fcurves.find(bone_path(bone, prop), index=index)


def has_curve(obj: bpy.types.Object, bone: str, prop: str) -> bool:
    bag = channelbag(obj)
    return bag is not None and any(bag.fcurves.find(bone_path(bone, prop), index=i)
                                   for i in range(4))


def new_curve(bag: bpy.types.bpy_struct, bone: str, prop: str, index: int
              ) -> bpy.types.FCurve:
    """A new F-curve for a bone channel, in the bone's group (made when missing), as
    Blender's keying files it."""
    fc = bag.fcurves.new(bone_path(bone, prop), index=index)
    group = bag.groups.get(bone) if hasattr(bag.groups, "get") else None
    if group is None:
        group = next((g for g in bag.groups if g.name == bone), None) or bag.groups.new(bone)
    fc.group = group
    return fc


def _rotation_prop(mode: str) -> tuple[str, int]:
    if mode == QUATERNION:
        return "rotation_quaternion", 4
    if mode == AXIS_ANGLE:
        return "rotation_axis_angle", 4
    return "rotation_euler", 3


def read_clip(obj: bpy.types.Object, info: RigInfo, frames: np.ndarray,
              unkeyed: Pose | None = None, bones: Sequence[int] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The action's local pose at every frame: quats ``(T, B, 4)``, locations ``(T, B, 3)``
    and raw Euler angles ``(T, B, 3)``.

    Only ``bones`` are evaluated (default: those the mapped joints depend on;
    ``fcurve.evaluate``, no frame changes); unanimated channels and other bones keep the
    values of ``unkeyed`` (default: the pose on the rig now; an edit not yet keyed changed
    that pose's unanimated channels, which the action never had). The action alone is
    read: drivers, constraints and NLA strips are not.
    """
    pose = read_pose(obj, info) if unkeyed is None else unkeyed
    t = len(frames)
    quats = np.repeat(pose.quaternion[None], t, axis=0)
    eulers = np.repeat(pose.eulers[None], t, axis=0)
    axis_angles = np.repeat(pose.axis_angles[None], t, axis=0)
    locations = np.repeat(pose.locations[None], t, axis=0)
    bag = channelbag(obj)
    if bag is not None:
        arrays = {"rotation_quaternion": quats, "rotation_euler": eulers,
                  "rotation_axis_angle": axis_angles, "location": locations}
        for b in info.needed if bones is None else bones:
            name = info.names[b]
            for prop, width in (_rotation_prop(pose.modes[b]), ("location", 3)):
                path = bone_path(name, prop)
                for i in range(width):
                    fc = bag.fcurves.find(path, index=i)
                    if fc is not None:
                        arrays[prop][:, b, i] = sample(fc, frames)
    return conversions.to_quats(pose.modes, quats, eulers, axis_angles), locations, eulers


def sample(fcurve: bpy.types.FCurve, frames: np.ndarray) -> np.ndarray:
    """The F-curve's values at ``frames``: a curve keyed on every one of them (baked
    motion) and without modifiers gives its keys' values, which is what evaluating it there
    gives (a curve passes through its keys), in one ``foreach_get``; others are evaluated
    frame by frame (a 1,000-frame clip of 66 curves: 324 ms evaluated)."""
    points = fcurve.keyframe_points
    if len(points) >= len(frames) and not len(fcurve.modifiers):
        co = np.empty(2 * len(points), dtype=np.float32)
        points.foreach_get("co", co)
        x = co[0::2]
        at = np.searchsorted(x, frames)
        inside = at < len(x)
        if inside.all() and (x[at] == np.asarray(frames, dtype=np.float32)).all():
            return co[1::2][at].astype(np.float64)
    return np.array([fcurve.evaluate(float(f)) for f in frames])


# Handle types recomputed from the neighbouring keys: a key bounding the rewritten span
# gets aligned handles instead, as they are, so the curve beyond it keeps its shape.
_AUTO_HANDLES = ("AUTO", "AUTO_CLAMPED")


def _merge_keys(fcurve, frames: np.ndarray, values: np.ndarray,
                unkeyed: float | None = None) -> None:
    """Replace the keys of ``fcurve`` inside [frames[0], frames[-1]] by ours; keep the rest.

    ``unkeyed`` (the channel's value where it has no keys yet): also keep every whole frame
    outside the range where it was. The frames between the range and the nearest keys
    outside it are keyed with the values they had, and those keys' automatic handles are
    frozen as they are (a sparse, hand-keyed curve: new keys next to a key recompute its
    handles, and with them the frames up to the key before it); a curve with no keys gets
    its old constant value on both sides of the range.
    """
    points = fcurve.keyframe_points
    n_old = len(points)
    co = np.empty(n_old * 2, dtype=np.float32)
    points.foreach_get("co", co)
    old_x = co[0::2]
    if unkeyed is not None:
        lo, hi = float(frames[0]), float(frames[-1])
        before = np.flatnonzero(old_x < lo - 1e-3)
        after = np.flatnonzero(old_x > hi + 1e-3)
        first = int(np.floor(old_x[before].max())) + 1 if before.size else int(lo) - 1
        last = int(np.ceil(old_x[after].min())) - 1 if after.size else int(hi) + 1
        pre, post = np.arange(first, lo), np.arange(hi + 1, last + 1)
        kept = [fcurve.evaluate(float(f)) if n_old else unkeyed for f in (*pre, *post)]
        bounds = [before[np.argmax(old_x[before])]] if before.size else []
        bounds += [after[np.argmin(old_x[after])]] if after.size else []
        for i in bounds:
            key = points[int(i)]
            for side in ("handle_left_type", "handle_right_type"):
                if getattr(key, side) in _AUTO_HANDLES:
                    setattr(key, side, "ALIGNED")
        frames = np.r_[pre, frames, post]
        values = np.r_[kept[:len(pre)], values, kept[len(pre):]]
    if n_old:
        inside = np.flatnonzero((old_x >= frames[0] - 1e-3) & (old_x <= frames[-1] + 1e-3))
        if len(inside) == n_old:
            points.clear()
        else:
            for i in inside[::-1]:
                points.remove(points[int(i)], fast=True)
    n_kept = len(points)
    points.add(len(frames))  # appended after the kept keys
    co = np.empty((n_kept + len(frames)) * 2, dtype=np.float32)
    points.foreach_get("co", co)
    co = co.reshape(-1, 2)
    co[n_kept:, 0] = frames
    co[n_kept:, 1] = values
    points.foreach_set("co", co.ravel())
    fcurve.update()  # sorts the keys and recomputes automatic handles


def write_keys(obj: bpy.types.Object, info: RigInfo, frames: Sequence[int],
               quats: np.ndarray, locations: np.ndarray, bones: Sequence[int] | None = None,
               euler_ref: np.ndarray | None = None, unkeyed: Pose | None = None,
               located: Sequence[int] | None = None) -> int:
    """Key ``bones`` (default: the mapped ones) at ``frames`` from ``quats`` (T, B, 4) and
    ``locations`` (T, B, 3), through F-curve data; returns the number of F-curves written.

    Each bone is keyed in its own rotation mode, ``located`` ones (default: the mapped
    roots) on their location too.
    Keys of those channels inside the frame range are replaced; keys outside are kept.
    ``euler_ref`` (B, 3): Euler angles the first frame stays compatible with (default: the
    current pose). ``unkeyed`` (the pose whose values unanimated channels had): keep every
    whole frame outside the range as it was (propagation; see :func:`_merge_keys`), where
    inserting a key reshapes the curve around it as Blender's keying does.
    """
    frames_arr = np.asarray(frames, dtype=np.float64)
    bones = list(info.mapped if bones is None else bones)
    located = info.roots if located is None else located
    pose = read_pose(obj, info)
    ref = pose.eulers if euler_ref is None else np.asarray(euler_ref, dtype=np.float64)
    values: dict[int, np.ndarray] = {}  # bone -> (T, width) keys of its rotation channel
    for mode in dict.fromkeys(pose.modes[b] for b in bones):
        group = [b for b in bones if pose.modes[b] == mode]
        q = quats[:, group]
        if mode == QUATERNION:
            converted = rotations.quat_make_continuous(q, axis=0)
        elif mode == AXIS_ANGLE:
            converted = conversions.quat_to_axis_angle(q)
        else:  # each frame compatible with the last: one pass over the frames per order
            converted = conversions.quats_to_eulers(q, mode, ref[group])
        values.update((b, converted[:, k]) for k, b in enumerate(group))
    bag = channelbag(obj, create=True)
    groups = {g.name: g for g in bag.groups}
    written = 0
    for b in bones:
        name = info.names[b]
        prop, width = _rotation_prop(pose.modes[b])
        channels = [(prop, i, values[b][:, i]) for i in range(width)]
        if b in located:
            channels += [("location", i, locations[:, b, i]) for i in range(3)]
        group = groups.get(name)
        if group is None:
            group = groups[name] = bag.groups.new(name)
        for prop_name, i, vals in channels:
            path = bone_path(name, prop_name)
            fc = bag.fcurves.find(path, index=i)
            if fc is None:
                fc = bag.fcurves.new(path, index=i)
                fc.group = group
            _merge_keys(fc, frames_arr, vals, None if unkeyed is None
                        else float(getattr(unkeyed, POSE_FIELD[prop_name])[b, i]))
            written += 1
    obj.update_tag()
    return written
