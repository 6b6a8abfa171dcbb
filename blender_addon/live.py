"""Live mode: solve again as soon as an effector empty moves (G, gizmo, driver, Python),
and once more, refined and measured, when the drag pauses.

A ``depsgraph_update_post`` handler, installed only while some scene has Live on, picks
the updates of our empties (``update.id.original``), finds their armature through the
empty's ``npe.effector_of`` tag and re-solves it (:func:`live_edit`). Our own pose writes
cause depsgraph updates too: the :func:`.guard.busy` guard and the "moved since the last
solve" check (stored in the effectors, so an undo restores it with the pose) keep them
from looping.
An update of an armature in Edit Mode drops its caches (its bones may change).

A drag update solves without latent refinement (fast; with it when *Refine While
Dragging* is on); once it pauses
(:data:`PAUSE_DELAY_S`), a timer solves again with it, corrects the write from the
evaluated rig and measures the metrics for the panel (:func:`drag_paused`).

``undo_post``, ``redo_post`` and ``load_post`` handlers drop every kept edit state (the
data it was read from is replaced), and the load handler re-syncs the depsgraph handler
with the loaded file's Live toggles. :func:`unregister` removes exactly these functions
and nothing else.
"""

from __future__ import annotations

import time

import bpy
from bpy.app.handlers import persistent

from . import app_hooks, edits, empties, live_controls, metric_requests, rig_controls, timeline
from . import state as kept
from .core import reach_bounds
from .core.pipeline import SHORT_MARK
from .errors import STATUS, EditError
from .guard import busy, is_busy

PAUSE_DELAY_S = 0.3  # a drag counts as paused after this long without an update
_PENDING: dict[str, object] = {}  # what the drag's pause has to do


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    """Re-solve the armatures whose effector empties moved in this update."""
    if is_busy() or not scene.npe.live:
        return
    owners: dict[str, bpy.types.Object] = {}
    rigs: dict[str, bpy.types.Object] = {}  # armatures updated: their controls may have moved
    for update in depsgraph.updates:
        obj = update.id
        if not isinstance(obj, bpy.types.Object):
            continue
        kind = obj.type
        if kind == "ARMATURE" and obj.mode == "EDIT":
            kept.invalidate(obj.name)
        elif kind == "ARMATURE" and len(obj.original.data.npe_mapping.joints):
            rigs[obj.name] = obj.original
        if kind != "EMPTY" or not update.is_updated_transform:
            continue
        owner = obj.original.npe.effector_of
        if owner is not None and owner.type == "ARMATURE":
            owners[owner.name] = owner
    for owner in owners.values():
        if owner.mode == "EDIT" or scene.objects.get(owner.name) is None \
                or empties.carried_now(owner.name):
            continue
        with busy(), rig_controls.deferred():  # no evaluation inside the handler
            live_edit(scene, owner, depsgraph)
    for name, rig in rigs.items():  # rig controls as effectors (live_controls)
        if name not in owners and scene.objects.get(name) is not None:
            with busy(), rig_controls.deferred():
                if live_controls.live_update(scene, rig, depsgraph):
                    pause_later(scene, rig)
    rig_controls.follow_later()


def live_edit(scene: bpy.types.Scene, obj: bpy.types.Object,
              depsgraph: bpy.types.Depsgraph | None, *, moved_only: bool = True) -> None:
    """The live handler's edit, when an empty moved since the last solve (``moved_only``)
    or its settings changed: errors become a status line instead of a report."""
    try:
        state = kept.get(scene, obj, fresh=False)
        empty_matrices = empties.matrices(obj, depsgraph)
        if moved_only and not empties.moved(empty_matrices, state.solved):
            return
        # Refine While Dragging off: a drag skips latent refinement, the pause adds it.
        outcome = edits.edit_with(scene, obj, state, empty_matrices, allow_nothing=True,
                                  live=True, refine=not moved_only or obj.npe.live_refine)
        if outcome.deferred:
            if not obj.npe.settle_due:
                obj.npe.settle_due = True
            pause_later(scene, obj)
    except EditError as exc:
        if STATUS.get(obj.name) != str(exc):
            print(f"Neural Pose Editor (live): {exc}")
        STATUS[obj.name] = str(exc)
    else:
        STATUS.pop(obj.name, None)


def pause_later(scene: bpy.types.Scene, obj: bpy.types.Object) -> None:
    """Run :func:`drag_paused` once the drag pauses: a timer pushed back by every update,
    so a drag pays for refining and measuring once instead of at every step."""
    armatures = set(_PENDING.get("armatures", ()))
    armatures.add(obj.name)
    _PENDING.update(scene=scene.name, last=obj.name, armatures=armatures,
                    due=time.monotonic() + PAUSE_DELAY_S)
    app_hooks.start_timer(_pause_timer, PAUSE_DELAY_S)


