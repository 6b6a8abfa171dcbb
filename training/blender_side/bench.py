"""Inside bpy: the add-on's interactive and propagation timings, and Blender's own IK on the
same problems (started by ``python -m training benchmark-blender``; writes one JSON file).

- Live update: an effector empty moved (``location`` set, ``view_layer.update()``) until
  the add-on's depsgraph handler has written the pose and Blender has evaluated it, on the
  mapped Bandai BVH rig and on a Rigify-size rig, refinement off and on, beside the same
  loop with Live off (the no-solve baseline). A second, instrumented pass splits the time
  into stages (see :class:`StageTimer`). Then a Neural Grab of the right hand along the
  same path: one drag step of :func:`blender_addon.grab.update` per move, evaluated.
- Accuracy against Blender's IK constraints: (x, x') pairs of test clips (x' within +-20
  frames): the rig at x, targets at x' joints, evaluate; Blender's Legacy IK (and iTaSC)
  with chains to the same five effectors, against the add-on's Solve.
- Propagation: ``npe.spread_edit`` over a 1,000-frame action, keys written, a few runs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import (
    base_pose,
    editors,
    empties,
    grab,
    key_edit,
    live,
    mapped_rig,
    metric_requests,
    model_sets,
    propagation,
    rig_controls,
    rig_io,
    rig_keys,
    state,
)
from blender_addon.core import compiled_networks, native
from blender_addon.core import models as core_models
from blender_addon.core import refine as core_refine
from blender_addon.core.fileio import write_json
from blender_addon.core.pipeline import DRAG_REFINE_STEPS, PoseEditor, SolveOptions
from blender_addon.core.skeleton import JOINT_INDEX, JOINTS
from training.blender_side import host, rigs

EFFECTORS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")  # the LIMBS preset
MOVED = "r_hand"  # the empty dragged in the live loop
WARMUP_MOVES = 10  # untimed moves first: model loading, caches
DRAG_RADIUS = 0.08  # m: the dragged hand circles this far around where it started
PAIR_OFFSET = 20  # frames between x and x', as in the engine benchmark
PROPAGATION_FRAMES = 1000
PROPAGATION_CENTER = 500
PROPAGATION_MOVE = np.array([0.0, 0.0, 0.10])  # m, world: the right hand raised
DEFAULT_REFINE = SolveOptions().refine_steps  # the add-on's default Refinement
# The generated Rigify rig's IK/FK switches: its limbs are put in FK for the benchmark (a
# limb left in IK also has its IK controls placed after every solve: rig_controls).
# The generated Rigify rig, made once per Blender version (generating takes seconds).
GENERATED_BLEND = Path(tempfile.gettempdir()) / (
    f"npe-bench-generated-rigify-{'.'.join(map(str, bpy.app.version))}.blend")
# Blender IK chains: joint -> the joint whose bone is the chain's last (topmost) bone.
IK_CHAIN_TOP = {"l_hand": "l_clavicle", "r_hand": "r_clavicle", "l_foot": "l_thigh",
                "r_foot": "r_thigh", "head": "spine"}
TAIL_ATOL = 1e-4  # m: a parent bone's tail counts as at its child's head
MS = 1e3
MM = 1e3
CM = 1e2


# ------------------------------------------------------------------ timing helpers


def summary(times: Sequence[float]) -> dict[str, float]:
    """Median, p95 and p10 in milliseconds of times in seconds (on a shared machine the
    p10 is the closest to the uncontended cost)."""
    t = np.asarray(times) * MS
    return {"median_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95)),
            "p10_ms": float(np.percentile(t, 10)), "mean_ms": float(t.mean()), "n": len(t)}


def _clocks() -> np.ndarray:
    """(wall, this thread's CPU) seconds: the CPU clock shrugs off a busy machine's waits."""
    return np.array([time.perf_counter(), time.thread_time()])


class StageTimer:
    """Exclusive time per stage, wall clock and CPU, by wrapping functions in place (nested
    stages subtract from their caller; a stage marked ``absorb`` keeps its callees' time
    as its own)."""

    def __init__(self) -> None:
        self.totals: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(2))
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[np.ndarray] = []  # per open stage: time spent in its child stages
        self._absorbing = 0
        self._restore: list[tuple[Any, str, Any]] = []

    def _enter(self) -> np.ndarray:
        self._stack.append(np.zeros(2))
        return _clocks()

    def _exit(self, label: str, start: np.ndarray) -> None:
        elapsed = _clocks() - start
        children = self._stack.pop()
        self.totals[label] += elapsed - children
        self.calls[label] += 1
        if self._stack:
            self._stack[-1] += elapsed

    def wrap(self, owner: Any, attr: str, label: str, absorb: bool = False) -> None:
        original = getattr(owner, attr)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if timer._absorbing:
                return original(*args, **kwargs)
            start = timer._enter()
            timer._absorbing += absorb
            try:
                return original(*args, **kwargs)
            finally:
                timer._absorbing -= absorb
                timer._exit(label, start)

        self._restore.append((owner, attr, original))
        setattr(owner, attr, timed)

    @contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Time a block as a stage (the outermost one: one live update)."""
        start = self._enter()
        try:
            yield
        finally:
            self._exit(label, start)

    def per_call_ms(self, labels: Sequence[str], n: int, cpu: bool = False) -> dict[str, float]:
        """Mean milliseconds per one of ``n`` repetitions, per stage."""
        return {s: float(self.totals[s][int(cpu)] / n * MS) for s in labels}

    def restore(self) -> None:
        for owner, attr, original in reversed(self._restore):
            setattr(owner, attr, original)
        self._restore.clear()


SOLVE_NUMPY = ("pipeline: numpy stages and kernels (start, request, rig-shaped answer, "
               "exact reach)")
SOLVE_ONNX = "pipeline: onnxruntime (networks, the decoder and its Jacobian)"
SOLVE_COMPILED = "pipeline: compiled networks (the universal edit, the refinement run)"
# Stages of a live update, in the order they run. (owner, attribute, label, absorb)
LIVE_STAGES: tuple[tuple[Any, str, str, bool], ...] = (
    (empties, "moved", "handler: moved check", False),
    (state, "get", "read: kept edit state (mapping, rig, effectors, base pose)", True),
    (empties, "matrices", "read: effector empties", True),
    (empties, "targets", "read: effector empties", True),
    (rig_io, "read_pose", "read: pose bones (foreach_get)", True),
    (base_pose, "base_is_current", "read: base pose", True),
    (base_pose, "base_arrays", "read: base pose", True),
    (editors, "editor_for", "read: editor lookup", True),
    (model_sets, "load", "read: model set lookup", True),
    (rig_io, "joint_positions", "forward kinematics (numpy)", False),
    (PoseEditor, "solve", SOLVE_NUMPY, False),
    (core_models.Module, "run", SOLVE_ONNX, False),
    (core_models.Module, "run_all", SOLVE_ONNX, False),
    (compiled_networks.CompiledUniversal, "edit", SOLVE_COMPILED, False),
    (core_refine.native_run, "_refine_native", SOLVE_COMPILED, False),
    (rig_io, "solve_rotations", "positions -> rotations", True),
    (rig_io, "write_pose", "write pose", True),
    (base_pose, "mark_written", "write pose", True),
    (base_pose, "store_base", "write pose", True),
    (empties, "mark_solved", "write pose", False),
    (metric_requests, "store_measured", "measure metrics (panel values)", True),
    (live, "pause_later", "measure metrics (panel values)", True),
)
HANDLER_REST = "handler and edit: the rest"
DEPSGRAPH = "depsgraph evaluation (Blender)"
STAGE_ORDER = (*dict.fromkeys(s[2] for s in LIVE_STAGES), HANDLER_REST, DEPSGRAPH)


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


# ------------------------------------------------------------------ rigs


def world_heads(obj: bpy.types.Object) -> np.ndarray:
    """World position of the 21 joints (mapped bones' heads) from Blender's evaluated pose."""
    heads = rigs.mapped_heads(obj)
    return np.array([heads[j] for j in JOINTS])


def setup_rig(kind: str, models: Path, bvh: Path | None) -> bpy.types.Object:
    """A fresh scene with the rig mapped and effectors on hands, feet and head. ``kind``:
    "bvh" (the clip imported), "rigify" (a Rigify-size deform rig) or "generated" (a
    Rigify rig generated from the human metarig, posed through its controls)."""
    if kind == "generated":
        obj = rigs.open_rigify(rigs.rigify_blend(GENERATED_BLEND))
        host.use_models(bpy.context.scene, models)
        rigs.limbs_to_fk(obj)  # limbs in FK, as the published figures had them
    else:
        host.new_scene(models)
        obj = rigs.import_bvh(bvh) if kind == "bvh" else rigs.rigify(full=True)
    rigs.select_only(obj)
    _op(bpy.ops.npe.map_rig, preset="auto")
    _op(bpy.ops.npe.add_effectors, preset="LIMBS")
    return obj


def _op(op: Callable[..., set[str]], **kwargs: Any) -> None:
    result = op(**kwargs)
    if result != {"FINISHED"}:
        raise RuntimeError(f"{op.idname_py()} returned {result}")


def effector_empty(obj: bpy.types.Object, joint: str) -> bpy.types.Object:
    return next(item.empty for item in obj.npe.effectors if item.joint == joint)


def drag_path(start: np.ndarray, n: int) -> np.ndarray:
    """``n`` successive positions of a hand dragged around ``start`` (a closed loop that
    rises, falls and sways: every move is a new problem, none far from the last)."""
    theta = np.linspace(0.0, 2.0 * math.pi, n + 1)[1:]
    offset = np.stack([np.sin(theta), 0.5 * np.sin(2.0 * theta), 1.0 - np.cos(theta)], axis=1)
    return start + DRAG_RADIUS * offset


# ------------------------------------------------------------------ live updates


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
            rig_controls.follow_pending()  # (limbs in IK: the timer it starts)
            view_layer.update()  # ...and this evaluates it, if the first did not already
        else:
            with timer.stage(DEPSGRAPH):
                empty.location = target
                view_layer.update()
                rig_controls.follow_pending()
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


# ------------------------------------------------------------------ accuracy vs Blender IK


def clip_heads(scene: bpy.types.Scene, obj: bpy.types.Object, frames: Sequence[int]
               ) -> dict[int, np.ndarray]:
    """Ground truth: the action's world joints at each frame."""
    out = {}
    for f in frames:
        scene.frame_set(int(f))
        out[int(f)] = world_heads(obj)
    return out


def sample_pairs(first: int, last: int, n: int, rng: np.random.Generator
                 ) -> list[tuple[int, int]]:
    i = rng.integers(first, last + 1, n)
    j = np.clip(i + rng.integers(-PAIR_OFFSET, PAIR_OFFSET + 1, n), first, last)
    return list(zip(i.tolist(), j.tolist(), strict=True))


def align(pose: np.ndarray, to: np.ndarray) -> np.ndarray:
    """``pose`` (21, 3, world, Z up) moved onto ``to``'s ground point (the pelvis on the
    floor) and turned to its facing (the hips' left-right line), heights kept: x' as the
    engine benchmark's model space sees it, a change of pose rather than a walk."""
    def frame(p: np.ndarray) -> tuple[np.ndarray, float]:
        left = p[JOINT_INDEX["l_thigh"]] - p[JOINT_INDEX["r_thigh"]]
        ground = p[JOINT_INDEX["pelvis"]] * np.array([1.0, 1.0, 0.0])
        return ground, math.atan2(left[1], left[0])

    (o_from, yaw_from), (o_to, yaw_to) = frame(pose), frame(to)
    c, s = math.cos(yaw_to - yaw_from), math.sin(yaw_to - yaw_from)
    turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return (pose - o_from) @ turn.T + o_to


def errors(heads: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-effector distances and per-other-joint distances (m) of one solved pose."""
    eff = [JOINT_INDEX[j] for j in EFFECTORS]
    rest = [k for k in range(len(JOINTS)) if k not in eff]
    d = np.linalg.norm(heads - truth, axis=1)
    return d[eff], d[rest]


def addon_solves(scene: bpy.types.Scene, obj: bpy.types.Object, pairs: list[tuple[int, int]],
                 truth: dict[int, np.ndarray], refine: int) -> dict[str, list]:
    """The add-on's Solve on each pair: the rig at x, the empties at x' joints (aligned)."""
    obj.npe.refine_steps = refine
    view_layer = bpy.context.view_layer
    out: dict[str, list] = {"eff": [], "rest": [], "times": []}
    for i, j in pairs:
        scene.frame_set(i)
        goal = align(truth[j], truth[i])
        for joint in EFFECTORS:
            effector_empty(obj, joint).location = goal[JOINT_INDEX[joint]]
        view_layer.update()
        start = time.perf_counter()
        _op(bpy.ops.npe.solve)
        view_layer.update()
        out["times"].append(time.perf_counter() - start)
        eff, rest = errors(world_heads(obj), goal)
        out["eff"].append(eff)
        out["rest"].append(rest)
    return out


def ik_chains(obj: bpy.types.Object) -> list[tuple[str, str, int, bool, str]]:
    """Per effector: (joint, bone carrying the IK constraint, chain_count, use_tail,
    top bone). The constraint sits on the bone whose tail is the joint when there is one
    (the parent, if connected at the joint), else on the joint's bone with use_tail off."""
    joints = mapped_rig.mapping_dict(obj.data)
    bones = obj.data.bones
    chains = []
    for joint in EFFECTORS:
        bone = bones[joints[joint]]
        top = joints[IK_CHAIN_TOP[joint]]
        parent = bone.parent
        tail_at_joint = parent is not None and (parent.tail_local - bone.head_local).length \
            < TAIL_ATOL / max(obj.matrix_world.to_scale()[0], 1e-9)
        owner = parent if tail_at_joint else bone
        count, b = 1, owner
        while b.name != top:
            b = b.parent
            if b is None:
                raise RuntimeError(f"{top} is not above {owner.name}")
            count += 1
        chains.append((joint, owner.name, count, tail_at_joint, top))
    return chains


def blender_ik(scene: bpy.types.Scene, obj: bpy.types.Object, pairs: list[tuple[int, int]],
               truth: dict[int, np.ndarray], solver: str) -> tuple[dict[str, list], list]:
    """Blender's IK constraints (default settings) to five target empties on each pair."""
    obj.pose.ik_solver = solver
    chains = ik_chains(obj)
    targets, constraints = {}, []
    for joint, owner, count, use_tail, _top in chains:
        target = bpy.data.objects.new(f"IK target {joint}", None)
        scene.collection.objects.link(target)
        con = obj.pose.bones[owner].constraints.new("IK")
        con.target = target
        con.chain_count = count
        con.use_tail = use_tail
        targets[joint] = target
        constraints.append((owner, con))
    view_layer = bpy.context.view_layer
    out: dict[str, list] = {"eff": [], "rest": [], "times": []}
    try:
        for i, j in pairs:
            scene.frame_set(i)
            goal = align(truth[j], truth[i])
            for joint, target in targets.items():
                target.location = goal[JOINT_INDEX[joint]]
            start = time.perf_counter()
            view_layer.update()
            out["times"].append(time.perf_counter() - start)
            eff, rest = errors(world_heads(obj), goal)
            out["eff"].append(eff)
            out["rest"].append(rest)
    finally:
        for owner, con in constraints:
            obj.pose.bones[owner].constraints.remove(con)
        for target in targets.values():
            bpy.data.objects.remove(target, do_unlink=True)
        obj.pose.ik_solver = "LEGACY"
    return out, [list(c) for c in chains]


def accuracy_row(method: str, res: dict[str, list]) -> dict[str, Any]:
    by_joint = np.array(res["eff"])  # (pairs, effectors)
    eff = by_joint.ravel()
    rest = np.concatenate(res["rest"]) if res["rest"] else np.zeros(0)
    row = {"method": method,
           "effector_by_joint_mean_mm": dict(zip(EFFECTORS, (by_joint.mean(axis=0) * MM
                                                             ).round(2).tolist(), strict=True)),
           "effector_mean_mm": float(eff.mean() * MM),
           "effector_median_mm": float(np.median(eff) * MM),
           "effector_p95_mm": float(np.percentile(eff, 95) * MM),
           "non_effector_mpjpe_cm": float(rest.mean() * CM)}
    if res.get("times"):
        row.update(summary(res["times"]))
    return row


def ik_comparison(models: Path, clips: Sequence[Path], pairs: int, seed: int
                  ) -> dict[str, Any]:
    """Accuracy and time of the add-on's Solve and Blender's IK on the same pairs."""
    rng = np.random.default_rng(seed)
    per_clip = max(1, pairs // len(clips))
    results: dict[str, dict[str, list]] = defaultdict(lambda: {"eff": [], "rest": [],
                                                                "times": []})
    chains: list = []
    methods = {"no edit: x itself (distance to the targets)": None,
               "add-on Solve, refinement off": ("addon", 0),
               f"add-on Solve, refinement {DEFAULT_REFINE} steps (default)":
                   ("addon", DEFAULT_REFINE),
               "Blender IK constraints, Legacy solver (default)": ("ik", "LEGACY"),
               "Blender IK constraints, iTaSC solver": ("ik", "ITASC")}
    for n, clip in enumerate(clips, 1):
        host.progress(f"IK comparison: clip {n}/{len(clips)} {clip.name} "
                      f"({per_clip} pairs x {len(methods) - 1} methods)")
        obj = setup_rig("bvh", models, clip)
        scene = bpy.context.scene
        first, last = (int(v) for v in obj.animation_data.action.frame_range)
        pp = sample_pairs(first, last, per_clip, rng)
        truth = clip_heads(scene, obj, sorted({f for p in pp for f in p}))
        for i, j in pp:
            eff, rest = errors(truth[i], align(truth[j], truth[i]))
            results["no edit: x itself (distance to the targets)"]["eff"].append(eff)
            results["no edit: x itself (distance to the targets)"]["rest"].append(rest)
        for method, spec in methods.items():
            if spec is None:
                continue
            kind, arg = spec
            if kind == "addon":
                res = addon_solves(scene, obj, pp, truth, arg)
            else:
                res, chains = blender_ik(scene, obj, pp, truth, arg)
            for key in ("eff", "rest", "times"):
                results[method][key] += res[key]
    rows = [accuracy_row(m, results[m]) for m in methods]
    timed = [r for r in rows if "median_ms" in r]
    base = next(r for r in timed if r["method"].startswith("Blender IK constraints, Legacy"))
    for r in timed:
        r["ratio_to_blender_ik"] = r["median_ms"] / base["median_ms"]
    return {"pairs": per_clip * len(clips), "clips": [c.name for c in clips],
            "effectors": list(EFFECTORS), "ik_chains": chains, "rows": rows}


# ------------------------------------------------------------------ propagation


PROPAGATION_STAGES: tuple[tuple[Any, str, str, bool], ...] = (
    (rig_keys, "read_clip", "read the action (F-curve evaluate)", True),
    (rig_io, "joint_positions", "forward kinematics (numpy)", True),
    (propagation, "propagate", "propagate (engine: encode, modules, decode)", True),
    (rig_io, "solve_rotations", "positions -> rotations", True),
    (rig_keys, "write_keys", "write keys (F-curve data)", True),
    (base_pose, "make_current_base", "new base pose", True),
)


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
PROPAGATION_TARGET_MS = {"bvh": 500.0, "generated": 2000.0}
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
    included)."""
    host.progress(f"propagation ({kind}): {runs} runs over {PROPAGATION_FRAMES} frames")
    obj = setup_rig(kind, models, clip)
    scene = bpy.context.scene
    if kind == "bvh":
        long_action(obj, PROPAGATION_FRAMES)
    else:
        sway_action(obj, PROPAGATION_FRAMES)
    scene.frame_set(PROPAGATION_CENTER)
    _op(bpy.ops.npe.remove_effectors, all=True)
    _op(bpy.ops.npe.add_effectors, preset="LIMBS")
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
            _op(bpy.ops.npe.spread_edit)
            times.append(time.perf_counter() - start)
    finally:
        timer.restore()
    stages = timer.per_call_ms(list(dict.fromkeys(s[2] for s in PROPAGATION_STAGES)), runs)
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


# ------------------------------------------------------------------ main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="training.blender_side.bench", description=__doc__)
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--clips", nargs="+", required=True, type=Path,
                   help="BVH test clips; the first also serves the live and propagation runs")
    p.add_argument("--out", required=True, type=Path, help="JSON result")
    p.add_argument("--moves", type=int, default=200)
    p.add_argument("--profile-moves", type=int, default=100)
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--propagation-runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", nargs="*", default=(), choices=("live", "ik", "propagation"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    host.start()
    result: dict[str, Any] = {"blender": bpy.app.version_string, "models": str(args.models),
                              "moved_effector": MOVED, "effectors": list(EFFECTORS)}
    if "live" not in args.skip:
        result["live"] = [
            *live_benchmark("bvh", f"BVH ({args.clips[0].name})", args.models, args.clips[0],
                            args.moves, args.profile_moves),
            *live_benchmark("rigify", "Rigify-size (79 bones, object scale 0.01)",
                            args.models, None, args.moves, args.profile_moves),
            *live_benchmark("generated", "generated Rigify rig (controls)",
                            args.models, None, args.moves, args.profile_moves)]
    if "ik" not in args.skip:
        result["ik"] = ik_comparison(args.models, args.clips, args.pairs, args.seed)
    if "propagation" not in args.skip:
        result["propagation"] = propagation_benchmark(args.models, args.clips[0],
                                                      args.propagation_runs)
        result["propagation_generated"] = propagation_benchmark(
            args.models, args.clips[0], args.propagation_runs, "generated")
    write_json(args.out, result)
    host.progress(f"wrote {args.out}")


if __name__ == "__main__":
    main()
