"""Effector empties: made at the joints, read as targets, snapped back, removed.

An effector is an item of the armature's ``npe.effectors`` (joint, weight, pin, rotation)
pointing to an unparented empty in the "NPE Effectors" collection; the empty points back
through ``npe.effector_of`` so the live handler finds its armature in one lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import bpy
import numpy as np
from mathutils import Matrix

from . import rig_io
from .core.skeleton import JOINT_INDEX, blender_to_yup
from .session import EditError

COLLECTION_NAME = "NPE Effectors"
SIZE_FRACTION = 0.05  # empty display size, as a fraction of the rig's height
MIN_SIZE = 1e-3
MATRIX_ATOL = 1e-6  # an empty closer than this to where it was solved has not moved

PRESETS: dict[str, tuple[str, ...]] = {
    "HANDS": ("l_hand", "r_hand"),
    "FEET": ("l_foot", "r_foot"),
    "HEAD": ("head",),
    "LIMBS": ("l_hand", "r_hand", "l_foot", "r_foot", "head"),
}


@dataclass
class Target:
    """One effector, read: the world target in core space and its settings."""

    joint: str
    target_core: np.ndarray  # (3,)
    weight: float
    pin: bool
    orientation_armature: np.ndarray | None  # (3, 3) when Use Rotation is on
    matrix: np.ndarray  # (16,) the empty's world matrix, row-major


def _matrix_array(m: Matrix) -> np.ndarray:
    return np.array(m, dtype=np.float64)


def _lost(scene: bpy.types.Scene, empty: bpy.types.Object | None) -> bool:
    return empty is None or scene.objects.get(empty.name) is None


def read(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
         depsgraph: bpy.types.Depsgraph | None) -> list[Target]:
    """Every effector of the armature as a target; a deleted empty is an error."""
    mw = rig_io.world_matrix(obj)
    out = []
    for item in obj.npe.effectors:
        empty = item.empty
        if _lost(scene, empty):
            raise EditError(f"The {item.joint} effector's empty was deleted: remove the "
                            "effector from the list (or add it again)")
        j = JOINT_INDEX.get(item.joint)
        if j is None:
            raise EditError(f"Effector on unknown joint {item.joint!r}: remove it")
        evaluated = empty.evaluated_get(depsgraph) if depsgraph is not None else empty
        m = _matrix_array(evaluated.matrix_world)
        if not np.isfinite(m).all():
            raise EditError(f"The {item.joint} effector's empty has an invalid transform")
        orientation = None
        if item.use_rotation:
            if info.joint_bones[j] is None:
                raise EditError(f"{item.joint} has no bone of its own: it cannot take the "
                                "empty's rotation (turn Use Rotation off)")
            orientation = rig_io.world_to_armature_rotation(mw, m[:3, :3])
        out.append(Target(item.joint, blender_to_yup(m[:3, 3]), float(item.weight), item.pin,
                          orientation, m.ravel()))
    return out


def mark_solved(obj: bpy.types.Object, targets: Sequence[Target] | None) -> None:
    """Remember where the empties were at this solve (None: where they are now)."""
    if targets is None:
        for item in obj.npe.effectors:
            if item.empty is not None:
                item.solved_matrix = _matrix_array(item.empty.matrix_world).ravel()
        return
    by_joint = {t.joint: t for t in targets}
    for item in obj.npe.effectors:
        t = by_joint.get(item.joint)
        if t is not None:
            item.solved_matrix = t.matrix


def moved_since_solve(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None) -> bool:
    """Whether an effector empty left the place it had at the last solve (live mode)."""
    for item in obj.npe.effectors:
        empty = item.empty
        if empty is None:
            continue
        evaluated = empty.evaluated_get(depsgraph) if depsgraph is not None else empty
        m = _matrix_array(evaluated.matrix_world).ravel()
        if not np.allclose(m, np.array(item.solved_matrix), rtol=0.0, atol=MATRIX_ATOL):
            return True
    return False


def collection(scene: bpy.types.Scene) -> bpy.types.Collection:
    """The scene's "NPE Effectors" collection, made and linked when missing."""
    coll = bpy.data.collections.get(COLLECTION_NAME)
    if coll is None:
        coll = bpy.data.collections.new(COLLECTION_NAME)
    if scene.collection.children.get(coll.name) is None:
        scene.collection.children.link(coll)
    return coll


