"""Spread Edit's Layer mode: the edit alone, in an NLA track over the armature's action.

The action stays the active action, untouched; its blend type becomes Combine (the same
motion: combined over nothing, a channel keeps its value), and the edit is a strip in
Combine mode on a track of its own, evaluated under it: the final rotation is the strip's
quaternion times the action's, the final location and Euler angles their sum. So the strip
holds only the change (a quaternion ``q_new q_old^-1``, a location or Euler difference),
its influence scales it (0.5: half the edit), and muting or deleting the track gives back
the action's own motion. An NLA strip in Combine mode works alike in Blender 4.2 to 5.0;
slotted actions (4.4+) are given the object's slot.

Over earlier layers or the animator's own tracks (the action combined over them, or no
action at all) a new layer goes on top of them, its change taken from the motion they
show: :func:`read_shown` reads it a frame at a time, and the strip holds what turns that
motion into the edit (see :meth:`Layer._values`; the action's share is Combine's no change
on what only the tracks animate, :func:`over_tracks`).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace

import bpy
import numpy as np

from . import rig_io, rig_keys
from .core import conversions
from .core.conversions import AXIS_ANGLE, QUATERNION
from .core.quaternions import quat_multiply, quat_normalize
from .errors import EditError
from .rig_io import RigInfo, read_pose

TRACK_PREFIX = "Spread Edit"
FRAMES_PER_STEP = 25  # frames read between two progress yields (Esc is read there)
_CONJUGATE = np.array([1.0, -1.0, -1.0, -1.0])
_PROPS = ("rotation_quaternion", "rotation_euler", "location")  # the channels a layer holds
_IDENTITY = np.array([1.0, 0.0, 0.0, 0.0])
UNCHANGED = 1e-6  # a channel's change under this on every frame is none (radians, units)


def check_layerable(obj: bpy.types.Object, info: RigInfo,
                    bones: Sequence[int] | None = None) -> None:
    """A new track shows only where the NLA is evaluated (else the spread reported an
    edit the rig did not show: 100 mm off); Layer mode combines quaternions and Euler
    angles, so axis-angle bones (of ``bones``, default the mapped ones) are refused."""
    if not obj.animation_data.use_nla:
        raise EditError(f"{obj.name}'s NLA tracks are switched off (the NLA editor's toggle "
                        "on its action line), so a layer would not show: switch them on, or "
                        "pick Keys or Every Frame")
    pose = read_pose(obj, info)
    bad = [info.names[b] for b in (info.mapped if bones is None else bones)
           if pose.modes[b] == AXIS_ANGLE]
    if bad:
        raise EditError(f"Layer mode cannot combine axis-angle rotations ({', '.join(bad)}): "
                        "use Keys or Every Frame, or another rotation mode")


def read_shown(scene: bpy.types.Scene, obj: bpy.types.Object, info: RigInfo,
               frames: np.ndarray, unkeyed: rig_io.Pose, progress: tuple[float, float]
               ) -> Generator[float, None, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Quats ``(T, B, 4)``, locations ``(T, B, 3)`` and raw Euler angles ``(T, B, 3)`` of
    ``frames`` as the NLA stack shows them (the action combined over the layers under it),
    one frame change each: :func:`.rig_keys.read_clip` reads the action alone. Channels
    nothing animates hold ``unkeyed``'s values (put on the rig first: an edit not yet keyed
    changed them). The caller puts the pose back (:func:`.spread_ik.pose_kept`)."""
    bones = list(info.needed)
    rig_io.write_channels(obj, info, read_pose(obj, info),
                          {attr: (bones, getattr(unkeyed, name)[bones])
                           for attr, _width, name in rig_io.CHANNELS})
    t = len(frames)
    quats = np.empty((t, *unkeyed.quats.shape))
    locs = np.empty((t, *unkeyed.locations.shape))
    eulers = np.empty((t, *unkeyed.eulers.shape))
    lo, hi = progress
    for k, f in enumerate(frames):
        scene.frame_set(int(f))
        pose = read_pose(obj, info)
        quats[k], locs[k], eulers[k] = pose.quats, pose.locations, pose.eulers
        if k % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
            yield lo + (hi - lo) * (k + 1) / t
    return quats, locs, eulers


# Each channel's value where an action has no F-curve of it, combined over tracks that
# animate it: Combine leaves their value as it is (a rotation_axis_angle's is (0, 0, 1, 0)).
_NO_CHANGE = {"rotation_quaternion": (1.0, 0.0, 0.0, 0.0), "rotation_euler": (0.0,) * 3,
              "rotation_axis_angle": (0.0, 0.0, 1.0, 0.0), "location": (0.0,) * 3}


