"""Armature <-> numpy: the only code that reads rigs into arrays and writes poses and keys.

Spaces, fixed once for the bpy layer:

- *armature space*: the rig's own, where ``bone.matrix_local`` lives and where
  :mod:`.core.rotations` works (the armature object's scale is not applied);
- *world*: Blender's scene space, Z up: ``obj.matrix_world @ armature_space``;
- *core space*: world in the core's Y-up axes (:func:`.core.skeleton.blender_to_yup`),
  where the models edit poses.

Quaternions are ``(w, x, y, z)``, Blender's order. A joint is its bone's head; a toe with
no bone of its own sits at its foot bone's tail. The arithmetic is the core's (rotation
channels: :mod:`.core.conversions`; joints and the exact-reach pass: :mod:`.core.reach`):
this module moves arrays in and out of Blender, in whole-collection ``foreach_get`` /
``foreach_set`` calls. Nothing here keeps a bpy reference between calls (after an undo
they would be dead): the rig cache holds plain arrays keyed by names, and every function
takes the object it works on.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import bpy
import numpy as np
from mathutils import Matrix

from . import pose_writes, rig_controls
from .channel_writes import write_rows
from .core import conversions, reach, rotations
from .core.conversions import AXIS_ANGLE, QUATERNION
from .core.skeleton import JOINT_INDEX, JOINTS, blender_to_yup, yup_to_blender

SETTINGS = "npe"  # the add-on's settings on an object: ``obj.npe`` (properties.py)
TOE_FOOT = {"l_toe": "l_foot", "r_toe": "r_foot"}  # a boneless toe sits at this foot's tail
# ``rotation_mode`` as ``foreach_get`` reads it (the enum's values).
MODE_NAMES = {0: QUATERNION, **{i + 1: o for i, o in enumerate(conversions.EULER_ORDERS)},
              -1: AXIS_ANGLE}


class RigError(ValueError):
    """The armature cannot be read as mapped (the message says what to fix)."""


# ---------------------------------------------------------------------------- the rig


@dataclass(frozen=True)
class RigInfo:
    """What the edit needs of an armature and its mapping, read once and cached."""

    key: tuple  # what it was built from; a different key rebuilds it
    names: tuple[str, ...]  # bone names, in ``armature.bones`` order
    # The rig the arithmetic runs on: the ``needed`` bones only (a control rig has hundreds
    # of others no joint depends on), indexed in ``needed`` order.
    mapped_rig: reach.MappedRig
    mapped: tuple[int, ...]  # the mapped bones, ascending: the only ones an edit writes
    roots: tuple[int, ...]  # mapped bones with no mapped ancestor: their location is written
    needed: tuple[int, ...]  # mapped bones and their ancestors: what a joint depends on
    pose_order: np.ndarray  # (B,) each bone's index in ``obj.pose.bones`` (may differ)
    shown: tuple[int | None, ...]  # 21: the bone the user sees at each joint (a deform bone)
    joint_bones: tuple[int | None, ...]  # 21: the bone index of each joint, or None
    toe_feet: Mapping[int, int]  # boneless toe joint -> its foot bone

    @property
    def rig(self) -> rotations.Rig:
        """The arithmetic's rig (the ``needed`` bones)."""
        return self.mapped_rig.rig


_RIGS: dict[str, RigInfo] = {}


SHOWN_ATOL = 1e-4  # a deform bone whose head is this close (armature units) shows a joint


def _rig_key(obj: bpy.types.Object, joints: dict[str, str], rest: np.ndarray) -> tuple:
    """What a rig is built from: names, mapping and every bone's rest matrix (a bone
    moved or resized in Edit Mode gives another key)."""
    return (obj.name, obj.data.name, len(obj.data.bones), tuple(sorted(joints.items())),
            hash(rest.tobytes()))


def forget(obj_name: str | None = None) -> None:
    """Forget the cached rig of one armature (all when None); see :func:`.state.invalidate`."""
    if obj_name is None:
        _RIGS.clear()
    else:
        _RIGS.pop(obj_name, None)
    rig_controls.forget(obj_name)


