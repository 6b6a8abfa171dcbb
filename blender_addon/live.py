"""Live mode: solve again as soon as an effector empty moves (G, gizmo, driver, Python).

A ``depsgraph_update_post`` handler, installed only while some scene has Live on, picks
the updates of our empties (``update.id.original``), finds their armature through the
empty's ``npe.effector_of`` tag and re-solves it. Our own pose writes cause depsgraph
updates too: the :func:`.session.busy` guard and the "moved since the last solve" check
(stored in the effectors, so an undo restores it with the pose) keep them from looping.
An update of an armature in Edit Mode drops its kept edit state (its bones may change).

``undo_post``, ``redo_post`` and ``load_post`` handlers drop every kept edit state (the
data it was read from is replaced), and the load handler re-syncs the depsgraph handler
with the loaded file's Live toggles. :func:`unregister` removes exactly these functions
and nothing else.
"""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

from . import session


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    """Re-solve the armatures whose effector empties moved in this update."""
    if session.is_busy() or not scene.npe.live:
        return
    owners: dict[str, bpy.types.Object] = {}
    for update in depsgraph.updates:
        obj = update.id
        if not isinstance(obj, bpy.types.Object):
            continue
        kind = obj.type
        if kind == "ARMATURE" and obj.mode == "EDIT":
            session.forget(obj.name)
        if kind != "EMPTY" or not update.is_updated_transform:
            continue
        owner = obj.original.npe.effector_of
        if owner is not None and owner.type == "ARMATURE":
            owners[owner.name] = owner
    for owner in owners.values():
        if owner.mode == "EDIT" or scene.objects.get(owner.name) is None:
            continue
        with session.busy():
            session.live_edit(scene, owner, depsgraph)


def effector_settings_changed(context: bpy.types.Context, obj: bpy.types.Object) -> None:
    """An effector's weight, pin or rotation toggle changed: re-solve when Live is on."""
    session.forget(obj.name if isinstance(obj, bpy.types.Object) else None)
    scene = context.scene
    if session.is_busy() or scene is None or not scene.npe.live or not isinstance(
            obj, bpy.types.Object) or obj.type != "ARMATURE":
        return
    with session.busy():
        session.live_edit(scene, obj, context.evaluated_depsgraph_get(), moved_only=False)


@persistent
def on_load_post(*_args: object) -> None:
    session.cancel_measure()
    sync()


@persistent
def on_undo_redo(*_args: object) -> None:
    """Undo and redo replace the data the kept edit states were read from."""
    session.forget()


def _set_installed(handlers: list, func: object, installed: bool) -> None:
    present = func in handlers
    if installed and not present:
        handlers.append(func)
    elif not installed and present:
        handlers.remove(func)


def sync() -> None:
    """Install the depsgraph handler iff a scene has Live on; remove it otherwise."""
    session.forget()
    try:
        scenes = bpy.data.scenes
        wanted = any(s.npe.live for s in scenes)
    except AttributeError:  # restricted context while add-ons load: nothing is live yet
        wanted = False
    _set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, wanted)


def register() -> None:
    handlers = bpy.app.handlers
    _set_installed(handlers.load_post, on_load_post, True)
    _set_installed(handlers.undo_post, on_undo_redo, True)
    _set_installed(handlers.redo_post, on_undo_redo, True)
    sync()


def unregister() -> None:
    handlers = bpy.app.handlers
    _set_installed(handlers.depsgraph_update_post, on_depsgraph_update, False)
    _set_installed(handlers.load_post, on_load_post, False)
    _set_installed(handlers.undo_post, on_undo_redo, False)
    _set_installed(handlers.redo_post, on_undo_redo, False)
    session.cancel_measure(unregister=True)
    session.forget()
