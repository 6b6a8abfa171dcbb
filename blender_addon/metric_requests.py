"""Pose metrics in the panel: one request item per metric of the model set, measured on
the rig and requested in the rig's own units (degrees; distances in the rig's world
metres, its proportions and scale), as :meth:`.core.pipeline.PoseEditor.metric_values`
and ``solve(..., metrics=...)`` take them."""

from __future__ import annotations

import bpy
import numpy as np

from . import editors, mapped_rig, metric_sliders, model_sets, rig_io
from .core.models import ModelSet
from .core.pipeline import PoseEditor
from .errors import EditError
from .guard import updates_suspended


def sync_metrics(obj: bpy.types.Object, models: ModelSet) -> None:
    """The character's request items: one per metric of the model set (kept when the set
    is unchanged)."""
    s = obj.npe
    names = list(models.metrics)
    if s.metrics_folder == str(models.folder) and [m.name for m in s.metrics] == names \
            and all(metric_sliders.REQUEST_KEY in m for m in s.metrics):
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
            metric_sliders.show(item, lo, hi)
            metric_sliders.put(item, 0.5 * (lo + hi))
        s.metrics_folder = str(models.folder)


def requested_metrics(obj: bpy.types.Object) -> dict[str, float]:
    """The character's enabled metric requests: name -> requested value (rig units)."""
    return {m.name: m.requested for m in obj.npe.metrics if m.enabled}


def switch_off(obj: bpy.types.Object) -> int:
    """Switch the character's requests off (their sliders' updates do not run); returns
    how many were on."""
    on = [m for m in obj.npe.metrics if m.enabled]
    with updates_suspended():
        for item in on:
            item.enabled = False
    return len(on)


# A request the solved pose, as the rig shows it, misses (short of it or past it) by more
# than OFF_SHARE of the change asked for is reported (the slider sweep's bound: it reached
# 95 to 105 %), and always past OFF_REQUEST of the slider's range; a miss within
# OFF_FLOOR of the range is noise. A rig may not take a request exactly: its chest is one
# rigid bone, held metrics and planted feet trade with the request, effectors hold limbs.
OFF_SHARE = 0.05
OFF_REQUEST = 0.01
OFF_FLOOR = 0.0005
OFF_NOTE = "off the request"  # in every such note (the panel picks them out by it)


def off_tolerance(item: bpy.types.PropertyGroup, requested: float, before: float) -> float:
    """How far the rig may miss a request before the panel says so (see OFF_SHARE)."""
    span = max(item.range_max - item.range_min, 0.0)
    return min(OFF_REQUEST * span, max(OFF_SHARE * abs(requested - before), OFF_FLOOR * span))


def shortfalls(obj: bpy.types.Object, requests: dict[str, float],
               before: dict[str, float]) -> list[str]:
    """A note for each request the measured pose (see :func:`store_measured`) misses;
    ``before``: each metric's value before the edit (rig units), so a small request is
    judged by the change it asked for."""
    notes = []
    for item in obj.npe.metrics:
        if item.name not in requests or not item.has_measured:
            continue
        miss = requests[item.name] - item.measured
        if abs(miss) > off_tolerance(item, requests[item.name], before[item.name]):
            unit = "°" if item.unit == "deg" else " m"
            notes.append(f"{item.label or item.name}: the rig shows {item.measured:.4g}{unit}, "
                         f"{abs(miss):.2g}{unit} {OFF_NOTE}: with the rest of the pose "
                         "held, this rig cannot take it exactly (add effectors, or pose "
                         "by hand)")
    return notes


def check_requests(requests: dict[str, float], models: ModelSet) -> None:
    unknown = [n for n in requests if n not in models.metrics]
    if unknown:
        raise EditError(f"Metric(s) {', '.join(unknown)} are not in this model set: click "
                        "Reload Models in the Neural Pose panel")


def store_measured(obj: bpy.types.Object, models: ModelSet, editor: PoseEditor,
                   positions_core: np.ndarray) -> None:
    """Measure every metric on a pose (21, 3) in the rig's units and show it in the
    character's panel, with the range the models know on this rig."""
    sync_metrics(obj, models)
    values = editor.metric_values(positions_core[None])
    ranges = editor.metric_ranges(positions_core[None])
    for item in obj.npe.metrics:
        if item.name in values:
            item.measured = float(values[item.name][0])
            item.has_measured = True
        if item.name in ranges:
            item.range_min, item.range_max = ranges[item.name]
            metric_sliders.show(item, item.range_min, item.range_max)


def measure_pose(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                 pose: rig_io.Pose) -> None:
    """:func:`store_measured` on a pose of the armature (no-op without models)."""
    joints, _ = rig_io.joint_positions(info, pose.quats, pose.locations)
    measure_joints(scene, obj, info, joints)


def measure_joints(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                   joints: np.ndarray) -> None:
    """:func:`store_measured` on the armature's joints (21, 3), armature space (no-op
    without models)."""
    try:
        models = model_sets.load(scene)
    except EditError:
        return
    mw = rig_io.world_matrix(obj)
    store_measured(obj, models, editors.editor_for(obj, info, models),
                   rig_io.armature_to_core(mw, joints))


def measure(scene: bpy.types.Scene, obj: bpy.types.Object) -> dict[str, float]:
    """Measure the metrics on the armature's current pose."""
    info = mapped_rig.rig_for(obj)
    model_sets.load(scene)  # a missing set is an error here
    measure_pose(scene, obj, info, rig_io.read_pose(obj, info))
    return {m.name: m.measured for m in obj.npe.metrics}