def _shown_bones(joint_bones: Sequence[int | None], mats: np.ndarray,
                 deform: np.ndarray) -> tuple[int | None, ...]:
    """The bone that shows each joint to the user: the mapped bone when it deforms, else
    the deform bone starting at the same place and pointing most alike (a control rig's
    DEF bone under its control), else the mapped bone itself."""
    heads, axes = mats[:, :3, 3], mats[:, :3, 1]
    candidates = np.flatnonzero(deform)
    out: list[int | None] = []
    for b in joint_bones:
        if b is None or deform[b] or not len(candidates):
            out.append(b)
            continue
        near = candidates[np.linalg.norm(heads[candidates] - heads[b], axis=1) < SHOWN_ATOL]
        out.append(int(near[np.argmax(axes[near] @ axes[b])]) if len(near) else b)
    return tuple(out)


def _depth(b: int, parents: np.ndarray) -> int:
    """How many ancestors bone ``b`` has."""
    n = 0
    while parents[b] >= 0:
        b, n = int(parents[b]), n + 1
    return n


def rig_info(obj: bpy.types.Object, joints: dict[str, str], fresh: bool = False) -> RigInfo:
    """The armature's rig (rest matrices, parents) and mapping, cached per object name.

    ``joints`` maps canonical joints to bone names (toes may be missing). ``fresh`` re-reads
    the rest pose even when cached: operators do, the live handler does not.
    """
    bones = obj.data.bones
    flat = np.empty(len(bones) * 16, dtype=np.float32)
    bones.foreach_get("matrix_local", flat)
    key = _rig_key(obj, joints, flat)
    cached = _RIGS.get(obj.name)
    if cached is not None and cached.key == key and not fresh:
        return cached
    if cached is None or cached.key != key:
        rig_controls.forget(obj.name)  # another rig: its limbs are found again
    names = tuple(b.name for b in bones)
    index = {n: i for i, n in enumerate(names)}
    parents = np.array([index[b.parent.name] if b.parent else -1 for b in bones], dtype=np.int64)
    missing = [f"{j} ({bone})" for j, bone in joints.items() if bone not in index]
    if missing:
        raise RigError(f"{obj.name}: mapped bones not found: {', '.join(missing)}. "
                       "Map the rig again or pick the bones in the mapping panel")
    unmapped = [j for j in JOINTS if j not in joints and j not in TOE_FOOT]
    if unmapped:
        raise RigError(f"{obj.name}: joints not mapped: {', '.join(unmapped)}. "
                       "Pick their bones in Rig Mapping › Joints")
    mats = flat.reshape(-1, 4, 4).transpose(0, 2, 1)  # foreach_get is column-major
    deform = np.empty(len(bones), dtype=bool)
    bones.foreach_get("use_deform", deform)
    lengths = np.empty(len(bones), dtype=np.float32)
    bones.foreach_get("length", lengths)
    pose_index = {pb.name: i for i, pb in enumerate(obj.pose.bones)}
    if len(pose_index) != len(names) or any(n not in pose_index for n in names):
        raise RigError(f"{obj.name}: the pose is out of date with the bones; leave Edit Mode")
    joint_bones = tuple(index[joints[j]] if j in joints else None for j in JOINTS)
    mapped = sorted(b for b in joint_bones if b is not None)
    mapped_set = set(mapped)
    # The hierarchy as Blender's evaluation moves the bones (a control rig's ORG bones
    # follow their controls), which the solve and forward kinematics model.
    parents = rig_controls.followed_parents(obj, names, parents, mats, mapped_set)

    def has_mapped_ancestor(b: int) -> bool:
        p = int(parents[b])
        while p >= 0:
            if p in mapped_set:
                return True
            p = int(parents[p])
        return False

    needed: set[int] = set()
    for b in mapped:
        while b >= 0:
            needed.add(b)
            b = int(parents[b])
    toe_feet = {JOINT_INDEX[t]: index[joints[f]] for t, f in TOE_FOOT.items() if t not in joints}
    if all(parents[b] < b for b in needed):
        sub = sorted(needed)  # ascending keeps parents before children, as in the armature
    else:  # a followed bone's parent comes after it: by depth, then as in the armature
        sub = sorted(needed, key=lambda b: (_depth(b, parents), b))
    local = {b: i for i, b in enumerate(sub)}
    rig = rotations.Rig.from_rest_matrices(
        [names[b] for b in sub],
        np.array([local[int(parents[b])] if parents[b] >= 0 else -1 for b in sub],
                 dtype=np.int64),
        mats[sub].astype(np.float64))
    model = reach.MappedRig(rig, tuple(None if b is None else local[b] for b in joint_bones),
                            {j: local[b] for j, b in toe_feet.items()},
                            lengths[sub].astype(np.float64))
    info = RigInfo(key, names, model,
                   tuple(mapped), tuple(b for b in mapped if not has_mapped_ancestor(b)),
                   tuple(sub), np.array([pose_index[n] for n in names], dtype=np.int64),
                   _shown_bones(joint_bones, mats.astype(np.float64), deform),
                   joint_bones, toe_feet)
    _RIGS[obj.name] = info
    return info


