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

Live updates must cost little beside the solve itself, so what an edit of an armature
needs and what does not change while the user drags (the rig, the effectors' settings,
the metric requests, the base pose as arrays, the pose as last written, the start pose's
joints) is kept per armature between updates. Everything that can change it drops it
(:func:`forget`): operators, undo and redo, file loads, and the update callbacks of the
mapping, effector, metric and model settings. No update touches the disk: a model set is
checked when it is chosen or reloaded. A drag solves without latent refinement; once it
pauses, the pose is solved again with it and the metrics are measured for the panel
(:func:`measure_later`, :func:`drag_paused`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import bpy
import numpy as np

from . import preferences, rig_io
from .core import conversions, skeleton
from .core.models import MANIFEST_NAME, ModelError, ModelSet, default_models_dir, read_manifest
from .core.pipeline import Effector, PoseEditor, SolveOptions, metric_values

if TYPE_CHECKING:
    from .empties import Spec, Target

DEFAULT_SET = "DEFAULT"
LOC_RTOL = 1e-5  # a pose is "the one we wrote" within these tolerances (float32 storage)
LOC_ATOL = 1e-6
QUAT_TOL = 1e-7  # 1 - |dot| between quaternions
MEASURE_DELAY_S = 0.3  # live mode measures the metrics once the drag pauses this long


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
_ENUM_ITEMS: dict[tuple, list[tuple[str, str, str, int]]] = {}
_SCANS: dict[tuple, list[Path]] = {}
_SUMMARIES: dict[str, list[str]] = {}


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


def model_set_items(context: bpy.types.Context | None, chosen: str = ""
                    ) -> list[tuple[str, str, str, int]]:
    """Enum items: the shipped set, the sets found in the preferences' folder, and the
    chosen set (``chosen``, a folder) when it is not among them (moved or deleted: listed
    as missing, so the choice is shown and reported rather than silently replaced)."""
    items = [(DEFAULT_SET, "Shipped", f"The models shipped with the add-on "
                                      f"({default_models_dir()})")]
    items += [(str(p), p.name, str(p)) for p in _scan(preferences.extra_model_folder(context))]
    if chosen and all(item[0] != chosen for item in items):
        path = Path(chosen)
        if (path / MANIFEST_NAME).is_file():
            items.append((chosen, path.name, chosen))
        else:
            items.append((chosen, f"{path.name} (missing)", f"{chosen}: no model set there "
                          "any more (moved or deleted?): pick another one"))
    numbered = [(*item, i) for i, item in enumerate(items)]
    return _ENUM_ITEMS.setdefault(tuple(numbered), numbered)


def model_set_index(chosen: str) -> int:
    """The enum value of the chosen folder ("" for the shipped set)."""
    for identifier, _name, _description, value in model_set_items(None, chosen):
        if identifier == (chosen or DEFAULT_SET):
            return value
    return 0


def model_set_path(value: int, chosen: str) -> str:
    """The folder an enum value stands for ("" for the shipped set)."""
    items = model_set_items(None, chosen)
    identifier = items[value][0] if 0 <= value < len(items) else DEFAULT_SET
    return "" if identifier == DEFAULT_SET else identifier


def model_folder(scene: bpy.types.Scene) -> Path:
    """The scene's model set: the chosen folder, or the shipped set."""
    chosen = scene.npe.model_path
    return Path(chosen) if chosen else default_models_dir()


def forget_model_sets() -> None:
    """Drop loaded models and editors (after a preference change or on Reload)."""
    _MODEL_SETS.clear()
    _EDITORS.clear()
    _SCANS.clear()
    _SUMMARIES.clear()
    forget()


def forget_editors() -> None:
    """Drop editors (their bone lengths come from a rig mapping that changed)."""
    _EDITORS.clear()
    forget()


def load_models(scene: bpy.types.Scene) -> ModelSet:
    """The scene's model set, loaded once per folder and thread count (Reload Models and
    a new choice load it again; nothing on disk is looked at in between)."""
    folder = model_folder(scene)
    key = (str(folder), preferences.threads())
    models = _MODEL_SETS.get(key)
    if models is None:
        if not folder.is_dir():
            raise EditError(f"Cannot load the models: the model set {folder} is missing "
                            "(moved or deleted?). Restore it, or pick another model set in "
                            "the Neural Pose panel")
        try:
            models = ModelSet(folder, threads=key[1])
        except ModelError as exc:
            raise EditError(f"Cannot load the models: {exc}. Pick another model set in the "
                            "Neural Pose panel or fix the folder") from exc
        except OSError as exc:
            raise EditError(f"Cannot read the models in {folder}: {exc}") from exc
        _MODEL_SETS[key] = models
    return models


def model_summary(scene: bpy.types.Scene) -> list[str]:
    """A few lines about the chosen model set, from its manifest (for the panel; read
    again after Reload Models or a new choice)."""
    folder = model_folder(scene)
    key = str(folder)
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
    """A new model set: load it (this is where a bad folder is found) and list its
    metrics, or clear the list and say why."""
    scene = context.scene
    _SUMMARIES.clear()
    forget()
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
    forget_editors()
    if not _STATE["suspended"]:
        armature.npe_mapping.source = "edited"


def editor_for(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
               models: ModelSet | None, matrix_world: np.ndarray | None = None) -> PoseEditor:
    """One editor per (model set, rig, world scale): its bone lengths are the rig's rest
    lengths in world units."""
    mw = rig_io.world_matrix(obj) if matrix_world is None else matrix_world
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
class BasePose:
    """The pose every edit starts from: the mapped bones' raw channel values (for an
    exact restore, ``info.mapped`` order), the frame it was taken at, and the pose the
    add-on last wrote over it (rows of quaternion and location)."""

    frame: int
    bones: tuple[str, ...]
    quaternion: np.ndarray  # (M, 4)
    euler: np.ndarray  # (M, 3)
    axis_angle: np.ndarray  # (M, 4)
    location: np.ndarray  # (M, 3)
    codes: np.ndarray  # (M,) the bones' rotation modes (enum values) then
    written: np.ndarray  # (M, 7)

    def channels(self) -> dict[str, np.ndarray]:
        return {"rotation_quaternion": self.quaternion, "rotation_euler": self.euler,
                "rotation_axis_angle": self.axis_angle, "location": self.location}


def _mapped_names(info: rig_io.RigInfo) -> tuple[str, ...]:
    return tuple(info.names[b] for b in info.mapped)


def _mapped_codes(info: rig_io.RigInfo, pose: rig_io.Pose) -> np.ndarray:
    """The mapped bones' rotation modes (enum values), ``info.mapped`` order."""
    return pose.codes[info.pose_order[list(info.mapped)]]


def _written(info: rig_io.RigInfo, pose: rig_io.Pose) -> np.ndarray:
    """Mapped bones' rotations and locations as rows of 7 (what "written" stores)."""
    m = list(info.mapped)
    return np.concatenate([pose.quats[m], pose.locations[m]], axis=1)  # (M, 7)


def read_base(obj: bpy.types.Object, info: rig_io.RigInfo) -> BasePose | None:
    """The stored base pose, or None when there is none for this mapping."""
    items = obj.npe.base_pose
    names = tuple(item.bone for item in items)
    if names != _mapped_names(info):
        return None
    values = []
    for attr, width in ((c[0], c[1]) for c in rig_io.CHANNELS):
        buf = np.empty(len(items) * width, dtype=np.float32)
        items.foreach_get(attr, buf)
        values.append(buf.reshape(-1, width).astype(np.float64))
    codes = np.empty(len(items), dtype=np.int32)
    items.foreach_get("rotation_mode", codes)
    written = np.empty(len(items) * 7, dtype=np.float32)
    items.foreach_get("written", written)
    return BasePose(obj.npe.base_frame, names, *values, codes,
                    written.reshape(-1, 7).astype(np.float64))


def store_base(obj: bpy.types.Object, info: rig_io.RigInfo, pose: rig_io.Pose,
               frame: int) -> BasePose:
    """Make the pose on the rig now (``pose``, as read) the base, taken at ``frame``."""
    m = list(info.mapped)
    base = BasePose(frame, _mapped_names(info), pose.quaternion[m], pose.eulers[m],
                    pose.axis_angles[m], pose.locations[m], _mapped_codes(info, pose),
                    _written(info, pose))
    items = obj.npe.base_pose
    items.clear()
    for name in base.bones:
        items.add().bone = name
    for attr, values in (*base.channels().items(), ("written", base.written)):
        items.foreach_set(attr, values.astype(np.float32).ravel())
    items.foreach_set("rotation_mode", base.codes)
    obj.npe.base_frame = frame
    return base


def mark_written(obj: bpy.types.Object, info: rig_io.RigInfo, base: BasePose,
                 pose: rig_io.Pose) -> None:
    """Remember ``pose`` (just written) as the add-on's, in the file too: undo brings it
    back with the pose, so the next edit still knows the pose is its own."""
    base.written = _written(info, pose)
    obj.npe.base_pose.foreach_set("written", base.written.astype(np.float32).ravel())


def base_is_current(base: BasePose | None, info: rig_io.RigInfo, pose: rig_io.Pose,
                    frame: int) -> bool:
    """Whether the stored base still applies: same bones in the same rotation modes, same
    frame, and the pose is still the one the add-on last wrote (else the user changed it:
    take a new base)."""
    if base is None or base.frame != frame or base.bones != _mapped_names(info) \
            or not np.array_equal(base.codes, _mapped_codes(info, pose)):
        return False
    now = _written(info, pose)
    dots = np.abs(np.sum(base.written[:, :4] * now[:, :4], axis=1))
    return bool(np.all(1.0 - dots < QUAT_TOL)
                and np.allclose(base.written[:, 4:], now[:, 4:], rtol=LOC_RTOL, atol=LOC_ATOL))


def ensure_base(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo) -> None:
    """Take a new base unless the stored one still applies (before adding effectors)."""
    pose = rig_io.read_pose(obj, info)
    if not base_is_current(read_base(obj, info), info, pose, scene.frame_current):
        make_current_base(scene, obj, info)


def base_arrays(info: rig_io.RigInfo, base: BasePose, pose: rig_io.Pose
                ) -> tuple[np.ndarray, np.ndarray]:
    """The current pose with the mapped bones set to the base (full B arrays)."""
    m = list(info.mapped)
    quats, locs = pose.quats.copy(), pose.locations.copy()
    quats[m] = conversions.to_quats([pose.modes[b] for b in m], base.quaternion, base.euler,
                                    base.axis_angle)
    locs[m] = base.location
    return quats, locs


def restore_base(obj: bpy.types.Object, info: rig_io.RigInfo, base: BasePose,
                 pose: rig_io.Pose) -> rig_io.Pose:
    """Put the base values back on the mapped bones, exactly as they were; returns the
    pose as written."""
    return rig_io.write_channels(obj, info, pose, {attr: (info.mapped, values) for attr, values
                                                   in base.channels().items()})


# ------------------------------------------------------------------ one armature's state


@dataclass
class _Armature:
    """An armature's edit state, kept between live updates: what the edit needs that does
    not change while the user drags, as arrays (see the module's docstring)."""

    info: rig_io.RigInfo
    effectors: tuple[Spec, ...]
    requests: dict[str, float]
    base: BasePose | None
    solved: np.ndarray  # (E, 16) the empties' world matrices at the last solve
    pose: rig_io.Pose | None = None  # the pose as the add-on last wrote it
    models: ModelSet | None = None
    _start: tuple = ()  # (pose origin, base, world matrix, quats, locations, start)
    _editor: tuple = ()  # (models, world matrix, editor)
    _inverse: tuple = ()  # (world matrix, its inverse)

    def load_models(self, scene: bpy.types.Scene) -> ModelSet:
        if self.models is None:
            self.models = load_models(scene)
        return self.models

    def base_is_current(self, pose: rig_io.Pose, frame: int) -> bool:
        if pose is self.pose and self.base is not None:  # nothing moved since our write
            return self.base.frame == frame
        return base_is_current(self.base, self.info, pose, frame)

    def start(self, pose: rig_io.Pose, keep_base: bool, matrix_world: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local rotations and locations the edit starts from, and their joints in core
        space: the same while the base and the unmapped bones stay (kept, read-only)."""
        mw = matrix_world.tobytes()
        kept = self._start
        if keep_base and kept and kept[0] is pose.origin and kept[1] is self.base \
                and kept[2] == mw:
            return kept[3:]
        if keep_base:
            quats, locs = base_arrays(self.info, self.base, pose)
        else:
            quats, locs = pose.quats, pose.locations
        joints, _ = rig_io.joint_positions(self.info, quats, locs)
        start = rig_io.armature_to_core(matrix_world, joints)
        if keep_base:
            for a in (quats, locs, start):
                a.flags.writeable = False
            self._start = (pose.origin, self.base, mw, quats, locs, start)
        return quats, locs, start

    def to_armature(self, matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
        """:func:`.rig_io.core_to_armature`, the inverse world matrix kept."""
        mw = matrix_world.tobytes()
        if not self._inverse or self._inverse[0] != mw:
            self._inverse = (mw, np.linalg.inv(matrix_world))
        return rig_io.core_to_armature(matrix_world, points, self._inverse[1])

    def editor(self, scene: bpy.types.Scene, obj: bpy.types.Object, models: ModelSet | None,
               matrix_world: np.ndarray) -> PoseEditor:
        mw = matrix_world.tobytes()
        kept = self._editor
        if kept and kept[0] is models and kept[1] == mw:
            return kept[2]
        editor = editor_for(scene, obj, self.info, models, matrix_world)
        self._editor = (models, mw, editor)
        return editor


_ARMATURES: dict[str, _Armature] = {}


def forget(obj_name: str | None = None) -> None:
    """Drop the kept edit state of one armature (all when None): it is built again from
    the Blender data at the next edit."""
    if obj_name is None:
        _ARMATURES.clear()
    else:
        _ARMATURES.pop(obj_name, None)


def _armature(scene: bpy.types.Scene, obj: bpy.types.Object, fresh: bool) -> _Armature:
    """The armature's edit state: kept (live updates) or built afresh (operators)."""
    from . import empties

    state = None if fresh else _ARMATURES.get(obj.name)
    if state is not None and len(obj.npe.effectors) == len(state.effectors) \
            and len(obj.pose.bones) == len(state.info.names):
        return state
    info = rig_for(obj, fresh=fresh)
    state = _Armature(info, empties.specs(scene, obj, info), requested_metrics(scene),
                      read_base(obj, info), empties.solved_matrices(obj))
    _ARMATURES[obj.name] = state
    return state


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


_PENDING: dict[str, object] = {}  # the measuring live mode left for later


def measure_later(scene: bpy.types.Scene, obj: bpy.types.Object, refine: bool = False
                  ) -> None:
    """Measure the metrics once the drag pauses (:data:`MEASURE_DELAY_S`): a timer, pushed
    back by every update, so a drag pays for it once instead of at every step. ``refine``:
    the drag solved without latent refinement; the pause solves again with it."""
    refined = set(_PENDING.get("refine", ()))
    if refine:
        refined.add(obj.name)
    _PENDING.update(scene=scene.name, armature=obj.name, refine=refined,
                    due=time.monotonic() + MEASURE_DELAY_S)
    if not bpy.app.timers.is_registered(_measure_pending):
        bpy.app.timers.register(_measure_pending, first_interval=MEASURE_DELAY_S,
                                persistent=True)


def _measure_pending() -> float | None:
    """The timer: :func:`drag_paused` when due, then redraw."""
    wait = float(_PENDING.get("due", 0.0)) - time.monotonic()
    if wait > 0.0:
        return wait
    if not drag_paused():
        return None
    for window in bpy.context.window_manager.windows:
        for area in window.screen.areas:
            if area.type == "VIEW_3D":
                area.tag_redraw()
    return None


def drag_paused() -> bool:
    """What live mode leaves for the drag's pause (the timer calls it; background Blender
    runs no timers, so tests call it directly): solve again, with the scene's refinement
    steps, the armatures whose drag skipped them (the pose :func:`edit` gives from the same
    base pose and empties), and measure the metrics. The objects are looked up by name
    (they may be gone). True when something was done."""
    scene = bpy.data.scenes.get(str(_PENDING.pop("scene", "")))
    last = str(_PENDING.pop("armature", ""))
    refine = set(_PENDING.pop("refine", ()))
    _PENDING.clear()
    if scene is None:
        return False
    done = False
    for name in [*sorted(refine - {last}), last]:  # the last one's metrics are shown
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != "ARMATURE" or obj.mode == "EDIT":
            continue
        try:
            with busy():
                if name in refine and name in _ARMATURES:  # not dropped by an undo
                    _refine_now(scene, obj)
                else:
                    measure(scene, obj)
        except EditError as exc:
            STATUS[name] = str(exc)
            continue
        STATUS.pop(name, None)
        done = True
    return done


def _refine_now(scene: bpy.types.Scene, obj: bpy.types.Object) -> None:
    """Solve the armature like :func:`edit` (refinement included, metrics measured) from
    its kept live state: nothing is read from disk."""
    from . import empties

    depsgraph = None
    if bpy.context.scene == scene:
        depsgraph = bpy.context.evaluated_depsgraph_get()
    state = _armature(scene, obj, fresh=False)
    _edit(scene, obj, state, empties.matrices(obj, depsgraph), allow_nothing=True,
          live=False)


def cancel_measure(unregister: bool = False) -> None:
    """Drop a pending measurement (a file was loaded); ``unregister``: its timer too (the
    add-on is being unregistered). The timer is persistent: one freed by a file load can
    leave Blender 4.5 hanging at exit."""
    _PENDING.clear()
    if unregister and bpy.app.timers.is_registered(_measure_pending):
        bpy.app.timers.unregister(_measure_pending)


def metric_request_changed(context: bpy.types.Context, item: bpy.types.PropertyGroup,
                           enabled_changed: bool) -> None:
    """A request slider or checkbox changed: edit the pose like Apply Metrics does."""
    forget()
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
    """A NaN or infinity anywhere makes the sum one (a single cheap reduction each)."""
    if not all(np.isfinite(np.sum(a)) for a in arrays):
        raise EditError("The solve produced invalid numbers (NaN): nothing was changed. "
                        "Move the effectors closer to the body or try the Classic solver")


def edit(scene: bpy.types.Scene, obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph | None,
         *, allow_nothing: bool = False, live: bool = False) -> Outcome:
    """Solve the armature's pose from its base pose, effectors and metric requests.

    ``allow_nothing``: with no effector and no request, go back to the base pose instead
    of failing (a request switched off). ``live``: reuse the armature's kept state (see
    the module's docstring) and leave measuring for later; operators build it afresh.
    """
    from . import empties

    state = _armature(scene, obj, fresh=not live)
    return _edit(scene, obj, state, empties.matrices(obj, depsgraph),
                 allow_nothing=allow_nothing, live=live)


def _read_pose(obj: bpy.types.Object, state: _Armature) -> rig_io.Pose:
    try:
        return rig_io.read_pose(obj, state.info, state.pose)
    except rig_io.RigError as exc:
        raise EditError(str(exc)) from exc


def _edit(scene: bpy.types.Scene, obj: bpy.types.Object, state: _Armature,
          empty_matrices: np.ndarray, *, allow_nothing: bool, live: bool,
          refine: bool = True) -> Outcome:
    """:func:`edit` with the state and the empties' matrices at hand. ``refine``: False
    skips the latent refinement (a live drag; the pause adds it, see :func:`drag_paused`)."""
    from . import empties

    info = state.info
    mw = rig_io.world_matrix(obj)
    targets = empties.targets(state.effectors, empty_matrices, mw)
    requests = state.requests
    options = solve_options(scene)
    skipped = not refine and options.refine_steps > 0 and options.solver != "classic"
    if skipped:
        options = replace(options, refine_steps=0)
    pose = _read_pose(obj, state)
    frame = scene.frame_current
    keep_base = state.base_is_current(pose, frame)
    if not targets and not requests:
        if not allow_nothing:
            raise EditError("Nothing to solve: add effectors or enable a metric request")
        if keep_base:
            state.pose = restore_base(obj, info, state.base, pose)
            mark_written(obj, info, state.base, state.pose)
        return Outcome("Back to the base pose")
    if requests and options.solver == "classic":
        raise EditError("Metric requests need a neural solver: pick Neural in Solver")
    models = state.load_models(scene) if (options.solver != "classic" or requests) else None
    if models is not None:
        check_requests(requests, models)
    quats, locs, start = state.start(pose, keep_base, mw)
    editor = state.editor(scene, obj, models, mw)
    effs = [Effector(t.joint, t.target_core, t.weight, t.pin) for t in targets]
    try:
        result = editor.solve(start, effs, requests, options)
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
    try:
        new_q, new_l = rig_io.solve_rotations(info, quats, locs, solved_arm, goals,
                                              orientations)
    except ValueError as exc:
        raise EditError(f"Cannot turn the solved joints into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)

    # Validated: write.
    if not keep_base:
        state.base = store_base(obj, info, pose, frame)
    state.pose = rig_io.write_pose(obj, info, new_q, new_l, pose)
    mark_written(obj, info, state.base, state.pose)
    empties.mark_solved(obj, empty_matrices)
    state.solved = empty_matrices.reshape(len(empty_matrices), 16)
    if live:
        if models is not None:
            measure_later(scene, obj, refine=skipped)
        return Outcome(f"Solved {obj.name}", list(result.notes))
    joints_new, _ = rig_io.joint_positions(info, state.pose.quats, state.pose.locations)
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


def reach_goals(targets: list[Target], start: np.ndarray, solved: np.ndarray
                ) -> tuple[list[int], np.ndarray]:
    """Where each effector joint must end up exactly (joints, core space ``(G, 3)``): a
    full-weight effector on its empty, a pin where it was; a softer one where the solve
    put it."""
    joints = [skeleton.JOINT_INDEX[t.joint] for t in targets]
    goals = [start[j] if t.pin else t.target_core if t.weight >= 1.0 else solved[j]
             for t, j in zip(targets, joints, strict=True)]
    return joints, np.array(goals).reshape(-1, 3)


def clean_pose(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Project the current pose onto the models' pose space; it becomes the new base."""
    info = rig_for(obj)
    models = load_models(scene)
    pose = rig_io.read_pose(obj, info)
    mw = rig_io.world_matrix(obj)
    joints_arm, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    editor = editor_for(scene, obj, info, models, mw)
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
    rig_io.write_pose(obj, info, new_q, new_l, pose)
    make_current_base(scene, obj, info)
    return Outcome(f"Cleaned the pose of {obj.name}")


def make_current_base(scene: bpy.types.Scene, obj: bpy.types.Object,
                      info: rig_io.RigInfo) -> None:
    """The pose on the rig becomes the base; effectors count as solved where they are."""
    from . import empties

    pose = rig_io.read_pose(obj, info)
    store_base(obj, info, pose, scene.frame_current)
    empties.mark_solved(obj, None)
    try:
        models = load_models(scene)
    except EditError:
        return
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    store_measured(scene, models, rig_io.armature_to_core(rig_io.world_matrix(obj), joints))


def reset_edits(scene: bpy.types.Scene, obj: bpy.types.Object) -> Outcome:
    """Back to the base pose; effectors return to their joints and requests switch off.

    Only while the base applies (same frame, the pose still the add-on's): after a frame
    change the rig shows that frame's own pose, which the stored base has nothing to do
    with, so that pose becomes the base instead and nothing is undone.
    """
    from . import empties

    info = rig_for(obj)
    base = read_base(obj, info)
    if base is None:
        raise EditError(f"{obj.name} has no edits to reset (no base pose for its mapping)")
    pose = rig_io.read_pose(obj, info)
    frame = scene.frame_current
    notes = []
    if base_is_current(base, info, pose, frame):
        pose = restore_base(obj, info, base, pose)
        mark_written(obj, info, base, pose)
        message = f"Reset {obj.name} to its base pose"
    else:
        why = (f"the edits were made on frame {base.frame}" if base.frame != frame
               else "the pose was changed since the last edit")
        make_current_base(scene, obj, info)
        message = f"Nothing to reset on {obj.name} at frame {frame}"
        notes.append(f"{why}: the pose shown is kept as the new base, and the effectors are "
                     "back on their joints")
    empties.snap(obj, info, pose)
    with updates_suspended():
        for item in scene.npe.metrics:
            item.enabled = False
    return Outcome(message, notes)


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
              depsgraph: bpy.types.Depsgraph | None, *, moved_only: bool = True) -> None:
    """The live handler's edit, when an empty moved since the last solve (``moved_only``)
    or its settings changed: errors become a status line instead of a report."""
    from . import empties

    try:
        state = _armature(scene, obj, fresh=False)
        empty_matrices = empties.matrices(obj, depsgraph)
        if moved_only and not empties.moved(empty_matrices, state.solved):
            return
        # A drag solves without latent refinement (fast); the pause adds it.
        _edit(scene, obj, state, empty_matrices, allow_nothing=True, live=True,
              refine=not moved_only)
    except EditError as exc:
        if STATUS.get(obj.name) != str(exc):
            print(f"Neural Pose Editor (live): {exc}")
        STATUS[obj.name] = str(exc)
    else:
        STATUS.pop(obj.name, None)
