"""A metric request's slider: an ID property on its request item, so that each slider has
its own soft range (what the models know on this rig), its own tooltip (the metric's
description) and Blender's angle or distance display in the scene's units. This is how
Blender gives per-item limits (a geometry-nodes modifier's inputs, Rigify's custom
properties); an RNA property's limits belong to its class.

An ID property runs no update callback: :mod:`.slider_edits` finds the sliders moved
(:func:`edited`, against ``item.applied``, the value the pose answers) and edits the pose.
Scripts set a request with ``item.set_requested``, which edits at once."""

from __future__ import annotations

import math

import bpy

REQUEST_KEY = "requested"  # the ID property holding the slider's value
_SUBTYPES = {"deg": "ANGLE", "m": "DISTANCE"}
_PRECISION = {"deg": 1, "m": 3}
_STEP = {"deg": 100, "m": 1}  # UI steps (1/100 of a unit): 1°, 1 cm per drag step


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
