"""The timeline: each character's edit belongs to the frame it was made on.

On a frame change (and when playback stops), every character the add-on has touched starts
again from the frame shown, as a pose change in Blender does: the base pose becomes that
frame's own, the effector empties the animator has not animated snap onto its joints, and
the metric requests switch off, their measured values re-read. So a drag on frame 40 never
pulls the body towards where frame 10's edit left the empties, and a request ticked on
frame 10 does not bend frame 40.

An edit that was not keyed is dropped where the bones are animated, exactly as Blender
drops an unkeyed pose change: ``frame_change_pre`` (the pose still shows the old frame)
compares the edit with the action at its frame and says so once, in the character's
status line and the console. Channels without keys keep the edit, as they do in Blender.

During playback nothing is done per frame (``animation_playback_post`` does it once, at
the frame playback stops on). Our own frame changes (propagation, scripts inside
:func:`.guard.busy`) are ignored.

A frame change is not an undo step, and Blender's undo re-reads only the data that differs
between the step it leaves and the step it loads: an empty snapped by a frame change after
the last push would keep the snapped place while its character is loaded back at the
step's frame and pose. :func:`restore_after_undo` puts such an empty back where its
character's step had it.
"""

from __future__ import annotations

import bpy
import numpy as np
from bpy.app.handlers import persistent
from mathutils import Matrix

from . import app_hooks, base_pose, edits, empties, mapped_rig, metric_requests, rig_io, rig_keys
from . import state as kept
from .errors import STATUS, EditError
from .guard import busy, is_busy

UNKEYED_QUAT_TOL = 1e-5  # 1 - |dot|: an edit this small is not worth a warning
UNKEYED_LOC_TOL = 1e-5  # armature units


