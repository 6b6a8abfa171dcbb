"""Inside bpy: the benchmark's scene: a rig (BVH, Rigify-size or generated Rigify) mapped with
effectors on hands, feet and head, and reading its evaluated joints back."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon.core.pipeline import SolveOptions
from blender_addon.core.skeleton import JOINTS
from training.blender_side import host, rigs

EFFECTORS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")  # the LIMBS preset
MOVED = "r_hand"  # the empty dragged in the live loop
DEFAULT_REFINE = SolveOptions().refine_steps  # the add-on's default Refinement
# The generated Rigify rig's IK/FK switches: its limbs are put in FK for the benchmark (a
# limb left in IK also has its IK controls placed after every solve: rig_controls).
# The generated Rigify rig, made once per Blender version (generating takes seconds).
GENERATED_BLEND = Path(tempfile.gettempdir()) / (
    f"npe-bench-generated-rigify-{'.'.join(map(str, bpy.app.version))}.blend")


def world_heads(obj: bpy.types.Object) -> np.ndarray:
    """World position of the 21 joints (mapped bones' heads) from Blender's evaluated pose."""
    heads = rigs.mapped_heads(obj)
    return np.array([heads[j] for j in JOINTS])


def setup_rig(kind: str, models: Path, bvh: Path | None) -> bpy.types.Object:
    """A fresh scene with the rig mapped and effectors on hands, feet and head. ``kind``:
    "bvh" (the clip imported), "rigify" (a Rigify-size deform rig), "generated" (a
    Rigify rig generated from the human metarig, posed through its controls, its limbs
    switched to FK) or "generated-ik" (the same, its limbs left in IK, as generated)."""
    if kind in ("generated", "generated-ik"):
        obj = rigs.open_rigify(rigs.rigify_blend(GENERATED_BLEND))
        host.use_models(bpy.context.scene, models)
        if kind == "generated":
            rigs.limbs_to_fk(obj)  # limbs in FK, as the published figures had them
    else:
        host.new_scene(models)
        obj = rigs.import_bvh(bvh) if kind == "bvh" else rigs.rigify(full=True)
    rigs.select_only(obj)
    run_op(bpy.ops.npe.map_rig, preset="auto")
    run_op(bpy.ops.npe.add_effectors, preset="LIMBS")
    return obj


def run_op(op: Callable[..., set[str]], **kwargs: Any) -> None:
    result = op(**kwargs)
    if result != {"FINISHED"}:
        raise RuntimeError(f"{op.idname_py()} returned {result}")


def effector_empty(obj: bpy.types.Object, joint: str) -> bpy.types.Object:
    return next(item.empty for item in obj.npe.effectors if item.joint == joint)
