"""The edit session: model sets, editors, the base pose, and one edit of an armature.

An armature's pose is always ``edit(base pose, effectors, metric requests)``: every edit
starts from the *base pose* (the mapped bones' local values when the session started), so
dragging an effector back and forth never drifts. The base is taken again when the pose
is no longer the one the add-on last wrote (the user posed by hand, or changed frame), and
replaced on purpose by Insert Keyframe, Clean Pose and propagation.

Functions here raise :class:`EditError` with a message saying what to do; operators turn it
into an error report, the live handler and property callbacks into a status line. Every
function validates and computes first and writes last, so an error changes nothing.
Caches hold numpy arrays and model sessions only, keyed by names and paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import bpy
import numpy as np

from . import preferences, rig_io
from .core import skeleton
from .core.models import MANIFEST_NAME, ModelError, ModelSet, default_models_dir, read_manifest
from .core.pipeline import Effector, PoseEditor, SolveOptions, metric_values

DEFAULT_SET = "DEFAULT"
LOC_RTOL = 1e-5  # a pose is "the one we wrote" within these tolerances (float32 storage)
LOC_ATOL = 1e-6
QUAT_TOL = 1e-7  # 1 - |dot| between quaternions


class EditError(Exception):
    """Something the user must fix; the message says what."""


@dataclass
class Outcome:
    """What an edit did, for the operator's report."""

    message: str
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ re-entrancy guard

_STATE = {"busy": 0, "suspended": 0}
STATUS: dict[str, str] = {}  # armature name -> last error of a live / slider edit


@contextmanager
def busy() -> Iterator[None]:
    """While set, the live handler ignores depsgraph updates (our own writes cause them)."""
    _STATE["busy"] += 1
    try:
        yield
    finally:
        _STATE["busy"] -= 1


def is_busy() -> bool:
    return _STATE["busy"] > 0


@contextmanager
def updates_suspended() -> Iterator[None]:
    """Set properties (metric requests, mapping items) without their update callbacks
    editing the pose or marking the mapping as edited by hand."""
    _STATE["suspended"] += 1
    try:
        yield
    finally:
        _STATE["suspended"] -= 1


# ------------------------------------------------------------------ model sets

_MODEL_SETS: dict[tuple, ModelSet] = {}
_EDITORS: dict[tuple, PoseEditor] = {}
# Blender keeps pointers into enum items' strings: every list handed out stays alive here.
_ENUM_ITEMS: dict[tuple, list[tuple[str, str, str]]] = {}
_SCANS: dict[tuple, list[Path]] = {}
_SUMMARIES: dict[tuple, list[str]] = {}


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0


def _scan(folder: Path | None) -> list[Path]:
    """Model sets in the preferences' folder: itself if it holds a manifest, else its
    sub-folders that do (cached until the folder changes)."""
    if folder is None:
        return []
    key = (str(folder), _mtime(folder))
    if key not in _SCANS:
        if (folder / MANIFEST_NAME).is_file():
            found = [folder]
        else:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir())
            except OSError:
                subs = []
            found = [p for p in subs if (p / MANIFEST_NAME).is_file()]
        _SCANS.clear()
        _SCANS[key] = found
    return _SCANS[key]


def model_set_items(context: bpy.types.Context | None) -> list[tuple[str, str, str]]:
    """Enum items: the shipped set, then the sets found in the preferences' folder."""
    items = [(DEFAULT_SET, "Shipped", f"The models shipped with the add-on "
                                      f"({default_models_dir()})")]
    items += [(str(p), p.name, str(p)) for p in _scan(preferences.extra_model_folder(context))]
    return _ENUM_ITEMS.setdefault(tuple(items), items)


def model_folder(scene: bpy.types.Scene) -> Path:
    choice = scene.npe.model_set
    return default_models_dir() if choice in ("", DEFAULT_SET) else Path(choice)


