"""The armature an edit works on, and its mapping checked: what every edit reads first."""

from __future__ import annotations

import bpy

from . import rig_io
from .core import skeleton
from .errors import EditError


def active_armature(context: bpy.types.Context) -> bpy.types.Object | None:
    """The armature the user works on: the active object, or an active effector's."""
    obj = context.active_object
    if obj is not None and obj.type != "ARMATURE":
        owner = obj.npe.effector_of
        obj = owner if owner is not None and owner.type == "ARMATURE" else None
    return obj


def armature_from_context(context: bpy.types.Context) -> bpy.types.Object:
    """The armature to edit (:func:`active_armature`); none is an error."""
    obj = active_armature(context)
    if obj is None:
        raise EditError("Select an armature (or one of its effector empties) first")
    if obj.mode == "EDIT":
        raise EditError(f"{obj.name} is in Edit Mode: switch to Pose or Object Mode first")
    return obj


def mapping_dict(armature: bpy.types.Armature) -> dict[str, str]:
    """Canonical joint -> bone name, for the joints that have a bone."""
    return {item.joint: item.bone for item in armature.npe_mapping.joints if item.bone}


def joints_problems(joints: dict[str, str], bones: object) -> list[str]:
    """What keeps a mapping (joint -> bone name) from being usable on an armature whose
    bones are ``bones`` (anything answering ``in``): empty when it is complete."""
    problems = []
    missing = [j for j in skeleton.JOINTS if j not in joints and j not in rig_io.TOE_FOOT]
    if missing:
        problems.append(f"unmapped: {', '.join(missing)}")
    absent = [f"{j} ({b})" for j, b in joints.items() if b not in bones]
    if absent:
        problems.append(f"no such bone: {', '.join(absent)}")
    seen: dict[str, str] = {}
    twice = []
    for j, b in joints.items():
        if b in seen:
            twice.append(f"{b} ({seen[b]}, {j})")
        seen[b] = j
    if twice:
        problems.append(f"bone used twice: {', '.join(twice)}")
    return problems


def mapping_problems(armature: bpy.types.Armature) -> list[str]:
    """What keeps the armature's mapping from being usable (empty when complete): for the
    panel too."""
    if not armature.npe_mapping.joints:
        return ["not mapped"]
    return joints_problems(mapping_dict(armature), armature.bones)


def require_mapping(obj: bpy.types.Object) -> dict[str, str]:
    problems = mapping_problems(obj.data)
    if problems == ["not mapped"]:
        raise EditError(f"{obj.name} is not mapped to the models' skeleton: click Map Rig")
    if problems:
        raise EditError(f"{obj.name}: the rig mapping is incomplete ({'; '.join(problems)}): "
                        "pick the bones in Rig Mapping › Joints or click Map Rig")
    return mapping_dict(obj.data)


def rig_for(obj: bpy.types.Object, fresh: bool = True) -> rig_io.RigInfo:
    """The mapped rig; operators read it afresh, the live handler reuses the cached one."""
    joints = require_mapping(obj)
    try:
        return rig_io.rig_info(obj, joints, fresh=fresh)
    except (rig_io.RigError, ValueError) as exc:
        raise EditError(str(exc)) from exc
