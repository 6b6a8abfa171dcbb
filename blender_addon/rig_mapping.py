"""Armature bones -> the 21 canonical joints, through :mod:`.core.mapping`.

The mapping lives on the armature data (``armature.npe_mapping``): one item per canonical
joint with its bone name (empty when unmapped). Presets and auto-detection fill it; the
panel's bone pickers edit it; JSON files save and load it.
"""

from __future__ import annotations

import os

import bpy

from . import rig_io, session
from .core import mapping
from .core.skeleton import JOINTS
from .session import EditError

AUTO = "auto"


def bones_and_parents(armature: bpy.types.Armature) -> tuple[list[str], list[int]]:
    names = [b.name for b in armature.bones]
    index = {n: i for i, n in enumerate(names)}
    return names, [index[b.parent.name] if b.parent else -1 for b in armature.bones]


def _partial(names: list[str], parents: list[int]) -> dict[str, str]:
    """What auto-detection finds of an incomplete rig, so the user only picks the rest.

    ``core.mapping`` raises on an incomplete rig without the partial result; its detector
    (a private helper) gives it.
    """
    try:
        found = mapping._auto(names, parents, {})["found"]
    except Exception:  # a best-effort hint: any failure just leaves every joint empty
        return {}
    return {c: names[i] for c, i in found.items() if c in JOINTS}


def _fill(armature: bpy.types.Armature, joints: dict[str, str], source: str) -> None:
    data = armature.npe_mapping
    with session.updates_suspended():  # not an edit by hand
        data.joints.clear()
        for joint in JOINTS:
            item = data.joints.add()
            item.joint = joint
            item.bone = joints.get(joint, "")
        data.source = source
    rig_io.invalidate()
    session.forget_editors()


def map_rig(obj: bpy.types.Object, spec: str) -> tuple[mapping.JointMap | None, list[str]]:
    """Map by ``spec`` ("auto" or a preset name); returns the map (None when incomplete)
    and the joints left unmapped (toes excepted: they sit at the foot bone's tail)."""
    names, parents = bones_and_parents(obj.data)
    if not names:
        raise EditError(f"{obj.name} has no bones")
    try:
        joint_map = mapping.resolve_mapping(names, parents, spec)
    except mapping.MappingError as exc:
        found = _partial(names, parents) if spec == AUTO else {}
        _fill(obj.data, found, f"{spec} (incomplete)")
        missing = [j for j in JOINTS if j not in found and j not in rig_io.TOE_FOOT]
        if not missing:  # detection found it all but a name clash: report the core's reason
            raise EditError(str(exc)) from exc
        return None, missing
    _fill(obj.data, joint_map.joints, joint_map.source)
    return joint_map, []


def joint_map(armature: bpy.types.Armature) -> mapping.JointMap:
    """The stored mapping as a core JointMap (boneless toes marked as synthesized)."""
    joints = session.mapping_dict(armature)
    synthesized = {t: f"at {joints[f]}'s tail" for t, f in rig_io.TOE_FOOT.items()
                   if t not in joints and f in joints}
    return mapping.JointMap(joints, synthesized, armature.npe_mapping.source or "edited")


def save(armature: bpy.types.Armature, path: str | os.PathLike[str]) -> None:
    if not armature.npe_mapping.joints:
        raise EditError("Nothing to save: map the rig first")
    try:
        mapping.save_mapping_json(path, joint_map(armature))
    except OSError as exc:
        raise EditError(f"Cannot write {path}: {exc}") from exc


def load(obj: bpy.types.Object, path: str | os.PathLike[str]) -> list[str]:
    """Apply a JSON mapping (joints it leaves out are auto-detected); returns what is
    still unmapped."""
    names, parents = bones_and_parents(obj.data)
    try:
        pinned = mapping.load_mapping_json(path)
    except mapping.MappingError as exc:
        raise EditError(str(exc)) from exc
    absent = [f"{j} -> {b}" for j, b in pinned.items() if b not in names]
    if absent:
        raise EditError(f"{os.fspath(path)} names bones {obj.name} does not have: "
                        f"{', '.join(absent)}")
    try:
        jm = mapping.resolve_mapping(names, parents, path)
    except mapping.MappingError:
        joints = dict(pinned)
        _fill(obj.data, joints, os.fspath(path))
        return [j for j in JOINTS if j not in joints and j not in rig_io.TOE_FOOT]
    _fill(obj.data, jm.joints, os.fspath(path))
    return []