# ---------------------------------------------------------------------------- poses


@dataclass
class Pose:
    """Local pose values of every bone (``matrix_basis``) in ``RigInfo`` bone order: each
    bone's rotation as a quaternion whatever its mode, and the raw channels.

    ``codes`` and ``raw`` are the values exactly as Blender keeps them (rotation modes;
    the float32 channels of :data:`CHANNELS` one after the other, pose-bone order): equal
    buffers, equal pose. ``origin`` is shared by poses that differ only in the mapped
    bones (a pose and what the add-on wrote over it). Arrays are never changed in place:
    poses share them.
    """

    quats: np.ndarray  # (B, 4) rotation as a quaternion, whatever the bone's mode
    locations: np.ndarray  # (B, 3)
    modes: tuple[str, ...]  # each bone's rotation_mode
    quaternion: np.ndarray  # (B, 4) raw rotation_quaternion
    eulers: np.ndarray  # (B, 3) raw rotation_euler (the reference for continuous Euler)
    axis_angles: np.ndarray  # (B, 4) raw rotation_axis_angle
    codes: np.ndarray  # (B,) int32 rotation modes, pose-bone order
    raw: np.ndarray  # (14 B,) float32 channels, pose-bone order
    origin: object = field(default_factory=object)


# The pose channels: (property, width, Pose attribute), in the order ``Pose.raw`` holds them.
CHANNELS = (("rotation_quaternion", 4, "quaternion"), ("rotation_euler", 3, "eulers"),
            ("rotation_axis_angle", 4, "axis_angles"), ("location", 3, "locations"))
_OFFSETS = dict(zip((c[0] for c in CHANNELS),
                    np.cumsum([0] + [c[1] for c in CHANNELS])[:-1].tolist(), strict=True))
_RAW_WIDTH = sum(c[1] for c in CHANNELS)
POSE_FIELD = {attr: name for attr, _width, name in CHANNELS}  # channel -> Pose field
_CHANNEL_OF = {"quaternion": "rotation_quaternion", "euler": "rotation_euler",
               "axis_angle": "rotation_axis_angle"}  # conversions.from_quats' names


def _block(raw: np.ndarray, attr: str, width: int, n: int) -> np.ndarray:
    """One channel's ``(n, width)`` view of a raw buffer."""
    start = _OFFSETS[attr] * n
    return raw[start:start + n * width].reshape(n, width)


@lru_cache(maxsize=16)
def _mode_names(codes: bytes) -> tuple[str, ...]:
    """Rotation mode names of int32 mode codes (a rig's few come back at every read)."""
    return tuple(MODE_NAMES[int(c)] for c in np.frombuffer(codes, dtype=np.int32))


