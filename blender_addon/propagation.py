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
from .core.skeleton import JOINT_INDEX, JOINTS
from .edits import EVALUATED_PASSES, EVALUATED_TOL
from .errors import EditError, Outcome, check_finite

CURVE_GROUP = ".NPE Weight Curve"  # the leading dot hides it from most lists
CURVE_NODE = "Weight Curve"
CUSTOM_SAMPLES = 33  # points of the custom curve passed to weight_curve
PREVIEW_SAMPLES = 9  # bars in the panel's W(t) preview
KINDS = {"HAT": "hat", "SMOOTH": "smooth", "CONSTANT": "constant", "CUSTOM": "custom"}
STEPS = 5  # progress bar steps: read, solve, rotations, keys, the evaluated rig's correction


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
    options = editors.solve_options(obj)
    if options.solver == "classic":
        raise EditError("Propagation blends the models' pose codes: pick a Neural solver")
    targets = empties.read(scene, obj, info, depsgraph)
    requests = metric_requests.requested_metrics(obj)
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
    def write(q: np.ndarray, loc: np.ndarray) -> int:
        return rig_keys.write_keys(obj, info, frames, q, loc, euler_ref=eulers[0],
                                   unkeyed=unkeyed)

    n = write(new_q, new_l)
    progress(4)
    _correct_from_evaluated(scene, obj, info, frames, w, goals, quats, locs, edited_arm,
                            (new_q, new_l), write, rig_io.world_scale(mw))
    scene.frame_set(scene.frame_current)  # show the keyed pose
    base_pose.make_current_base(scene, obj, info)
    notes = []
    if any(t.orientation_armature is not None for t in targets):
        notes.append("effector rotations are not propagated (positions only)")
    return Outcome(f"Propagated over frames {frames[0]}-{frames[-1]} of {obj.name} "
                   f"({n} F-curves{_miss(obj, info, targets, mw, scene.frame_current)})", notes)


def _correct_from_evaluated(scene: bpy.types.Scene, obj: bpy.types.Object,
                            info: rig_io.RigInfo, frames: np.ndarray, w: np.ndarray,
                            goals: dict[int, np.ndarray], quats: np.ndarray, locs: np.ndarray,
                            edited_arm: np.ndarray, keyed: tuple[np.ndarray, np.ndarray],
                            write: Callable[[np.ndarray, np.ndarray], int], scale: float
                            ) -> None:
    """On a rig whose controls do not move the joints exactly as its bone hierarchy says
    (Rigify's neck bends over two bones), correct the keys from what Blender evaluates, as
    a single edit does: each frame's effector goals are moved by what the evaluation
    missed, solved and keyed again while that brings the frame closer (at most
    :data:`.edits.EVALUATED_PASSES` passes), each frame keeping its best keys. A rig that
    follows its hierarchy is seen at the current frame alone and left as keyed."""
    if not goals:
        return
    joints = list(goals)
    wanted = np.stack([goals[j] for j in joints], axis=1)  # (T, G, 3) armature space
    current = scene.frame_current
    scene.frame_set(current)  # the keys just written, evaluated
    seen_now = rig_io.evaluated_joints(obj, info)[joints]
    if np.linalg.norm(seen_now - wanted[current - int(frames[0])], axis=-1).max() * scale \
            < EVALUATED_TOL:
        return
    try:
        _correct_frames(scene, obj, info, frames, w > 0.0, joints, wanted, quats, locs,
                        edited_arm, keyed, write, scale)
    finally:
        scene.frame_set(current)


def _correct_frames(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                    frames: np.ndarray, live: np.ndarray, joints: list[int],
                    wanted: np.ndarray, quats: np.ndarray, locs: np.ndarray,
                    edited_arm: np.ndarray, keyed: tuple[np.ndarray, np.ndarray],
                    write: Callable[[np.ndarray, np.ndarray], int], scale: float) -> None:
    """The passes of :func:`_correct_from_evaluated` over the ``live`` frames."""
    best_q, best_l = (a.copy() for a in keyed)
    seen = _evaluated_clip(scene, obj, info, frames, live)[:, joints]
    best = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)  # (T,) worst goal per frame
    aim = wanted.copy()
    active = live & (best * scale >= EVALUATED_TOL)
    written = False
    for _ in range(EVALUATED_PASSES):
        if not active.any():
            break
        aim[active] += wanted[active] - seen[active]
        shifted = edited_arm.copy()
        shifted[:, joints] = aim
        try:
            q, loc = rig_io.solve_rotations(info, quats, locs, shifted,
                                            {j: aim[:, k] for k, j in enumerate(joints)})
        except ValueError:  # the keys written stand: each frame is a whole pose already
            break
        q[~active], loc[~active] = best_q[~active], best_l[~active]
        write(q, loc)
        written = True
        seen[active] = _evaluated_clip(scene, obj, info, frames, active)[active][:, joints]
        miss = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)
        better = active & (miss < best)  # a frame that got no closer stops, at its best
        best_q[better], best_l[better], best[better] = q[better], loc[better], miss[better]
        active = better & (best * scale >= EVALUATED_TOL)
    if written:  # the frames whose last pass got no closer go back to their best keys
        write(best_q, best_l)


def _evaluated_clip(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                    frames: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(T, 21, 3) armature-space joints as Blender evaluates them at ``frames[rows]`` (one
    frame change each: constraints are evaluated a frame at a time); other rows are NaN."""
    out = np.full((len(frames), len(JOINTS), 3), np.nan)
    for k in np.flatnonzero(rows):
        scene.frame_set(int(frames[k]))
        out[k] = rig_io.evaluated_joints(obj, info)
    return out


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
