"""The edits the operators, the live handler and the slider callbacks run.

Every function validates and computes first and writes last, so an error
(:class:`.errors.EditError`) changes nothing. Reports are measured on the rig as Blender
evaluates it (constraints and drivers included), on the bones the user sees at the joints
(:attr:`.rig_io.RigInfo.shown`): a rig the add-on cannot move is reported as such. On a rig
whose controls do not move the joints exactly as the bone hierarchy says (a control rig
such as Rigify's), operators correct the write from what Blender evaluated, a few passes
(:data:`EVALUATED_PASSES`); live drags skip that and the drag's pause does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import bpy
import numpy as np

from . import (
    base_pose,
    editors,
    empties,
    keying,
    mapped_rig,
    metric_requests,
    model_sets,
    pose_writes,
    rig_controls,
    rig_io,
    rig_keys,
    rig_mapping,
)
from . import state as kept
from .core import skeleton
from .core.pipeline import MISS_NOTE_M, Effector
from .core.propagate import kept_short
from .errors import STATUS, EditError, Outcome, check_finite
from .guard import busy, is_suspended, updates_suspended

EVALUATED_PASSES = 3  # corrections of a write from the evaluated rig, at most
EVALUATED_TOL = 1e-4  # m (world): effector joints this close to their goals need no pass
# A pass that leaves more than this share of the miss ends the passes: what is left is not
# the evaluation's (a limb at full stretch, a limit), and each pass costs an evaluation.
EVALUATED_STALL = 0.5
CM = 100.0


def edit(scene: bpy.types.Scene, obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None,
         *, allow_nothing: bool = False, live: bool = False, refine: bool = True) -> Outcome:
    """Solve the armature's pose from its base pose, effectors and metric requests.

    ``allow_nothing``: with no effector and no request, go back to the base pose instead
    of failing (a request switched off). ``live``: reuse the armature's kept state (see
    :mod:`.state`), measure nothing (the drag's pause does); operators build it afresh.
    ``refine``: False skips the latent refinement (a live drag).
    """
    # (before the FK controls are matched, which the user has not seen; the empties moved
    # then read as placed, not as last evaluated)
    if not live and follow_pose(scene, obj, depsgraph):
        depsgraph = None
    notes = [] if live else prepare_controls(obj)
    state = kept.get(scene, obj, fresh=not live)
    outcome = edit_with(scene, obj, state, empties.matrices(obj, depsgraph),
                        allow_nothing=allow_nothing, live=live, refine=refine)
    outcome.notes[:0] = notes
    return outcome


def follow_pose(scene: bpy.types.Scene, obj: bpy.types.Object,
                depsgraph: bpy.types.Depsgraph | None) -> bool:
    """Where the pose was changed outside the add-on since its last write, the empties not
    moved since the last solve go onto it (:func:`.empties.follow_pose`); whether any
    moved. Before a solve or a grab, and before they match FK controls to IK limbs."""
    try:
        info = mapped_rig.rig_for(obj)
        pose = rig_io.read_pose(obj, info)
        now = empties.matrices(obj, depsgraph)
    except (EditError, rig_io.RigError):
        return False  # (the solve says what is wrong)
    base = base_pose.read_base(obj, info)
    if base_pose.base_is_current(base, info, pose, scene.frame_current):
        return False
    moved = base_pose.moved_joints(info, base, pose)
    return empties.follow_pose(obj, info, now, moved) is not None


def prepare_controls(obj: bpy.types.Object) -> list[str]:
    """The FK controls of limbs in IK go where the limbs are shown, when the IK controls
    put them elsewhere (the solve reads its start from the FK controls; the switch and
    what is shown do not change); notes for the report, none when nothing moved."""
    view_layer = bpy.context.view_layer
    if view_layer is None:
        return []
    joints = mapped_rig.mapping_dict(obj.data)
    matched = rig_controls.match_fk_to_shown(obj, joints.values(), view_layer)
    if matched:  # the FK controls put where the limbs are: no user's move
        pose_writes.mark(obj.name)
    return [f"FK controls of {', '.join(matched)} put where the IK limb is (it stays in "
            "IK)"] if matched else []


def _read_pose(obj: bpy.types.Object, state: kept.ArmatureState) -> rig_io.Pose:
    try:
        return rig_io.read_pose(obj, state.info, state.pose)
    except rig_io.RigError as exc:
        raise EditError(str(exc)) from exc


def edit_with(scene: bpy.types.Scene, obj: bpy.types.Object, state: kept.ArmatureState,
              empty_matrices: np.ndarray, *, allow_nothing: bool, live: bool,
              refine: bool = True, extra: Sequence[empties.Target] = ()) -> Outcome:
    """:func:`edit` with the state and the empties' matrices at hand. ``extra``: targets
    that no empty holds (a grabbed joint, a moved rig control); each replaces an
    effector of the same joint."""
    info = state.info
    mw = rig_io.world_matrix(obj)
    requests = state.requests
    options = editors.solve_options(obj)
    skipped = not refine and options.refine_steps > 0 and options.solver != "classic"
    if skipped:
        options = replace(options, refine_steps=0)
    pose = _read_pose(obj, state)
    frame = scene.frame_current
    keep_base = state.base_is_current(pose, frame)
    if not keep_base and live:  # the pose changed outside the add-on: the empties follow
        followed = empties.follow_pose(  # (Solve: in edit)
            obj, info, empty_matrices, base_pose.moved_joints(info, state.base, pose))
        if followed is not None:
            empty_matrices = followed
    targets = empties.targets(state.effectors, empty_matrices, mw)
    if extra:
        taken = {t.joint for t in extra}
        targets = [t for t in targets if t.joint not in taken] + list(extra)
    if not targets and not requests:
        if not allow_nothing:
            raise EditError("Nothing to solve: add effectors or enable a metric request")
        if keep_base:
            state.pose = base_pose.restore_base(obj, info, state.base, pose)
            base_pose.mark_written(obj, info, state.base, state.pose)
        return Outcome("Back to the base pose")
    if requests and options.solver == "classic":
        raise EditError("Metric requests need a neural solver: pick Neural in Solver")
    models = model_sets.load(scene) if (options.solver != "classic" or requests) else None
    if models is not None:
        metric_requests.check_requests(requests, models)
    quats, locs, start = state.start(pose, keep_base, mw)
    editor = state.editor(obj, models)
    effs = [Effector(t.joint, t.target_core, t.weight, t.pin) for t in targets]
    try:
        result = editor.solve(start, effs, requests, options, drag=live)
    except ValueError as exc:
        raise EditError(f"Cannot solve: {exc}") from exc
    new_core = result.positions[0]
    check_finite(new_core)
    orientations = {skeleton.JOINT_INDEX[t.joint]: t.orientation_armature
                    for t in targets if t.orientation_armature is not None and not t.pin}
    goal_joints, goal_core = reach_goals(targets, start, new_core)
    in_armature = state.to_armature(mw, np.concatenate([new_core, goal_core]))
    solved_arm = in_armature[:skeleton.NUM_JOINTS]
    goals = dict(zip(goal_joints, in_armature[skeleton.NUM_JOINTS:], strict=True))
    # The engine's answer keeps the rig's bone lengths and rigid branches when Fix Lengths
    # is on: the limbs are re-aimed on it before the fit (one pass).
    new_q, new_l = _rotations(info, quats, locs, solved_arm, goals, orientations,
                              rig_shaped=options.fix_lengths)

    # Validated: write.
    if not keep_base:
        state.base = base_pose.store_base(obj, info, pose, frame)
    # (IK controls placed roughly while dragging, else once the correction is done)
    with rig_controls.dragging() if live else rig_controls.deferred():
        state.pose = rig_io.write_pose(obj, info, new_q, new_l, pose)
    base_pose.mark_written(obj, info, state.base, state.pose)
    empties.mark_solved(obj, empty_matrices)
    state.solved = empty_matrices.reshape(len(empty_matrices), 16)
    notes = list(result.notes)
    if not live and obj.npe.settle_due:
        obj.npe.settle_due = False  # settled: an undo step stored from now on needs nothing
    if live:
        return Outcome(f"Solved {obj.name}", notes, deferred=True)
    seen = _settle(obj, state, (quats, locs, solved_arm, goals, orientations), mw)
    notes += auto_key(scene, obj, info, (quats, locs), state.pose)  # from the base
    final_core = rig_io.armature_to_core(mw, seen)
    if models is not None:  # what the user sees
        metric_requests.measure_joints(scene, obj, info, seen)
        before = {k: float(v[0]) for k, v in editor.metric_values(start[None]).items()}
        notes += metric_requests.shortfalls(obj, requests, before)
    parts = []
    if targets:
        miss = largest_miss(targets, final_core)
        notes += driven_notes(obj, info, miss)
        parts.append(f"{len(targets)} effector(s), largest miss {miss * CM:.1f} cm")
    if requests:
        parts.append(f"{len(requests)} metric request(s)")
    return Outcome(f"Solved {obj.name}: {', '.join(parts)}", notes)


def _rotations(info: rig_io.RigInfo, quats: np.ndarray, locs: np.ndarray,
               solved_arm: np.ndarray, goals: dict[int, np.ndarray],
               orientations: dict[int, np.ndarray], rig_shaped: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    try:
        new_q, new_l = rig_io.solve_rotations(info, quats, locs, solved_arm, goals,
                                              orientations, rig_shaped=rig_shaped)
    except ValueError as exc:
        raise EditError(f"Cannot turn the solved joints into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)
    return new_q, new_l


def evaluated_joints(obj: bpy.types.Object, info: rig_io.RigInfo) -> np.ndarray:
    """Armature-space joints (21, 3) as Blender evaluates the rig now (the depsgraph is
    updated first; objects outside the active view layer are read as last evaluated). A
    limb in IK whose IK controls are left to place (:func:`.rig_controls.deferred`) is read
    on its FK controls, where the placement will show it."""
    view_layer = bpy.context.view_layer
    if view_layer is not None:
        view_layer.update()
    unplaced = rig_controls.unplaced(obj)
    on_fk = {j for j, b in enumerate(info.joint_bones)
             if b is not None and info.names[b] in unplaced} if unplaced else ()
    return rig_io.evaluated_joints(obj, info, on_fk)


def _settle(obj: bpy.types.Object, state: kept.ArmatureState, solve: tuple,
            matrix_world: np.ndarray) -> np.ndarray:
    """:func:`correct_written` of the pose just written (``state.pose``), kept as the
    base's written pose. Returns the evaluated joints (armature space) left on the rig."""
    state.pose, seen = correct_written(obj, state.info, state.pose, solve,
                                       rig_io.world_scale(matrix_world))
    base_pose.mark_written(obj, state.info, state.base, state.pose)
    return seen


def correct_written(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose,
                    solve: tuple, scale: float, shown: bool = True
                    ) -> tuple[rig_io.Pose, np.ndarray | None]:
    """Correct the pose just written (``pose``, from ``solve``: the start rotations and
    locations, the solved joints, the effector goals and orientations) from the evaluated
    rig: the effector joints' goals are moved by what Blender's evaluation missed, solved
    and written again, while that brings them closer (at most :data:`EVALUATED_PASSES`,
    and none after a pass that removed less than half the miss, :data:`EVALUATED_STALL`);
    the best write stays. ``scale``: world units per armature unit. Limbs in IK are read
    on their FK controls through the passes, and their IK controls placed once after them
    (written under :func:`.rig_controls.deferred`, the pose just written's too): each
    placement costs a few evaluations of the rig. Returns the pose left on the rig and its
    evaluated joints (armature space); without ``shown``, None for those where IK controls
    were placed (their last pass, settled, is not evaluated: Spread Edit's frames)."""
    try:
        with rig_controls.deferred():  # the passes' writes: IK controls placed once, after
            pose, seen = _correct(obj, info, pose, solve, scale)
    finally:  # (a pass that fails leaves nothing to place later)
        placed = rig_controls.place_unplaced(obj, shown)
    if placed:
        seen = evaluated_joints(obj, info) if shown else None
    return pose, seen


def _correct(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose,
             solve: tuple, scale: float) -> tuple[rig_io.Pose, np.ndarray]:
    """:func:`correct_written`'s passes."""
    quats, locs, solved_arm, goals, orientations = solve
    seen = evaluated_joints(obj, info)
    if not goals:
        return pose, seen
    joints = list(goals)
    wanted = np.array([goals[j] for j in joints])
    best = (_miss(seen, joints, wanted), pose, seen)
    aim = wanted.copy()
    for _ in range(EVALUATED_PASSES):
        if best[0] * scale < EVALUATED_TOL:
            break
        aim = aim + (wanted - seen[joints])
        shifted = solved_arm.copy()
        shifted[joints] = aim
        new_q, new_l = _rotations(info, quats, locs, shifted, dict(zip(joints, aim, strict=True)),
                                  orientations)
        pose = rig_io.write_pose(obj, info, new_q, new_l, pose)
        seen = evaluated_joints(obj, info)
        miss = _miss(seen, joints, wanted)
        if miss >= best[0]:
            break
        stalled = miss > best[0] * EVALUATED_STALL
        best = (miss, pose, seen)
        if stalled:
            break
    if pose is not best[1]:  # the last pass made it worse: back to the best one
        pose = rig_io.write_pose(obj, info, best[1].quats, best[1].locations, pose)
        seen = evaluated_joints(obj, info)
    return pose, seen


def _miss(seen: np.ndarray, joints: list[int], wanted: np.ndarray) -> float:
    return float(np.linalg.norm(seen[joints] - wanted, axis=1).max())


def largest_miss(targets: list[empties.Target], joints_core: np.ndarray) -> float:
    """How far the moved effector joints are from their empties (core space, metres)."""
    moved = [t for t in targets if not t.pin]
    return max((float(np.linalg.norm(joints_core[skeleton.JOINT_INDEX[t.joint]]
                                     - t.target_core)) for t in moved), default=0.0)


def driven_notes(obj: bpy.types.Object, info: rig_io.RigInfo, miss: float) -> list[str]:
    """Where the rig shows an edit's moved effectors over :data:`MISS_NOTE_M` off their
    empties (``miss``, core space): the mapped bones Blender poses by itself, named as Map
    Rig names them (:func:`.rig_mapping.driven_note`), if any."""
    said = None if miss <= MISS_NOTE_M else rig_mapping.driven_note(
        obj, (info.names[b] for b in info.mapped))
    return [] if said is None else [said[0]]


def reach_goals(targets: list[empties.Target], start: np.ndarray, solved: np.ndarray
                ) -> tuple[list[int], np.ndarray]:
    """Where each effector joint must end up exactly (joints, core space ``(G, 3)``): a
    full-weight effector on its empty, a pin where it was; a softer one, and one the solve
    left short beyond its limb's reach (:func:`.core.propagate.kept_short`, as Spread
    Edit's goals), where the solve put it."""
    joints = [skeleton.JOINT_INDEX[t.joint] for t in targets]
    aims = start.copy()
    aims[joints] = np.reshape([t.target_core for t in targets], (-1, 3))
    short = kept_short(start, solved, aims)
    goals = [start[j] if t.pin else t.target_core if t.weight >= 1.0 and not short[j]
             else solved[j] for t, j in zip(targets, joints, strict=True)]
    return joints, np.array(goals).reshape(-1, 3)


def clean_pose(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Project the current pose onto the models' pose space; it becomes the new base."""
    info = mapped_rig.rig_for(obj)
    models = model_sets.load(scene)
    pose = rig_io.read_pose(obj, info)
    mw = rig_io.world_matrix(obj)
    joints_arm, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    editor = editors.editor_for(obj, info, models)
    try:
        cleaned = editor.clean_pose(rig_io.armature_to_core(mw, joints_arm)[None])[0]
    except ValueError as exc:
        raise EditError(f"Cannot clean the pose: {exc}") from exc
    check_finite(cleaned)
    try:
        new_q, new_l = rig_io.solve_rotations(info, pose.quats, pose.locations,
                                              rig_io.core_to_armature(mw, cleaned))
    except ValueError as exc:
        raise EditError(f"Cannot turn the cleaned joints into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)
    notes = auto_key(scene, obj, info, (pose.quats, pose.locations),
                     rig_io.write_pose(obj, info, new_q, new_l, pose))
    base_pose.make_current_base(scene, obj, info)
    return Outcome(f"Cleaned the pose of {obj.name}", notes)


def reset_edits(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Back to the base pose; effectors return to their joints and requests switch off.

    Only while the base applies (same frame, the pose still the add-on's): after a frame
    change the rig shows that frame's own pose, which the stored base has nothing to do
    with, so that pose becomes the base instead and nothing is undone.
    """
    info = mapped_rig.rig_for(obj)
    base = base_pose.read_base(obj, info)
    if base is None:
        raise EditError(f"{obj.name} has no edits to reset (no base pose for its mapping)")
    pose = rig_io.read_pose(obj, info)
    frame = scene.frame_current
    notes = []
    if base_pose.base_is_current(base, info, pose, frame):
        restored = base_pose.restore_base(obj, info, base, pose)
        base_pose.mark_written(obj, info, base, restored)
        notes += auto_key(scene, obj, info, (pose.quats, pose.locations), restored)
        message = f"Reset {obj.name} to its base pose"
    else:
        why = (f"the edits were made on frame {base.frame}" if base.frame != frame
               else "the pose was changed since the last edit")
        base_pose.make_current_base(scene, obj, info)
        message = f"Nothing to reset on {obj.name} at frame {frame}"
        notes.append(f"{why}: the pose shown is kept as the new base, and the effectors are "
                     "back on their joints")
    empties.snap(obj, info)
    metric_requests.switch_off(obj)
    return Outcome(message, notes)


def insert_keyframe(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Key the mapped bones' current pose at the current frame, as Blender keys (the
    scene's key type, the user's interpolation, keys that exist keep their shape); it
    becomes the new base."""
    info = mapped_rig.rig_for(obj)
    rig_keys.refuse_linked_action(obj, "key this pose")
    frame = scene.frame_current
    mapped = [info.names[b] for b in info.mapped]
    bones = rig_controls.keyed_bones(obj, mapped)  # a limb in IK: its IK controls
    roots = {info.names[b] for b in info.roots} | (set(bones) - set(mapped))
    channels = keying.keying_set_channels(scene, obj, bones)
    if channels is None:  # the mapped bones' rotations, the roots' locations
        channels = [(b, p, None) for b in bones for p in
                    (keying.rotation_prop(obj.pose.bones[b]),
                     *(("location",) if b in roots else ()))]
    n, locked = keying.key_channels(obj, frame, channels, keying.KeyStyle.of(scene))
    base_pose.make_current_base(scene, obj, info)
    return Outcome(f"Keyed {len(bones)} bones of {obj.name} at frame {frame} ({n} keys)",
                   [_locked_note(locked)] if locked else [])


def _locked_note(locked: list[str]) -> str:
    return (f"{len(locked)} locked F-curve(s) not keyed, e.g. {locked[0]}: unlock them (Graph "
            "Editor: Channel > Toggle Channel Locking) to key them")


def auto_key(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
             before: tuple[np.ndarray, np.ndarray], after: rig_io.Pose) -> list[str]:
    """With Auto Keying on, key the bones an edit changed from ``before`` (rotations and
    locations, the pose the edit started from) as Blender's Auto Keying would (see
    :mod:`.keying`); a note for the report."""
    if not keying.auto_keying(scene):
        return []
    mapped = list(info.mapped)
    quats, locs = before
    turned = 1.0 - np.abs(np.sum(quats[mapped] * after.quats[mapped], axis=1)) \
        > base_pose.QUAT_TOL
    moved = np.abs(locs[mapped] - after.locations[mapped]).max(axis=1) > base_pose.LOC_ATOL
    changed = [info.names[b] for b, t, m in zip(mapped, turned, moved, strict=True) if t or m]
    if not changed:
        return []
    try:
        rig_keys.refuse_linked_action(obj, "key it")
    except EditError as exc:  # (the edit stands, unkeyed, as Blender's Auto Keying leaves it)
        return [f"Auto Keying: nothing keyed. {exc}"]
    bones = rig_controls.keyed_bones(obj, changed)  # a limb in IK: its IK controls
    located = {info.names[b] for b, m in zip(mapped, moved, strict=True) if m} \
        | (set(bones) - set(changed))
    channels = keying.keying_set_channels(scene, obj, bones)
    if channels is None:
        channels = keying.changed_channels(obj, bones, located)
    n, locked = keying.key_channels(obj, scene.frame_current, channels,
                                    keying.KeyStyle.of(scene, auto=True))
    return [f"Auto Keying: {n} keys on {len(bones)} bones at frame {scene.frame_current}",
            *([_locked_note(locked)] if locked else [])]


def metric_request_changed(context: bpy.types.Context, item: bpy.types.PropertyGroup,
                           enabled_changed: bool) -> None:
    """A request slider or checkbox changed: edit the pose like Apply Metrics does."""
    kept.invalidate()
    if is_suspended():
        return
    scene = context.scene
    obj = item.id_data  # the character whose request this is
    if not isinstance(obj, bpy.types.Object) or obj.type != "ARMATURE" or obj.mode == "EDIT":
        return
    try:
        if enabled_changed and item.enabled:
            metric_requests.measure(scene, obj)
            with updates_suspended():  # start from the measured value: no jump
                item.set_requested(item.measured)
            STATUS.pop("metrics", None)
            return
        with busy():
            outcome = edit(scene, obj, context.evaluated_depsgraph_get(), allow_nothing=True)
        STATUS.pop("metrics", None)
        said = [n for n in outcome.notes
                if "clamped" in n or metric_requests.OFF_NOTE in n]
        if said:
            STATUS["metrics"] = said[0]
    except EditError as exc:
        STATUS["metrics"] = str(exc)
        print(f"Neural Pose Editor: {exc}")


def model_set_changed(context: bpy.types.Context) -> None:
    """A new model set: load it (this is where a bad folder is found) and list its
    metrics on every character that lists them, or clear those lists and say why."""
    scene = context.scene
    kept.invalidate()
    characters = [o for o in scene.objects if o.type == "ARMATURE" and
                  (o.npe.metrics or o.data.npe_mapping.joints)]
    try:
        models = model_sets.load(scene)
    except EditError as exc:
        for obj in characters:
            obj.npe.metrics.clear()
            obj.npe.metrics_folder = ""
        STATUS["models"] = str(exc)
    else:
        for obj in characters:
            metric_requests.sync_metrics(obj, models)
        STATUS.pop("models", None)
