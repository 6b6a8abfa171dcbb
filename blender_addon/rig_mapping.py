"""Armature bones -> the 21 canonical joints, through :mod:`.core.mapping`.

The mapping lives on the armature data (``armature.npe_mapping``): one item per canonical
joint with its bone name (empty when unmapped). Presets and auto-detection fill it; the
panel's bone pickers edit it; JSON files save and load it (a file is checked whole before
it replaces anything). Mapping a control rig also prepares it (:mod:`.rig_controls`), and
mapped bones that Blender poses by itself are named in the report.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import bpy

from . import mapped_rig, rig_controls, rig_io
from .core import mapping
from .core.skeleton import JOINTS
from .errors import EditError
from .guard import updates_suspended
from .state import invalidate

AUTO = "auto"
CONTROLS_PRESET = "rigify_controls"
SHOWN_DRIVEN = 3  # driven bones named in a report at most


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


def own_armature(obj: bpy.types.Object) -> bpy.types.Armature:
    """The armature data a mapping is saved on. A linked character's library override
    keeps the library's armature data linked, and what is written on linked data is lost
    when the file is saved; the data becomes a library override of its own first, as
    Blender's Library Override › Make does for data one edits."""
    if obj.data.library is not None and obj.override_library is not None:
        _ = obj.data.npe_mapping.source  # the library's empty mapping, for the override
        obj.data.override_create(remap_local_usages=True)  # remaps this object's data
        if obj.data.override_library is not None:  # editable: its changes are saved
            obj.data.override_library.is_system_override = False
        if obj.data.library is not None:
            raise EditError(f"{obj.name}: its armature data {obj.data.name!r} is linked "
                            "and cannot be overridden: make it editable (Object › Library "
                            "Override › Make) and map again")
    return obj.data


def _fill(obj: bpy.types.Object, joints: dict[str, str], source: str) -> None:
    data = own_armature(obj).npe_mapping
    with updates_suspended():  # not an edit by hand
        data.joints.clear()
        for joint in JOINTS:
            item = data.joints.add()
            item.joint = joint
            item.bone = joints.get(joint, "")
        data.source = source
    for other in bpy.data.objects:
        if other.data == obj.data:
            invalidate(other.name)


def check_lengths(obj: bpy.types.Object, joint_map: mapping.JointMap) -> None:
    """Refuse a mapping whose limbs or trunk have no length on the rig's rest pose (a twist
    bone mapped for the elbow: its head on the shoulder), before anything is changed."""
    import numpy as np

    bones = obj.data.bones
    rest = np.zeros((len(JOINTS), 3))
    for j, joint in enumerate(JOINTS):
        if bone := joint_map.joints.get(joint):
            rest[j] = bones[bone].head_local
    try:
        mapping.check_lengths(joint_map, rest)
    except mapping.MappingError as exc:
        raise EditError(f"{obj.name}: {exc}; the mapping was not changed") from exc


def map_rig(obj: bpy.types.Object, spec: str, view_layer: bpy.types.ViewLayer
            ) -> tuple[mapping.JointMap | None, list[str], list[str]]:
    """Map by ``spec`` ("auto" or a preset name); returns the map (None when incomplete),
    the joints left unmapped (toes excepted: they sit at the foot bone's tail) and notes
    for the report (limbs in IK, bones Blender poses by itself)."""
    names, parents = bones_and_parents(obj.data)
    if not names:
        raise EditError(f"{obj.name} has no bones")
    rig_controls.forget(obj.name)  # its limbs read afresh, constraints included
    try:
        joint_map = mapping.resolve_mapping(names, parents, spec)
    except mapping.MappingError as exc:
        found = _partial(names, parents) if spec == AUTO else {}
        _fill(obj, found, f"{spec} (incomplete)")
        missing = [j for j in JOINTS if j not in found and j not in rig_io.TOE_FOOT]
        if not missing:  # detection found it all but a name clash: report the core's reason
            raise EditError(str(exc)) from exc
        return None, missing, []
    check_lengths(obj, joint_map)
    _fill(obj, joint_map.joints, joint_map.source)
    return joint_map, [], prepare(obj, joint_map.joints, view_layer)


def prepare(obj: bpy.types.Object, joints: dict[str, str],
            view_layer: bpy.types.ViewLayer) -> list[str]:
    """Put the FK controls of limbs in IK where the limbs are shown (the solve starts from
    them; the IK/FK switches stay as they are) and say which
    mapped bones Blender still poses by itself; returns notes for the report."""
    rig_controls.match_fk_to_shown(obj, joints.values(), view_layer)
    notes = rig_controls.ik_notes(obj, joints.values())
    said = driven_note(obj, joints.values())
    obj.data.npe_mapping.warning = "" if said is None else said[1]
    return notes + ([] if said is None else [said[0]])


def driven_note(obj: bpy.types.Object, bones: Iterable[str]) -> tuple[str, str] | None:
    """The report's note and the panel's warning naming the mapped ``bones`` that Blender
    poses by itself (:func:`.rig_controls.driven_bones`) and what to map instead; None
    where it poses none of them. Map Rig says it, and so does an edit that the rig then
    misses (a constraint or driver added since: a hand 43 cm off its empty, said only as
    a number)."""
    driven = rig_controls.driven_bones(obj, bones)
    if not driven:
        return None
    names, parents = bones_and_parents(obj.data)
    try:
        mapping.resolve_mapping(names, parents, CONTROLS_PRESET)
        hint = "map the controls (Rigify preset)"
    except mapping.MappingError:
        hint = (f"map the bones that drive {'it' if len(driven) == 1 else 'them'} (the "
                "rig's controls) instead")
    shown = [f"{bone} {why}" for bone, why in list(driven.items())[:SHOWN_DRIVEN]]
    more = f" and {len(driven) - SHOWN_DRIVEN} more" if len(driven) > SHOWN_DRIVEN else ""
    first = next(iter(driven))
    others = f" and {len(driven) - 1} more" if len(driven) > 1 else ""
    return (f"{'; '.join(shown)}{more}: the add-on cannot move "
            f"{'it' if len(driven) == 1 else 'them'}: {hint}",
            f"{first}{others} Blender poses itself: {hint}")


def joint_map(armature: bpy.types.Armature) -> mapping.JointMap:
    """The stored mapping as a core JointMap (boneless toes marked as synthesized)."""
    joints = mapped_rig.mapping_dict(armature)
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


def load(obj: bpy.types.Object, path: str | os.PathLike[str],
         view_layer: bpy.types.ViewLayer) -> list[str]:
    """Apply a JSON mapping; joints it leaves out are auto-detected. The result is checked
    whole first (every bone present, none used twice, every joint found): a bad file
    changes nothing. Returns notes for the report (see :func:`prepare`)."""
    where = os.fspath(path)
    names, parents = bones_and_parents(obj.data)
    try:
        pinned = mapping.load_mapping_json(path)
    except mapping.MappingError as exc:
        raise EditError(str(exc)) from exc
    problems = mapped_rig.joints_problems(pinned, set(names))
    problems = [p for p in problems if not p.startswith("unmapped")]  # completed below
    if problems:
        raise EditError(f"{where} does not fit {obj.name} ({'; '.join(problems)}): "
                        "the mapping was not changed")
    try:
        jm = mapping.resolve_mapping(names, parents, path)
    except mapping.MappingError as exc:
        raise EditError(f"{where} does not map {obj.name} completely ({exc}): the mapping "
                        "was not changed") from exc
    check_lengths(obj, jm)
    _fill(obj, jm.joints, where)
    return prepare(obj, jm.joints, view_layer)
