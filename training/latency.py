"""``python -m training benchmark --suite latency``: the engine's speed alone, and where.

The engine suite's accuracy passes take minutes; this times only what a user waits for,
one thread, one pose at a time, with the machine it ran on, so it can be run on a quiet
machine next to a baseline: single solves through :meth:`PoseEditor.solve` (the engine
suite's latency table: each pose a fresh problem), and Live drag updates
(``solve(drag=True)`` with the default options, and with refinement off, as *Refine While
Dragging* off does): one hand dragged 10-25 cm in :data:`DRAG_STEPS` steps from each start
pose, hands, feet and head as effectors, so each update solves again from the same start.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions
from training import benchmark, benchmark_blender

DRAG_STEPS = 10  # updates per drag
DRAG_SPAN = (0.10, 0.25)  # m: how far the hand goes
DRAG_JOINT = "r_hand"
DRAG_EFFECTORS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
DRAG_SETTINGS = {"refined (default)": SolveOptions(),
                 "refinement off": SolveOptions(refine_steps=0)}


def machine() -> dict[str, Any]:
    """What the timings ran on: CPU, cores, load, and the numeric libraries."""
    import onnxruntime
    from threadpoolctl import threadpool_info

    return {**benchmark_blender.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
            "thread_pools": {p["internal_api"]: p["num_threads"] for p in threadpool_info()}}


def drag_latency(editor: PoseEditor, poses: np.ndarray, options: SolveOptions,
                 rng: np.random.Generator) -> dict[str, float]:
    """Live drag updates from each start pose (see the module's docstring)."""
    hand = skeleton.JOINT_INDEX[DRAG_JOINT]
    times = []
    for pose in poses:
        move = rng.normal(size=3)
        move *= rng.uniform(*DRAG_SPAN) / np.linalg.norm(move)
        for step in range(1, DRAG_STEPS + 1):
            target = pose.copy()
            target[hand] += move * step / DRAG_STEPS
            effs = [Effector(j, target[skeleton.JOINT_INDEX[j]]) for j in DRAG_EFFECTORS]
            start = time.perf_counter()
            editor.solve(pose, effs, options=options, drag=True)
            times.append(time.perf_counter() - start)
    return {**benchmark.timing(times), "updates": len(times)}


def run(models_dir: str, data: str | None = None, bvh: list[str] | None = None,
        map_spec: str = "auto", units: str = "auto", solves: int = 1000, drags: int = 60,
        max_clips: int = 400, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    clips, description = benchmark.load_clips(data, bvh, map_spec, units, max_clips)
    editor = PoseEditor(ModelSet(models_dir))
    result: dict[str, Any] = {"data": description, "models": models_dir, "solves": solves,
                              "machine": machine(), "drag_updates": {}}
    x, x2 = benchmark.sample_pairs(clips, solves, rng)
    result["latency"] = benchmark.latency_table(editor, x, x2)
    for name, options in DRAG_SETTINGS.items():
        result["drag_updates"][name] = drag_latency(editor, x[:drags], options,
                                                    np.random.default_rng(seed + 1))
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
    return "\n".join(lines) + "\n"