def read_pose(obj: bpy.types.Object, info: RigInfo, previous: Pose | None = None) -> Pose:
    """The armature's current local pose; Euler and axis-angle bones become quaternions.

    Five ``foreach_get`` calls; when nothing changed since ``previous`` (the same values
    to the bit), ``previous`` itself comes back and nothing is converted.
    """
    pbones = obj.pose.bones
    n = len(pbones)
    if n != len(info.names):
        raise RigError(f"{obj.name}: the bones changed since the rig was read; map it again")
    codes = np.empty(n, dtype=np.int32)
    pbones.foreach_get("rotation_mode", codes)
    raw = np.empty(n * _RAW_WIDTH, dtype=np.float32)
    for attr, width, _name in CHANNELS:
        pbones.foreach_get(attr, _block(raw, attr, width, n).reshape(-1))
    if previous is not None and np.array_equal(raw, previous.raw) \
            and np.array_equal(codes, previous.codes):
        return previous
    order = info.pose_order
    quaternion, eulers, axis_angles, locations = (
        _block(raw, attr, width, n)[order].astype(np.float64) for attr, width, _ in CHANNELS)
    modes = _mode_names(codes[order].tobytes())
    return Pose(conversions.to_quats(modes, quaternion, eulers, axis_angles), locations, modes,
                quaternion, eulers, axis_angles, codes, raw)


def write_channels(obj: bpy.types.Object, info: RigInfo, pose: Pose,
                   values: Mapping[str, tuple[Sequence[int], np.ndarray]],
                   quats: np.ndarray | None = None) -> Pose:
    """Set raw channel values of mapped bones over ``pose`` (the pose on the rig now, as
    read): ``values`` maps channels of :data:`CHANNELS` to (bones, ``(len(bones), width)``
    values), one ``foreach_set`` each. Returns the pose as written, which :func:`read_pose`
    gives back while nobody changes the rig (same ``origin``: only mapped bones changed);
    its rotations of the bones written are ``quats`` (B, 4) when given (what was converted
    to the channels), else read from the channels."""
    order = info.pose_order
    n = len(order)
    raw = pose.raw.copy()
    changed: dict[str, np.ndarray] = {}
    rotated: set[int] = set()
    for attr, width, name in CHANNELS:
        if attr not in values:
            continue
        bones, vals = values[attr]
        bones = list(bones)
        block = _block(raw, attr, width, n)
        block[order[bones]] = vals
        # the rig's other bones as it holds them now, not as ``pose`` read them (a step of
        # the IK controls since was written back, its twist undone); the pose returned
        # keeps ``pose``'s, so :func:`read_pose` sees such a change
        write_rows(obj, attr, order[bones], vals)
        channel = getattr(pose, name).copy()
        channel[bones] = block[order[bones]]  # as Blender keeps them (float32)
        changed[name] = channel
        if attr != "location":
            rotated.update(bones)
    # foreach_set does not always tag the pose for re-evaluation. The object's own
    # component is enough for the pose (and what depends on it, constraints and deformed
    # meshes); tagging its data too makes Blender redo far more (2x on a Rigify rig).
    obj.update_tag(refresh={"OBJECT"})
    if "location" in values:  # a location the add-on wrote is no move of a rig control
        pose_writes.mark(obj.name)
    new = replace(pose, raw=raw, **changed)
    if rotated:
        idx = sorted(rotated)
        new.quats = pose.quats.copy()
        new.quats[idx] = quats[idx] if quats is not None else conversions.to_quats(
            [pose.modes[b] for b in idx], new.quaternion[idx], new.eulers[idx],
            new.axis_angles[idx])
    # A control rig's limbs in IK show the FK controls just written only once their IK
    # controls are placed there (nothing happens on other rigs).
    rig_controls.follow_fk(obj, [info.names[b] for b in sorted(rotated)],
                           written=lambda names: kinematic_matrices(info, new, names))
    return new


def kinematic_matrices(info: RigInfo, pose: Pose, names: Iterable[str]) -> dict[str, Matrix]:
    """Armature-space matrices of the bones ``names`` among the mapped bones and their
    ancestors (:attr:`RigInfo.needed`), as the rig's parents and rest offsets carry
    ``pose`` (constraints aside): where a written FK chain goes, before Blender evaluates
    it."""
    sub = list(info.needed)
    at = {info.names[b]: i for i, b in enumerate(sub)}
    wanted = [(n, at[n]) for n in names if n in at]
    if not wanted:
        return {}
    world, heads = rotations.forward_kinematics(info.mapped_rig.rig, pose.quats[sub],
                                                pose.locations[sub])
    out = {}
    for name, i in wanted:
        m = Matrix(world[i].tolist()).to_4x4()
        m.translation = heads[i]
        out[name] = m
    return out


