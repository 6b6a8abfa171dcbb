"""How far the metric networks follow a request, from an exported model folder (run by
onnxruntime, what the add-on ships) or a training run's checkpoints.

For validation poses x, each metric is requested at its current value + delta (degrees or
centimetres, only where the request stays inside the metric's training range); the
network's edit is applied as the engine applies it, ``x + D(M(E(x), v)) - D(E(x))``, and
the reach is the achieved change over the requested one (median per metric and delta).
No refinement: this measures the networks themselves.

``python -m training slider-reach --set models runs/cmu.npz --json OUT.json``
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blender_addon.core.metrics import MetricSpec, evaluate_metric
from training.data.dataset import PoseData
from training.learning.nets import MetricNet
from training.learning.recipes import load_autoencoder
from training.learning.train import load_checkpoint

Array = Callable[..., np.ndarray]
GOOD_REACH = (0.95, 1.05)  # the band the summary line counts cells in

DELTAS = (-20.0, -10.0, 10.0, 20.0, 40.0)  # degrees for angles, centimetres otherwise


def _checkpoint_networks(runs: Path) -> tuple[Array, Array, list]:
    ae = load_autoencoder(runs / "ae.pt").eval()
    nets = []
    for path in sorted(runs.glob("metric_*.pt")):
        ckpt = load_checkpoint(path, "metric")
        cfg = ckpt["config"]
        net = MetricNet(cfg["latent"], 0.0, 1.0, cfg["hidden"])
        net.load_state_dict(ckpt["best_state"] or ckpt["state_dict"])
        net.eval()

        def edit(z: np.ndarray, v: np.ndarray, net: MetricNet = net) -> np.ndarray:
            return net(torch.from_numpy(z), torch.from_numpy(v)).numpy()
        nets.append((MetricSpec.from_dict(cfg["spec"]), tuple(cfg["range"]), edit))

    def encode(x: np.ndarray) -> np.ndarray:
        return ae.encode(torch.from_numpy(x)).numpy()

    def decode(z: np.ndarray) -> np.ndarray:
        return ae.decode(torch.from_numpy(z)).reshape(len(z), -1, 3).numpy()
    return encode, decode, nets


def _onnx_networks(models: Path) -> tuple[Array, Array, list]:
    from blender_addon.core.models import ModelSet

    ms = ModelSet(models, threads=1)
    nets = [(m.metric, m.value_range, m.run) for _, m in sorted(ms.metrics.items())]
    return ms.encode, ms.decode, nets


@torch.no_grad()
def metric_reach(source: str | Path, data: str | Path, poses: int = 300, split: str = "val",
                 deltas: tuple[float, ...] = DELTAS, seed: int = 0) -> dict[str, Any]:
    """Median achieved / requested change per metric and delta (see the module doc);
    ``source`` is a model folder (has a manifest) or a training run's folder."""
    from blender_addon.core.models import MANIFEST_NAME

    source = Path(source)
    encode, decode, nets = _onnx_networks(source) if (source / MANIFEST_NAME).is_file() \
        else _checkpoint_networks(source)
    pd = PoseData.load(data)
    pool = np.flatnonzero(pd.split_mask(split))
    pick = np.random.default_rng(seed).choice(pool, size=min(poses, len(pool)), replace=False)
    x = pd.poses[pick].astype(np.float32)
    z = encode(x)
    rec = decode(z)
    result: dict[str, Any] = {"source": str(source), "data": str(data), "split": split,
                              "poses": len(x), "deltas": list(deltas), "metrics": {}}
    for spec, (lo, hi), edit in nets:
        unit = 1.0 if spec.unit == "deg" else 0.01
        current = evaluate_metric(x, spec)
        row: dict[str, Any] = {}
        for d in deltas:
            want = current + d * unit
            inside = (want >= lo) & (want <= hi)
            if inside.sum() < 10:
                row[f"{d:+g}"] = None
                continue
            v = want[inside].astype(np.float32)[:, None]
            edited = x[inside] + decode(edit(z[inside], v)) - rec[inside]
            got = evaluate_metric(edited, spec) - current[inside]
            row[f"{d:+g}"] = {"reach": float(np.median(got / (d * unit))),
                              "poses": int(inside.sum())}
        shown = [r["reach"] for r in row.values() if r]
        result["metrics"][spec.name] = {"unit": "deg" if unit == 1.0 else "cm", **row,
                                        "median_over_deltas": float(np.median(shown))
                                        if shown else None}
    return result


def markdown(result: dict[str, Any]) -> str:
    deltas = [f"{d:+g}" for d in result["deltas"]]
    lines = ["| metric | " + " | ".join(deltas) + " |", "|---|" + "---|" * len(deltas)]
    for name, row in result["metrics"].items():
        cells = [f"{row[d]['reach']:.2f}" if row[d] else "–" for d in deltas]
        lines.append(f"| {name} ({row['unit']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_sets(sets: list[tuple[str, str]], poses: int = 300, split: str = "val", seed: int = 0
             ) -> dict[str, Any]:
    """One result per (model or run folder, dataset)."""
    torch.set_num_threads(1)
    return {"sets": [metric_reach(source, data, poses, split, seed=seed)
                     for source, data in sets]}


def _cells(result: dict[str, Any]) -> list[float]:
    return [c["reach"] for row in result["metrics"].values() for d in result["deltas"]
            if (c := row[f"{d:+g}"])]


def markdown_sets(result: dict[str, Any]) -> str:
    """One table, each cell the sets' reaches in order; then how many lie near 1."""
    first = result["sets"][0]
    deltas = [f"{d:+g}" for d in first["deltas"]]
    lines = ["| metric | " + " | ".join(deltas) + " |", "|---|" + "---|" * len(deltas)]
    for name, row in first["metrics"].items():
        cells = [" / ".join(f"{s['metrics'][name][d]['reach']:.2f}"
                            if s["metrics"][name][d] else "–" for s in result["sets"])
                 for d in deltas]
        unit = "°" if row["unit"] == "deg" else row["unit"]
        lines.append(f"| {name} ({unit}) | " + " | ".join(cells) + " |")
    lo, hi = GOOD_REACH
    lines.append("")
    for s in result["sets"]:
        cells = np.array(_cells(s))
        near = int(((cells >= lo) & (cells <= hi)).sum())
        lines.append(f"`{s['source']}` on `{s['data']}`: {near} of {len(cells)} cells within "
                     f"{lo}–{hi}, median distance from 1 "
                     f"{float(np.median(np.abs(cells - 1))):.3f}.")
        lines.append("")
    return "\n".join(lines[:-1]) + "\n"
