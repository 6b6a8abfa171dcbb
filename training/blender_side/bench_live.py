"""Inside bpy: live-update timings: an effector empty moved until the add-on's depsgraph
handler has written the pose and Blender has evaluated it, beside Live off, a Neural Grab
and bones turned by hand; an instrumented pass splits the time by stage."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import (
    grab,
    live,
    mapped_rig,
    rig_controls,
)
from blender_addon.core import native
from blender_addon.core.pipeline import DRAG_REFINE_STEPS
from blender_addon.core.skeleton import JOINT_INDEX
from training.blender_side import host
from training.blender_side.bench_measure import MM, StageTimer, summary
from training.blender_side.bench_rig import (
    DEFAULT_REFINE,
    MOVED,
    effector_empty,
    setup_rig,
    world_heads,
)
from training.blender_side.bench_stages import (
    DEPSGRAPH,
    HANDLER_REST,
    LIVE_STAGES,
    SOLVE_NUMPY,
    STAGE_ORDER,
)

WARMUP_MOVES = 10  # untimed moves first: model loading, caches
DRAG_RADIUS = 0.08  # m: the dragged hand circles this far around where it started


@contextmanager
def profiled_handler(timer: StageTimer) -> Iterator[None]:
    """The add-on's depsgraph handler swapped for a timed wrapper (put back after: no
    handler of ours may outlive the run)."""
    handlers = bpy.app.handlers.depsgraph_update_post
    original = live.on_depsgraph_update
    index = list(handlers).index(original)

    def timed(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
        with timer.stage(HANDLER_REST):
            original(scene, depsgraph)

    handlers[index] = timed
    for owner, attr, label, absorb in LIVE_STAGES:
        timer.wrap(owner, attr, label, absorb)
    try:
        yield
    finally:
        timer.restore()
        handlers.remove(timed)
        if original not in handlers:
            handlers.append(original)


def drag_path(start: np.ndarray, n: int) -> np.ndarray:
    """``n`` successive positions of a hand dragged around ``start`` (a closed loop that
    rises, falls and sways: every move is a new problem, none far from the last)."""
    theta = np.linspace(0.0, 2.0 * math.pi, n + 1)[1:]
    offset = np.stack([np.sin(theta), 0.5 * np.sin(2.0 * theta), 1.0 - np.cos(theta)], axis=1)
    return start + DRAG_RADIUS * offset


def live_loop(scene: bpy.types.Scene, obj: bpy.types.Object, path: np.ndarray,
              timer: StageTimer | None = None
              ) -> tuple[list[float], list[float], list[float]]:
    """Move the empty along ``path``; per move, the seconds until the pose is written and
    evaluated (wall clock, and this process's CPU time: less sensitive to a busy machine),
    and the evaluated hand's distance to its empty (m)."""
    view_layer = bpy.context.view_layer
    empty = effector_empty(obj, MOVED)
    info = mapped_rig.rig_for(obj)
    bone = obj.pose.bones[info.names[info.shown[JOINT_INDEX[MOVED]]]]  # a deform bone
    mw = obj.matrix_world
    times, cpu, reach = [], [], []
    for target in path:
        start, start_cpu = time.perf_counter(), time.process_time()
        if timer is None:
            empty.location = target
            view_layer.update()  # the handler solves and writes the pose here...
            rig_controls.follow_dragged()  # (limbs in IK: the timer it starts)
            view_layer.update()  # ...and this evaluates it, if the first did not already
        else:
            with timer.stage(DEPSGRAPH):
                empty.location = target
                view_layer.update()
                rig_controls.follow_dragged()
                view_layer.update()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        reach.append(float(np.linalg.norm(np.array(mw @ bone.head) - target)))
    return times, cpu, reach


GRAB = "Neural Grab: a drag step (the right hand grabbed, default options)"


def grab_loop(scene: bpy.types.Scene, obj: bpy.types.Object, path: np.ndarray
              ) -> tuple[list[float], list[float], list[float]]:
    """A Neural Grab of the moved joint, its target along ``path`` (world): per move, the
    seconds of one drag step until the pose is written and evaluated (wall clock, CPU),
    and the evaluated joint's distance to its target (m). The grab is cancelled after."""
    view_layer = bpy.context.view_layer
    info = mapped_rig.rig_for(obj)
    bone = obj.pose.bones[info.names[info.shown[JOINT_INDEX[MOVED]]]]
    mw = obj.matrix_world
    g = grab.begin(scene, obj, [MOVED])
    times, cpu, reach = [], [], []
    try:
        for target in path:
            offset = target - g.start_world[0]
            start, start_cpu = time.perf_counter(), time.process_time()
            grab.update(scene, obj, g, offset)
            view_layer.update()
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            reach.append(float(np.linalg.norm(np.array(mw @ bone.head) - target)))
    finally:
        grab.cancel(obj, g)
    return times, cpu, reach


# The default setting again with the compiled kernels switched off: the numpy engine, the
# baseline they are measured against in the same run.
NUMPY_ONLY = "compiled kernels off (numpy alone)"
BY_HAND_RAD = 1e-3  # radians per move: the mapped bones turned a little, as a user would
BY_HAND = "By hand: the mapped bones turned, no solve (Blender's evaluation alone)"


def by_hand_loop(obj: bpy.types.Object, moves: int) -> tuple[list[float], list[float]]:
    """Every mapped bone (on a control rig, its controls) turned a little per move, and the
    rig evaluated: what any pose change of this rig costs in Blender, add-on or not
    (wall clock and CPU seconds per move)."""
    view_layer = bpy.context.view_layer
    info = mapped_rig.rig_for(obj)
    bones = [obj.pose.bones[info.names[b]] for b in info.joint_bones if b is not None]
    times, cpu = [], []
    for k in range(moves):
        angle = BY_HAND_RAD * (k % 2 * 2 - 1)
        start, start_cpu = time.perf_counter(), time.process_time()
        for bone in bones:
            if bone.rotation_mode == "QUATERNION":
                bone.rotation_quaternion.x += angle / 2
            elif bone.rotation_mode == "AXIS_ANGLE":
                bone.rotation_axis_angle[0] += angle
            else:
                bone.rotation_euler.x += angle
        view_layer.update()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return times, cpu


def live_benchmark(kind: str, label: str, models: Path, bvh: Path | None, moves: int,
                   profile_moves: int) -> list[dict[str, Any]]:
    """Timed loops (Live off, refinement off, default refinement) and a profiled pass each."""
    obj = setup_rig(kind, models, bvh)
    scene = bpy.context.scene
    empty = effector_empty(obj, MOVED)
    path = drag_path(np.array(empty.location), moves)
    rows = []
    default = (f"Live, refinement on every update ({DRAG_REFINE_STEPS} steps"
               + (", as at the pause" if DRAG_REFINE_STEPS == DEFAULT_REFINE
                  else f"; {DEFAULT_REFINE} at the pause") + ")")
    # (setting, Live, refinement, on every update, compiled kernels)
    settings = (("Live off: no solve (baseline)", False, 0, False, True),
                ("Live, refinement off", True, 0, False, True),
                (f"Live, refinement {DEFAULT_REFINE} steps when the drag pauses",
                 True, DEFAULT_REFINE, False, True),
                (f"{default} (default)", True, DEFAULT_REFINE, True, True),
                (f"{default}, {NUMPY_ONLY}", True, DEFAULT_REFINE, True, False))
    for setting, on, refine, every, compiled in settings:
        host.progress(f"live updates: {label}, {setting} ({moves} moves)")
        obj.npe.refine_steps = refine
        obj.npe.live_refine = every
        scene.npe.live = on
        with contextlib.nullcontext() if compiled else native.switched_off():
            live_loop(scene, obj, path[:WARMUP_MOVES])
            times, cpu, reach = live_loop(scene, obj, path)
        cpu_stats = summary(cpu)
        row = {"rig": label, "bones": len(obj.data.bones), "setting": setting, "live": on,
               "refine_steps": refine, "refine_every_update": every,
               "kernels": compiled and native.kernels() is not None, **summary(times),
               "cpu_median_ms": cpu_stats["median_ms"], "cpu_p95_ms": cpu_stats["p95_ms"],
               "cpu_p10_ms": cpu_stats["p10_ms"],
               "reach_median_mm": float(np.median(reach) * MM),
               "reach_max_mm": float(np.max(reach) * MM)}
        if on:
            timer = StageTimer()
            with profiled_handler(timer), (
                    contextlib.nullcontext() if compiled else native.switched_off()):
                live_loop(scene, obj, path[:profile_moves], timer)
            row["profile"] = timer.per_call_ms(STAGE_ORDER, profile_moves)
            row["profile_cpu"] = timer.per_call_ms(STAGE_ORDER, profile_moves, cpu=True)
            row["profile_moves"] = profile_moves
            row["solves_per_move"] = timer.calls[SOLVE_NUMPY] / profile_moves
        scene.npe.live = False
        rows.append(row)
    host.progress(f"live updates: {label}, {GRAB} ({moves} moves)")
    obj.npe.refine_steps, obj.npe.live_refine = DEFAULT_REFINE, True
    hand = world_heads(obj)[JOINT_INDEX[MOVED]]
    grab_path = drag_path(hand, moves)
    grab_loop(scene, obj, grab_path[:WARMUP_MOVES])
    times, cpu, reach = grab_loop(scene, obj, grab_path)
    cpu_stats = summary(cpu)
    rows.append({"rig": label, "bones": len(obj.data.bones), "setting": GRAB, "live": True,
                 "refine_steps": DEFAULT_REFINE, "refine_every_update": True,
                 "kernels": native.kernels() is not None, **summary(times),
                 "cpu_median_ms": cpu_stats["median_ms"], "cpu_p95_ms": cpu_stats["p95_ms"],
                 "cpu_p10_ms": cpu_stats["p10_ms"],
                 "reach_median_mm": float(np.median(reach) * MM),
                 "reach_max_mm": float(np.max(reach) * MM)})
    host.progress(f"live updates: {label}, {BY_HAND} ({moves} moves)")
    by_hand_loop(obj, WARMUP_MOVES)
    times, cpu = by_hand_loop(obj, moves)
    cpu_stats = summary(cpu)
    rows.insert(1, {"rig": label, "bones": len(obj.data.bones), "setting": BY_HAND,
                    "live": False, "refine_steps": 0, "refine_every_update": False,
                    **summary(times), "cpu_median_ms": cpu_stats["median_ms"],
                    "cpu_p95_ms": cpu_stats["p95_ms"], "cpu_p10_ms": cpu_stats["p10_ms"],
                    "reach_median_mm": float("nan"), "reach_max_mm": float("nan")})
    base = rows[0]["median_ms"]
    for row in rows:
        row["ratio_to_baseline"] = row["median_ms"] / base
    return rows