def forget_model_sets() -> None:
    """Drop loaded models and editors (after a preference change or on Reload)."""
    _MODEL_SETS.clear()
    _EDITORS.clear()
    _SCANS.clear()
    _SUMMARIES.clear()


def forget_editors() -> None:
    """Drop editors (their bone lengths come from a rig mapping that changed)."""
    _EDITORS.clear()


def load_models(scene: bpy.types.Scene) -> ModelSet:
    """The scene's model set, loaded once per folder, thread count and manifest version."""
    folder = model_folder(scene)
    threads = preferences.threads()
    key = (str(folder), threads, _mtime(folder / MANIFEST_NAME))
    models = _MODEL_SETS.get(key)
    if models is None:
        try:
            models = ModelSet(folder, threads=threads)
        except ModelError as exc:
            raise EditError(f"Cannot load the models: {exc}. Pick another model set in the "
                            "Neural Pose panel or fix the folder") from exc
        except OSError as exc:
            raise EditError(f"Cannot read the models in {folder}: {exc}") from exc
        _MODEL_SETS[key] = models
    return models


def model_summary(scene: bpy.types.Scene) -> list[str]:
    """A few lines about the chosen model set, from its manifest (cached; for the panel)."""
    folder = model_folder(scene)
    key = (str(folder), _mtime(folder / MANIFEST_NAME))
    if key not in _SUMMARIES:
        try:
            manifest = read_manifest(folder)
        except ModelError as exc:
            lines = [f"Error: {exc}"]
        else:
            sk = manifest.get("skeleton", {})
            training = manifest.get("training", {})
            data = training.get("data") or "unknown data"
            lines = [
                f"Models: {folder.name}",
                f"Skeleton: {len(sk.get('joints', ()))} joints, {sk.get('units', 'm')}, "
                f"{sk.get('up', '+Y')} up",
                f"Trained on: {Path(str(data)).name}",
                f"Metrics: {len(manifest.get('metrics', ()))}",
            ]
        _SUMMARIES.clear()
        _SUMMARIES[key] = lines
    return _SUMMARIES[key]


def model_set_changed(context: bpy.types.Context) -> None:
    """A new model set: list its metrics (or clear the list when it cannot load)."""
    scene = context.scene
    try:
        sync_metrics(scene, load_models(scene))
    except EditError as exc:
        scene.npe.metrics.clear()
        scene.npe.metrics_folder = ""
        STATUS["models"] = str(exc)
    else:
        STATUS.pop("models", None)


# ------------------------------------------------------------------ armature and mapping


def armature_from_context(context: bpy.types.Context) -> bpy.types.Object:
    """The armature to edit: the active object, or the armature of an active effector."""
    obj = context.active_object
    if obj is not None and obj.type != "ARMATURE":
        owner = obj.npe.effector_of
        obj = owner if owner is not None and owner.type == "ARMATURE" else None
    if obj is None:
        raise EditError("Select an armature (or one of its effector empties) first")
    if obj.mode == "EDIT":
        raise EditError(f"{obj.name} is in Edit Mode: switch to Pose or Object Mode first")
    return obj


def mapping_dict(armature: bpy.types.Armature) -> dict[str, str]:
    """Canonical joint -> bone name, for the joints that have a bone."""
    return {item.joint: item.bone for item in armature.npe_mapping.joints if item.bone}


def mapping_problems(armature: bpy.types.Armature) -> list[str]:
    """What keeps the mapping from being usable (empty when complete): for the panel too."""
    items = armature.npe_mapping.joints
    if not items:
        return ["not mapped"]
    joints = mapping_dict(armature)
    problems = []
    missing = [j for j in skeleton.JOINTS if j not in joints and j not in rig_io.TOE_FOOT]
    if missing:
        problems.append(f"unmapped: {', '.join(missing)}")
    absent = [f"{j} ({b})" for j, b in joints.items() if b not in armature.bones]
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


