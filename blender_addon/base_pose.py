"""The base pose: the pose every edit of an armature starts from, stored on the object.

An armature's pose is always ``edit(base pose, effectors, metric requests)``: every edit
starts from the *base pose* (the mapped bones' local values when the session started), so
dragging an effector back and forth never drifts. The base is taken again when the pose
is no longer the one the add-on last wrote (the user posed by hand, or changed frame), and
replaced on purpose by Insert Keyframe, Clean Pose and propagation. It lives in
``obj.npe.base_pose`` (saved with the file, restored by undo).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import bpy
import numpy as np

from . import empties, metric_requests, rig_io
from .core import conversions, quaternions

LOC_RTOL = 1e-5  # a pose is "the one we wrote" within these tolerances (float32 storage)
LOC_ATOL = 1e-6
QUAT_TOL = 1e-7  # 1 - |dot| between quaternions
JOINT_MOVED = 1e-5  # armature units: a joint this far from its place in the base moved


@dataclass
class BasePose:
    """The pose every edit starts from: the mapped bones' raw channel values (for an
    exact restore, ``info.mapped`` order), the frame it was taken at, and the pose the
    add-on last wrote over it (rows of quaternion and location)."""

    frame: int
    bones: tuple[str, ...]
    quaternion: np.ndarray  # (M, 4)
    euler: np.ndarray  # (M, 3)
    axis_angle: np.ndarray  # (M, 4)
    location: np.ndarray  # (M, 3)
    codes: np.ndarray  # (M,) the bones' rotation modes (enum values) then
    written: np.ndarray  # (M, 7)

    def channels(self) -> dict[str, np.ndarray]:
        return {"rotation_quaternion": self.quaternion, "rotation_euler": self.euler,
                "rotation_axis_angle": self.axis_angle, "location": self.location}


def _mapped_names(info: rig_io.RigInfo) -> tuple[str, ...]:
    return tuple(info.names[b] for b in info.mapped)


def _mapped_codes(info: rig_io.RigInfo, pose: rig_io.Pose) -> np.ndarray:
    """The mapped bones' rotation modes (enum values), ``info.mapped`` order."""
    return pose.codes[info.pose_order[list(info.mapped)]]


def _written(info: rig_io.RigInfo, pose: rig_io.Pose) -> np.ndarray:
    """Mapped bones' rotations and locations as rows of 7 (what "written" stores)."""
    m = list(info.mapped)
    return np.concatenate([pose.quats[m], pose.locations[m]], axis=1)  # (M, 7)


def read_base(obj: bpy.types.Object, info: rig_io.RigInfo) -> BasePose | None:
    """The stored base pose, or None when there is none for this mapping."""
    items = obj.npe.base_pose
    names = tuple(item.bone for item in items)
    if names != _mapped_names(info):
        return None
    values = []
    for attr, width in ((c[0], c[1]) for c in rig_io.CHANNELS):
        buf = np.empty(len(items) * width, dtype=np.float32)
        items.foreach_get(attr, buf)
        values.append(buf.reshape(-1, width).astype(np.float64))
    codes = np.empty(len(items), dtype=np.int32)
    items.foreach_get("rotation_mode", codes)
    written = np.empty(len(items) * 7, dtype=np.float32)
    items.foreach_get("written", written)
    return BasePose(obj.npe.base_frame, names, *values, codes,
                    written.reshape(-1, 7).astype(np.float64))


def store_base(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose,
               frame: int) -> BasePose:
    """Make the pose on the rig now (``pose``, as read) the base, taken at ``frame``."""
    m = list(info.mapped)
    base = BasePose(frame, _mapped_names(info), pose.quaternion[m], pose.eulers[m],
                    pose.axis_angles[m], pose.locations[m], _mapped_codes(info, pose),
                    _written(info, pose))
    items = obj.npe.base_pose
    items.clear()
    for name in base.bones:
        items.add().bone = name
    for attr, values in (*base.channels().items(), ("written", base.written)):
        items.foreach_set(attr, values.astype(np.float32).ravel())
    items.foreach_set("rotation_mode", base.codes)
    obj.npe.base_frame = frame
    return base


def mark_written(obj: bpy.types.Object, info: rig_io.RigInfo, base: BasePose,
                 pose: rig_io.Pose) -> None:
    """Remember ``pose`` (just written) as the add-on's, in the file too: undo brings it
    back with the pose, so the next edit still knows the pose is its own."""
    base.written = _written(info, pose)
    rig_io.store_settings(obj, "base_pose", "written", base.written)


def _same_bones(base: BasePose | None, info: rig_io.RigInfo, pose: rig_io.Pose) -> bool:
    """Whether the stored base is of the mapped bones, in the rotation modes of ``pose``."""
    return base is not None and base.bones == _mapped_names(info) \
        and np.array_equal(base.codes, _mapped_codes(info, pose))


