"""Spread Edit's writers that keep an animator's keys: new values on the keys that exist
(Keys mode), and a snapshot that puts the F-curves back exactly (Esc, a failed run).

:func:`.rig_keys.write_keys` replaces every key of a range by one per frame (a bake);
here no key is added or removed: each keeps its frame, type, interpolation, easing and
handle types. A key's free or aligned handles move with it; automatic and vector handles
are recomputed by ``fcurve.update()`` as Blender recomputes them after a key is moved;
keys outside the range are written back bit for bit after that (their automatic handles
would otherwise follow the moved neighbours).
"""

from __future__ import annotations

from collections.abc import Sequence

import bpy
import numpy as np

from . import rig_keys
from .core import conversions, rotations
from .core.conversions import AXIS_ANGLE, QUATERNION
from .rig_io import RigInfo, read_pose

Channel = tuple[str, int]  # (data path, array index)
KEY_TOL = 1e-3  # frames: a key this close to the range's ends belongs to it
# A bone the edit turns by over this (radians), or moves by over UNKEYED_MOVE (armature
# units), is one Keys mode leaves as it was where it holds no key (:func:`unkeyed`).
UNKEYED_TURN_RAD = 0.01
UNKEYED_MOVE = 1e-3
# Per-key attributes a snapshot restores, with their foreach width and dtype.
_KEY_ATTRS: tuple[tuple[str, int, type], ...] = (
    ("co", 2, np.float32), ("handle_left", 2, np.float32), ("handle_right", 2, np.float32),
    ("handle_left_type", 1, np.int32), ("handle_right_type", 1, np.int32),
    ("interpolation", 1, np.int32), ("easing", 1, np.int32), ("type", 1, np.int32),
    ("back", 1, np.float32), ("amplitude", 1, np.float32), ("period", 1, np.float32),
    ("select_control_point", 1, bool), ("select_left_handle", 1, bool),
    ("select_right_handle", 1, bool),
)


def channel_paths(obj: bpy.types.Object, info: RigInfo, bones: Sequence[int] | None = None,
                  located: Sequence[int] | None = None) -> list[Channel]:
    """The channels Spread Edit writes: each of ``bones``' rotation in its own mode (default:
    the mapped bones), the location of ``located`` (default: the mapped roots) too."""
    pose = read_pose(obj, info)
    located = info.roots if located is None else located
    out = []
    for b in (info.mapped if bones is None else bones):
        name = info.names[b]
        prop, width = rig_keys._rotation_prop(pose.modes[b])
        out += [(rig_keys.bone_path(name, prop), i) for i in range(width)]
        if b in located:
            out += [(rig_keys.bone_path(name, "location"), i) for i in range(3)]
    return out


def channel_values(obj: bpy.types.Object, info: RigInfo, quats: np.ndarray,
                   locations: np.ndarray, reference: np.ndarray, euler_ref: np.ndarray,
                   bones: Sequence[int] | None = None, located: Sequence[int] | None = None
                   ) -> dict[Channel, np.ndarray]:
    """(T,) values of every channel of :func:`channel_paths` (``bones``, ``located``) for
    poses ``quats`` (T, B, 4) and ``locations`` (T, B, 3), each bone in its rotation mode.
    Quaternions take the sign of ``reference`` (T, B, 4, the action's own rotations) frame
    by frame, so a key keeps its hemisphere against its neighbours; Euler angles stay
    compatible frame to frame from ``euler_ref`` (B, 3, the action's raw angles at the
    first frame)."""
    pose = read_pose(obj, info)
    located = info.roots if located is None else located
    out: dict[Channel, np.ndarray] = {}
    for b in (info.mapped if bones is None else bones):
        name = info.names[b]
        mode = pose.modes[b]
        q = quats[:, b]
        if mode == QUATERNION:
            sign = np.where(np.sum(q * reference[:, b], axis=-1) < 0.0, -1.0, 1.0)
            values = q * sign[:, None]
        elif mode == AXIS_ANGLE:
            values = conversions.quat_to_axis_angle(rotations.quat_make_continuous(q, axis=0))
        else:
            values = conversions.quats_to_eulers(q, mode, euler_ref[b])
        prop, width = rig_keys._rotation_prop(mode)
        out.update(((rig_keys.bone_path(name, prop), i), values[:, i]) for i in range(width))
        if b in located:
            out.update(((rig_keys.bone_path(name, "location"), i), locations[:, b, i])
                       for i in range(3))
    return out


def keyed_frames(obj: bpy.types.Object, channels: Sequence[Channel]) -> np.ndarray:
    """The sorted frames (floats) holding a key on any of ``channels``."""
    bag = rig_keys.channelbag(obj)
    if bag is None:
        return np.empty(0)
    found = []
    for path, index in channels:
        fc = bag.fcurves.find(path, index=index)
        if fc is not None and len(fc.keyframe_points):
            co = np.empty(2 * len(fc.keyframe_points), dtype=np.float32)
            fc.keyframe_points.foreach_get("co", co)
            found.append(co[0::2])
    return np.unique(np.concatenate(found)) if found else np.empty(0)


