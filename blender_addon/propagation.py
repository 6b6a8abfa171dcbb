"""Spread Edit: the edit made at the current frame spread over its neighbours.

The clip is read from the action's F-curves in one go (no frame changes; over earlier
layers, as the NLA stack shows it, a frame at a time), edited by
:func:`.core.propagate.propagate` in one batched call, turned into bone rotations for all
frames at once and written in one of three modes: on the keys the action has (Keys,
:mod:`.key_edit`), on every frame (Every Frame, :func:`.rig_keys.write_keys`), or into an
NLA layer of its own (Layer, :mod:`.spread_layer`). W(t) comes from the panel's falloff:
hat, smooth, constant, or a custom curve drawn in a CurveMapping widget, which lives in a
hidden node group (add-ons have no CurveMapping property of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, fields

import bpy
import numpy as np

from . import (
    base_pose,
    editors,
    edits,
    empties,
    key_edit,
    mapped_rig,
    metric_requests,
    model_sets,
    rig_io,
    rig_keys,
    spread_checks,
    spread_correct,
    spread_goals,
    spread_hand,
    spread_ik,
    spread_layer,
)
from .core.pipeline import Effector
from .core.propagate import propagate, weight_curve
from .errors import EditError, Outcome, check_finite
from .guard import busy
from .spread_correct import CORRECTING
from .spread_items import DEFAULT_RADIUS, SPARSE_SHARE

CURVE_GROUP = ".NPE Weight Curve"  # the leading dot hides it from most lists
CURVE_NODE = "Weight Curve"
CUSTOM_SAMPLES = 33  # points of the custom curve passed to weight_curve
PREVIEW_SAMPLES = 9  # bars in the panel's W(t) preview
KINDS = {"HAT": "hat", "SMOOTH": "smooth", "CONSTANT": "constant", "CUSTOM": "custom"}
STEPS = 20  # progress bar steps of a run to the end (propagate_edit's progress callback)
UNCHANGED_M = 1e-6  # m: a spread whose joints all move less than this had nothing to spread
# Keys mode: a moved effector this far (m) off its empty at the edited frame, with bones the
# edit turns that hold no key in the range (:func:`.key_edit.unkeyed`), is said: those bones
# keep the action's motion.
KEYS_MISS_M = 1e-3


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


# ------------------------------------------------------------------ settings and weights


@dataclass
class SpreadSettings:
    """What one Spread Edit does: the operator's properties (F9), or the scene's defaults
    the panel shows (``mode`` AUTO there: resolved on the action by :func:`resolve_mode`)."""

    mode: str = "AUTO"
    range_mode: str = "RADIUS"
    radius: int = DEFAULT_RADIUS
    frame_start: int = 1
    frame_end: int = 60
    curve: str = "SMOOTH"
    metric_mode: str = "DELTA"

    @classmethod
    def of(cls, owner: object) -> SpreadSettings:  # (the scene's extra show_overlay aside)
        """From anything holding the same names (the operator, the scene's group)."""
        return cls(**{f.name: getattr(owner, f.name) for f in fields(cls)})


def scene_settings(scene: bpy.types.Scene) -> SpreadSettings:
    """The scene's defaults; Start/End takes the preview range when one is set."""
    s = SpreadSettings.of(scene.npe.propagation)
    if scene.use_preview_range:
        s.frame_start, s.frame_end = scene.frame_preview_start, scene.frame_preview_end
    return s


def _edit_channels(obj: bpy.types.Object | None) -> list:
    """The channels a spread keys: the mapped bones', a limb in IK's IK controls instead
    of its FK controls."""
    if obj is None:
        return []
    info = mapped_rig.rig_for(obj)
    return key_edit.channel_paths(obj, info, *_written(obj, info)[1:])


def _written(obj: bpy.types.Object, info: rig_io.RigInfo, frames: np.ndarray | None = None
             ) -> tuple[spread_ik.IkLimbs | None, Sequence[int], Sequence[int]]:
    """The rig's limbs in IK (on some of ``frames``; default: now), and the bones whose
    rotations and locations a spread writes: the mapped bones and roots, a limb in IK's
    IK controls instead of its FK controls."""
    ik = spread_ik.ik_limbs(obj, info, frames)
    return (ik, ik.keyed, ik.located) if ik is not None else (None, info.mapped, info.roots)


def window(scene: bpy.types.Scene, settings: SpreadSettings | None = None,
           obj: bpy.types.Object | None = None) -> tuple[int, int, int]:
    """(start, end, center): the frames the edit may reach, and the edited frame. To Keys:
    from the frame after the mapped bones' key before the current frame to the frame
    before their key after it (the scene's range where there is none)."""
    s = settings or scene_settings(scene)
    center = scene.frame_current
    if s.range_mode == "RADIUS":
        return center - s.radius, center + s.radius, center
    if s.range_mode == "START_END":
        return s.frame_start, s.frame_end, center
    if obj is None:
        raise EditError("To Keys needs an armature: select one")
    keys = key_edit.keyed_frames(obj, _edit_channels(obj))
    before = keys[keys < center - key_edit.KEY_TOL]
    after = keys[keys > center + key_edit.KEY_TOL]
    start = int(np.floor(before.max())) + 1 if before.size else scene.frame_start
    end = int(np.ceil(after.min())) - 1 if after.size else scene.frame_end
    return min(start, center), max(end, center), center


def weights(scene: bpy.types.Scene, settings: SpreadSettings | None = None,
            obj: bpy.types.Object | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Frames of the window and W(t) on them (1 at the current frame)."""
    s = settings or scene_settings(scene)
    start, end, center = window(scene, s, obj)
    if not start <= center <= end:
        raise EditError(f"The current frame {center} is outside the range {start}-{end}: "
                        "move the range or the playhead")
    frames = np.arange(start, end + 1)
    kind = KINDS[s.curve]
    samples = custom_samples() if kind == "custom" else None
    c = center - start
    if s.range_mode == "RADIUS":
        w = weight_curve(len(frames), c, s.radius, kind, samples)
    else:  # fade out at each end of the range: one radius per side
        left = weight_curve(len(frames), c, c + 1, kind, samples)
        right = weight_curve(len(frames), c, len(frames) - c, kind, samples)
        w = np.where(frames <= center, left, right)
    return frames, w


def resolve_mode(settings: SpreadSettings, obj: bpy.types.Object, frames: np.ndarray,
                 w: np.ndarray, layers: list[str] | None = None) -> str:
    """AUTO: Layer over NLA tracks that change the range (``layers``, default
    :func:`layers_read`'s; the action combined over them, or no action);
    else Keys where the mapped bones' keys in the range are sparse (at most
    :data:`.spread_items.SPARSE_SHARE` of its frames hold one), else Every Frame."""
    if settings.mode != "AUTO":
        return settings.mode
    if layers is None:
        info = mapped_rig.rig_for(obj)
        layers = layers_read(obj, info, frames, _written(obj, info, frames)[1])
    if rig_keys.combined_over(obj) and layers:
        return "LAYER"
    keys = _keys_in(obj, frames, w)
    return "KEYS" if 0 < len(keys) <= SPARSE_SHARE * max(int((w > 0).sum()), 1) \
        else "EVERY_FRAME"


def layers_read(obj: bpy.types.Object, info: rig_io.RigInfo, frames: np.ndarray,
                bones: Sequence[int]) -> list[str]:
    """The NLA tracks that change, in ``frames``, a channel a spread reads: those of the
    bones the mapped joints hang from, and of ``bones`` (those it writes)."""
    return rig_keys.layers_under(obj, frames[0], frames[-1],
                                 [info.names[b] for b in set(info.needed) | set(bones)])


def _keys_in(obj: bpy.types.Object, frames: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The keyed frames of the mapped bones where W > 0."""
    keys = key_edit.keyed_frames(obj, _edit_channels(obj))
    return keys[np.interp(keys, frames, w, left=0.0, right=0.0) > 0.0]


def preview(scene: bpy.types.Scene, settings: SpreadSettings | None = None,
            obj: bpy.types.Object | None = None) -> tuple[str, list[tuple[int, float]]]:
    """For the panel: the mode the frames are edited in, and (frame, W) of the frames that
    will change (all of them in Keys mode, else a few across the range)."""
    s = settings or scene_settings(scene)
    try:
        frames, w = weights(scene, s, obj)
        mode = resolve_mode(s, obj, frames, w) if obj is not None else s.mode
    except (EditError, ValueError, KeyError):
        return s.mode, []
    if mode == "KEYS" and obj is not None:
        keys = _keys_in(obj, frames, w)
        return mode, [(round(k), float(np.interp(k, frames, w))) for k in keys]
    live = np.flatnonzero(w > 0)
    idx = np.unique(np.linspace(live[0], live[-1], PREVIEW_SAMPLES).round().astype(int))
    return mode, [(int(frames[i]), float(w[i])) for i in idx]


# ------------------------------------------------------------------ the edit


def propagate_edit(scene: bpy.types.Scene, obj: bpy.types.Object,
                   depsgraph: bpy.types.Depsgraph | None,
                   progress: Callable[[int], None] = lambda _step: None,
                   settings: SpreadSettings | None = None) -> Outcome:
    """Spread the edit at the current frame with the current effectors and requests, to
    the end (no cancelling): :class:`SpreadJob` run in one go."""
    job = SpreadJob(scene, obj, depsgraph, settings or scene_settings(scene))
    while (step := job.step()) is not None:
        progress(min(int(step * STEPS), STEPS))
    return job.outcome


class SpreadJob:
    """One Spread Edit in steps (a modal operator runs one per timer event): :meth:`step`
    returns the progress in [0, 1], or None once done (:attr:`outcome`); :meth:`cancel`
    leaves the action, NLA tracks and pose exactly as they were. An error in any step
    also puts them back before it is raised."""

    def __init__(self, scene: bpy.types.Scene, obj: bpy.types.Object,
                 depsgraph: bpy.types.Depsgraph | None, settings: SpreadSettings) -> None:
        self.outcome: Outcome | None = None
        self._undo: list[Callable[[], None]] = []
        self._steps = _spread(scene, obj, depsgraph, settings, self._undo)

    def step(self) -> float | None:
        try:
            with busy():  # its frame changes are its own: no timeline handling
                return next(self._steps)
        except StopIteration as done:
            self.outcome = done.value
            return None

    def cancel(self) -> None:
        self._steps.close()  # the generator puts back what it wrote


def _spread(scene: bpy.types.Scene, obj: bpy.types.Object,
            depsgraph: bpy.types.Depsgraph | None, s: SpreadSettings,
            undo: list[Callable[[], None]]) -> Generator[float, None, Outcome]:
    """The steps of :class:`SpreadJob`: validate, read, solve, rotations (nothing written
    yet), then write and correct from the evaluated rig (undone if stopped there)."""
    info = mapped_rig.rig_for(obj)
    options = editors.solve_options(obj)
    if options.solver == "classic":
        raise EditError("Spread Edit blends the models' pose codes: pick a Neural solver")
    targets = empties.read(scene, obj, info, depsgraph)
    requests = metric_requests.requested_metrics(obj)
    if not targets and not requests:
        raise EditError("Nothing to spread: add effectors or enable a metric request")
    spread_checks.check_action(obj)
    models = model_sets.load(scene)
    metric_requests.check_requests(requests, models)
    frames_all, w_all = weights(scene, s, obj)
    live = np.flatnonzero(w_all > 0)
    frames = frames_all[live[0]:live[-1] + 1]  # W = 0 frames inside keep their values
    w = w_all[live[0]:live[-1] + 1]
    center = scene.frame_current - int(frames[0])
    ik, bones, located = _written(obj, info, frames)
    layers = layers_read(obj, info, frames, bones)
    mode = resolve_mode(s, obj, frames, w, layers)
    spread_checks.check_mode(obj, info, frames, mode, bones, located, layers)
    keyed = _keys_in(obj, frames, w) if mode == "KEYS" else None
    if keyed is not None and not len(keyed):
        raise EditError(f"No key of the mapped bones in frames {frames[0]}-{frames[-1]}: "
                        "Keys mode moves keys and adds none; pick Every Frame or Layer")
    yield 0.05

    start, by_hand = base_pose.edit_start(scene, obj, info)
    mw = rig_io.world_matrix(obj)
    if by_hand and ik is not None:  # (a limb in IK shows its controls, not the bones read:
        start, by_hand = None, False  # read as the rig shows it, as before any edit)
    if by_hand:  # (read before any frame change)
        shown_now = spread_hand.shown_pose(obj, info, mw)
        moved = spread_hand.dragged(obj, depsgraph)
    unkeyed = rig_io.read_pose(obj, info) if start is None else start
    # (over layers, every bone written, the IK controls too: the action's own rotations)
    below = rig_keys.curves_below(obj, frames[0], frames[-1]) if layers else set()
    quats, locs, eulers = rig_keys.read_clip(
        obj, info, frames, spread_layer.over_tracks(unkeyed, info, below) if layers
        else unkeyed, sorted(set(info.needed) | set(bones)) if layers else None)
    current = scene.frame_current  # (the passes below change frame)
    action_quats = None  # the action's own rotations, where layers under it show others
    if layers:
        action_quats = quats
        with spread_ik.pose_kept(scene, obj, current):
            quats, locs, eulers = yield from spread_layer.read_shown(
                scene, obj, info, frames, unkeyed, (0.05, 0.1))
    if mode == "LAYER" and ik is None:  # what the layer changes: the motion as read
        shown = quats.copy(), locs.copy(), eulers.copy()
    if start is not None and ik is None:  # the edited frame as it was before the edit:
        # with Auto Keying on, the action already holds the edit there (read from it, the
        # edit was nothing, and the spread moved no other frame)
        quats[center], locs[center], eulers[center] = start.quats, start.locations, \
            start.eulers
    if ik is not None:  # each frame's limbs as Blender shows them
        with spread_ik.pose_kept(scene, obj, current):
            unkeyed, stretched = yield from spread_ik.read_shown(
                scene, obj, info, frames, center, ik, (quats, locs, eulers), unkeyed,
                (0.1 if layers else 0.05, 0.15), from_action=not layers)
    joints, _ = rig_io.joint_positions(info, quats, locs)
    clip = rig_io.armature_to_core(mw, joints)
    if by_hand:
        targets = spread_hand.as_targets(targets, shown_now, moved)
    editor = editors.editor_for(obj, info, models)
    yield 0.15
    try:
        edited = propagate(editor, clip, center, w,
                           [Effector(t.joint, t.target_core, t.weight, t.pin) for t in targets],
                           requests,
                           s.metric_mode.lower(), options)
    except ValueError as exc:
        raise EditError(f"Cannot spread the edit: {exc}") from exc
    check_finite(edited)
    unchanged = float(np.abs(edited - clip).max()) < UNCHANGED_M
    yield 0.4
    edited_arm = rig_io.core_to_armature(mw, edited)
    goals = spread_goals.positions(targets, clip, edited, w, center, mw)
    orientations = spread_goals.orientations(info, targets, quats, locs, w, center)
    try:
        new_q, new_l = rig_io.solve_rotations(info, quats, locs, edited_arm, goals,
                                              orientations or None)
    except ValueError as exc:
        raise EditError(f"Cannot turn the edited clip into bone rotations: {exc}") from exc
    check_finite(new_q, new_l)
    still = w <= 0.0
    new_q[still], new_l[still] = quats[still], locs[still]
    yield 0.5
    written = w > 0.0  # the frames a correction from the evaluated rig may change
    if mode == "KEYS":
        written = np.isin(frames, np.round(keyed).astype(int))
    if ik is not None:  # each frame written and corrected as Solve does, IK controls placed
        with spread_ik.pose_kept(scene, obj, current):
            yield from spread_ik.place_controls(
                scene, obj, info, frames, center, written, w, stretched, ik, (quats, locs),
                (new_q, new_l),
                edited_arm, goals, orientations, rig_io.world_scale(mw), (0.5, CORRECTING))

    # Validated: write, undone if stopped from here on.
    snapshot = key_edit.ActionSnapshot(obj, key_edit.channel_paths(obj, info, bones, located))
    undo.append(snapshot.restore)
    if mode == "KEYS":
        # Euler angles chained from key to key, from the first key's own: a key is
        # interpolated from its neighbouring keys, not from the frames between (chained
        # through those, a forearm's key took another branch of its angles than the keys
        # beside it, and the frames between swung the hand 131 mm for a 100 mm edit). A
        # key between frames takes the value between the two frames around it.
        on = np.flatnonzero(np.isin(frames, np.floor(keyed)) | np.isin(frames, np.ceil(keyed)))

        def write(q: np.ndarray, loc: np.ndarray) -> int:
            values = key_edit.channel_values(obj, info, q[on], loc[on], quats[on],
                                             eulers[on[0]], bones, located)
            return key_edit.write_on_keys(obj, values, frames[on], w[on])[0]
    elif mode == "LAYER":
        layer = spread_layer.Layer(obj, info, frames, *(shown if ik is None else
                                                        (quats, locs, eulers)),
                                   scene.frame_current, bones, located, action_quats,
                                   below)
        undo.append(layer.remove)
        write = layer.write
    else:
        def write(q: np.ndarray, loc: np.ndarray) -> int:
            return rig_keys.write_keys(obj, info, frames, q, loc, bones, eulers[0], unkeyed,
                                       located)
    try:
        n = write(new_q, new_l)
        yield CORRECTING
        if ik is None:  # (with limbs in IK, each frame was corrected as it was placed)
            yield from spread_correct.correct_from_evaluated(
                scene, obj, info, frames, np.where(written, w, 0.0), goals, quats, locs,
                edited_arm, (new_q, new_l), write, rig_io.world_scale(mw))
    except BaseException:
        for put_back in reversed(undo):
            put_back()
        scene.frame_set(scene.frame_current)
        raise
    scene.frame_set(scene.frame_current)  # show the keyed pose
    base_pose.make_current_base(scene, obj, info)
    notes = []
    if by_hand:  # (its empties onto the pose spread, where the next solve starts from)
        empties.snap(obj, info, animated=False)
        notes.append(f"The pose at frame {scene.frame_current} was changed outside the "
                     "add-on (bones turned by hand, or keys changed): that whole change was "
                     "spread, and the effectors put on it")
    if mode == "LAYER" and (based := layer.based):
        some = f"{len(based)} channel(s) the layer changes ({_names(based, 2)})"
        notes.append((f"{obj.name} had no action: a new one, {layer.made_action.name}, holds "
                      f"one key of the pose's value on each of the {some} that no track "
                      "animates" if layer.made_action else f"The action held no key on "
                      f"{some}: each got one key of the pose's value") + ", which the layer "
                     "combines over and muting it gives back")
    if unchanged and not by_hand:
        notes.append(f"Nothing to spread at frame {scene.frame_current}: no effector is off "
                     "its joint and no metric request changes the pose there. Insert Keyframe "
                     "and a frame change start the edit again from the pose shown: drag, then "
                     "Spread Edit")
    on_key = mode != "KEYS" or np.isclose(keyed, scene.frame_current).any()
    if not on_key:
        notes.append(f"frame {scene.frame_current} holds no key: Keys mode moved the keys "
                     "around it, and the pose there is what they interpolate")
    miss = _miss(obj, info, targets, mw)
    notes += edits.driven_notes(obj, info, miss or 0.0)
    if mode == "KEYS" and miss is not None and miss > KEYS_MISS_M:
        notes += _keys_missed(obj, info, (bones, located), frames, w, center, on_key,
                              ((quats[center], locs[center]), (new_q[center], new_l[center])),
                              miss)
    what = {"KEYS": f"{0 if keyed is None else len(keyed)} keyed frames",
            "EVERY_FRAME": "every frame", "LAYER": "a new NLA layer"}[mode]
    reach = "" if miss is None else \
        f"; largest effector miss at frame {scene.frame_current}: {miss * 100:.1f} cm"
    return Outcome(f"Spread Edit over frames {frames[0]}-{frames[-1]} of {obj.name}, {what} "
                   f"({n} F-curves{reach})", notes)


def _keys_missed(obj: bpy.types.Object, info: rig_io.RigInfo, channels: tuple,
                 frames: np.ndarray, w: np.ndarray, center: int, on_key: bool,
                 change: tuple, miss: float) -> list[str]:
    """Why Keys mode left the edited frame ``miss`` (m) off an effector: the bones the edit
    turns there (``change``: before and after) with a channel that holds no key in the
    range keep the action's motion on it; those with one keyed only on other frames than a
    keyed edited frame (``on_key``; keys staggered for overlap) take the edit from the keys
    around it (an arm keyed 2-5 frames after the body: 3.0 cm, unsaid)."""
    frame = int(frames[center])
    if left := key_edit.unkeyed(obj, info, *channels, frames[w > 0], *change):
        return [f"Keys mode adds no key: {len(left)} bone(s) the edit turns have a channel "
                f"with no key in frames {frames[0]}-{frames[-1]} ({_names(left)}), which keeps "
                f"the action's motion, so frame {frame} is {miss * 100:.1f} cm off the "
                "effector: key those channels on the keyed frames, or use Every Frame or "
                "Layer"]
    if on_key and (left := key_edit.unkeyed(obj, info, *channels, frames[center:center + 1],
                                            *change)):
        return [f"Keys mode adds no key: {len(left)} bone(s) the edit turns have a channel "
                f"with no key at frame {frame} ({_names(left)}; their keys are on other "
                "frames), which takes the edit from the keys around it, so the frame is "
                f"{miss * 100:.1f} cm off the effector: key the frame first (Insert "
                "Keyframe), or use Every Frame or Layer"]
    return []


def _names(bones: list[str], shown: int = 3) -> str:
    return f"{', '.join(bones[:shown])}{', ...' if len(bones) > shown else ''}"


def _miss(obj: bpy.types.Object, info: rig_io.RigInfo, targets: list,
          matrix_world: np.ndarray) -> float | None:
    """How far (m) the moved effector joints are from their empties in the keyed pose now
    on the rig, as Blender evaluates it (what the user sees, constraints included); None
    without a moved effector."""
    if all(t.pin for t in targets):
        return None
    bpy.context.view_layer.update()
    return edits.largest_miss(targets, rig_io.armature_to_core(
        matrix_world, rig_io.evaluated_joints(obj, info)))
