"""What the add-on's tests measure on rigs, read from Blender's evaluated pose (the rigs
themselves are built by :mod:`training.blender_side.rigs`, shared with the benchmark)."""

from __future__ import annotations

from collections.abc import Sequence

import bpy
import numpy as np

from blender_addon import rig_keys
from blender_addon.core.skeleton import JOINTS, PARENTS
from training.blender_side.bench_rig import effector_empty
from training.blender_side.rigs import (  # noqa: F401 - the builders, re-exported for tests
    KINDS,
    TOOLS,
    build,
    build_armature,
    extract_bvh,
    import_bvh,
    limbs_to_fk,
    mapped_heads,
    mixamo,
    mixamo_bones,
    other_tool_rig,
    rigify,
    rigify_bones,
    select_only,
)

# m: a limb in IK, its chain's end from its FK end while a drag (Live, Neural Grab) places
# its IK controls roughly (one pass; Blender's IK stops short by some 0.2 mm, seen 0.23)
DRAG_PLACE_TOL = 1e-3


def ik_end_gap(obj: bpy.types.Object) -> float:
    """The largest gap (armature units) between a mapped limb in IK's chain end and its FK
    end, as Blender evaluates them: how exactly its IK controls are placed on the FK pose."""
    from blender_addon import mapped_rig, rig_controls

    bpy.context.view_layer.update()
    pbones = obj.pose.bones
    found = rig_controls.ik_limbs(obj, mapped_rig.mapping_dict(obj.data).values())
    assert found, f"{obj.name} has no limb in IK"
    return max((pbones[limb.fk[2]].head - pbones[limb.ik_out[1]].tail).length
               for limb in found)

# ------------------------------------------------------------------ what the tests measure
# Blender's own evaluated pose (pose_bone.head/tail after a depsgraph update), never the
# add-on's FK: the tests check the add-on against Blender.


def joint_distances(obj: bpy.types.Object) -> np.ndarray:
    """World distance between each canonical joint and its parent joint (21,)."""
    heads = mapped_heads(obj)
    return np.array([0.0 if p < 0 else np.linalg.norm(heads[JOINTS[j]] - heads[JOINTS[p]])
                     for j, p in enumerate(PARENTS)])


def bone_lengths(obj: bpy.types.Object) -> np.ndarray:
    """World length of every pose bone (head to tail)."""
    bpy.context.view_layer.update()
    mw = obj.matrix_world
    return np.array([np.linalg.norm(np.array(mw @ pb.tail) - np.array(mw @ pb.head))
                     for pb in obj.pose.bones])


def pose_matrices(obj: bpy.types.Object) -> np.ndarray:
    """Every pose bone's local matrix (rotation in any mode, location, scale): (B, 4, 4)."""
    return np.array([np.array(pb.matrix_basis) for pb in obj.pose.bones])


def keys(obj: bpy.types.Object) -> dict[tuple[str, int], np.ndarray]:
    """Every F-curve's keys (frame, value) of the object's action slot."""
    bag = rig_keys.channelbag(obj)
    out = {}
    if bag is None:
        return out
    for fc in bag.fcurves:
        co = np.empty(len(fc.keyframe_points) * 2, dtype=np.float32)
        fc.keyframe_points.foreach_get("co", co)
        out[(fc.data_path, fc.array_index)] = co.reshape(-1, 2)
    return out


def cancelled(op: object, *args: object, **kwargs: object) -> str:
    """Call an operator expected to fail: an error report is a RuntimeError from Python.

    Returns the error message (the report), for the test to check it says what to do.
    """
    try:
        result = op(*args, **kwargs)
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError(f"expected an error report, the operator returned {result}")


def select_bones(obj: bpy.types.Object, names: Sequence[str]) -> None:
    """Select pose bones (the flag moved from Bone in 4.x to PoseBone in 5.0)."""
    for pb in obj.pose.bones:
        target = pb if "select" in pb.bl_rna.properties else pb.bone
        target.select = pb.name in names


def hands_and_pinned_feet(obj: bpy.types.Object) -> None:
    """Hands and feet as effectors, the feet pinned."""
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="FEET") == {"FINISHED"}
    for item in obj.npe.effectors:
        item.pin = item.joint.endswith("foot")


def live_hand(obj: bpy.types.Object) -> tuple[bpy.types.Object, np.ndarray]:
    """:func:`hands_and_pinned_feet` with Live on: the right hand's empty, to drag, and
    where it starts."""
    hands_and_pinned_feet(obj)
    bpy.context.scene.npe.live = True
    hand = effector_empty(obj, "r_hand")
    return hand, np.array(hand.location)


def unkey_bones(obj: bpy.types.Object, joints: Sequence[str], mute: bool = False
                ) -> list[str]:
    """The action's F-curves of the bones mapped to ``joints`` removed: blocking that left
    them unkeyed (the pose holds them); or muted. Returns those bones."""
    from blender_addon import mapped_rig

    info = mapped_rig.rig_for(obj)
    names = [info.names[info.joint_bones[JOINTS.index(j)]] for j in joints]
    bag = rig_keys.channelbag(obj)
    for fc in [fc for fc in bag.fcurves if any(f'"{n}"' in fc.data_path for n in names)]:
        if mute:
            fc.mute = True
        else:
            bag.fcurves.remove(fc)
    return names
