"""Armature <-> numpy: the only code that reads rigs into arrays and writes poses and keys.

Spaces, fixed once for the bpy layer:

- *armature space*: the rig's own, where ``bone.matrix_local`` lives and where
  :mod:`.core.rotations` works (the armature object's scale is not applied);
- *world*: Blender's scene space, Z up: ``obj.matrix_world @ armature_space``;
- *core space*: world in the core's Y-up axes (:func:`.core.skeleton.blender_to_yup`),
  where the models edit poses.

Quaternions are ``(w, x, y, z)``, Blender's order. A joint is its bone's head; a toe with
no bone of its own sits at its foot bone's tail. Nothing here keeps a bpy reference
between calls (after an undo they would be dead): the rig cache holds plain arrays keyed
by names, and every function takes the object it works on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import bpy
import numpy as np
from mathutils import Euler, Quaternion

from .core import rotations
from .core.skeleton import (
    ANCESTORS,
    CHILDREN,
    JOINT_INDEX,
    JOINTS,
    NUM_JOINTS,
    PARENTS,
    blender_to_yup,
    yup_to_blender,
)

QUATERNION = "QUATERNION"
AXIS_ANGLE = "AXIS_ANGLE"
EULER_ORDERS = ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX")
_AXIS = {"X": 0, "Y": 1, "Z": 2}
TOE_FOOT = {"l_toe": "l_foot", "r_toe": "r_foot"}  # a boneless toe sits at this foot's tail
_EPS = 1e-12
LIMB_SLACK = 1e-6  # a limb never quite straightens (a straight limb has no bend plane)


class RigError(ValueError):
    """The armature cannot be read as mapped (the message says what to fix)."""


# ----------------------------------------------------------------------- rotation modes


def euler_to_quat(angles: np.ndarray, order: str) -> np.ndarray:
    """Blender Euler angles ``(..., 3)`` (x, y, z, radians) in ``order`` -> ``(..., 4)``.

    Blender's ``'XYZ'`` turns about X first, so its matrix is ``Rz @ Ry @ Rx``: the core's
    :func:`~.core.rotations.euler_to_matrix` with the axes listed in reverse.
    """
    a = np.asarray(angles, dtype=np.float64)
    rev = order[::-1]
    ordered = np.stack([a[..., _AXIS[c]] for c in rev], axis=-1)
    return rotations.matrix_to_quat(rotations.euler_to_matrix(ordered, rev))


def axis_angle_to_quat(aa: np.ndarray) -> np.ndarray:
    """Blender's ``rotation_axis_angle`` ``(..., 4)`` = (angle, x, y, z) -> ``(..., 4)``."""
    aa = np.asarray(aa, dtype=np.float64)
    axis = aa[..., 1:]
    norm = np.linalg.norm(axis, axis=-1, keepdims=True)
    axis = np.where(norm > _EPS, axis / np.maximum(norm, _EPS), 0.0)
    half = 0.5 * aa[..., :1]
    return np.concatenate([np.cos(half), np.sin(half) * axis], axis=-1)


def quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """``(..., 4)`` -> (angle, x, y, z); the identity gives Blender's default axis +Y."""
    q = rotations.quat_normalize(q)
    s = np.linalg.norm(q[..., 1:], axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    axis = np.where(s > _EPS, q[..., 1:] / np.maximum(s, _EPS), np.array([0.0, 1.0, 0.0]))
    return np.concatenate([angle, axis], axis=-1)


def to_quats(modes: Sequence[str], quats: np.ndarray, eulers: np.ndarray,
             axis_angles: np.ndarray) -> np.ndarray:
    """Each bone's rotation as a quaternion, read from the channel its mode uses.

    ``quats`` (..., B, 4), ``eulers`` (..., B, 3), ``axis_angles`` (..., B, 4): the raw
    values of the three rotation properties (frames may lead).
    """
    out = np.array(quats, dtype=np.float64, copy=True)
    for mode in set(modes):
        if mode == QUATERNION:
            continue
        idx = [b for b, m in enumerate(modes) if m == mode]
        if mode == AXIS_ANGLE:
            out[..., idx, :] = axis_angle_to_quat(axis_angles[..., idx, :])
        else:
            out[..., idx, :] = euler_to_quat(eulers[..., idx, :], mode)
    return out


def quats_to_eulers(quats: np.ndarray, order: str, compat: Sequence[float]) -> np.ndarray:
    """Frames of quaternions ``(T, 4)`` -> Euler ``(T, 3)``, each compatible with the last.

    Blender's own conversion (``to_euler(order, compat)``) keeps the angles continuous, so
    written Euler keys do not flip by 360 degrees between frames.
    """
    out = np.empty((len(quats), 3))
    prev = Euler(compat, order)
    for t, q in enumerate(quats):
        prev = Quaternion(q).to_euler(order, prev)
        out[t] = prev
    return out


# ---------------------------------------------------------------------------- the rig


@dataclass(frozen=True)
class RigInfo:
    """What the edit needs of an armature and its mapping, read once and cached."""

    key: tuple  # what it was built from; a different key rebuilds it
    names: tuple[str, ...]  # bone names, in ``armature.bones`` order
    rig: rotations.Rig
    joint_bones: tuple[int | None, ...]  # 21 entries: bone index of each joint, or None
    mapped: tuple[int, ...]  # the mapped bones, ascending: the only ones an edit writes
    roots: tuple[int, ...]  # mapped bones with no mapped ancestor: their location is written
    needed: tuple[int, ...]  # mapped bones and their ancestors: what a joint depends on
    toe_feet: dict[int, int]  # boneless toe joint -> its foot bone
    lengths: np.ndarray  # (B,) rest bone lengths, armature space (a foot's tail)
    pose_order: np.ndarray  # (B,) each bone's index in ``obj.pose.bones`` (may differ)


_RIGS: dict[str, RigInfo] = {}


def _rig_key(obj: bpy.types.Object, joints: dict[str, str]) -> tuple:
    return (obj.name, obj.data.name, len(obj.data.bones), tuple(sorted(joints.items())))


def invalidate(obj_name: str | None = None) -> None:
    """Forget the cached rig of one armature (all when None): after a mapping or bone edit."""
    if obj_name is None:
        _RIGS.clear()
    else:
        _RIGS.pop(obj_name, None)


def rig_info(obj: bpy.types.Object, joints: dict[str, str], fresh: bool = False) -> RigInfo:
    """The armature's rig (rest matrices, parents) and mapping, cached per object name.

    ``joints`` maps canonical joints to bone names (toes may be missing). ``fresh`` re-reads
    the rest pose even when cached: operators do, the live handler does not.
    """
    key = _rig_key(obj, joints)
    cached = _RIGS.get(obj.name)
    if cached is not None and cached.key == key and not fresh:
        return cached
    bones = obj.data.bones
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
    mats = np.empty(len(bones) * 16, dtype=np.float32)
    bones.foreach_get("matrix_local", mats)
    mats = mats.reshape(-1, 4, 4).transpose(0, 2, 1)  # foreach_get is column-major
    lengths = np.empty(len(bones), dtype=np.float32)
    bones.foreach_get("length", lengths)
    rig = rotations.Rig.from_rest_matrices(list(names), parents, mats.astype(np.float64))
    pose_index = {pb.name: i for i, pb in enumerate(obj.pose.bones)}
    if len(pose_index) != len(names) or any(n not in pose_index for n in names):
        raise RigError(f"{obj.name}: the pose is out of date with the bones; leave Edit Mode")
    joint_bones = tuple(index[joints[j]] if j in joints else None for j in JOINTS)
    mapped = sorted(b for b in joint_bones if b is not None)
    mapped_set = set(mapped)

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
    info = RigInfo(key, names, rig, joint_bones, tuple(mapped),
                   tuple(b for b in mapped if not has_mapped_ancestor(b)),
                   tuple(sorted(needed)), toe_feet, lengths.astype(np.float64),
                   np.array([pose_index[n] for n in names], dtype=np.int64))
    _RIGS[obj.name] = info
    return info


# ---------------------------------------------------------------------------- poses


@dataclass
class Pose:
    """Local pose values of every bone (``matrix_basis``), as arrays."""

    quats: np.ndarray  # (B, 4) rotation as a quaternion, whatever the bone's mode
    locations: np.ndarray  # (B, 3)
    modes: tuple[str, ...]  # each bone's rotation_mode
    eulers: np.ndarray  # (B, 3) raw rotation_euler (the reference for continuous Euler)


def _get(collection: bpy.types.bpy_prop_collection, attr: str, width: int) -> np.ndarray:
    buf = np.empty(len(collection) * width, dtype=np.float32)
    collection.foreach_get(attr, buf)
    return buf.reshape(-1, width).astype(np.float64)


def _set(collection: bpy.types.bpy_prop_collection, attr: str, values: np.ndarray) -> None:
    collection.foreach_set(attr, np.ascontiguousarray(values, dtype=np.float32).ravel())


def read_pose(obj: bpy.types.Object, info: RigInfo) -> Pose:
    """The armature's current local pose in ``info``'s bone order; Euler and axis-angle
    bones become quaternions."""
    pbones = obj.pose.bones
    order = info.pose_order
    modes = tuple(pbones[int(i)].rotation_mode for i in order)
    quats = _get(pbones, "rotation_quaternion", 4)[order]
    eulers = _get(pbones, "rotation_euler", 3)[order]
    axis_angles = (_get(pbones, "rotation_axis_angle", 4)[order] if AXIS_ANGLE in modes
                   else quats)
    return Pose(to_quats(modes, quats, eulers, axis_angles),
                _get(pbones, "location", 3)[order], modes, eulers)


def write_pose(obj: bpy.types.Object, info: RigInfo, quats: np.ndarray,
               locations: np.ndarray, bones: Sequence[int] | None = None) -> None:
    """Write rotations of ``bones`` (default: the mapped ones) in each bone's own mode, and
    the location of the mapped root bones among them.

    Quaternion bones and locations go through ``foreach_set``; Euler and axis-angle bones
    (converted with Blender's own, continuity-keeping conversion) one by one.
    """
    bones = info.mapped if bones is None else tuple(bones)
    pbones = obj.pose.bones
    order = info.pose_order
    modes = [pbones[int(order[b])].rotation_mode for b in bones]
    quat_bones = [b for b, m in zip(bones, modes, strict=True) if m == QUATERNION]
    if quat_bones:
        current = _get(pbones, "rotation_quaternion", 4)
        current[order[quat_bones]] = quats[quat_bones]
        _set(pbones, "rotation_quaternion", current)
    for b, mode in zip(bones, modes, strict=True):
        pb = pbones[int(order[b])]
        if mode == AXIS_ANGLE:
            pb.rotation_axis_angle = quat_to_axis_angle(quats[b])
        elif mode != QUATERNION:
            pb.rotation_euler = Quaternion(quats[b]).to_euler(mode, pb.rotation_euler)
    roots = [b for b in bones if b in info.roots]
    if roots:
        current = _get(pbones, "location", 3)
        current[order[roots]] = locations[roots]
        _set(pbones, "location", current)
    obj.update_tag()  # foreach_set does not tag the pose for re-evaluation


def joint_positions(info: RigInfo, quats: np.ndarray,
                    locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Armature-space joints ``(..., 21, 3)`` and bone rotations ``(..., B, 3, 3)`` of a pose.

    Frames may lead. A boneless toe is its foot bone's tail.
    """
    world_r, heads = rotations.forward_kinematics(info.rig, quats, locations)
    joints = np.zeros((*heads.shape[:-2], NUM_JOINTS, 3))
    for j, b in enumerate(info.joint_bones):
        if b is not None:
            joints[..., j, :] = heads[..., b, :]
    for j, foot in info.toe_feet.items():
        joints[..., j, :] = heads[..., foot, :] + world_r[..., foot, :, 1] * info.lengths[foot]
    return joints, world_r


def solve_rotations(info: RigInfo, quats: np.ndarray, locations: np.ndarray,
                    targets: np.ndarray, goals: dict[int, np.ndarray] | None = None,
                    orientations: dict[int, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Local rotations (and root locations) putting the joints on ``targets`` (..., 21, 3),
    armature space, then effector joints exactly on their ``goals`` where a limb allows.

    A rig cannot always take the solved positions exactly: a chest or pelvis bone carries
    its children rigidly, so when the solve changed the angles between them (neck and
    clavicles; spine and thighs) the best fit leaves every limb start a little off, and
    the limb's end inherits that error. ``goals`` (joint -> (..., 3), e.g. an effector's
    empty) fixes it: a second pass re-aims the two bones above each goal joint (upper arm
    and forearm, thigh and shin) like a two-bone IK from where the limb really starts,
    bending in the plane of the solved elbow or knee. Other joints do not move.
    """
    q, loc = rotations.positions_to_rotations(info.rig, quats, locations, info.joint_bones,
                                              targets, orientations)
    if not goals:
        return q, loc
    joints, _ = joint_positions(info, q, loc)
    adjusted = joints.copy()
    changed = False
    for j, goal in goals.items():
        limb = _limb(info, j, goals)
        if limb is None:
            continue
        mid, top = limb
        adjusted = _two_bone(adjusted, joints, top, mid, j, np.asarray(goal, dtype=np.float64))
        changed = True
    if not changed:
        return q, loc
    return rotations.positions_to_rotations(info.rig, q, loc, info.joint_bones, adjusted,
                                            orientations)


def _limb(info: RigInfo, j: int, goals: dict[int, np.ndarray]) -> tuple[int, int] | None:
    """(mid, top) joints above ``j`` forming a plain two-bone limb, or None.

    Both must have a bone, a single child in the canonical tree and no goal of their own.
    """
    mid = int(PARENTS[j])
    top = int(PARENTS[mid]) if mid >= 0 else -1
    if top < 0 or mid in goals or top in goals:
        return None
    if any(info.joint_bones[k] is None for k in (j, mid, top)):
        return None
    if CHILDREN[mid] != (j,) or CHILDREN[top] != (mid,):
        return None
    return mid, top


def _two_bone(adjusted: np.ndarray, joints: np.ndarray, top: int, mid: int, end: int,
              goal: np.ndarray) -> np.ndarray:
    """New positions of ``mid`` and ``end`` (and ``end``'s descendants, carried along) so
    that ``end`` reaches ``goal`` from ``top`` with the limb's own lengths (batched)."""
    s, e, w = joints[..., top, :], joints[..., mid, :], joints[..., end, :]
    a = np.linalg.norm(e - s, axis=-1)
    b = np.linalg.norm(w - e, axis=-1)
    to_goal = goal - s
    d_raw = np.linalg.norm(to_goal, axis=-1)
    u = to_goal / np.maximum(d_raw, _EPS)[..., None]
    d = np.clip(d_raw, np.abs(a - b) + LIMB_SLACK * (a + b), (1.0 - LIMB_SLACK) * (a + b))
    # Bend in the plane of the current elbow/knee; a straight limb keeps its old bend side.
    pole = e - s
    pole = pole - np.sum(pole * u, axis=-1, keepdims=True) * u
    pole_n = np.linalg.norm(pole, axis=-1, keepdims=True)
    fallback = _any_perpendicular(u)
    v = np.where(pole_n > _EPS, pole / np.maximum(pole_n, _EPS), fallback)
    x = (a * a - b * b + d * d) / (2.0 * d)
    h = np.sqrt(np.maximum(a * a - x * x, 0.0))
    new_mid = s + x[..., None] * u + h[..., None] * v
    new_end = s + d[..., None] * u
    out = adjusted.copy()
    out[..., mid, :] = new_mid
    below = [k for k in range(NUM_JOINTS) if k != end and ANCESTORS[k, end]]
    out[..., below, :] += (new_end - w)[..., None, :]
    out[..., end, :] = new_end
    return out


def _any_perpendicular(u: np.ndarray) -> np.ndarray:
    """A unit vector perpendicular to each unit ``u`` (crossed with its smallest axis)."""
    axis = np.zeros_like(u)
    np.put_along_axis(axis, np.argmin(np.abs(u), axis=-1)[..., None], 1.0, axis=-1)
    p = np.cross(u, axis)
    return p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), _EPS)


