"""A metric request's slider: an ID property on its request item, so that each slider has
its own soft range (what the models know on this rig), its own tooltip (the metric's
description) and Blender's angle or distance display in the scene's units. This is how
Blender gives per-item limits (a geometry-nodes modifier's inputs, Rigify's custom
properties); an RNA property's limits belong to its class.

An ID property runs no update callback. Blender tags its owner when the animator edits
one in the UI, so a ``depsgraph_update_post`` handler (always installed: a slider solves
with Live off too) compares each slider with the value its pose answers
(``item.applied``) and edits the pose when they differ. Scripts set a request with
``item.set_requested``, which edits at once."""

from __future__ import annotations

import math

import bpy
from bpy.app.handlers import persistent

from . import app_hooks
from .guard import is_busy

REQUEST_KEY = "requested"  # the ID property holding the slider's value
_SUBTYPES = {"deg": "ANGLE", "m": "DISTANCE"}
_PRECISION = {"deg": 1, "m": 3}
_STEP = {"deg": 100, "m": 1}  # UI steps (1/100 of a unit): 1°, 1 cm per drag step
_PENDING: set[str] = set()  # characters whose sliders moved in the UI


def to_raw(unit: str, value: float) -> float:
    """The slider's stored value (radians, world metres) of a value in the engine's units
    (degrees, rig metres)."""
    return math.radians(value) if unit == "deg" else value


def from_raw(unit: str, raw: float) -> float:
    return math.degrees(raw) if unit == "deg" else raw


def raw_value(item: bpy.types.PropertyGroup) -> float:
    return float(item.get(REQUEST_KEY, 0.0))


def put(item: bpy.types.PropertyGroup, value: float) -> None:
    """Set the slider (engine units) and mark the pose as answering it."""
    raw = to_raw(item.unit, value)
    item[REQUEST_KEY] = raw
    item.applied = raw


def show(item: bpy.types.PropertyGroup, lo: float, hi: float) -> None:
    """The slider's subtype, tooltip and soft range ``lo``..``hi`` (engine units)."""
    if REQUEST_KEY not in item:
        item[REQUEST_KEY] = 0.0
    lo_raw, hi_raw = to_raw(item.unit, lo), to_raw(item.unit, hi)
    if hi_raw <= lo_raw:  # nothing known yet: Blender's defaults for the subtype
        lo_raw, hi_raw = (0.0, math.pi) if item.unit == "deg" else (0.0, 2.0)
    item.id_properties_ui(REQUEST_KEY).update(
        subtype=_SUBTYPES.get(item.unit, "NONE"), soft_min=lo_raw, soft_max=hi_raw,
        description=item.description or item.label, precision=_PRECISION.get(item.unit, 3),
        step=_STEP.get(item.unit, 1))


def edited(obj: bpy.types.Object) -> list[bpy.types.PropertyGroup]:
    """The character's request items whose slider moved since its pose answered it."""
    moved = []
    for item in obj.npe.metrics:
        raw = item.get(REQUEST_KEY)
        if raw is not None and float(raw) != item.applied:
            item.applied = float(raw)
            moved.append(item)
    return moved


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    """A slider edited in the UI tags its character: its edit runs right after this
    update (an edit reads the evaluated rig, which a depsgraph handler must not do)."""
    if is_busy():
        return
    for update in depsgraph.updates:
        obj = update.id
        if isinstance(obj, bpy.types.Object) and obj.type == "ARMATURE" \
                and obj.original.npe.metrics and edited(obj.original):
            _PENDING.add(obj.original.name)
    if _PENDING:
        app_hooks.start_timer(apply_pending)


def apply_pending() -> None:
    """Edit the poses whose sliders moved (the timer runs it; background Blender runs no
    timers, so tests call it): one edit per character, with every request it has."""
    from . import edits

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
