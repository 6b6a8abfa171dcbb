"""Spread the edit made at the current frame over its neighbours, keyed into the action.

The clip is read from the action's F-curves in one go (no frame changes), edited by
:func:`.core.propagate.propagate` in one batched call, turned into bone rotations for all
frames at once and keyed through F-curve data. W(t) comes from the panel's falloff:
hat, smooth, constant, or a custom curve drawn in a CurveMapping widget, which lives in a
hidden node group (add-ons have no CurveMapping property of their own).
"""

from __future__ import annotations

from collections.abc import Callable

import bpy
import numpy as np

from . import (
    base_pose,
    editors,
    empties,
    mapped_rig,
    metric_requests,
    model_sets,
    rig_io,
    rig_keys,
)
from .core.pipeline import Effector
from .core.propagate import propagate, weight_curve
from .core.skeleton import JOINT_INDEX
from .errors import EditError, Outcome, check_finite

CURVE_GROUP = ".NPE Weight Curve"  # the leading dot hides it from most lists
CURVE_NODE = "Weight Curve"
CUSTOM_SAMPLES = 33  # points of the custom curve passed to weight_curve
PREVIEW_SAMPLES = 9  # bars in the panel's W(t) preview
KINDS = {"HAT": "hat", "SMOOTH": "smooth", "CONSTANT": "constant", "CUSTOM": "custom"}
STEPS = 4  # progress bar steps: read, solve, rotations, keys


# ------------------------------------------------------------------ the custom curve


def weight_curve_node() -> bpy.types.Node | None:
    """The custom falloff's curve node, or None when it was never made (safe in draw)."""
    group = bpy.data.node_groups.get(CURVE_GROUP)
    return None if group is None else group.nodes.get(CURVE_NODE)


def ensure_weight_curve() -> bpy.types.Node:
    """Make the hidden node group holding the custom falloff (1 at the edit, 0 at the end)."""
    node = weight_curve_node()
    if node is not None:
        return node
    group = bpy.data.node_groups.get(CURVE_GROUP)
    if group is None:
        group = bpy.data.node_groups.new(CURVE_GROUP, "ShaderNodeTree")
        group.use_fake_user = True
    node = group.nodes.new("ShaderNodeFloatCurve")
    node.name = CURVE_NODE
    mapping = node.mapping
    mapping.initialize()
    points = mapping.curves[0].points
    points[0].location = (0.0, 1.0)
    points[-1].location = (1.0, 0.0)
    mapping.update()
    return node


def custom_samples() -> np.ndarray:
    """The custom curve sampled over the normalized distance 0..1 (a line when missing)."""
    node = weight_curve_node()
    x = np.linspace(0.0, 1.0, CUSTOM_SAMPLES)
    if node is None:
        return 1.0 - x
    mapping = node.mapping
    curve = mapping.curves[0]
    return np.clip([mapping.evaluate(curve, float(v)) for v in x], 0.0, 1.0)


# ------------------------------------------------------------------ weights


def window(scene: bpy.types.Scene) -> tuple[int, int, int]:
    """(start, end, center): the frames the edit may reach, and the edited frame."""
    p = scene.npe.propagation
    center = scene.frame_current
    if p.range_mode == "RADIUS":
        return center - p.radius, center + p.radius, center
    return p.frame_start, p.frame_end, center


def weights(scene: bpy.types.Scene) -> tuple[np.ndarray, np.ndarray]:
    """Frames of the window and W(t) on them (1 at the current frame)."""
    p = scene.npe.propagation
    start, end, center = window(scene)
    if not start <= center <= end:
        raise EditError(f"The current frame {center} is outside the range {start}-{end}: "
                        "move the range or the playhead")
    frames = np.arange(start, end + 1)
    kind = KINDS[p.curve]
    samples = custom_samples() if kind == "custom" else None
    c = center - start
    if p.range_mode == "RADIUS":
        w = weight_curve(len(frames), c, p.radius, kind, samples)
    else:  # fade out at each end of the range: one radius per side
        left = weight_curve(len(frames), c, c + 1, kind, samples)
        right = weight_curve(len(frames), c, len(frames) - c, kind, samples)
        w = np.where(frames <= center, left, right)
    return frames, w


def preview(scene: bpy.types.Scene) -> list[tuple[int, float]]:
    """A few (frame, W) pairs across the window, for the panel."""
    try:
        frames, w = weights(scene)
    except (EditError, ValueError):
        return []
    idx = np.unique(np.linspace(0, len(frames) - 1, PREVIEW_SAMPLES).round().astype(int))
    return [(int(frames[i]), float(w[i])) for i in idx]