def _of_frame(base: BasePose | None, info: rig_io.RigInfo, pose: rig_io.Pose,
              frame: int) -> bool:
    """Whether the stored base was taken at ``frame``, of the same bones in the same
    rotation modes."""
    return _same_bones(base, info, pose) and base.frame == frame


def base_is_current(base: BasePose | None, info: rig_io.RigInfo, pose: rig_io.Pose,
                    frame: int) -> bool:
    """Whether the stored base still applies: same bones in the same rotation modes, same
    frame, and the pose is still the one the add-on last wrote (else the user changed it:
    take a new base)."""
    if not _of_frame(base, info, pose, frame):
        return False
    now = _written(info, pose)
    # Unit quaternions compared (a pose between two keys is not one: Blender interpolates
    # quaternion channels linearly).
    was, is_ = (quaternions.quat_normalize(q[:, :4]) for q in (base.written, now))
    dots = np.abs(np.sum(was * is_, axis=1))
    return bool(np.all(1.0 - dots < QUAT_TOL)
                and np.allclose(base.written[:, 4:], now[:, 4:], rtol=LOC_RTOL, atol=LOC_ATOL))


def moved_joints(info: rig_io.RigInfo, base: BasePose | None, pose: rig_io.Pose
                 ) -> np.ndarray:
    """(21,) the joints ``pose`` moved from where the add-on last wrote them (as the
    mapped bones carry them; all of them without a base of the same bones and rotation
    modes)."""
    if not _same_bones(base, info, pose):
        return np.ones(len(info.joint_bones), dtype=bool)
    m = list(info.mapped)
    quats, locs = pose.quats.copy(), pose.locations.copy()
    quats[m], locs[m] = base.written[:, :4], base.written[:, 4:]
    was, _ = rig_io.joint_positions(info, quats, locs)
    now, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    return np.linalg.norm(now - was, axis=-1) > JOINT_MOVED


def ensure_base(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo) -> None:
    """Take a new base unless the stored one still applies (before adding effectors)."""
    pose = rig_io.read_pose(obj, info)
    if not base_is_current(read_base(obj, info), info, pose, scene.frame_current):
        make_current_base(scene, obj, info)


def base_arrays(info: rig_io.RigInfo, base: BasePose, pose: rig_io.Pose
                ) -> tuple[np.ndarray, np.ndarray]:
    """The current pose with the mapped bones set to the base (full B arrays)."""
    m = list(info.mapped)
    quats, locs = pose.quats.copy(), pose.locations.copy()
    quats[m] = conversions.to_quats([pose.modes[b] for b in m], base.quaternion, base.euler,
                                    base.axis_angle)
    locs[m] = base.location
    return quats, locs


def edit_start(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo
               ) -> tuple[rig_io.Pose | None, bool]:
    """The pose the edit on the rig at the current frame started from, and whether the
    pose was changed since outside the add-on (bones turned by hand, keys changed: the
    base is no longer the pose it wrote). The pose on the rig with the mapped bones back
    at the base, while the base was taken at this frame; None when it was not. Its
    channels without keys hold the values they had before the edit (an edit not yet keyed
    changes them on every frame), for propagation to read the action with and keep
    outside its range."""
    pose = rig_io.read_pose(obj, info)
    base = read_base(obj, info)
    if not _of_frame(base, info, pose, scene.frame_current):
        return None, False
    by_hand = not base_is_current(base, info, pose, scene.frame_current)
    m = list(info.mapped)
    channels = {}
    for attr, values in base.channels().items():
        name = rig_io.POSE_FIELD[attr]
        channel = getattr(pose, name).copy()
        channel[m] = values
        channels[name] = channel
    quats, _ = base_arrays(info, base, pose)
    return replace(pose, quats=quats, **channels), by_hand


def restore_base(obj: bpy.types.Object, info: rig_io.RigInfo, base: BasePose,
                 pose: rig_io.Pose) -> rig_io.Pose:
    """Put the base values back on the mapped bones, exactly as they were; returns the
    pose as written."""
    return rig_io.write_channels(obj, info, pose, {attr: (info.mapped, values) for attr, values
                                                   in base.channels().items()})


def make_current_base(scene: bpy.types.Scene, obj: bpy.types.Object,
                      info: rig_io.RigInfo) -> None:
    """The pose on the rig becomes the base; effectors count as solved where they are."""
    pose = rig_io.read_pose(obj, info)
    store_base(obj, info, pose, scene.frame_current)
    empties.mark_solved(obj, None)
    metric_requests.measure_pose(scene, obj, info, pose)