# ---------------------------------------------------------------------------- spaces


def world_matrix(obj: bpy.types.Object) -> np.ndarray:
    """The armature object's world matrix as a (4, 4) array."""
    return np.array(obj.matrix_world, dtype=np.float64)


def armature_to_core(matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Armature-space points ``(..., 3)`` -> core space (world, Y up)."""
    world = points @ matrix_world[:3, :3].T + matrix_world[:3, 3]
    return blender_to_yup(world)


def core_to_armature(matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Inverse of :func:`armature_to_core`."""
    inv = np.linalg.inv(matrix_world)
    return yup_to_blender(points) @ inv[:3, :3].T + inv[:3, 3]


def world_to_armature_rotation(matrix_world: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """A world rotation (3, 3) in armature space, the object's scale dropped."""
    obj_r = orthonormal(matrix_world[:3, :3])
    return obj_r.T @ orthonormal(rotation)


def orthonormal(m: np.ndarray) -> np.ndarray:
    """The rotation part of a (3, 3) matrix with scale (nearest rotation, by SVD)."""
    u, _, vt = np.linalg.svd(np.asarray(m, dtype=np.float64))
    r = u @ vt
    if np.linalg.det(r) < 0:
        u[:, -1] *= -1.0
        r = u @ vt
    return r


# ---------------------------------------------------------------------------- F-curves


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


def bone_path(name: str, prop: str) -> str:
    return f'pose.bones["{bpy.utils.escape_identifier(name)}"].{prop}'


def _rotation_prop(mode: str) -> tuple[str, int]:
    if mode == QUATERNION:
        return "rotation_quaternion", 4
    if mode == AXIS_ANGLE:
        return "rotation_axis_angle", 4
    return "rotation_euler", 3


def read_clip(obj: bpy.types.Object, info: RigInfo, frames: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The action's local pose at every frame: quats ``(T, B, 4)``, locations ``(T, B, 3)``
    and raw Euler angles ``(T, B, 3)``.

    Only the bones the mapped joints depend on are evaluated (``fcurve.evaluate``, no
    frame changes); unanimated channels and other bones keep their current values. The
    action alone is read: drivers, constraints and NLA strips are not.
    """
    pose = read_pose(obj, info)
    pbones = obj.pose.bones
    t = len(frames)
    order = info.pose_order
    quats = np.repeat(_get(pbones, "rotation_quaternion", 4)[order][None], t, axis=0)
    eulers = np.repeat(pose.eulers[None], t, axis=0)
    axis_angles = np.repeat(_get(pbones, "rotation_axis_angle", 4)[order][None], t, axis=0)
    locations = np.repeat(pose.locations[None], t, axis=0)
    bag = channelbag(obj)
    if bag is not None:
        arrays = {"rotation_quaternion": quats, "rotation_euler": eulers,
                  "rotation_axis_angle": axis_angles, "location": locations}
        for b in info.needed:
            name = info.names[b]
            for prop, width in (_rotation_prop(pose.modes[b]), ("location", 3)):
                path = bone_path(name, prop)
                for i in range(width):
                    fc = bag.fcurves.find(path, index=i)
                    if fc is not None:
                        arrays[prop][:, b, i] = [fc.evaluate(float(f)) for f in frames]
    return to_quats(pose.modes, quats, eulers, axis_angles), locations, eulers


def _merge_keys(fcurve, frames: np.ndarray, values: np.ndarray) -> None:
    """Replace the keys of ``fcurve`` inside [frames[0], frames[-1]] by ours; keep the rest."""
    points = fcurve.keyframe_points
    n_old = len(points)
    if n_old:
        co = np.empty(n_old * 2, dtype=np.float32)
        points.foreach_get("co", co)
        old_x = co[0::2]
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
               euler_ref: np.ndarray | None = None) -> int:
    """Key ``bones`` (default: the mapped ones) at ``frames`` from ``quats`` (T, B, 4) and
    ``locations`` (T, B, 3), through F-curve data; returns the number of F-curves written.

    Each bone is keyed in its own rotation mode, mapped root bones on their location too.
    Keys of those channels inside the frame range are replaced; keys outside are kept.
    ``euler_ref`` (B, 3): Euler angles the first frame stays compatible with (default: the
    current pose).
    """
    frames_arr = np.asarray(frames, dtype=np.float64)
    bones = info.mapped if bones is None else tuple(bones)
    bag = channelbag(obj, create=True)
    pbones = obj.pose.bones
    groups = {g.name: g for g in bag.groups}
    written = 0
    for b in bones:
        pb = pbones[int(info.pose_order[b])]
        name = info.names[b]
        mode = pb.rotation_mode
        prop, width = _rotation_prop(mode)
        q = quats[:, b]
        if mode == QUATERNION:
            values = rotations.quat_make_continuous(q, axis=0)
        elif mode == AXIS_ANGLE:
            values = quat_to_axis_angle(q)
        else:
            ref = pb.rotation_euler if euler_ref is None else euler_ref[b]
            values = quats_to_eulers(q, mode, ref)
        channels = [(prop, i, values[:, i]) for i in range(width)]
        if b in info.roots:
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
            _merge_keys(fc, frames_arr, vals)
            written += 1
    obj.update_tag()
    return written
