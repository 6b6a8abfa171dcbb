"""``python -m training benchmark --suite latency``: the engine's speed alone, and where.

The engine suite's accuracy passes take minutes; this times only what a user waits for,
one thread, one pose at a time, with the machine it ran on, so it can be run on a quiet
machine next to a baseline: single solves through :meth:`PoseEditor.solve` (the engine
suite's latency table: each pose a fresh problem), and Live drag updates
(``solve(drag=True)`` with the default options, and with refinement off, as *Refine While
Dragging* off does): one hand dragged 10-25 cm in :data:`DRAG_STEPS` steps from each start
pose, hands, feet and head as effectors, so each update solves again from the same start.
The same calls also run with the compiled kernels switched off
(``NPE_NATIVE=0``, numpy alone), in turn with them on: the kernels' speed-up.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from blender_addon.core import native, skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions
from training.blender import benchmark as benchmark_blender
from training.evaluation import benchmark

DRAG_STEPS = 10  # updates per drag
DRAG_SPAN = (0.10, 0.25)  # m: how far the hand goes
DRAG_JOINT = "r_hand"
DRAG_EFFECTORS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
# The kernels' comparison runs the same calls on both sides in blocks of this many, in
# turn: each side's caches stay warm within a block, and a drifting machine speed reaches
# both alike.
GRAPH_BLOCK = 50
DRAG_SETTINGS = {"refined (default)": SolveOptions(),
                 "refinement off": SolveOptions(refine_steps=0)}
# What the default single solve's features cost (issue 15's planted feet and answers a rig
# can take, both on by default): the same single solves with them turned off, one and then
# both, so each feature's share of the latency is measured in the same run.
FEATURE_SETTINGS = {
    "universal, planted feet off": SolveOptions(refine_steps=0, keep_planted_feet=False),
    "universal, planted feet and rig-shaped answers off": SolveOptions(
        refine_steps=0, keep_planted_feet=False, fix_lengths=False),
    "universal + refinement, planted feet off": SolveOptions(keep_planted_feet=False),
    "universal + refinement, planted feet and rig-shaped answers off": SolveOptions(
        keep_planted_feet=False, fix_lengths=False),
}
OFF_M = 0.001  # m: a drag update that leaves a goal this far off its target shows it
JUMP_M = 0.005  # m: a move of the pose at the drag's pause the user sees


def machine() -> dict[str, Any]:
    """What the timings ran on: CPU, cores, load, and the numeric libraries."""
    import onnxruntime
    from threadpoolctl import threadpool_info

    return {**benchmark_blender.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
            "thread_pools": {p["internal_api"]: p["num_threads"] for p in threadpool_info()}}


def drag_updates(poses: np.ndarray, rng: np.random.Generator,
                 span: tuple[float, float] = DRAG_SPAN
                 ) -> Iterator[tuple[np.ndarray, list[Effector]]]:
    """Live drag updates from each start pose (see the module's docstring): the start pose
    and the effectors of each update; the hand goes ``span`` metres in all."""
    hand = skeleton.JOINT_INDEX[DRAG_JOINT]
    for pose in poses:
        move = rng.normal(size=3)
        move *= rng.uniform(*span) / np.linalg.norm(move)
        for step in range(1, DRAG_STEPS + 1):
            target = pose.copy()
            target[hand] += move * step / DRAG_STEPS
            yield pose, benchmark.effectors_at(target, DRAG_EFFECTORS)


def drag_latency(editor: PoseEditor, poses: np.ndarray, options: SolveOptions,
                 rng: np.random.Generator) -> dict[str, float]:
    times = []
    for pose, effs in drag_updates(poses, rng):
        start = time.perf_counter()
        editor.solve(pose, effs, options=options, drag=True)
        times.append(time.perf_counter() - start)
    return {**benchmark.timing(times), "updates": len(times)}


def feature_costs(editor: PoseEditor, x: np.ndarray, x2: np.ndarray
                  ) -> dict[str, dict[str, dict[str, float]]]:
    """Single solves as in :func:`benchmark.latency_table` with :data:`FEATURE_SETTINGS`:
    per effector set, per setting."""
    return {set_name: {name: benchmark.latency(editor, x, x2, joints, options)
                       for name, options in FEATURE_SETTINGS.items()}
            for set_name, joints in benchmark.LATENCY_SETS.items()}


def drag_continuity(editor: PoseEditor, poses: np.ndarray, rng: np.random.Generator,
                    span: tuple[float, float] = DRAG_SPAN) -> dict[str, float]:
    """Live mode as the user sees it, default options: the drag updates of
    :func:`drag_updates` (``solve(drag=True)``), and at each drag's end the pause's solve
    of the same targets (``solve()``: the full-body FABRIK fallback a drag update skips).
    How many updates leave a goal off its target, and how far the pose moves when the drag
    pauses (the largest joint move): a pose that jumps then is one the drag never showed."""
    misses, jumps, pause_misses = [], [], []
    for k, (pose, effs) in enumerate(drag_updates(poses, rng, span)):
        shown = editor.solve(pose, effs, drag=True)
        misses.append(shown.effector_error.max())
        if (k + 1) % DRAG_STEPS == 0:
            paused = editor.solve(pose, effs)
            jumps.append(float(np.linalg.norm(shown.positions - paused.positions,
                                              axis=-1).max()))
            pause_misses.append(paused.effector_error.max())
    jumps_mm = np.array(jumps) * benchmark.MM
    return {"updates": len(misses), "drags": len(jumps),
            "updates_off_pct": float(np.mean(np.array(misses) > OFF_M) * 100.0),
            "pauses_off_pct": float(np.mean(np.array(pause_misses) > OFF_M) * 100.0),
            "jumps_over": int((jumps_mm > JUMP_M * benchmark.MM).sum()),
            "jump_median_mm": float(np.median(jumps_mm)),
            "jump_p90_mm": float(np.percentile(jumps_mm, 90)),
            "jump_max_mm": float(jumps_mm.max())}


Call = tuple[np.ndarray, list[Effector], bool]  # a pose, its effectors, whether a drag
# An A/B side: the editor that solves, and the context it solves in (numpy alone, say).
Side = tuple[PoseEditor, Callable[[], AbstractContextManager[Any]]]


def _interleaved(sides: dict[str, Side], calls: list[Call],
                 options: SolveOptions | None = None) -> dict[str, list[float]]:
    """Each side's seconds per call: the same calls on every side in blocks of
    :data:`GRAPH_BLOCK`, in turn (the order flipped every other block), so each side's
    caches stay warm within a block and a drifting machine speed reaches all alike.
    ``options``: the solves' (default: the defaults)."""
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(0, len(calls), GRAPH_BLOCK):
        for name in (names if k % (2 * GRAPH_BLOCK) == 0 else names[::-1]):
            editor, context = sides[name]
            with context():
                for pose, effs, drag in calls[k:k + GRAPH_BLOCK]:
                    start = time.perf_counter()
                    editor.solve(pose, effs, options=options, drag=drag)
                    times[name].append(time.perf_counter() - start)
    return times


def _calls(x: np.ndarray, x2: np.ndarray, drags: int, seed: int
           ) -> dict[str, list[Call]]:
    """The refined calls both A/B comparisons time: single solves per effector set, and
    Live drag updates (pose, effectors, drag)."""
    cases: dict[str, list[Call]] = {
        f"single solve, {name}": [
            (p, benchmark.effectors_at(t, joints), False) for p, t in zip(x, x2, strict=True)]
        for name, joints in benchmark.LATENCY_SETS.items()}
    cases["Live drag update (hands, feet, head)"] = [
        (p, effs, True) for p, effs in drag_updates(x[:drags], np.random.default_rng(seed))]
    return cases


def kernel_speedup(editor: PoseEditor, x: np.ndarray, x2: np.ndarray, drags: int, seed: int
                   ) -> dict[str, dict[str, Any]]:
    """Default-option calls (:func:`_calls`) with the compiled kernels and with numpy alone,
    in blocks of :data:`GRAPH_BLOCK` calls on both in turn; {} where no kernels load."""
    if native.kernels() is None:
        return {}
    out = {}
    sides = {"kernels": (editor, nullcontext), "numpy": (editor, native.switched_off)}
    calls = _calls(x, x2, drags, seed)
    cases = {name: (c, None) for name, c in calls.items()}
    # The networks' answer alone too: the compiled networks (compiled_networks) serve it.
    cases.update({name.replace("single solve", "single solve, refinement off"):
                  (c, SolveOptions(refine_steps=0))
                  for name, c in calls.items() if name.startswith("single solve")})
    for name, (calls_of, options) in cases.items():
        times = _interleaved(sides, calls_of, options)
        out[name] = {side: benchmark.timing(t) for side, t in times.items()}
        out[name]["speedup"] = out[name]["numpy"]["median_ms"] / out[name]["kernels"]["median_ms"]
        out[name]["speedup_p95"] = out[name]["numpy"]["p95_ms"] / out[name]["kernels"]["p95_ms"]
    return out


def run(models_dir: str, data: str | None = None, bvh: list[str] | None = None,
        map_spec: str = "auto", units: str = "auto", solves: int = 1000, drags: int = 60,
        max_clips: int = 400, seed: int = 0, up: str = "auto") -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    clips, description = benchmark.load_clips(data, bvh, map_spec, units, max_clips, up)
    editor = PoseEditor(ModelSet(models_dir))
    result: dict[str, Any] = {"data": description, "models": models_dir, "solves": solves,
                              "machine": machine(), "drag_updates": {}}
    x, x2 = benchmark.sample_pairs(clips, solves, rng)
    result["latency"] = benchmark.latency_table(editor, x, x2)
    result["features"] = feature_costs(editor, x, x2)
    for name, options in DRAG_SETTINGS.items():
        result["drag_updates"][name] = drag_latency(editor, x[:drags], options,
                                                    np.random.default_rng(seed + 1))
    result["drag_continuity"] = drag_continuity(editor, x[:drags], np.random.default_rng(seed + 1))
    result["kernels"] = kernel_speedup(editor, x, x2, drags, seed + 1)
    result["machine"]["load_avg_after"] = list(os.getloadavg())
    return result


def _pools(m: dict[str, Any]) -> str:
    """The thread pools numpy and others loaded, and their threads while timing."""
    pools = m.get("thread_pools", {})
    return ", ".join(f"{k}: {v} thread(s)" for k, v in pools.items()) or "no thread pools"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"Data: {result['data']}; models `{result['models']}`; {m['cpu']}, {m['cores']} "
             f"cores (one thread used; {_pools(m)}), load average "
             f"{m['load_avg_1_5_15'][0]:.2f} before / "
             f"{m['load_avg_after'][0]:.2f} after (1 min); Python {m['python']}, numpy "
             f"{m['numpy']}, onnxruntime {m['onnxruntime']}.", "",
             *benchmark.latency_lines(result["latency"])]
    for name, r in result["drag_updates"].items():
        lines.append(f"| Live drag update ({r['updates']} updates; hands, feet, head) | {name} | "
                     f"{r['median_ms']:.3f} | {r['p95_ms']:.3f} | – |")
    features = result.get("features")
    if features:
        sets = list(features)
        lines += ["", "**What the default's features cost** (the same single solves with "
                  "planted feet, then also answers a rig can take, turned off; refined "
                  "without the latter, the numpy steps run: the kernels' refinement is made "
                  "for rig-shaped answers):", "",
                  f"| median (ms), one thread | {' | '.join(sets)} |",
                  "|---|" + "---|" * len(sets)]
        for name in features[sets[0]]:
            lines.append(f"| {name} | " + " | ".join(
                f"{features[s][name]['median_ms']:.3f}" for s in sets) + " |")
    c = result.get("drag_continuity")
    if c:
        off, jump = OFF_M * benchmark.MM, JUMP_M * benchmark.MM
        lines += ["", f"**Live drag, then the pause** (the same {c['drags']} drags, default "
                  f"options; not timed): {c['updates_off_pct']:.1f} % of the {c['updates']} "
                  f"drag updates leave a goal more than {off:.0f} mm off its target "
                  f"(the pauses: {c['pauses_off_pct']:.1f} %); when a drag pauses, the pose "
                  f"moves by more than {jump:.0f} mm in {c['jumps_over']} of "
                  f"{c['drags']} drags (median {c['jump_median_mm']:.2f} mm, p90 "
                  f"{c['jump_p90_mm']:.1f} mm, largest {c['jump_max_mm']:.1f} mm)."]
    if result.get("kernels"):
        lines += ["", "**Compiled kernels** (default options; the same calls with the "
                  "compiled kernels and with numpy alone, `NPE_NATIVE=0`, in blocks of "
                  f"{GRAPH_BLOCK} in turn):", "",
                  "| call | kernels, median (ms) | numpy, median (ms) | speed-up | "
                  "kernels, p95 (ms) | numpy, p95 (ms) | speed-up, p95 |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in result["kernels"].items():
            lines.append(f"| {name} | {r['kernels']['median_ms']:.3f} | "
                         f"{r['numpy']['median_ms']:.3f} | {r['speedup']:.2f}× | "
                         f"{r['kernels']['p95_ms']:.3f} | {r['numpy']['p95_ms']:.3f} | "
                         f"{r['speedup_p95']:.2f}× |")
    return "\n".join(lines) + "\n"
