"""Effector empties: made at the joints, read as targets, snapped back, removed.

An effector is an item of the armature's ``npe.effectors`` (joint, weight, pin, rotation)
pointing to an unparented empty in the "NPE Effectors" collection (its location is a world
place, as the animator and scripts set it); the empty points back through
``npe.effector_of`` so the live handler finds its armature in one lookup.

The empties are the character's, as a rig's IK targets are: when the armature object moves
(moved, turned or scaled by the animator, or by its own parent or animation), the empties
the animator has not keyed or parented go along (:func:`carry`), and where an empty is and
was solved is compared in the object's frame, so moving the character is not a drag. Left
behind, a character moved 0.5 m and then solved went back 0.5 m to its empties.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import bpy
import numpy as np
from bpy.app.handlers import persistent
from mathutils import Matrix

from . import app_hooks, rig_io
from .core import conversions
from .core.skeleton import JOINT_INDEX
from .errors import EditError
from .guard import is_busy

COLLECTION_NAME = "NPE Effectors"
SIZE_FRACTION = 0.05  # empty display size, as a fraction of the rig's height
MIN_SIZE = 1e-3
MATRIX_ATOL = 1e-6  # an empty closer than this to where it was solved has not moved
_EPS = 1e-12

PRESETS: dict[str, tuple[str, ...]] = {
    "HANDS": ("l_hand", "r_hand"),
    "FEET": ("l_foot", "r_foot"),
    "HEAD": ("head",),
    "LIMBS": ("l_hand", "r_hand", "l_foot", "r_foot", "head"),
}


@dataclass(frozen=True)
class Spec:
    """One effector's settings (an item of the armature's ``npe.effectors``), checked."""

    joint: str
    index: int  # canonical joint index
    weight: float
    pin: bool
    use_rotation: bool


@dataclass
class Target:
    """One effector, read: the world target in core space and its settings."""

    joint: str
    target_core: np.ndarray  # (3,)
    weight: float
    pin: bool
    orientation_armature: np.ndarray | None  # (3, 3) when Use Rotation is on
    matrix: np.ndarray  # (16,) the empty's world matrix, row-major


def _lost(scene: bpy.types.Scene, empty: bpy.types.Object | None) -> bool:
    return empty is None or scene.objects.get(empty.name) is None


def _deleted(joint: str) -> EditError:
    return EditError(f"The {joint} effector's empty was deleted: remove the effector from "
                     "the list (or add it again)")


def specs(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo
          ) -> tuple[Spec, ...]:
    """Every effector of the armature, in list order; a deleted empty is an error."""
    out = []
    for item in obj.npe.effectors:
        if _lost(scene, item.empty):
            raise _deleted(item.joint)
        j = JOINT_INDEX.get(item.joint)
        if j is None:
            raise EditError(f"Effector on unknown joint {item.joint!r}: remove it")
        if item.use_rotation and info.joint_bones[j] is None:
            raise EditError(f"{item.joint} has no bone of its own: it cannot take the "
                            "empty's rotation (turn Use Rotation off)")
        out.append(Spec(item.joint, j, float(item.weight), item.pin, item.use_rotation))
    return tuple(out)


def object_frame(matrix_world: np.ndarray) -> np.ndarray:
    """(4, 4) the armature object's world matrix without its scale: the frame the empties
    are compared in (in metres, so their float32 copies are as exact as world ones)."""
    out = np.eye(4)
    out[:3, :3] = conversions.orthonormal(matrix_world[:3, :3])
    out[:3, 3] = matrix_world[:3, 3]
    return out


def _in_object(obj: bpy.types.Object, world: np.ndarray) -> np.ndarray:
    """World matrices ``(..., 4, 4)`` in the armature object's frame (:func:`object_frame`)."""
    return np.linalg.inv(object_frame(rig_io.world_matrix(obj))) @ world


def in_world(matrix_world: np.ndarray, in_object: np.ndarray) -> np.ndarray:
    """Matrices ``(..., 4, 4)`` in the armature object's frame (of ``matrix_world``) back
    in world space: :func:`_in_object` undone."""
    return object_frame(matrix_world) @ in_object


def placed(obj: bpy.types.Object, empty: bpy.types.Object) -> np.ndarray:
    """(16,) where ``empty`` is now, in its armature's frame, row-major (as solved)."""
    return _in_object(obj, rig_io.matrix_of(empty)).ravel()


def matrices(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None) -> np.ndarray:
    """The effector empties' matrices ``(E, 4, 4)``, evaluated, in list order, in the
    armature object's frame (:func:`object_frame`)."""
    items = obj.npe.effectors
    buf = np.empty((len(items), 16), dtype=np.float32)
    for i, item in enumerate(items):
        empty = item.empty
        if empty is None:
            raise _deleted(item.joint)
        if depsgraph is not None:
            empty = empty.evaluated_get(depsgraph)
        empty.path_resolve("matrix_world", False).foreach_get(buf[i])
    world = buf.reshape(-1, 4, 4).transpose(0, 2, 1).astype(np.float64)  # column-major
    return _in_object(obj, world)