def mapping_changed(armature: bpy.types.Armature) -> None:
    """A joint's bone was picked by hand: cached rigs and editors are stale."""
    rig_io.invalidate()
    _EDITORS.clear()
    if not _STATE["suspended"]:
        armature.npe_mapping.source = "edited"


def editor_for(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
               models: ModelSet | None) -> PoseEditor:
    """One editor per (model set, rig, world scale): its bone lengths are the rig's rest
    lengths in world units."""
    mw = rig_io.world_matrix(obj)
    scale = tuple(np.round(np.linalg.norm(mw[:3, :3], axis=0), 6))
    key = (None if models is None else str(models.folder), id(models), info.key, scale)
    editor = _EDITORS.get(key)
    if editor is None:
        nb = info.rig.num_bones
        rest, _ = rig_io.joint_positions(info, np.tile([1.0, 0.0, 0.0, 0.0], (nb, 1)),
                                         np.zeros((nb, 3)))
        lengths = skeleton.bone_lengths(rig_io.armature_to_core(mw, rest))
        editor = PoseEditor(models, lengths=lengths)
        if len(_EDITORS) > 16:
            _EDITORS.clear()
        _EDITORS[key] = editor
    return editor


def solve_options(scene: bpy.types.Scene) -> SolveOptions:
    s = scene.npe
    return SolveOptions(solver=s.solver, combine=s.combine, refine_steps=s.refine_steps,
                        fix_lengths=s.fix_lengths, keep_details=s.keep_details)


# ------------------------------------------------------------------ base pose


@dataclass
class RawPose:
    """The mapped bones' property values, read as they are (for an exact restore)."""

    bones: list[str]
    quaternion: np.ndarray  # (M, 4)
    euler: np.ndarray  # (M, 3)
    axis_angle: np.ndarray  # (M, 4)
    location: np.ndarray  # (M, 3)


def read_raw(obj: bpy.types.Object, info: rig_io.RigInfo) -> RawPose:
    names = [info.names[b] for b in info.mapped]
    pbs = [obj.pose.bones[n] for n in names]
    return RawPose(
        names,
        np.array([tuple(pb.rotation_quaternion) for pb in pbs]).reshape(-1, 4),
        np.array([tuple(pb.rotation_euler) for pb in pbs]).reshape(-1, 3),
        np.array([tuple(pb.rotation_axis_angle) for pb in pbs]).reshape(-1, 4),
        np.array([tuple(pb.location) for pb in pbs]).reshape(-1, 3),
    )


def _written(info: rig_io.RigInfo, pose: rig_io.Pose) -> np.ndarray:
    """Mapped bones' rotations and locations as rows of 7 (what "written" stores)."""
    m = list(info.mapped)
    return np.concatenate([pose.quats[m], pose.locations[m]], axis=1)  # (M, 7)


def store_base(obj: bpy.types.Object, info: rig_io.RigInfo, raw: RawPose, frame: int,
               pose: rig_io.Pose) -> None:
    """Make ``raw`` the base pose; ``pose`` (the current one) is what we last wrote."""
    items = obj.npe.base_pose
    items.clear()
    written = _written(info, pose)
    for i, name in enumerate(raw.bones):
        item = items.add()
        item.bone = name
        item.rotation_quaternion = raw.quaternion[i]
        item.rotation_euler = raw.euler[i]
        item.rotation_axis_angle = raw.axis_angle[i]
        item.location = raw.location[i]
        item.written = written[i]
    obj.npe.base_frame = frame


def mark_written(obj: bpy.types.Object, info: rig_io.RigInfo) -> rig_io.Pose:
    """Remember the pose now on the rig as the add-on's (read back: exact float32 values)."""
    pose = rig_io.read_pose(obj, info)
    written = _written(info, pose)
    for item, row in zip(obj.npe.base_pose, written, strict=True):
        item.written = row
    return pose


def _base_matches(obj: bpy.types.Object, info: rig_io.RigInfo) -> bool:
    items = obj.npe.base_pose
    return len(items) == len(info.mapped) and all(
        item.bone == info.names[b] for item, b in zip(items, info.mapped, strict=True))


