"""Neural Grab: the rig's own bones dragged in Pose Mode, the whole body solved each step.

The joint a bone grabs is the one it moves (:func:`bone_joint`): a limb segment's tail
(the upper arm moves the elbow, the forearm the wrist, the thigh the knee, the shin the
ankle, the clavicle the shoulder), any other mapped bone its own head (hand, foot, toe,
head, the trunk's bones); a Rigify IK control the joint it drives (``hand_ik.L`` the left
wrist, ``foot_ik.L`` the left ankle, ``torso`` the pelvis). Effectors, pins and the pin
toggle use the same rule.

A grab (:func:`begin`) saves everything an edit may write (every pose bone's channels,
the IK/FK switches, the base pose, the effectors' solved matrices) so :func:`cancel`
puts it back exactly, takes the pose shown as the base, and reads where the grabbed
joints are. Each step (:func:`update`) is one solve through :func:`.edits.edit_with`:
the grabbed joints moved by the same world offset as full-weight targets, beside the
armature's own effectors (pins held, planted feet kept, body follow: the add-on's
options); a drag step skips the correction from the evaluated rig, the confirming step
(``final``) does it, as Live mode's pause does. The modal operator only turns events
into offsets (:mod:`.operators.grab`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import bpy
import numpy as np

from . import base_pose, edits, empties, mapped_rig, pose_writes, rig_controls, rig_io
from . import state as kept
from .core.skeleton import JOINT_INDEX, JOINTS
from .errors import EditError, Outcome

# A limb segment's bone moves the joint at its tail (the next joint down the limb).
TAIL_JOINT: dict[str, str] = {
    f"{side}_{bone}": f"{side}_{child}"
    for side in ("l", "r")
    for bone, child in (("clavicle", "upperarm"), ("upperarm", "forearm"),
                        ("forearm", "hand"), ("thigh", "shin"), ("shin", "foot"))
}
# Rigify's IK and torso controls: the joint each one drives.
RIGIFY_CONTROL = re.compile(r"^(?P<part>hand|foot)_ik\.(?P<side>[LR])$")
RIGIFY_TORSO = "torso"
POSE_CHANNELS = (("location", 3), ("rotation_quaternion", 4), ("rotation_euler", 3),
                 ("rotation_axis_angle", 4), ("scale", 3))
BASE_FIELDS = ("rotation_quaternion", "rotation_euler", "rotation_axis_angle", "location",
               "written")


def control_joint(name: str) -> str | None:
    """The joint a rig control drives (Rigify's IK hand and foot, its torso), or None."""
    if name == RIGIFY_TORSO:
        return "pelvis"
    m = RIGIFY_CONTROL.match(name)
    if m is None:
        return None
    return f"{m['side'].lower()}_{m['part']}"


def bone_joints(info: rig_io.RigInfo) -> dict[str, str]:
    """Bone name -> the joint it moves, for every mapped bone and every bone shown at a
    joint (a control rig's deform bones): a limb segment's tail joint where that joint is
    mapped, else its own."""
    out: dict[str, str] = {}
    for bones in (info.shown, info.joint_bones):  # the mapped bones win
        for j, b in enumerate(bones):
            if b is None:
                continue
            joint = JOINTS[j]
            tail = TAIL_JOINT.get(joint)
            if tail is not None and info.joint_bones[JOINT_INDEX[tail]] is not None:
                joint = tail
            out[info.names[b]] = joint
    return out


def bone_joint(info: rig_io.RigInfo, name: str) -> str | None:
    """The joint bone ``name`` moves (see :func:`bone_joints`), a rig control's joint, or
    None for a bone that moves no joint (a finger, a mechanism bone)."""
    return bone_joints(info).get(name) or control_joint(name)


def is_selected(pb: bpy.types.PoseBone) -> bool:
    """Bone selection moved from Bone (4.x) to PoseBone (5.0)."""
    if "select" in pb.bl_rna.properties:
        return bool(pb.select)
    return bool(pb.bone.select)


def selected_joints(obj: bpy.types.Object, info: rig_io.RigInfo
                    ) -> tuple[list[str], list[str]]:
    """The joints the selected pose bones move (each once, in skeleton order), and the
    selected bones that move none."""
    joints = bone_joints(info)
    chosen, strangers = set(), []
    for pb in obj.pose.bones:
        if not is_selected(pb):
            continue
        joint = joints.get(pb.name) or control_joint(pb.name)
        if joint is None:
            strangers.append(pb.name)
        else:
            chosen.add(joint)
    return [j for j in JOINTS if j in chosen], strangers


# ------------------------------------------------------------------ what a cancel restores


@dataclass
class Saved:
    """What an edit may write on an armature, as it was: restored exactly by a cancel."""

    channels: dict[str, np.ndarray]  # every pose bone's channel values (float32, as kept)
    switches: dict[str, float]  # the IK/FK switches (pose bone -> value)
    base: list[dict]  # the base pose items' values
    base_frame: int
    solved: np.ndarray  # (E, 16) the effectors' solved matrices


def save(obj: bpy.types.Object) -> Saved:
    """Everything :func:`restore` puts back."""
    pbones = obj.pose.bones
    channels = {}
    for attr, width in POSE_CHANNELS:
        buf = np.empty(len(pbones) * width, dtype=np.float32)
        pbones.foreach_get(attr, buf)
        channels[attr] = buf
    switches = {pb.name: float(pb[rig_controls.IK_FK]) for pb in pbones
                if rig_controls.IK_FK in pb}
    base = [{"bone": item.bone, "rotation_mode": item.rotation_mode,
             **{f: tuple(getattr(item, f)) for f in BASE_FIELDS}} for item in obj.npe.base_pose]
    return Saved(channels, switches, base, obj.npe.base_frame, empties.solved_matrices(obj))


def restore(obj: bpy.types.Object, saved: Saved) -> None:
    """Put back what :func:`save` read: the pose exactly, the switches, the base pose and
    the effectors' solved matrices (so Live mode sees nothing moved)."""
    pbones = obj.pose.bones
    for attr, values in saved.channels.items():
        pbones.foreach_set(attr, values)
    for name, value in saved.switches.items():
        pb = pbones.get(name)
        if pb is not None:
            pb[rig_controls.IK_FK] = value
    items = obj.npe.base_pose
    items.clear()
    for values in saved.base:
        item = items.add()
        for key, value in values.items():
            setattr(item, key, value)
    obj.npe.base_frame = saved.base_frame
    if len(saved.solved) == len(obj.npe.effectors):
        rig_io.store_settings(obj, "effectors", "solved_matrix", saved.solved)
    obj.update_tag()
    kept.invalidate(obj.name)
    pose_writes.mark(obj.name)
    view_layer = bpy.context.view_layer
    if view_layer is not None:
        view_layer.update()


# ------------------------------------------------------------------ the grab


@dataclass
class Grab:
    """A grab in progress: the armature, the joints it moves and where they started."""

    obj_name: str
    joints: tuple[str, ...]
    start_world: np.ndarray  # (G, 3) the grabbed joints as shown when it began
    saved: Saved
    state: kept.ArmatureState
    empty_matrices: np.ndarray  # (E, 4, 4) the effector empties, read once
    notes: list[str] = field(default_factory=list)  # what begin did (limbs to FK)


def _shown_world(obj: bpy.types.Object, info: rig_io.RigInfo) -> np.ndarray:
    """World joints (21, 3) as Blender shows the rig now."""
    mw = rig_io.world_matrix(obj)
    return edits.evaluated_joints(obj, info) @ mw[:3, :3].T + mw[:3, 3]


def begin(scene: bpy.types.Scene, obj: bpy.types.Object,
          joints: Sequence[str] | None = None) -> Grab:
    """Start grabbing ``joints`` (None: those of the selected bones) of ``obj``; nothing
    is written but what an edit needs first (limbs to FK, the pose shown as the base),
    and a cancel puts that back too. The empties first follow a pose changed by hand
    (:func:`.edits.follow_pose`; left behind, they turned a hand turned by hand 109 mm
    back)."""
    edits.follow_pose(scene, obj, bpy.context.evaluated_depsgraph_get())
    saved = save(obj)
    info = mapped_rig.rig_for(obj)
    if joints is None:
        joints, _strangers = selected_joints(obj, info)
        if not joints:
            raise EditError("Select bones mapped to joints (or a Rigify IK or torso "
                            "control) to grab")
    unknown = [j for j in joints if j not in JOINT_INDEX]
    if unknown:
        raise EditError(f"Unknown joint(s) to grab: {', '.join(unknown)}")
    missing = [j for j in joints if info.joint_bones[JOINT_INDEX[j]] is None
               and JOINT_INDEX[j] not in info.toe_feet]
    if missing:
        raise EditError(f"{obj.name} has no bone mapped to {', '.join(missing)}: map it "
                        "first (Map Rig)")
    try:
        notes = edits.prepare_controls(obj)
        base_pose.store_base(obj, info, rig_io.read_pose(obj, info), scene.frame_current)
        empties.mark_solved(obj, None)
        kept.invalidate(obj.name)
        state = kept.get(scene, obj, fresh=True)
        shown = _shown_world(obj, state.info)
        empty_matrices = empties.matrices(obj, bpy.context.evaluated_depsgraph_get())
    except (EditError, rig_io.RigError) as exc:
        restore(obj, saved)
        raise EditError(str(exc)) from exc
    where = shown[[JOINT_INDEX[j] for j in joints]]
    return Grab(obj.name, tuple(joints), where, saved, state, empty_matrices, notes)


def targets(obj: bpy.types.Object, grab: Grab, offset: np.ndarray) -> list[empties.Target]:
    """The grabbed joints moved by ``offset`` (world, (3,)) as full-weight targets."""
    where = grab.start_world + np.asarray(offset, dtype=np.float64)[None]
    mw = rig_io.world_matrix(obj)
    core = rig_io.world_to_core(mw, where)
    out = []
    for joint, place, world in zip(grab.joints, core, where, strict=True):
        m = np.eye(4)
        m[:3, 3] = world
        out.append(empties.Target(joint, place, 1.0, False, None, m.ravel()))
    return out


def update(scene: bpy.types.Scene, obj: bpy.types.Object, grab: Grab, offset: np.ndarray,
           *, final: bool = False) -> Outcome:
    """One step of the grab: the grabbed joints moved by ``offset`` (world metres, (3,)),
    the whole body solved from the grab's start with the add-on's options, the pose
    written. ``final``: the confirming step (refined, corrected from the evaluated rig,
    measured, reported). An error changes nothing."""
    offset = np.asarray(offset, dtype=np.float64).reshape(3)
    if not np.isfinite(offset).all():
        raise EditError(f"The grab's offset is not a finite vector: {offset.tolist()}")
    extra = targets(obj, grab, offset)
    refine = final or obj.npe.live_refine
    outcome = edits.edit_with(scene, obj, grab.state, grab.empty_matrices,
                              allow_nothing=True, live=not final, refine=refine, extra=extra)
    if final:
        outcome.notes[:0] = grab.notes
    return outcome


def cancel(obj: bpy.types.Object, grab: Grab) -> None:
    """Put the armature back exactly as it was before :func:`begin`."""
    restore(obj, grab.saved)


def grab_offset(scene: bpy.types.Scene, obj: bpy.types.Object, offset: Iterable[float],
                joints: Sequence[str] | None = None) -> Outcome:
    """A whole grab at once (the operator's exec path, tests, scripts): begin, one final
    step, and on an error everything put back."""
    grab = begin(scene, obj, joints)
    try:
        return update(scene, obj, grab, np.asarray(list(offset), dtype=np.float64),
                      final=True)
    except EditError:
        cancel(obj, grab)
        raise