def over_tracks(pose: rig_io.Pose, info: RigInfo, below: set[tuple[str, int]]) -> rig_io.Pose:
    """``pose`` with the channels of ``below`` (data path, index: what the tracks under
    the action animate, :func:`.rig_keys.curves_below`) at Combine's no change: what
    :func:`.rig_keys.read_clip` gives for them where the action has no F-curve is then
    the action's share of the motion shown. (Read as the pose's value, an animator's base
    motion on a track under an action of additive tweaks counted twice: the edited hand
    347 mm off its target, and muting the layer put the hips 1.8 m off.)"""
    fields = {}
    for attr, width, name in rig_io.CHANNELS:
        values = getattr(pose, name).copy()
        for b, bone in enumerate(info.names):
            path = rig_keys.bone_path(bone, attr)
            for i in range(width):
                if (path, i) in below:
                    values[b, i] = _NO_CHANGE[attr][i]
        fields[name] = values
    return replace(pose, **fields)


def check_stackable(obj: bpy.types.Object, layers: list[str], frames: np.ndarray,
                    mode: str) -> None:
    """Over NLA tracks that change the motion in the range, only a new layer on top of
    them keeps what they show (Keys and Every Frame write the action, read alone)."""
    anim = obj.animation_data
    tracks = f"NLA tracks that change its motion in frames {frames[0]}-{frames[-1]} " \
             f"({', '.join(layers)})"
    where = f"{obj.name} is animated by {tracks}, with no action over them" \
        if anim.action is None else f"{obj.name}'s action lies over {tracks}"
    if not rig_keys.combined_over(obj):
        how = "replaces only the channels it keys, and theirs show through" \
            if anim.action_blend_type == "REPLACE" and anim.action_influence >= 1.0 \
            else "is not combined over them at full influence"
        raise EditError(f"{where}, which Spread Edit does not read (the action {how}): "
                        "mute them, or bake them into the action first")
    if mode != "LAYER":
        raise EditError(f"{where}: pick Layer, which adds another layer over them (Keys and "
                        "Every Frame write the action, read alone); or mute them, or bake "
                        "them into the action first")


