"""Live mode: solve again as soon as an effector empty moves (G, gizmo, driver, Python).

A ``depsgraph_update_post`` handler, installed only while some scene has Live on, picks
the updates of our empties (``update.id.original``), finds their armature through the
empty's ``npe.effector_of`` tag and re-solves it. Our own pose writes cause depsgraph
updates too: the :func:`.session.busy` guard and the "moved since the last solve" check
(stored in the effectors, so an undo restores it with the pose) keep them from looping.
A ``load_post`` handler re-syncs the handler with the loaded file's Live toggles.
:func:`unregister` removes exactly these two functions and nothing else.
"""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

from . import empties, session


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    """Re-solve the armatures whose effector empties moved in this update."""
    if session.is_busy() or not scene.npe.live:
        return
    owners: dict[str, bpy.types.Object] = {}
    for update in depsgraph.updates:
        if not update.is_updated_transform:
            continue
        obj = update.id
        if not isinstance(obj, bpy.types.Object) or obj.type != "EMPTY":
            continue
        owner = obj.original.npe.effector_of
        if owner is not None and owner.type == "ARMATURE":
            owners[owner.name] = owner
    for owner in owners.values():
        if scene.objects.get(owner.name) is None or owner.mode == "EDIT":
            continue
        if not empties.moved_since_solve(owner, depsgraph):
            continue
        with session.busy():
            session.live_edit(scene, owner, depsgraph)


def effector_settings_changed(context: bpy.types.Context, obj: bpy.types.Object) -> None:
    """An effector's weight, pin or rotation toggle changed: re-solve when Live is on."""
    scene = context.scene
    if session.is_busy() or scene is None or not scene.npe.live or not isinstance(
            obj, bpy.types.Object) or obj.type != "ARMATURE":
        return
    with session.busy():
        session.live_edit(scene, obj, context.evaluated_depsgraph_get())


@persistent
def on_load_post(*_args: object) -> None:
    sync()


def _set_installed(handlers: list, func: object, installed: bool) -> None:
    present = func in handlers
    if installed and not present:
        handlers.append(func)
    elif not installed and present:
        handlers.remove(func)


def sync() -> None:
    """Install the depsgraph handler iff a scene has Live on; remove it otherwise."""
    try:
        scenes = bpy.data.scenes
        wanted = any(s.npe.live for s in scenes)
    except AttributeError:  # restricted context while add-ons load: nothing is live yet
        wanted = False
    _set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, wanted)


def register() -> None:
    _set_installed(bpy.app.handlers.load_post, on_load_post, True)
    sync()


def unregister() -> None:
    _set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, False)
    _set_installed(bpy.app.handlers.load_post, on_load_post, False)