def write_on_keys(obj: bpy.types.Object, values: dict[Channel, np.ndarray],
                  frames: np.ndarray, weights: np.ndarray) -> tuple[int, int]:
    """Move the keys of ``values``' channels that lie on frames with weight > 0 to the new
    values (``values[c][t]`` at ``frames[t]``; a key between frames takes the value
    interpolated between them); nothing else changes. Returns (F-curves, keys) changed."""
    bag = rig_keys.channelbag(obj)
    if bag is None:
        return 0, 0
    frames = np.asarray(frames, dtype=np.float64)
    live = np.interp  # W between frames, for keys on subframes
    curves = keys = 0
    for (path, index), vals in values.items():
        fc = bag.fcurves.find(path, index=index)
        if fc is None or not len(fc.keyframe_points):
            continue  # an unkeyed channel stays so: no key is added
        points = fc.keyframe_points
        arrays = {a: _get(points, a, 2, np.float32).reshape(-1, 2)
                  for a in ("co", "handle_left", "handle_right")}
        x = arrays["co"][:, 0].astype(np.float64)
        w = live(x, frames, weights, left=0.0, right=0.0)
        inside = (x >= frames[0] - KEY_TOL) & (x <= frames[-1] + KEY_TOL) & (w > 0.0)
        if not inside.any():
            continue
        outside = {a: v[~inside].copy() for a, v in arrays.items()}
        new = np.interp(x[inside], frames, vals).astype(np.float32)
        shift = new - arrays["co"][inside, 1]
        arrays["co"][inside, 1] = new
        arrays["handle_left"][inside, 1] += shift
        arrays["handle_right"][inside, 1] += shift
        for a, v in arrays.items():
            points.foreach_set(a, v.ravel())
        fc.update()  # automatic and vector handles, as Blender computes them
        after = {a: _get(points, a, 2, np.float32).reshape(-1, 2) for a in arrays}
        for a, v in after.items():
            v[~inside] = outside[a]
            points.foreach_set(a, v.ravel())
        curves += 1
        keys += int(inside.sum())
    obj.update_tag()
    return curves, keys


def _get(points: bpy.types.bpy_prop_collection, attr: str, width: int, dtype: type
         ) -> np.ndarray:
    out = np.empty(len(points) * width, dtype=dtype)
    points.foreach_get(attr, out)
    return out


class ActionSnapshot:
    """The F-curves of ``channels`` on the object's action as they are now, to be put back
    exactly by :meth:`restore`: every key's attributes, and which F-curves and groups did
    not exist (removed again)."""

    def __init__(self, obj: bpy.types.Object, channels: Sequence[Channel]) -> None:
        self.obj_name = obj.name
        bag = rig_keys.channelbag(obj)
        self.had_bag = bag is not None
        self.groups = {g.name for g in bag.groups} if bag is not None else set()
        self.curves: dict[Channel, dict[str, np.ndarray] | None] = {}
        for path, index in channels:
            fc = bag.fcurves.find(path, index=index) if bag is not None else None
            self.curves[(path, index)] = None if fc is None else {
                a: _get(fc.keyframe_points, a, width, dtype)
                for a, width, dtype in _KEY_ATTRS}

    def restore(self) -> None:
        obj = bpy.data.objects[self.obj_name]
        bag = rig_keys.channelbag(obj)
        if bag is None:
            return
        for (path, index), saved in self.curves.items():
            fc = bag.fcurves.find(path, index=index)
            if saved is None:
                if fc is not None:
                    bag.fcurves.remove(fc)
                continue
            if fc is None:
                fc = bag.fcurves.new(path, index=index)
            points = fc.keyframe_points
            n = len(saved["co"]) // 2
            if len(points) != n:
                points.clear()
                points.add(n)
            for a, _width, _dtype in _KEY_ATTRS:
                points.foreach_set(a, saved[a])
            fc.update()
            # update() recomputes automatic handles: the saved ones are the ones Blender
            # had computed, written back as they were.
            for a in ("co", "handle_left", "handle_right"):
                points.foreach_set(a, saved[a])
        for group in [g for g in bag.groups if g.name not in self.groups]:
            if not any(fc.group == group for fc in bag.fcurves):
                bag.groups.remove(group)
        obj.update_tag()


def unkeyed(obj: bpy.types.Object, info: RigInfo, bones: Sequence[int],
            located: Sequence[int], frames: np.ndarray, was: tuple[np.ndarray, np.ndarray],
            solved: tuple[np.ndarray, np.ndarray]) -> list[str]:
    """The names of ``bones`` that the solve turns or moves at the edited frame (``was``
    and ``solved``: (B, 4) rotations and (B, 3) locations there) with a channel of that
    turn or move holding no key in ``frames`` (one keyed on its X rotation alone too:
    5.6-10.2 cm missed, unsaid): Keys mode adds none, so it keeps the action's values. The
    most turned first."""
    turn = 2.0 * np.arccos(np.clip(np.abs(np.sum(was[0] * solved[0], axis=-1)), 0.0, 1.0))
    shift = np.linalg.norm(solved[1] - was[1], axis=-1)
    out = []
    for b in sorted(bones, key=lambda b: -turn[b]):
        turns = turn[b] > UNKEYED_TURN_RAD
        moves = b in located and shift[b] > UNKEYED_MOVE
        channels = [c for c in channel_paths(obj, info, [b], [b] if moves else [])
                    if turns or c[0].endswith(".location")]
        for channel in channels:
            keys = keyed_frames(obj, [channel])
            if not ((keys >= frames[0] - KEY_TOL) & (keys <= frames[-1] + KEY_TOL)).any():
                out.append(info.names[b])
                break
    return out