def base_is_current(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose,
                    frame: int) -> bool:
    """Whether the stored base still applies: same bones, same frame, and the pose is still
    the one the add-on last wrote (else the user changed it: take a new base)."""
    if not _base_matches(obj, info) or obj.npe.base_frame != frame:
        return False
    written = np.array([tuple(item.written) for item in obj.npe.base_pose])
    now = _written(info, pose)
    dots = np.abs(np.sum(written[:, :4] * now[:, :4], axis=1))
    return bool(np.all(1.0 - dots < QUAT_TOL)
                and np.allclose(written[:, 4:], now[:, 4:], rtol=LOC_RTOL, atol=LOC_ATOL))


def base_arrays(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose
                ) -> tuple[np.ndarray, np.ndarray]:
    """The current pose with the mapped bones set to the stored base (full B arrays)."""
    quats, locs = pose.quats.copy(), pose.locations.copy()
    items = obj.npe.base_pose
    m = list(info.mapped)
    raw_q = np.array([tuple(i.rotation_quaternion) for i in items])
    raw_e = np.array([tuple(i.rotation_euler) for i in items])
    raw_aa = np.array([tuple(i.rotation_axis_angle) for i in items])
    quats[m] = rig_io.to_quats([pose.modes[b] for b in m], raw_q, raw_e, raw_aa)
    locs[m] = np.array([tuple(i.location) for i in items])
    return quats, locs


def restore_base(obj: bpy.types.Object) -> None:
    """Put the stored base values back on the pose bones, exactly as they were."""
    for item in obj.npe.base_pose:
        pb = obj.pose.bones.get(item.bone)
        if pb is None:
            continue
        pb.rotation_quaternion = item.rotation_quaternion
        pb.rotation_euler = item.rotation_euler
        pb.rotation_axis_angle = item.rotation_axis_angle
        pb.location = item.location
    obj.update_tag()


# ------------------------------------------------------------------ metrics


def sync_metrics(scene: bpy.types.Scene, models: ModelSet) -> None:
    """One request item per metric of the model set (kept when the set is unchanged)."""
    s = scene.npe
    names = list(models.metrics)
    if s.metrics_folder == str(models.folder) and [m.name for m in s.metrics] == names:
        return
    with updates_suspended():
        s.metrics.clear()
        for name, module in models.metrics.items():
            spec = module.metric
            item = s.metrics.add()
            item.name = name
            item.label = name.replace("_", " ").capitalize()
            item.description = spec.description
            item.unit = spec.unit
            lo, hi = module.value_range or (0.0, 0.0)
            setattr(item, item.value_prop, 0.5 * (lo + hi))
        s.metrics_folder = str(models.folder)


def requested_metrics(scene: bpy.types.Scene) -> dict[str, float]:
    """The enabled metric requests: name -> requested value."""
    return {m.name: m.requested for m in scene.npe.metrics if m.enabled}


def check_requests(requests: dict[str, float], models: ModelSet) -> None:
    unknown = [n for n in requests if n not in models.metrics]
    if unknown:
        raise EditError(f"Metric(s) {', '.join(unknown)} are not in this model set: click "
                        "Reload Models in the Neural Pose panel")


def store_measured(scene: bpy.types.Scene, models: ModelSet, positions_core: np.ndarray
                   ) -> None:
    """Measure every metric on a pose (21, 3) and show it in the panel."""
    sync_metrics(scene, models)
    values = metric_values(positions_core[None], models)
    for item in scene.npe.metrics:
        if item.name in values:
            item.measured = float(values[item.name][0])
            item.has_measured = True


def measure(scene: bpy.types.Scene, obj: bpy.types.Object) -> dict[str, float]:
    """Measure the metrics on the armature's current pose."""
    info = rig_for(obj)
    models = load_models(scene)
    pose = rig_io.read_pose(obj, info)
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    store_measured(scene, models, rig_io.armature_to_core(rig_io.world_matrix(obj), joints))
    return {m.name: m.measured for m in scene.npe.metrics}