def targets(effectors: Sequence[Spec], empty_matrices: np.ndarray, matrix_world: np.ndarray
            ) -> list[Target]:
    """The effectors as targets, from their empties' matrices in the armature object's
    frame (:func:`matrices`)."""
    finite = np.isfinite(empty_matrices.reshape(len(empty_matrices), 16)).all(axis=1)
    if not finite.all():
        bad = effectors[int(np.argmin(finite))].joint
        raise EditError(f"The {bad} effector's empty has an invalid transform")
    empty_matrices = in_world(matrix_world, empty_matrices)
    places = rig_io.world_to_core(matrix_world, empty_matrices[:, :3, 3])
    return [Target(s.joint, p, s.weight, s.pin,
                   rig_io.world_to_armature_rotation(matrix_world, m[:3, :3])
                   if s.use_rotation else None, m.ravel())
            for s, m, p in zip(effectors, empty_matrices, places, strict=True)]


def read(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
         depsgraph: bpy.types.Depsgraph | None) -> list[Target]:
    """Every effector of the armature as a target; a deleted empty is an error."""
    return targets(specs(scene, obj, info), matrices(obj, depsgraph), rig_io.world_matrix(obj))


def solved_matrices(obj: bpy.types.Object) -> np.ndarray:
    """Where the empties were at the last solve ``(E, 16)`` (row-major, in the armature
    object's frame)."""
    items = obj.npe.effectors
    out = np.empty(len(items) * 16, dtype=np.float32)
    items.foreach_get("solved_matrix", out)
    return out.reshape(-1, 16).astype(np.float64)


def moved(empty_matrices: np.ndarray, solved: np.ndarray) -> bool:
    """Whether an empty left the place it had at the last solve (live mode)."""
    now = empty_matrices.reshape(len(empty_matrices), 16)
    return now.shape != solved.shape or bool(moved_rows(now, solved).any())


def moved_rows(empty_matrices: np.ndarray, solved: np.ndarray) -> np.ndarray:
    """(E,) which empties left the place they had at the last solve (the same count)."""
    now = empty_matrices.reshape(len(empty_matrices), 16)
    return np.abs(now - solved).max(axis=1, initial=0.0) > MATRIX_ATOL


def moved_since_solve(obj: bpy.types.Object, empty_matrices: np.ndarray) -> np.ndarray:
    """(E,) which of ``obj``'s empties (``empty_matrices``, as :func:`matrices` reads them)
    left the place they had at its last solve; all of them when the effectors changed
    since (no place to compare)."""
    solved = solved_matrices(obj)
    if solved.shape != (len(empty_matrices), 16):
        return np.ones(len(empty_matrices), dtype=bool)
    return moved_rows(empty_matrices, solved)


def follow_pose(obj: bpy.types.Object, info: rig_io.RigInfo, empty_matrices: np.ndarray,
                joints: np.ndarray) -> np.ndarray | None:
    """After the pose was changed outside the add-on (bones turned by hand, keys changed):
    the empties of the ``joints`` (21,) it moved, not moved since the last solve (nor
    keyed), go onto their joints as last evaluated, the pose the user sees (not evaluated
    again: the solve's own preparation, a control rig's FK controls matched to its IK
    limbs, is not shown yet), where they hold them; returns the matrices as
    :func:`matrices` reads them then, or None where no empty followed. Left where they
    were, the next solve pulled the pose back to them (a forearm turned by hand: the hand
    109 mm back); an empty whose joint did not move stays, a goal out of reach included."""
    on_moved = np.array([JOINT_INDEX.get(item.joint) is not None
                         and bool(joints[JOINT_INDEX[item.joint]])
                         for item in obj.npe.effectors], dtype=bool)
    stale = ~moved_since_solve(obj, empty_matrices) & on_moved
    if not stale.any():
        return None
    snap(obj, info, animated=False, evaluated=True, only=stale)
    return matrices(obj, None)


def mark_solved(obj: bpy.types.Object, empty_matrices: np.ndarray | None) -> None:
    """Remember where the empties are at this solve (``(E, 4, 4)`` in list order, as
    :func:`matrices` gives them; None: read them)."""
    items = obj.npe.effectors
    if empty_matrices is None:
        for item in items:
            if item.empty is not None:
                item.solved_matrix = placed(obj, item.empty)
        return
    rig_io.store_settings(obj, "effectors", "solved_matrix",
                          np.reshape(empty_matrices, (len(items), 16)))