# ------------------------------------------------------------------ the edit


def _goals(targets: list, clip: np.ndarray, edited: np.ndarray, w: np.ndarray, center: int,
           matrix_world: np.ndarray) -> dict[int, np.ndarray]:
    """Where effector joints must land exactly on every frame (armature space).

    A pin holds its joint where the clip had it; a full-weight effector reaches its empty at
    the edited frame, the rest of the models' miss fading out with W(t); a softer one keeps
    the edited positions.
    """
    goals = {}
    for t in targets:
        j = JOINT_INDEX[t.joint]
        if t.pin:
            goal = clip[:, j]
        elif t.weight >= 1.0:
            goal = edited[:, j] + w[:, None] * (t.target_core - edited[center, j])
        else:
            goal = edited[:, j]
        goals[j] = rig_io.core_to_armature(matrix_world, goal)
    return goals


def propagate_edit(scene: bpy.types.Scene, obj: bpy.types.Object,
                   depsgraph: bpy.types.Depsgraph | None,
                   progress: Callable[[int], None] = lambda _step: None) -> Outcome:
    """Edit the action around the current frame with the current effectors and requests."""
    info = mapped_rig.rig_for(obj)
    options = editors.solve_options(scene)
    if options.solver == "classic":
        raise EditError("Propagation blends the models' pose codes: pick a Neural solver")
    targets = empties.read(scene, obj, info, depsgraph)
    requests = metric_requests.requested_metrics(scene)
    if not targets and not requests:
        raise EditError("Nothing to propagate: add effectors or enable a metric request")
    if rig_keys.channelbag(obj) is None:
        raise EditError(f"{obj.name} has no action to edit: key its animation first")
    models = model_sets.load(scene)
    metric_requests.check_requests(requests, models)
    frames_all, w_all = weights(scene)
    live = np.flatnonzero(w_all > 0)
    frames = frames_all[live[0]:live[-1] + 1]  # W = 0 frames inside keep their values
    w = w_all[live[0]:live[-1] + 1]
    center = scene.frame_current - int(frames[0])

    progress(0)
    unkeyed = base_pose.unkeyed_pose(scene, obj, info)
    quats, locs, eulers = rig_keys.read_clip(obj, info, frames, unkeyed)
    mw = rig_io.world_matrix(obj)
    joints, _ = rig_io.joint_positions(info, quats, locs)
    clip = rig_io.armature_to_core(mw, joints)
    editor = editors.editor_for(obj, info, models)
    effs = [Effector(t.joint, t.target_core, t.weight, t.pin) for t in targets]
    progress(1)
    try:
        edited = propagate(editor, clip, center, w, effs, requests,
                           scene.npe.propagation.metric_mode.lower(), options)
    except ValueError as exc:
        raise EditError(f"Cannot propagate: {exc}") from exc
    check_finite(edited)
    progress(2)
    edited_arm = rig_io.core_to_armature(mw, edited)
    goals = _goals(targets, clip, edited, w, center, mw)
    try:
        new_q, new_l = rig_io.solve_rotations(info, quats, locs, edited_arm, goals)
    except ValueError as exc:
        raise EditError(f"Cannot turn the edited clip into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)
    still = w <= 0.0
    new_q[still], new_l[still] = quats[still], locs[still]
    progress(3)

    # Validated: write.
    n = rig_keys.write_keys(obj, info, frames, new_q, new_l, euler_ref=eulers[0],
                            unkeyed=unkeyed)
    scene.frame_set(scene.frame_current)  # show the keyed pose
    base_pose.make_current_base(scene, obj, info)
    notes = []
    if any(t.orientation_armature is not None for t in targets):
        notes.append("effector rotations are not propagated (positions only)")
    return Outcome(f"Propagated over frames {frames[0]}-{frames[-1]} of {obj.name} "
                   f"({n} F-curves{_miss(obj, info, targets, mw, scene.frame_current)})", notes)


def _miss(obj: bpy.types.Object, info: rig_io.RigInfo, targets: list,
          matrix_world: np.ndarray, frame: int) -> str:
    """How far the moved effector joints are from their empties in the keyed pose now on
    the rig, as Blender evaluates it (what the user sees, constraints included)."""
    moved = [t for t in targets if not t.pin]
    if not moved:
        return ""
    bpy.context.view_layer.update()
    keyed = rig_io.armature_to_core(matrix_world, rig_io.evaluated_joints(obj, info))
    miss = max(float(np.linalg.norm(keyed[JOINT_INDEX[t.joint]] - t.target_core))
               for t in moved)
    return f"; largest effector miss at frame {frame}: {miss * 100:.1f} cm"