def metric_request_changed(context: bpy.types.Context, item: bpy.types.PropertyGroup,
                           enabled_changed: bool) -> None:
    """A request slider or checkbox changed: edit the pose like Apply Metrics does."""
    if _STATE["suspended"]:
        return
    scene = context.scene
    try:
        obj = armature_from_context(context)
    except EditError as exc:
        STATUS["metrics"] = str(exc)
        return
    try:
        if enabled_changed and item.enabled:
            measure(scene, obj)
            with updates_suspended():  # start from the measured value: no jump
                setattr(item, item.value_prop, item.measured)
            STATUS.pop("metrics", None)
            return
        with busy():
            edit(scene, obj, context.evaluated_depsgraph_get(), allow_nothing=True)
        STATUS.pop("metrics", None)
    except EditError as exc:
        STATUS["metrics"] = str(exc)
        print(f"Neural Pose Editor: {exc}")


# ------------------------------------------------------------------ the edit


def check_finite(*arrays: np.ndarray) -> None:
    if not all(np.isfinite(a).all() for a in arrays):
        raise EditError("The solve produced invalid numbers (NaN): nothing was changed. "
                        "Move the effectors closer to the body or try the Classic solver")


def edit(scene: bpy.types.Scene, obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None,
         *, allow_nothing: bool = False, fresh: bool = True) -> Outcome:
    """Solve the armature's pose from its base pose, effectors and metric requests.

    ``allow_nothing``: with no effector and no request, go back to the base pose instead
    of failing (a request switched off). ``fresh``: re-read the rest pose (operators).
    """
    from . import empties

    info = rig_for(obj, fresh=fresh)
    targets = empties.read(scene, obj, info, depsgraph)
    requests = requested_metrics(scene)
    options = solve_options(scene)
    pose = rig_io.read_pose(obj, info)
    frame = scene.frame_current
    keep_base = base_is_current(obj, info, pose, frame)
    if not targets and not requests:
        if not allow_nothing:
            raise EditError("Nothing to solve: add effectors or enable a metric request")
        if keep_base:
            restore_base(obj)
            mark_written(obj, info)
        return Outcome("Back to the base pose")
    if requests and options.solver == "classic":
        raise EditError("Metric requests need a neural solver: pick Neural in Solver")
    models = load_models(scene) if (options.solver != "classic" or requests) else None
    if models is not None:
        check_requests(requests, models)
    quats, locs = base_arrays(obj, info, pose) if keep_base else (pose.quats, pose.locations)
    mw = rig_io.world_matrix(obj)
    joints_arm, _ = rig_io.joint_positions(info, quats, locs)
    start = rig_io.armature_to_core(mw, joints_arm)
    editor = editor_for(scene, obj, info, models)
    effs = [Effector(t.joint, t.target_core, t.weight, t.pin) for t in targets]
    try:
        result = editor.solve(start, effs, requests, options)
    except ValueError as exc:
        raise EditError(f"Cannot solve: {exc}") from exc
    new_core = result.positions[0]
    check_finite(new_core)
    orientations = {skeleton.JOINT_INDEX[t.joint]: t.orientation_armature
                    for t in targets if t.orientation_armature is not None and not t.pin}
    solved_arm = rig_io.core_to_armature(mw, new_core)
    goals = reach_goals(targets, start, new_core, mw)
    try:
        new_q, new_l = rig_io.solve_rotations(info, quats, locs, solved_arm, goals,
                                              orientations)
    except ValueError as exc:
        raise EditError(f"Cannot turn the solved joints into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)

    # Validated: write.
    if not keep_base:
        store_base(obj, info, read_raw(obj, info), frame, pose)
    rig_io.write_pose(obj, info, new_q, new_l)
    final = mark_written(obj, info)
    empties.mark_solved(obj, targets)
    joints_new, _ = rig_io.joint_positions(info, final.quats, final.locations)
    final_core = rig_io.armature_to_core(mw, joints_new)
    if models is not None:
        store_measured(scene, models, final_core)
    moved = [t for t in targets if not t.pin]
    miss = max((float(np.linalg.norm(final_core[skeleton.JOINT_INDEX[t.joint]] - t.target_core))
                for t in moved), default=0.0)
    parts = []
    if targets:
        parts.append(f"{len(targets)} effector(s), largest miss {miss * 100:.1f} cm")
    if requests:
        parts.append(f"{len(requests)} metric request(s)")
    return Outcome(f"Solved {obj.name}: {', '.join(parts)}", list(result.notes))


def reach_goals(targets: list, start: np.ndarray, solved: np.ndarray, matrix_world: np.ndarray
                ) -> dict[int, np.ndarray]:
    """Where each effector joint must end up exactly (armature space): a full-weight
    effector on its empty, a pin where it was; a softer one where the solve put it."""
    goals = {}
    for t in targets:
        j = skeleton.JOINT_INDEX[t.joint]
        goal = start[j] if t.pin else t.target_core if t.weight >= 1.0 else solved[j]
        goals[j] = rig_io.core_to_armature(matrix_world, goal)
    return goals


def clean_pose(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Project the current pose onto the models' pose space; it becomes the new base."""
    info = rig_for(obj)
    models = load_models(scene)
    pose = rig_io.read_pose(obj, info)
    mw = rig_io.world_matrix(obj)
    joints_arm, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    editor = editor_for(scene, obj, info, models)
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
    rig_io.write_pose(obj, info, new_q, new_l)
    make_current_base(scene, obj, info)
    return Outcome(f"Cleaned the pose of {obj.name}")


def make_current_base(scene: bpy.types.Scene, obj: bpy.types.Object,
                      info: rig_io.RigInfo) -> None:
    """The pose on the rig becomes the base; effectors count as solved where they are."""
    from . import empties

    pose = rig_io.read_pose(obj, info)
    store_base(obj, info, read_raw(obj, info), scene.frame_current, pose)
    empties.mark_solved(obj, None)
    try:
        models = load_models(scene)
    except EditError:
        return
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    store_measured(scene, models, rig_io.armature_to_core(rig_io.world_matrix(obj), joints))


def reset_edits(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Back to the base pose; effectors return to their joints and requests switch off."""
    from . import empties

    info = rig_for(obj)
    if not _base_matches(obj, info):
        raise EditError(f"{obj.name} has no edits to reset (no base pose for its mapping)")
    restore_base(obj)
    pose = mark_written(obj, info)
    empties.snap(obj, info, pose)
    with updates_suspended():
        for item in scene.npe.metrics:
            item.enabled = False
    return Outcome(f"Reset {obj.name} to its base pose")


def insert_keyframe(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Key the mapped bones' current pose at the current frame; it becomes the new base."""
    info = rig_for(obj)
    pose = rig_io.read_pose(obj, info)
    frame = scene.frame_current
    n = rig_io.write_keys(obj, info, [frame], pose.quats[None], pose.locations[None],
                          euler_ref=pose.eulers)
    make_current_base(scene, obj, info)
    return Outcome(f"Keyed {len(info.mapped)} bones of {obj.name} at frame {frame} "
                   f"({n} F-curves)")


def live_edit(scene: bpy.types.Scene, obj: bpy.types.Object,
              depsgraph: bpy.types.Depsgraph | None) -> None:
    """The live handler's edit: errors become a status line instead of a report."""
    try:
        edit(scene, obj, depsgraph, allow_nothing=True, fresh=False)
    except EditError as exc:
        if STATUS.get(obj.name) != str(exc):
            print(f"Neural Pose Editor (live): {exc}")
        STATUS[obj.name] = str(exc)
    else:
        STATUS.pop(obj.name, None)