def write_pose(obj: bpy.types.Object, info: RigInfo, quats: np.ndarray,
               locations: np.ndarray, pose: Pose, bones: Sequence[int] | None = None,
               located: Sequence[int] | None = None) -> Pose:
    """Write the mapped bones' rotations (``quats`` (B, 4)) in each bone's own mode, and the
    location of the mapped root bones, over ``pose`` (the pose on the rig now, as read);
    or those of ``bones`` and the locations of ``located``.

    One ``foreach_set`` per channel in use; Euler angles stay compatible with the current
    ones. Returns the pose as written (see :func:`write_channels`; its rotations are
    ``quats``, not their float32 rounding).
    """
    bones = list(info.mapped if bones is None else bones)
    roots = list(info.roots if located is None else located)
    by_channel = conversions.from_quats([pose.modes[b] for b in bones], quats[bones],
                                        pose.eulers[bones])
    values = {_CHANNEL_OF[channel]: ([bones[i] for i in idx], vals)
              for channel, (idx, vals) in by_channel.items()}
    if roots:
        values["location"] = (roots, locations[roots])
    return write_channels(obj, info, pose, values, quats)


def store_settings(obj: bpy.types.Object, collection: str, attr: str,
                   rows: np.ndarray) -> None:
    """``obj.npe.<collection>[i].<attr> = rows[i]`` (rows ``(items, size)``), written to the
    ID properties behind them: a write through RNA (``foreach_set`` too) tags the whole
    object for re-evaluation, though nothing Blender evaluates reads these values: a live
    update on a generated Rigify rig evaluated it twice (median 11.8 ms, against 7.3 ms
    written here; one A/B run of ``benchmark-blender --skip ik propagation``). Saved and
    undone alike; ``foreach_set`` where an item never stored the value (nothing to write into).
    """
    items = getattr(obj.npe, collection)
    system = getattr(obj, "bl_system_properties_get", None)  # Blender 5 keeps them apart
    stored = system() if system is not None else obj
    group = stored.get(SETTINGS) if stored is not None else None
    entries = group.get(collection) if group is not None else None
    rows = np.asarray(rows, dtype=np.float32)  # what the property keeps
    if entries is None or len(entries) != len(items) or len(rows) != len(items) or any(
            len(entry.get(attr, ())) != rows.shape[1] for entry in entries):
        items.foreach_set(attr, rows.ravel())
        return
    for entry, row in zip(entries, rows, strict=True):
        entry[attr][:] = row


