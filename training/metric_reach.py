"""How far the metric networks follow a request, straight from the checkpoints.

For validation poses x, each metric is requested at its current value + delta (degrees or
centimetres, only where the request stays inside the metric's training range); the
network's edit is applied as the engine applies it, ``x + D(M(E(x), v)) - D(E(x))``, and
the reach is the achieved change over the requested one (median per metric and delta).
No refinement: this measures the networks themselves.

``python -m training.metric_reach --runs runs/train --data runs/poses.npz``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blender_addon.core.fileio import write_json
from blender_addon.core.metrics import MetricSpec, evaluate_metric
from training.data import PoseData
from training.nets import MetricNet
from training.recipes import load_autoencoder
from training.train import load_checkpoint

DELTAS = (-20.0, -10.0, 10.0, 20.0, 40.0)  # degrees for angles, centimetres otherwise


@torch.no_grad()
def metric_reach(runs: str | Path, data: str | Path, poses: int = 300, split: str = "val",
                 deltas: tuple[float, ...] = DELTAS, seed: int = 0) -> dict[str, Any]:
    """Median achieved / requested change per metric and delta (see the module doc)."""
    runs = Path(runs)
    ae = load_autoencoder(runs / "ae.pt").eval()
    pd = PoseData.load(data)
    pool = np.flatnonzero(pd.split_mask(split))
    pick = np.random.default_rng(seed).choice(pool, size=min(poses, len(pool)), replace=False)
    x = pd.poses[pick].astype(np.float32)
    xt = torch.from_numpy(x)
    z = ae.encode(xt)
    rec = ae.decode(z).reshape(xt.shape)
    result: dict[str, Any] = {"runs": str(runs), "data": str(data), "split": split,
                              "poses": len(x), "deltas": list(deltas), "metrics": {}}
    for path in sorted(runs.glob("metric_*.pt")):
        ckpt = load_checkpoint(path, "metric")
        cfg = ckpt["config"]
        net = MetricNet(cfg["latent"], 0.0, 1.0, cfg["hidden"])
        net.load_state_dict(ckpt["best_state"] or ckpt["state_dict"])
        net.eval()
        spec = MetricSpec.from_dict(cfg["spec"])
        lo, hi = cfg["range"]
        unit = 1.0 if spec.unit == "deg" else 0.01
        current = evaluate_metric(x, spec)
        row: dict[str, Any] = {}
        for d in deltas:
            want = current + d * unit
            inside = (want >= lo) & (want <= hi)
            if inside.sum() < 10:
                row[f"{d:+g}"] = None
                continue
            v = torch.from_numpy(want[inside].astype(np.float32))[:, None]
            edited = xt[inside] + ae.decode(net(z[inside], v)).reshape(-1, *x.shape[1:]) \
                - rec[inside]
            got = evaluate_metric(edited.numpy(), spec) - current[inside]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.metric_reach", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="checkpoint folder with ae.pt and metric_*.pt")
    p.add_argument("--data", required=True, help="dataset .npz")
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--poses", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args(argv)
    result = metric_reach(args.runs, args.data, args.poses, args.split, seed=args.seed)
    print(markdown(result))
    if args.json:
        write_json(args.json, result)
    else:
        print(json.dumps({k: v["median_over_deltas"] for k, v in result["metrics"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