def _characters(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The scene's armatures an edit session has touched (they hold a base pose)."""
    return [obj for obj in scene.objects
            if obj.type == "ARMATURE" and obj.mode != "EDIT" and len(obj.npe.base_pose)]


def _playing() -> bool:
    screen = getattr(bpy.context, "screen", None)
    return bool(screen is not None and screen.is_animation_playing)


def unkeyed_edit(obj: bpy.types.Object, info: rig_io.RigInfo, frame: int) -> bool:
    """Whether the pose on the rig is an edit of ``frame`` that the action would overwrite:
    the add-on's own pose (its base still applies at that frame) on an animated channel
    that differs from the action there."""
    base = base_pose.read_base(obj, info)
    pose = rig_io.read_pose(obj, info)
    if base is None or not base_pose.base_is_current(base, info, pose, frame) \
            or rig_keys.layers_under(obj, frame, frame, [info.names[b] for b in info.mapped]):
        return False  # (under NLA layers the action holds other values than it shows)
    quats, locs, _ = rig_keys.read_clip(obj, info, np.array([frame]), unkeyed=pose)
    mapped = list(info.mapped)
    dots = np.abs(np.sum(quats[0, mapped] * pose.quats[mapped], axis=1))
    moved = np.abs(locs[0, mapped] - pose.locations[mapped]).max(initial=0.0)
    return bool(np.any(1.0 - dots > UNKEYED_QUAT_TOL) or moved > UNKEYED_LOC_TOL)


def follow_frame(scene: bpy.types.Scene, obj: bpy.types.Object) -> None:
    """Start the character's edit session again from the frame shown (see the module)."""
    info = mapped_rig.rig_for(obj, fresh=False)  # the kept rig: a frame change moves no bone
    base_pose.make_current_base(scene, obj, info)
    empties.snap(obj, info, animated=False, evaluated=True)
    for item in obj.npe.effectors:
        if item.empty is not None and not empties.is_animated(item.empty):
            _SNAPPED[item.empty.name] = np.array(item.solved_matrix, dtype=np.float64)
    metric_requests.switch_off(obj)
    kept.invalidate(obj.name)


_SNAPPED: dict[str, np.ndarray] = {}  # effector empty -> the matrix a frame change gave it


def restore_after_undo() -> None:
    """After an undo or redo: an effector empty still where a frame change snapped it,
    on a character loaded back at its step's frame (the frame shown) with the empty solved
    elsewhere, goes back to that solved place (see the module)."""
    snapped = dict(_SNAPPED)
    _SNAPPED.clear()
    if not snapped:
        return
    for scene in bpy.data.scenes:
        for obj in _characters(scene):
            if obj.npe.base_frame != scene.frame_current:
                continue  # it shows another frame than its step's: the snap stands
            for item in obj.npe.effectors:
                empty = item.empty
                was = snapped.get(empty.name) if empty is not None else None
                if was is None or empties.is_animated(empty):
                    continue
                now = empties.placed(obj, empty)
                solved = np.array(item.solved_matrix, dtype=np.float64)
                if empties.moved(now[None], was[None]) or not empties.moved(now[None],
                                                                          solved[None]):
                    continue  # moved since the snap (re-read by the undo), or in place
                world = empties.in_world(rig_io.world_matrix(obj), solved.reshape(4, 4))
                empty.matrix_world = Matrix(world.tolist())


@persistent
def on_frame_change_pre(scene: bpy.types.Scene, *_args: object) -> None:
    """Say once that an unkeyed edit is about to be dropped (the pose still shows it)."""
    if is_busy() or _playing():
        return
    for obj in _characters(scene):
        frame = obj.npe.base_frame
        if frame == scene.frame_current:
            continue
        try:
            info = mapped_rig.rig_for(obj, fresh=False)
            dropped = unkeyed_edit(obj, info, frame)
        except (EditError, rig_io.RigError):
            continue
        if dropped:
            message = (f"The edit of {obj.name} on frame {frame} was not keyed: its animated "
                       "bones went back to their keys (key an edit before changing frame, "
                       "or turn Auto Keying on)")
            STATUS[obj.name] = message
            print(f"Neural Pose Editor: {message}")


@persistent
def on_frame_change_post(scene: bpy.types.Scene, *_args: object) -> None:
    if is_busy() or _playing():
        return
    _follow_all(scene)


@persistent
def on_playback_stop(scene: bpy.types.Scene, *_args: object) -> None:
    _follow_all(scene)


def _follow_all(scene: bpy.types.Scene) -> None:
    followed = []
    for obj in _characters(scene):
        if obj.npe.base_frame == scene.frame_current:
            continue  # our own write, or nothing new to follow
        try:
            with busy():
                follow_frame(scene, obj)
            followed.append(obj.name)
        except (EditError, rig_io.RigError) as exc:
            STATUS[obj.name] = str(exc)
    if followed:  # limbs in IK: their FK controls to the frame's pose, outside the handler
        match_later(followed)


def match_later(names: list[str]) -> None:
    """:func:`match_controls` on the next tick (a handler may not evaluate the rig)."""
    _TO_MATCH.update(names)
    app_hooks.start_timer(_match_timer)


_TO_MATCH: set[str] = set()  # characters whose IK limbs' FK controls a timer matches


def _match_timer() -> None:
    names = sorted(_TO_MATCH)
    _TO_MATCH.clear()
    match_controls(names)


def match_controls(names: list[str]) -> None:
    """Put the FK controls of limbs in IK where the frame shows them (a control rig's
    solve starts from them; evaluating the rig is not allowed inside a frame handler)."""
    for name in names:
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != "ARMATURE" or obj.mode == "EDIT":
            continue
        with busy():
            if edits.prepare_controls(obj):
                kept.invalidate(name)


HANDLERS = (("frame_change_pre", on_frame_change_pre),
            ("frame_change_post", on_frame_change_post),
            ("animation_playback_post", on_playback_stop))


def register() -> None:
    for name, func in HANDLERS:
        app_hooks.set_installed(getattr(bpy.app.handlers, name), func, True)


def unregister() -> None:
    """Our handlers and our timer (one left registered hangs bpy 4.5 at exit)."""
    _TO_MATCH.clear()
    _SNAPPED.clear()
    app_hooks.stop_timer(_match_timer)
    for name, func in HANDLERS:
        app_hooks.set_installed(getattr(bpy.app.handlers, name), func, False)
