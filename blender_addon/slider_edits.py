"""A metric slider moved in the UI edits its character's pose (the sliders are ID
properties, see :mod:`.metric_sliders`, which run no update callback). Blender tags an ID
property's owner when the animator edits it, so a ``depsgraph_update_post`` handler
(always installed: a slider solves with Live off too) notes the characters whose sliders
moved, and a timer edits them right after the update: an edit reads the evaluated rig,
which a depsgraph handler must not do."""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

from . import app_hooks, edits, metric_sliders
from .guard import is_busy

_PENDING: set[str] = set()  # characters whose sliders moved in the UI


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    if is_busy():
        return
    for update in depsgraph.updates:
        obj = update.id
        if isinstance(obj, bpy.types.Object) and obj.type == "ARMATURE" \
                and obj.original.npe.metrics and metric_sliders.edited(obj.original):
            _PENDING.add(obj.original.name)
    if _PENDING:
        app_hooks.start_timer(apply_pending)


def apply_pending() -> None:
    """Edit the poses whose sliders moved (the timer runs it; background Blender runs no
    timers, so tests call it): one edit per character, with every request it has."""
    names = sorted(_PENDING)
    _PENDING.clear()
    for name in names:
        obj = bpy.data.objects.get(name)
        if obj is not None and obj.type == "ARMATURE" and obj.npe.metrics:
            edits.metric_request_changed(bpy.context, obj.npe.metrics[0],
                                         enabled_changed=False)


def register() -> None:
    app_hooks.set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, True)


def unregister() -> None:
    _PENDING.clear()
    app_hooks.stop_timer(apply_pending)
    app_hooks.set_installed(bpy.app.handlers.depsgraph_update_post, on_depsgraph_update, False)