def joint_positions(info: RigInfo, quats: np.ndarray,
                    locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Armature-space joints ``(..., 21, 3)`` of a pose given for every bone (``(..., B,
    4)`` and ``(..., B, 3)``, frames may lead), and the world rotations of the ``needed``
    bones ``(..., N, 3, 3)``; see :func:`.core.reach.joint_positions`."""
    sub = list(info.needed)
    return reach.joint_positions(info.mapped_rig, quats[..., sub, :], locations[..., sub, :])


def solve_rotations(info: RigInfo, quats: np.ndarray, locations: np.ndarray,
                    targets: np.ndarray, goals: Mapping[int, np.ndarray] | None = None,
                    orientations: Mapping[int, np.ndarray] | None = None, *,
                    rig_shaped: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Local rotations and locations of every bone (the given pose, ``(..., B, 4)`` and
    ``(..., B, 3)``, with the needed bones solved) putting the joints on ``targets``
    (..., 21, 3), armature space, and effector joints exactly on their ``goals``: see
    :func:`.core.reach.solve` (``rig_shaped``: the targets are a pose the rig can take)."""
    sub = list(info.needed)
    q, loc = reach.solve(info.mapped_rig, quats[..., sub, :], locations[..., sub, :],
                         targets, goals, orientations, rig_shaped=rig_shaped)
    new_q, new_l = quats.copy(), locations.copy()
    new_q[..., sub, :] = q
    new_l[..., sub, :] = loc
    return new_q, new_l


def evaluated_joints(obj: bpy.types.Object, info: RigInfo,
                     on_mapped: Container[int] = ()) -> np.ndarray:
    """Armature-space joints ``(21, 3)`` as Blender evaluates the rig (constraints and
    drivers included), each read on the bone that shows it (:attr:`RigInfo.shown`), or on
    its mapped bone for the joints ``on_mapped``; a boneless toe at its foot bone's
    evaluated tail. The caller updates the depsgraph first (``view_layer.update()``)."""
    pbones = obj.pose.bones
    n = len(pbones)
    heads = np.empty(n * 3, dtype=np.float32)
    tails = np.empty(n * 3, dtype=np.float32)
    pbones.foreach_get("head", heads)
    pbones.foreach_get("tail", tails)
    heads = heads.reshape(-1, 3)[info.pose_order].astype(np.float64)
    tails = tails.reshape(-1, 3)[info.pose_order].astype(np.float64)
    out = np.zeros((len(JOINTS), 3))
    for j, b in enumerate(info.shown):
        if j in on_mapped:
            b = info.joint_bones[j]
        if b is not None:
            out[j] = heads[b]
        elif j in info.toe_feet:
            out[j] = tails[info.toe_feet[j]]
    return out


def evaluated_matrices(obj: bpy.types.Object, info: RigInfo) -> np.ndarray:
    """Every bone's evaluated pose matrix ``(B, 4, 4)`` (armature space, ``RigInfo``
    order); the caller updates the depsgraph first."""
    pbones = obj.pose.bones
    flat = np.empty(len(pbones) * 16, dtype=np.float32)
    pbones.foreach_get("matrix", flat)
    return flat.reshape(-1, 4, 4).transpose(0, 2, 1)[info.pose_order].astype(np.float64)


# ---------------------------------------------------------------------------- spaces


def matrix_of(data: bpy.types.bpy_struct, attr: str = "matrix_world") -> np.ndarray:
    """A 4x4 matrix property as a (4, 4) array, in one call (``np.array`` of a mathutils
    Matrix costs some 20 microseconds)."""
    buf = np.empty(16, dtype=np.float32)
    data.path_resolve(attr, False).foreach_get(buf)
    return buf.reshape(4, 4).T.astype(np.float64)  # column-major


def world_scale(matrix_world: np.ndarray) -> float:
    """The object's largest axis scale: armature units to world units (for tolerances)."""
    return float(np.linalg.norm(matrix_world[:3, :3], axis=0).max())


def world_matrix(obj: bpy.types.Object) -> np.ndarray:
    """The armature object's world matrix as a (4, 4) array."""
    return matrix_of(obj)


def _floor(matrix_world: np.ndarray) -> np.ndarray:
    """(3,) world: the point of the armature object's origin height on the world's Z axis."""
    return np.array([0.0, 0.0, matrix_world[2, 3]])


def world_to_core(matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
    """World points ``(..., 3)`` -> core space: Y up, the floor the horizontal plane through
    the armature object's origin. The models know a body on a floor at height 0: a rig
    whose object stands on a platform, 0.5 m up, looked to them like a body floating 0.5 m
    in the air (its planted feet were not held, and slid in hand drags)."""
    return blender_to_yup(np.asarray(points, dtype=np.float64) - _floor(matrix_world))


def armature_to_core(matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Armature-space points ``(..., 3)`` -> core space (:func:`world_to_core`)."""
    return world_to_core(matrix_world, points @ matrix_world[:3, :3].T + matrix_world[:3, 3])


def core_to_armature(matrix_world: np.ndarray, points: np.ndarray,
                     inverse: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`armature_to_core` (``inverse``: the world matrix's, when known)."""
    inv = np.linalg.inv(matrix_world) if inverse is None else inverse
    return (yup_to_blender(points) + _floor(matrix_world)) @ inv[:3, :3].T + inv[:3, 3]


def world_to_armature_rotation(matrix_world: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """A world rotation (3, 3) in armature space, the object's scale dropped."""
    return np.swapaxes(conversions.orthonormal(matrix_world[:3, :3]), -1, -2) @ \
        conversions.orthonormal(rotation)