def _joint_frames(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose
                  ) -> tuple[np.ndarray, np.ndarray]:
    """World location (21, 3) and world orientation (21, 3, 3) of each joint's bone."""
    joints, world_r = rig_io.joint_positions(info, pose.quats, pose.locations)
    mw = rig_io.world_matrix(obj)
    obj_r = rig_io.orthonormal(mw[:3, :3])
    locs = joints @ mw[:3, :3].T + mw[:3, 3]
    rots = np.empty((len(joints), 3, 3))
    for j, b in enumerate(info.joint_bones):
        bone = b if b is not None else info.toe_feet.get(j)
        rots[j] = obj_r @ world_r[bone] if bone is not None else obj_r
    return locs, rots


def _world_matrix(location: np.ndarray, rotation: np.ndarray) -> Matrix:
    m = np.eye(4)
    m[:3, :3] = rotation
    m[:3, 3] = location
    return Matrix(m.tolist())


def add(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
        joints: Sequence[str]) -> tuple[list[str], list[str]]:
    """Empties at ``joints`` (world place and bone orientation); returns (added, existing)."""
    pose = rig_io.read_pose(obj, info)
    locs, rots = _joint_frames(obj, info, pose)
    height = float(np.ptp(locs[:, 2])) if len(locs) else 1.0
    size = max(SIZE_FRACTION * height, MIN_SIZE)
    have = {item.joint for item in obj.npe.effectors if not _lost(scene, item.empty)}
    stale = [i for i, item in enumerate(obj.npe.effectors) if item.joint in joints
             and item.joint not in have]
    for i in reversed(stale):  # a lost empty for a joint we are adding: replace the item
        obj.npe.effectors.remove(i)
    coll = collection(scene)
    added, existing = [], []
    for joint in joints:
        if joint in have:
            existing.append(joint)
            continue
        j = JOINT_INDEX[joint]
        empty = bpy.data.objects.new(f"NPE {obj.name} {joint}", None)
        empty.empty_display_type = "SPHERE"
        empty.empty_display_size = size
        empty.show_in_front = True
        empty.matrix_world = _world_matrix(locs[j], rots[j])
        empty.npe.effector_of = obj
        coll.objects.link(empty)
        item = obj.npe.effectors.add()
        item.joint = joint
        item.empty = empty
        item.solved_matrix = _matrix_array(empty.matrix_world).ravel()
        added.append(joint)
    obj.npe.active_effector = len(obj.npe.effectors) - 1
    return added, existing


def snap(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose) -> None:
    """Move every effector empty back onto its joint (orientation too)."""
    locs, rots = _joint_frames(obj, info, pose)
    for item in obj.npe.effectors:
        if item.empty is None or item.joint not in JOINT_INDEX:
            continue
        j = JOINT_INDEX[item.joint]
        item.empty.matrix_world = _world_matrix(locs[j], rots[j])
        item.solved_matrix = _matrix_array(item.empty.matrix_world).ravel()


def remove(obj: bpy.types.Object, index: int | None) -> int:
    """Delete one effector (by index) or all (None) with their empties; returns how many."""
    items = obj.npe.effectors
    indices = list(range(len(items))) if index is None else [index]
    for i in sorted(indices, reverse=True):
        empty = items[i].empty
        if empty is not None and empty.npe.effector_of == obj:
            bpy.data.objects.remove(empty, do_unlink=True)
        items.remove(i)
    obj.npe.active_effector = min(obj.npe.active_effector, len(items) - 1)
    return len(indices)


def selected_joints(obj: bpy.types.Object, info: rig_io.RigInfo) -> tuple[list[str], list[str]]:
    """Canonical joints of the selected pose bones; and the selected bones with no joint."""
    joint_of = {info.names[b]: j for j, b in zip(JOINT_INDEX, info.joint_bones, strict=True)
                if b is not None}
    selected = [pb.name for pb in obj.pose.bones if _is_selected(pb)]
    return ([joint_of[n] for n in selected if n in joint_of],
            [n for n in selected if n not in joint_of])


def _is_selected(pb: bpy.types.PoseBone) -> bool:
    """Bone selection moved from Bone (4.x) to PoseBone (5.0)."""
    if "select" in pb.bl_rna.properties:
        return bool(pb.select)
    return bool(pb.bone.select)
