"""The slider sweep: each metric asked for its current value + delta, as a user drags it.

For test poses and each metric, a request of the current value plus delta in {-20, -10, -5,
+5, +10, +20, +40} (degrees, or centimetres for lengths), kept where it stays inside the
range the metric's network saw in training, is solved through the engine API the add-on
calls (rig units, default options or the networks alone). Per metric and delta: the share of
the requested change the pose makes (median), how much the metrics not asked for changed
(median over poses of the largest change: degrees for angles, centimetres for lengths) and
how far the joints moved (mean).

``evaluate`` runs it on a dataset's test split; ``benchmark --suite sliders`` (:func:`run`)
on any clips, BVH files in their own skeleton's proportions and units among them: motion
from another studio, as a user's rig brings it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import PoseEditor, SolveOptions
from training.evaluation.drags import sample_poses

DELTAS = (-20.0, -10.0, -5.0, 5.0, 10.0, 20.0, 40.0)
METHODS = {"networks alone": SolveOptions(refine_steps=0),
           "default options (refined)": SolveOptions()}
DEFAULT_METHOD = "default options (refined)"
MIN_POSES = 10  # a delta with fewer poses inside the range is not reported
CM = 100.0


def _unit(editor: PoseEditor, name: str) -> float:
    """Request units per delta unit: 1 for degrees, 0.01 (m per cm) for lengths."""
    return 1.0 if editor.models.metrics[name].metric.unit == "deg" else 0.01


def sweep(editor: PoseEditor, poses: np.ndarray, options: SolveOptions,
          deltas: tuple[float, ...] = DELTAS) -> dict[str, dict[str, Any]]:
    """Per metric and delta: share, other metrics' change, joints moved (see module doc)."""
    now = editor.metric_values(poses)
    ranges = editor.metric_ranges(poses, widen=False)
    no_effectors = np.zeros(poses.shape[:2])
    out: dict[str, dict[str, Any]] = {}
    for name in now:
        unit = _unit(editor, name)
        lo, hi = ranges[name]
        row: dict[str, Any] = {"unit": "deg" if unit == 1.0 else "cm"}
        for d in deltas:
            want = now[name] + d * unit
            inside = (want > lo) & (want < hi)
            if inside.sum() < MIN_POSES:
                row[f"{d:+g}"] = None
                continue
            x = poses[inside]
            edited = editor.solve_arrays(x, no_effectors[inside], x,
                                         metrics={name: want[inside]},
                                         options=options).positions
            got = editor.metric_values(edited)
            change = {k: np.abs(got[k] - now[k][inside]) for k in got if k != name}
            angles = [v for k, v in change.items() if _unit(editor, k) == 1.0]
            lengths = [v * CM for k, v in change.items() if _unit(editor, k) != 1.0]
            row[f"{d:+g}"] = {
                "share": float(np.median((got[name] - now[name][inside]) / (d * unit))),
                "others_deg": float(np.median(np.max(angles, axis=0))) if angles else 0.0,
                "others_cm": float(np.median(np.max(lengths, axis=0))) if lengths else 0.0,
                "joints_moved_cm": float(np.linalg.norm(edited - x, axis=-1).mean() * CM),
                "poses": int(inside.sum()),
            }
        out[name] = row
    return out


def markdown(sweeps: dict[str, dict[str, dict[str, Any]]]) -> str:
    """One table per method: share (other metrics' change in deg / cm) per metric and delta."""
    lines: list[str] = []
    for method, table in sweeps.items():
        deltas = [k for k in next(iter(table.values())) if k != "unit"]
        lines += [f"Sliders, {method}: achieved / requested change (other metrics' change, "
                  "median: deg / cm)", "",
                  "| metric | unit | " + " | ".join(deltas) + " |",
                  "|---|---|" + "---|" * len(deltas)]
        for name, row in table.items():
            cells = ["-" if row[d] is None else
                     f"{row[d]['share']:.2f} ({row[d]['others_deg']:.1f} / "
                     f"{row[d]['others_cm']:.1f})" for d in deltas]
            lines.append(f"| {name} | {row['unit']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def run(models_dir: str, clips: list[np.ndarray], description: str, n: int = 300,
        seed: int = 0) -> dict[str, Any]:
    """The sweep of every method on ``n`` poses drawn over the frames of ``clips`` (rig
    space: their own proportions and units)."""
    poses = sample_poses(clips, n, np.random.default_rng(seed)).astype(np.float64)
    editor = PoseEditor(ModelSet(models_dir))
    return {"data": description, "models": str(models_dir), "poses": n, "seed": seed,
            "sliders": {method: sweep(editor, poses, options)
                        for method, options in METHODS.items()}}


def report(result: dict[str, Any], methods: tuple[str, ...] | None = None) -> str:
    """:func:`run`'s report: where the poses come from, then :func:`markdown` of the
    ``methods`` (default all)."""
    chosen = {k: v for k, v in result["sliders"].items() if methods is None or k in methods}
    return (f"Data: {result['data']}; {result['poses']} poses (seed {result['seed']}); "
            f"models `{result['models']}`.\n\n" + markdown(chosen))