def carry(obj: bpy.types.Object) -> int:
    """Move the effector empties along with the armature object where it moved since they
    were last carried (or placed): each empty without keys or a parent of its own keeps its
    place and orientation on the character. Only the armature's own empties: a duplicate
    (Shift+D) lists its original's too. Returns how many moved."""
    now = rig_io.world_matrix(obj)
    was = np.array(obj.npe.carried_matrix, dtype=np.float64).reshape(4, 4)
    if not was.any():  # (first seen: nothing to carry from)
        obj.npe.carried_matrix = now.ravel()
        return 0
    if np.abs(now - was).max() <= MATRIX_ATOL or abs(np.linalg.det(was[:3, :3])) < _EPS:
        return 0
    move = now @ np.linalg.inv(was)
    turn = object_frame(now)[:3, :3] @ object_frame(was)[:3, :3].T
    count = 0
    for item in obj.npe.effectors:
        empty = item.empty
        if empty is None or empty.npe.effector_of != obj or empty.parent is not None \
                or is_animated(empty):
            continue
        m = rig_io.matrix_of(empty)
        m[:3, :3] = turn @ m[:3, :3]
        m[:3, 3] = move[:3, :3] @ m[:3, 3] + move[:3, 3]
        empty.matrix_world = Matrix(m.tolist())
        count += 1
    obj.npe.carried_matrix = now.ravel()
    return count


_CARRIED: set[str] = set()  # the armatures whose empties this update carried


def carried_now(name: str) -> bool:
    """Whether this update carried the armature's empties: the update's evaluated empties
    are still where they were (Live compares them in the next update, where they are)."""
    return name in _CARRIED


@persistent
def on_depsgraph_update(_scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    """Carry the empties of each armature whose object moved in this update (not inside
    our own frame passes: a spread puts the frame back, and the object with it). Installed
    before Live's handler, which runs after it in the same update."""
    _CARRIED.clear()
    if is_busy():
        return
    for update in depsgraph.updates:
        obj = update.id
        if isinstance(obj, bpy.types.Object) and obj.type == "ARMATURE" \
                and update.is_updated_transform and len(obj.original.npe.effectors) \
                and carry(obj.original):
            _CARRIED.add(obj.original.name)


def collection(scene: bpy.types.Scene) -> bpy.types.Collection:
    """The scene's "NPE Effectors" collection, made and linked when missing."""
    coll = bpy.data.collections.get(COLLECTION_NAME)
    if coll is None:
        coll = bpy.data.collections.new(COLLECTION_NAME)
    if scene.collection.children.get(coll.name) is None:
        scene.collection.children.link(coll)
    return coll


def joint_frames(obj: bpy.types.Object, info: rig_io.RigInfo, update: bool = True
                  ) -> tuple[np.ndarray, np.ndarray]:
    """World location (21, 3) and world orientation (21, 3, 3) of each joint as Blender
    shows it (evaluated: a control rig's constraints and stretch included): the place of
    the bone that shows the joint, the orientation of its mapped bone."""
    view_layer = bpy.context.view_layer
    if update and view_layer is not None:
        view_layer.update()
    joints = rig_io.evaluated_joints(obj, info)
    mats = rig_io.evaluated_matrices(obj, info)
    mw = rig_io.world_matrix(obj)
    obj_r = conversions.orthonormal(mw[:3, :3])
    locs = joints @ mw[:3, :3].T + mw[:3, 3]
    rots = np.empty((len(joints), 3, 3))
    for j, b in enumerate(info.joint_bones):
        bone = b if b is not None else info.toe_feet.get(j)
        rots[j] = obj_r @ conversions.orthonormal(mats[bone, :3, :3]) if bone is not None \
            else obj_r
    return locs, rots


def _world_matrix(location: np.ndarray, rotation: np.ndarray) -> Matrix:
    m = np.eye(4)
    m[:3, :3] = rotation
    m[:3, 3] = location
    return Matrix(m.tolist())


def add(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
        joints: Sequence[str]) -> tuple[list[str], list[str]]:
    """Empties at ``joints`` (world place and bone orientation); returns (added, existing)."""
    locs, rots = joint_frames(obj, info)
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
        item.solved_matrix = placed(obj, empty)
        added.append(joint)
    obj.npe.active_effector = len(obj.npe.effectors) - 1
    obj.npe.carried_matrix = rig_io.world_matrix(obj).ravel()
    return added, existing


def is_animated(empty: bpy.types.Object) -> bool:
    """An empty with an action: the animator keyed where it goes."""
    anim = empty.animation_data
    return anim is not None and anim.action is not None


def snap(obj: bpy.types.Object, info: rig_io.RigInfo, animated: bool = True,
         evaluated: bool = False, only: np.ndarray | None = None) -> None:
    """Move every effector empty (of ``only``, a mask in list order) back onto its joint
    as shown (orientation too); ``animated`` False leaves the empties the animator keyed
    where their keys put them; ``evaluated``: the depsgraph is up to date (a frame change
    handler, where evaluating it again crashes Blender)."""
    locs, rots = joint_frames(obj, info, update=not evaluated)
    for i, item in enumerate(obj.npe.effectors):
        if item.empty is None or item.joint not in JOINT_INDEX \
                or (not animated and is_animated(item.empty)) \
                or (only is not None and not only[i]):
            continue
        j = JOINT_INDEX[item.joint]
        item.empty.matrix_world = _world_matrix(locs[j], rots[j])
        item.solved_matrix = placed(obj, item.empty)
    obj.npe.carried_matrix = rig_io.world_matrix(obj).ravel()  # (placed on it as it is)


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


def register() -> None:
    app_hooks.set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, True)


def unregister() -> None:
    _CARRIED.clear()
    app_hooks.set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, False)