class Layer:
    """The layer of one Spread Edit: an action of changes on a new NLA track. :meth:`write`
    (re)writes the changes for poses (the evaluated rig's correction writes again);
    :meth:`remove` deletes track and action (a cancelled run).

    ``base_*``: the motion shown before the edit; ``action_quats``: the action's own
    rotations where layers under it make it show another (default: the same); ``below``:
    the channels those layers animate (:func:`.rig_keys.curves_below`)."""

    def __init__(self, obj: bpy.types.Object, info: RigInfo, frames: np.ndarray,
                 base_quats: np.ndarray, base_locs: np.ndarray, base_eulers: np.ndarray,
                 center: int, bones: Sequence[int] | None = None,
                 located: Sequence[int] | None = None,
                 action_quats: np.ndarray | None = None,
                 below: set[tuple[str, int]] | None = None) -> None:
        self.obj_name, self.info = obj.name, info
        self.bones = list(info.mapped if bones is None else bones)  # their rotations
        self.located = set(info.roots if located is None else located)  # their locations
        self.frames = np.asarray(frames, dtype=np.float64)
        self.base_quats, self.base_locs, self.base_eulers = base_quats, base_locs, base_eulers
        self.action_quats = action_quats
        self.below = below or set()
        self.modes = read_pose(obj, info).modes
        anim = obj.animation_data
        name = f"{TRACK_PREFIX} {obj.name} f{center}"
        self.action = bpy.data.actions.new(name)
        self.slot = None
        if hasattr(self.action, "layers"):  # 4.4+: a slot for the object, its channelbag
            self.slot = self.action.slots.new(id_type="OBJECT", name=obj.name)
            strip = self.action.layers.new("Layer").strips.new(type="KEYFRAME")
            self.bag = strip.channelbag(self.slot, ensure=True)
        else:
            self.bag = self.action
        self.track = anim.nla_tracks.new()
        self.track.name = name
        self.written = False
        self.anim_blend = anim.action_blend_type
        self.based: list[str] = []  # the action's channels given a key of the pose's value
        self.made_action: bpy.types.Action | None = None  # made for them, if there was none
        self._paths: dict[str, tuple[int, str]] | None = None  # data path -> bone, property

    def _values(self, quats: np.ndarray, locs: np.ndarray) -> dict[tuple[str, int], np.ndarray]:
        """Each channel's change per frame (T,) from the motion shown to ``quats``/``locs``.

        The stack shows ``L s a`` for a rotation (``L``: the layers under this one, ``s``
        this strip's, ``a`` the action's; Combine multiplies on the left, bottom track
        first) and the sum for a location or Euler angle. So ``s = a e^-1 q a^-1`` turns
        the motion shown ``e = L a`` into ``q``; without layers under it, ``q e^-1``; and
        an added channel takes ``q - e``."""
        info = self.info
        out = {}
        for b in self.bones:
            name, mode = info.names[b], self.modes[b]
            if mode == QUATERNION:
                base = quat_normalize(self.base_quats[:, b]) * _CONJUGATE
                new = quat_normalize(quats[:, b])
                if self.action_quats is None:
                    delta = quat_multiply(new, base)
                else:
                    a = quat_normalize(self.action_quats[:, b])
                    delta = quat_multiply(quat_multiply(a, base),
                                          quat_multiply(new, a * _CONJUGATE))
                delta *= np.where(delta[:, :1] < 0.0, -1.0, 1.0)  # the short way
                prop = "rotation_quaternion"
            else:
                new = conversions.quats_to_eulers(quats[:, b], mode, self.base_eulers[0, b])
                delta = new - self.base_eulers[:, b]
                prop = "rotation_euler"
            self._add(out, name, prop, delta, _IDENTITY if mode == QUATERNION else 0.0)
            if b in self.located:
                self._add(out, name, "location", locs[:, b] - self.base_locs[:, b], 0.0)
        return out

    def _add(self, out: dict[tuple[str, int], np.ndarray], bone: str, prop: str,
             change: np.ndarray, none: np.ndarray | float) -> None:
        """``change`` (T, width) of one bone's channel into ``out``, unless it changes
        nothing on any frame and the layer holds no curve of it yet: a layer keeps the
        channels the edit changes (a channel it holds but the action does not key needs
        a key there, :meth:`_give_base`)."""
        path = rig_keys.bone_path(bone, prop)
        if np.abs(change - none).max() <= UNCHANGED and self.bag.fcurves.find(path) is None:
            return
        out.update(((path, i), change[:, i]) for i in range(change.shape[1]))

    def write(self, quats: np.ndarray, locs: np.ndarray) -> int:
        """Key the change to ``quats``/``locs`` on every frame; returns the F-curves."""
        n = len(self.frames)
        values = self._values(quats, locs)
        self._give_base(values)
        for (path, index), vals in values.items():
            fc = self.bag.fcurves.find(path, index=index)
            if fc is None:
                b, prop = self._channel(path)
                fc = rig_keys.new_curve(self.bag, self.info.names[b], prop, index)
                fc.keyframe_points.add(n)
            co = np.empty((n, 2), dtype=np.float32)
            co[:, 0], co[:, 1] = self.frames, vals
            fc.keyframe_points.foreach_set("co", co.ravel())
            fc.update()
        if not self.written:
            self._strip()
            self.written = True
        obj = bpy.data.objects[self.obj_name]
        obj.update_tag()
        return len(self.bag.fcurves)

    def _give_base(self, values: dict[tuple[str, int], np.ndarray]) -> None:
        """One key of the pose's value, in the action, on each channel of ``values`` that
        the action does not animate: Combine puts a layer over the action's value, and
        over the channel's default where the action has none (an arm left unkeyed: the
        edited hand landed 343 mm off its target, and muting the layer left the arm at
        its rest pose, 568 mm off the motion). A channel that tracks under the action
        animate has their value under the layer already."""
        obj = bpy.data.objects[self.obj_name]
        bag = rig_keys.channelbag(obj)
        base = {"rotation_quaternion": self.base_quats, "rotation_euler": self.base_eulers,
                "location": self.base_locs}
        for path, i in values:
            if (path, i) in self.below or (
                    bag is not None and bag.fcurves.find(path, index=i) is not None):
                continue
            rig_keys.refuse_linked_action(obj, f"layer over {path}[{i}], which it does not key")
            if bag is None:  # motion in NLA tracks alone: a new action holds those keys
                had = obj.animation_data.action  # (4.4+: one without a slot for it yet)
                bag = rig_keys.channelbag(obj, create=True)
                self.made_action = obj.animation_data.action if had is None else None
            b, prop = self._channel(path)
            fc = rig_keys.new_curve(bag, self.info.names[b], prop, i)
            fc.keyframe_points.insert(float(self.frames[0]), float(base[prop][0, b, i]),
                                      options={"FAST"})
            self.based.append(f"{path}[{i}]")

    def _channel(self, path: str) -> tuple[int, str]:
        """(bone, property) of one of the layer's data paths."""
        if self._paths is None:
            self._paths = {rig_keys.bone_path(self.info.names[b], prop): (b, prop)
                           for b in self.bones for prop in _PROPS}
        return self._paths[path]

    def _strip(self) -> None:
        obj = bpy.data.objects[self.obj_name]
        strip = self.track.strips.new(self.track.name, int(self.frames[0]), self.action)
        if self.slot is not None and getattr(strip, "action_slot", None) is None:
            strip.action_slot = self.slot
        strip.blend_type = "COMBINE"
        strip.extrapolation = "NOTHING"
        strip.use_animated_influence = True  # keyable, as an animator fades a layer
        strip.influence = 1.0
        for fc in strip.fcurves:  # the influence F-curve Blender made: full, to be keyed
            if fc.data_path == "influence":
                for key in fc.keyframe_points:
                    key.co.y = key.handle_left.y = key.handle_right.y = 1.0
                fc.update()
        obj.animation_data.action_blend_type = "COMBINE"

    def remove(self) -> None:
        """Delete the track and its action (and an action made for base keys); the
        action's blend type as it was."""
        obj = bpy.data.objects[self.obj_name]
        anim = obj.animation_data
        track = anim.nla_tracks.get(self.track.name)
        if track is not None:
            anim.nla_tracks.remove(track)
        if self.made_action is not None:
            anim.action = None
            bpy.data.actions.remove(self.made_action)
        anim.action_blend_type = self.anim_blend
        bpy.data.actions.remove(self.action)
        obj.update_tag()
