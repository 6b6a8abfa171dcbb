"""Inside bpy: propagation timing: ``npe.spread_edit`` over a long action, keys written,
split by stage."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import (
    key_edit,
    mapped_rig,
    propagation,
    rig_keys,
)
from training.blender_side import host
from training.blender_side.bench_measure import MS, StageTimer, summary
from training.blender_side.bench_rig import (
    MOVED,
    effector_empty,
    run_op,
    setup_rig,
)
from training.blender_side.bench_stages import PROPAGATION_STAGES

PROPAGATION_FRAMES = 1000
PROPAGATION_CENTER = 500
PROPAGATION_MOVE = np.array([0.0, 0.0, 0.10])  # m, world: the right hand raised


def long_action(obj: bpy.types.Object, frames: int) -> None:
    """Key ``frames`` frames from the imported clip, played forward then backward (no jumps)."""
    info = mapped_rig.rig_for(obj)
    first, last = (int(v) for v in obj.animation_data.action.frame_range)
    quats, locs, eulers = rig_keys.read_clip(obj, info, np.arange(first, last + 1))
    cycle = np.r_[np.arange(len(quats)), np.arange(len(quats) - 2, 0, -1)]
    idx = np.resize(cycle, frames)
    rig_keys.write_keys(obj, info, np.arange(1, frames + 1), quats[idx], locs[idx],
                      euler_ref=eulers[0])
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, frames


# Issue 49's targets: 1,000 frames spread (Every Frame) on each rig.
PROPAGATION_TARGET_MS = {"bvh": 500.0, "generated": 2000.0, "generated-ik": 2000.0}
IK_SPREAD_RUNS = 3  # runs of the spread through limbs in IK (some 12 s each)
GENERATED_SWAY = (0.03, 0.02)  # m: the generated rig's torso control swaying, keyed


def sway_action(obj: bpy.types.Object, frames: int) -> None:
    """The generated Rigify rig's torso control swaying, keyed on ``frames`` frames through
    F-curve data (its controls hold no clip to play)."""
    obj.pose.bones["torso"].keyframe_insert("location", frame=1)
    bag = rig_keys.channelbag(obj)
    t = np.arange(1, frames + 1, dtype=np.float64)
    values = (GENERATED_SWAY[0] * np.sin(t / 8.0), 0.0 * t, GENERATED_SWAY[1] * np.sin(t / 5.0))
    for i, v in enumerate(values):
        fc = bag.fcurves.find('pose.bones["torso"].location', index=i)
        fc.keyframe_points.clear()
        fc.keyframe_points.add(frames)
        fc.keyframe_points.foreach_set("co", np.column_stack([t, v]).astype(np.float32).ravel())
        fc.update()
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, frames


def propagation_benchmark(models: Path, clip: Path, runs: int, kind: str = "bvh"
                          ) -> dict[str, Any]:
    """``npe.spread_edit`` (Every Frame) over a 1,000-frame action, every frame edited and
    keyed, on the BVH rig or the generated Rigify rig (its evaluated-rig correction
    included; ``kind`` "generated-ik": its limbs left in IK, read and placed frame by
    frame on the sampled frames)."""
    host.progress(f"propagation ({kind}): {runs} runs over {PROPAGATION_FRAMES} frames")
    obj = setup_rig(kind, models, clip)
    scene = bpy.context.scene
    if kind == "bvh":
        long_action(obj, PROPAGATION_FRAMES)
    else:
        sway_action(obj, PROPAGATION_FRAMES)
    scene.frame_set(PROPAGATION_CENTER)
    run_op(bpy.ops.npe.remove_effectors, all=True)
    run_op(bpy.ops.npe.add_effectors, preset="LIMBS")
    p = scene.npe.propagation
    p.mode, p.range_mode, p.frame_start, p.frame_end, p.curve = \
        "EVERY_FRAME", "START_END", 1, PROPAGATION_FRAMES, "CONSTANT"
    window, w = propagation.weights(scene)
    empty = effector_empty(obj, MOVED)
    empty.location = np.array(empty.location) + PROPAGATION_MOVE
    bpy.context.view_layer.update()
    times = []
    timer = StageTimer()
    for owner, attr, label, absorb in PROPAGATION_STAGES:
        timer.wrap(owner, attr, label, absorb)
    try:
        for _ in range(runs):
            start = time.perf_counter()
            run_op(bpy.ops.npe.spread_edit)
            times.append(time.perf_counter() - start)
    finally:
        timer.restore()
    stages = timer.per_call_ms([label for label in dict.fromkeys(s[2] for s in PROPAGATION_STAGES)
                                if timer.calls[label]], runs)  # (the rig's own stages)
    stages["operator and the rest"] = float(np.mean(times) * MS - sum(stages.values()))
    start = time.perf_counter()
    scene.frame_set(PROPAGATION_CENTER)
    frame_set_ms = (time.perf_counter() - start) * MS
    info = mapped_rig.rig_for(obj)
    written = len(key_edit.channel_paths(obj, info))
    return {"rig": kind, "frames": PROPAGATION_FRAMES, "edited_frames": int((w > 0).sum()),
            "window": [int(window[0]), int(window[-1])], "runs": runs,
            "fcurves_written": written, **summary(times), "stages": stages,
            "frame_set_alone_ms": frame_set_ms, "target_ms": PROPAGATION_TARGET_MS[kind]}
