"""Inside bpy: what the Blender-side benchmark's stage timer wraps, in the order the
stages run: (owner, attribute, label, absorb) for a live update and for a propagation
(see :class:`~training.blender_side.bench_measure.StageTimer`)."""

from __future__ import annotations

from typing import Any

from blender_addon import (
    base_pose,
    editors,
    edits,
    empties,
    fk_match,
    live,
    metric_requests,
    model_sets,
    propagation,
    rig_controls,
    rig_io,
    rig_keys,
    state,
)
from blender_addon.core import compiled_networks
from blender_addon.core import models as core_models
from blender_addon.core import refine as core_refine
from blender_addon.core.pipeline import PoseEditor

SOLVE_NUMPY = ("pipeline: numpy stages and kernels (start, request, rig-shaped answer, "
               "exact reach)")
SOLVE_ONNX = "pipeline: onnxruntime (networks, the decoder and its Jacobian)"
SOLVE_COMPILED = "pipeline: compiled networks (the universal edit, the refinement run)"
# Stages of a live update, in the order they run. (owner, attribute, label, absorb)
LIVE_STAGES: tuple[tuple[Any, str, str, bool], ...] = (
    (empties, "moved", "handler: moved check", False),
    (state, "get", "read: kept edit state (mapping, rig, effectors, base pose)", True),
    (empties, "matrices", "read: effector empties", True),
    (empties, "targets", "read: effector empties", True),
    (rig_io, "read_pose", "read: pose bones (foreach_get)", True),
    (base_pose, "base_is_current", "read: base pose", True),
    (base_pose, "base_arrays", "read: base pose", True),
    (editors, "editor_for", "read: editor lookup", True),
    (model_sets, "load", "read: model set lookup", True),
    (rig_io, "joint_positions", "forward kinematics (numpy)", False),
    (PoseEditor, "solve", SOLVE_NUMPY, False),
    (core_models.Module, "run", SOLVE_ONNX, False),
    (core_models.Module, "run_all", SOLVE_ONNX, False),
    (compiled_networks.CompiledUniversal, "edit", SOLVE_COMPILED, False),
    (core_refine.native_run, "_refine_native", SOLVE_COMPILED, False),
    (rig_io, "solve_rotations", "positions -> rotations", True),
    (rig_io, "write_pose", "write pose", True),
    (base_pose, "mark_written", "write pose", True),
    (base_pose, "store_base", "write pose", True),
    (empties, "mark_solved", "write pose", False),
    (metric_requests, "store_measured", "measure metrics (panel values)", True),
    (live, "pause_later", "measure metrics (panel values)", True),
    (rig_controls, "follow_dragged", "limbs in IK: IK controls placed (the drag's timer)", False),
)
HANDLER_REST = "handler and edit: the rest"
DEPSGRAPH = "depsgraph evaluation (Blender)"
STAGE_ORDER = (*dict.fromkeys(s[2] for s in LIVE_STAGES), HANDLER_REST, DEPSGRAPH)

# Stages of a propagation (npe.spread_edit), in the order they run.
PROPAGATION_STAGES: tuple[tuple[Any, str, str, bool], ...] = (
    (rig_keys, "read_clip", "read the action (F-curve evaluate)", True),
    (rig_io, "joint_positions", "forward kinematics (numpy)", True),
    (propagation, "propagate", "propagate (engine: encode, modules, decode)", True),
    (rig_io, "solve_rotations", "positions -> rotations", True),
    (rig_keys, "write_keys", "write keys (F-curve data)", True),
    (base_pose, "make_current_base", "new base pose", True),
    # Limbs left in IK, on each sampled frame (spread_ik): their frame changes stay in
    # "operator and the rest".
    (fk_match, "set_fk_shown",
     "limbs in IK: FK controls set on the limb shown (FK->IK snap, not evaluated)", True),
    # (the IK controls are placed once a frame's correction is done, inside it: counted
    # apart)
    (edits, "correct_written", "limbs in IK: the pose corrected from the rig", False),
    (rig_controls, "follow_fk", "limbs in IK: IK controls placed (IK->FK snap)", True),
)
