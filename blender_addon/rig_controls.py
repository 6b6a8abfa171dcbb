"""Control rigs: mapped bones that Blender overrides, and Rigify's IK/FK switch.

A bone whose pose comes from constraints or drivers does not move when the add-on writes
its rotation: :func:`driven_bones` finds such mapped bones so Map Rig can say so. A
generated Rigify rig is posed through its FK controls (the ``rigify_controls`` preset);
its limbs follow the FK controls only with their ``IK_FK`` switch at 1, so
:func:`switch_to_fk` first puts the FK controls where the limbs are (matching the ORG
bones, as Rigify's own IK→FK snap does, stretch included) and then switches, so the pose
shown is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import bpy
import numpy as np

IK_FK = "IK_FK"  # Rigify's IK/FK switch (0: IK, 1: FK) on the limb's "<first>_parent" bone
FK_SUFFIX = re.compile(r"^(?P<base>.+)_fk(?P<side>\.[LR](?:\.\d+)?)?$")
PARENT_SUFFIX = "_parent"
ORG_PREFIX = "ORG-"
# Constraint types that only limit or scale a bone: they leave the add-on's pose in charge.
HARMLESS = frozenset({"LIMIT_ROTATION", "LIMIT_LOCATION", "LIMIT_SCALE", "LIMIT_DISTANCE",
                      "MAINTAIN_VOLUME", "COPY_SCALE"})
POSE_CHANNELS = ("location", "rotation_quaternion", "rotation_euler", "rotation_axis_angle")
DRIVER_PATH = re.compile(r'^pose\.bones\["(?P<bone>(?:[^"\\]|\\.)*)"\]\.(?P<prop>\w+)$')


def _active(constraint: bpy.types.Constraint) -> bool:
    return not constraint.mute and constraint.influence > 0.0 \
        and getattr(constraint, "enabled", True)


def driven_bones(obj: bpy.types.Object, names: Iterable[str]) -> dict[str, str]:
    """Of the bones ``names``, those Blender poses by itself: bone -> why ("follows
    constraints (Copy Transforms)", "is in the IK chain of X", "has drivers")."""
    wanted = set(names)
    out: dict[str, str] = {}
    pbones = obj.pose.bones
    for name in wanted:
        pb = pbones.get(name)
        if pb is None:
            continue
        kinds = [c.type for c in pb.constraints if _active(c) and c.type not in HARMLESS]
        if kinds:
            labels = ", ".join(dict.fromkeys(k.replace("_", " ").title() for k in kinds))
            out[name] = f"follows constraints ({labels})"
    for pb in pbones:  # IK chains reach up from their owner
        for c in pb.constraints:
            if c.type not in ("IK", "SPLINE_IK") or not _active(c):
                continue
            bone, depth = pb.bone, 0
            limit = getattr(c, "chain_count", 0) or 1 << 30
            if c.type == "IK" and not getattr(c, "use_tail", True):
                bone = bone.parent
            while bone is not None and depth < limit:
                if bone.name in wanted and bone.name not in out:
                    out[bone.name] = f"is in the IK chain of {pb.name}"
                bone, depth = bone.parent, depth + 1
    anim = obj.animation_data
    for fc in anim.drivers if anim is not None else ():
        m = DRIVER_PATH.match(fc.data_path)
        if m and m["prop"] in POSE_CHANNELS and not fc.mute:
            bone = m["bone"].replace('\\"', '"').replace("\\\\", "\\")
            if bone in wanted and bone not in out:
                out[bone] = "has drivers on its pose"
    return out


FOLLOW_REST_ATOL = 1e-4  # armature units: a copying bone this near its source at rest follows it


def followed_parents(obj: bpy.types.Object, names: Sequence[str], parents: np.ndarray,
                     rest: np.ndarray, skip: Iterable[int] = ()) -> np.ndarray:
    """Each bone's parent as Blender's evaluation moves it: a bone whose last active
    constraint is a Copy Transforms from another bone of the rig (world to world, full
    influence, replacing; the two bones alike at rest, ``rest`` (B, 4, 4) armature space)
    takes that bone's place whatever its own parent does, so it hangs from that bone.
    A control rig's ORG bones do this: Rigify's ``ORG-shoulder.L`` copies the
    ``shoulder.L`` control and the upper arm hangs from it, so the clavicle control moves
    the arm (by the hierarchy alone it moves nothing, and a solve that turns it leaves
    the shoulder behind). The copying bone's own pose, which the constraint overrides, is
    taken as its rest (a control rig never poses its ORG bones). ``names`` / ``parents``
    (B,): the armature's bones (``-1`` for a root); ``skip``: bones kept as they are
    (mapped ones, which an edit poses itself)."""
    index = {n: i for i, n in enumerate(names)}
    out = np.array(parents, dtype=np.int64)
    kept = set(skip)
    pbones = obj.pose.bones
    for b, name in enumerate(names):
        pb = pbones.get(name)
        if b in kept or pb is None:
            continue
        active = [c for c in pb.constraints if _active(c)]
        c = active[-1] if active else None
        if c is None or c.type != "COPY_TRANSFORMS" or c.influence < 1.0 \
                or c.target != obj or c.subtarget not in index \
                or (c.owner_space, c.target_space, c.mix_mode) != ("WORLD", "WORLD", "REPLACE") \
                or c.head_tail != 0.0:
            continue
        source = index[c.subtarget]
        if not np.allclose(rest[b], rest[source], atol=FOLLOW_REST_ATOL):
            continue
        up = source
        while up >= 0 and up != b:  # never under itself
            up = int(out[up])
        if up != b:
            out[b] = source
    return out


def _limb_switches(obj: bpy.types.Object, names: Iterable[str]
                   ) -> dict[str, list[str]]:
    """IK/FK switch bone -> the mapped FK controls of its limb (parents first)."""
    pbones = obj.pose.bones
    out: dict[str, list[str]] = {}
    for name in names:
        m = FK_SUFFIX.match(name)
        if m is None or pbones.get(name) is None:
            continue
        bone = pbones[name].bone
        while bone is not None:  # the limb's first FK control is the topmost *_fk above
            first = FK_SUFFIX.match(bone.name)
            if first and first["side"] == m["side"]:
                top = first
            bone = bone.parent
        holder = f"{top['base']}{PARENT_SUFFIX}{top['side'] or ''}"
        if pbones.get(holder) is not None and IK_FK in pbones[holder]:
            out.setdefault(holder, []).append(name)
    for controls in out.values():
        controls.sort(key=lambda n: len(pbones[n].bone.parent_recursive))
    return out


def switch_to_fk(obj: bpy.types.Object, names: Iterable[str],
                 view_layer: bpy.types.ViewLayer) -> list[str]:
    """Switch the limbs whose FK controls are mapped to FK (``IK_FK`` = 1), the FK
    controls first put where the limbs are; returns the switches changed."""
    changed = []
    pbones = obj.pose.bones
    for holder, controls in _limb_switches(obj, names).items():
        if float(pbones[holder][IK_FK]) >= 1.0:
            continue
        for name in controls:  # parents first: each reads its parent's new place
            org = pbones.get(ORG_PREFIX + FK_SUFFIX.sub(r"\g<base>\g<side>", name))
            if org is not None:
                view_layer.update()
                pbones[name].matrix = org.matrix.copy()
        pbones[holder][IK_FK] = 1.0
        changed.append(holder)
    if changed:
        obj.update_tag()
        view_layer.update()
    return changed


def fk_note(switched: list[str]) -> list[str]:
    """The report line for limbs :func:`switch_to_fk` switched (none when empty)."""
    if not switched:
        return []
    return [f"switched {', '.join(switched)} to FK (IK_FK = 1) so the FK controls pose the "
            "limbs; the pose shown is unchanged"]