def _pause_timer() -> float | None:
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
    runs no timers, so tests call it directly): solve the dragged armatures again as an
    operator does (refinement, correction from the evaluated rig, metrics measured; the
    pose :func:`.edits.edit` gives from the same base pose and empties), from their kept
    state. Objects are looked up by name (they may be gone). True when something was done."""
    scene = bpy.data.scenes.get(str(_PENDING.pop("scene", "")))
    last = str(_PENDING.pop("last", ""))
    armatures = set(_PENDING.pop("armatures", ()))
    _PENDING.clear()
    if scene is None:
        return False
    done = False
    rig_controls.follow_pending()  # limbs in IK left by the drag's last update
    for name in [*sorted(armatures - {last}), last]:  # the last one's metrics are shown
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != "ARMATURE" or obj.mode == "EDIT":
            continue
        done = settle(scene, obj, fresh=False) or done
    return done


def settle(scene: bpy.types.Scene, obj: bpy.types.Object, *, fresh: bool) -> bool:
    """Solve ``obj`` again as an operator does, from its base pose and empties (its rig
    controls held by the drag too). ``fresh``: its kept state was dropped by an undo and is
    read again (the pose of the step the undo loaded); otherwise a dropped state is only
    measured. Errors become the panel's status line. True when it was solved or measured."""
    name = obj.name
    try:
        with busy():
            if fresh or kept.is_kept(name):  # not dropped by an undo
                switched = edits.prepare_controls(obj)  # IK controls moved by hand
                depsgraph = bpy.context.evaluated_depsgraph_get() \
                    if bpy.context.scene == scene else None
                outcome = edits.edit_with(
                    scene, obj, kept.get(scene, obj, fresh=fresh or bool(switched)),
                    empties.matrices(obj, depsgraph), allow_nothing=True, live=False,
                    extra=live_controls.held(name))
                live_controls.settled(scene, obj)
            else:
                metric_requests.measure(scene, obj)
                outcome = None
    except EditError as exc:
        STATUS[name] = str(exc)
        return False
    # A target no pose of the rig can reach, or one left short, stays said in the
    # panel (no operator reports a live drag); the next update clears it.
    said = [n for mark in (reach_bounds.NOTE_MARK, SHORT_MARK)
            for n in (outcome.notes if outcome else ()) if mark in n]
    if said:
        STATUS[name] = said[0]
    else:
        STATUS.pop(name, None)
    return True


def settle_loaded_steps() -> None:
    """After an undo or redo: a step stored mid-drag (Ctrl+Z right after a Live drag,
    before its pause) shows its settled pose, the one the animator saw, so the pause's
    settle belongs to the drag's undo step. The settle is a function of the step's base
    pose and empties, so it is re-run rather than stored."""
    for scene in bpy.data.scenes:
        if not scene.npe.live:
            continue
        for obj in scene.objects:
            if obj.type == "ARMATURE" and obj.npe.settle_due and obj.mode != "EDIT":
                settle(scene, obj, fresh=True)


def cancel_pause(unregister: bool = False) -> None:
    """Drop what a drag's pause had to do (a file was loaded); ``unregister``: its timer
    too (the add-on is being unregistered). The timer is persistent: one freed by a file
    load can leave Blender 4.5 hanging at exit."""
    _PENDING.clear()
    rig_controls.cancel_follow()
    if unregister:
        app_hooks.stop_timer(_pause_timer)


def effector_settings_changed(context: bpy.types.Context, obj: bpy.types.Object) -> None:
    """An effector's weight, pin or rotation toggle changed: re-solve when Live is on."""
    kept.invalidate(obj.name if isinstance(obj, bpy.types.Object) else None)
    if isinstance(obj, bpy.types.Object) and obj.type == "ARMATURE":
        from . import pins

        pins.sync_colours(obj)  # a pin switched in the panel
    scene = context.scene
    if is_busy() or scene is None or not scene.npe.live or not isinstance(
            obj, bpy.types.Object) or obj.type != "ARMATURE":
        return
    with busy():
        live_edit(scene, obj, context.evaluated_depsgraph_get(), moved_only=False)


@persistent
def on_load_post(*_args: object) -> None:
    cancel_pause()
    sync()


@persistent
def on_undo_redo(*_args: object) -> None:
    """Undo and redo replace the data the kept edit states were read from; a pause due
    then belongs to the step left, and the step loaded is settled if it was stored
    mid-drag. Empties a frame change left out of the step go back first."""
    timeline.restore_after_undo()
    kept.invalidate()
    live_controls.see_all()
    cancel_pause()
    settle_loaded_steps()


def sync() -> None:
    """Install the depsgraph handler iff a scene has Live on; remove it otherwise."""
    kept.invalidate()
    try:
        scenes = bpy.data.scenes
        wanted = any(s.npe.live for s in scenes)
    except AttributeError:  # restricted context while add-ons load: nothing is live yet
        wanted = False
    handlers = bpy.app.handlers
    app_hooks.set_installed(handlers.depsgraph_update_post, on_depsgraph_update, wanted)
    app_hooks.set_installed(handlers.frame_change_post, live_controls.on_frame_change, wanted)
    if wanted:
        live_controls.see_all()
        # IK controls moved while Live was off: the first drag starts from the limbs shown.
        timeline.match_later([o.name for o in bpy.data.objects if o.type == "ARMATURE"
                              and len(o.data.npe_mapping.joints)])


def register() -> None:
    handlers = bpy.app.handlers
    app_hooks.set_installed(handlers.load_post, on_load_post, True)
    app_hooks.set_installed(handlers.undo_post, on_undo_redo, True)
    app_hooks.set_installed(handlers.redo_post, on_undo_redo, True)
    sync()


def unregister() -> None:
    handlers = bpy.app.handlers
    app_hooks.set_installed(handlers.depsgraph_update_post, on_depsgraph_update, False)
    app_hooks.set_installed(handlers.frame_change_post, live_controls.on_frame_change, False)
    app_hooks.set_installed(handlers.load_post, on_load_post, False)
    app_hooks.set_installed(handlers.undo_post, on_undo_redo, False)
    app_hooks.set_installed(handlers.redo_post, on_undo_redo, False)
    cancel_pause(unregister=True)
    kept.invalidate()
