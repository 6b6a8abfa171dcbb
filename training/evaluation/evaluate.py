"""``python -m training evaluate``: the exported ONNX set on the test split.

Everything runs through onnxruntime on the exported files (what the add-on ships), with
(x, x') pairs drawn from the test clips as in training. Errors are in centimetres in
model space (canonical proportions), angles in degrees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.fileio import atomic_open, write_json
from blender_addon.core.metrics import evaluate_metric
from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import PoseEditor, SolveOptions
from training.data.dataset import PoseData
from training.data.pairs import METRIC_PAIR_OFFSET, SOLVER_PAIR_OFFSET, pair_indices
from training.evaluation import sliders

CM = 100.0
EFFECTOR_SETS: dict[str, tuple[str, ...] | None] = {
    "both hands": ("l_hand", "r_hand"),
    "hands, feet, head": ("l_hand", "r_hand", "l_foot", "r_foot", "head"),
    "random 1-6": None,
}


def sample_pairs(data: PoseData, split: str, n: int, max_offset: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x and x' (same clip, at most ``max_offset`` frames apart) from one split."""
    i, j = pair_indices(*data.clip_bounds(), n, max_offset, rng,
                        candidates=np.flatnonzero(data.split_mask(split)))
    return data.poses[i].astype(np.float32), data.poses[j].astype(np.float32)


def random_effector_masks(n: int, rng: np.random.Generator) -> np.ndarray:
    """1-6 distinct joints per row, uniformly."""
    k = rng.integers(1, 7, size=n)
    order = np.argsort(rng.random((n, skeleton.NUM_JOINTS)), axis=1)
    ranks = np.argsort(order, axis=1)
    return (ranks < k[:, None]).astype(np.float32)


def fixed_mask(names: tuple[str, ...], n: int) -> np.ndarray:
    mask = np.zeros((n, skeleton.NUM_JOINTS), np.float32)
    mask[:, skeleton.joint_indices(names)] = 1.0
    return mask


def solve_latent(editor: PoseEditor, x: np.ndarray, x2: np.ndarray, mask: np.ndarray,
                 solver: str) -> np.ndarray:
    """The networks alone, in model space: encode x, edit towards x' targets, decode."""
    z = editor.models.encode(x)
    z_new, _ = editor.edit_latent(z, x, mask, x2, mask, {}, SolveOptions(solver=solver))
    return editor.models.decode(z_new)


def effector_errors(pred: np.ndarray, x2: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    err = np.linalg.norm(pred - x2, axis=-1) * CM
    eff = mask > 0
    return {"effector_cm": float(err[eff].mean()),
            "effector_median_cm": float(np.median(err[eff])),
            "non_effector_mpjpe_cm": float(err[~eff].mean())}


SLIDER_POSES = 300


def evaluate(models_dir: str | Path, data_path: str | Path, n_pairs: int = 4000,
             seed: int = 0, split: str = "test", slider_poses: int = SLIDER_POSES
             ) -> dict[str, Any]:
    models = ModelSet(models_dir)
    editor = PoseEditor(models)
    data = PoseData.load(data_path)
    rng = np.random.default_rng(seed)
    test = data.poses[data.split_mask(split)].astype(np.float32)
    recon = models.decode(models.encode(test))
    result: dict[str, Any] = {
        "split": split, "frames": len(test), "pairs": n_pairs,
        "ae_mpjpe_cm": float(np.linalg.norm(recon - test, axis=-1).mean() * CM),
        "solvers": {}, "metrics": {},
    }
    for set_name, names in EFFECTOR_SETS.items():
        x, x2 = sample_pairs(data, split, n_pairs, SOLVER_PAIR_OFFSET, rng)
        mask = random_effector_masks(n_pairs, rng) if names is None else fixed_mask(names, n_pairs)
        result["solvers"][set_name] = {
            "universal": effector_errors(solve_latent(editor, x, x2, mask, "universal"), x2,
                                         mask),
            "chained specialized": effector_errors(solve_latent(editor, x, x2, mask, "chained"),
                                                   x2, mask),
            "no edit": effector_errors(x, x2, mask),
        }
    for name, module in models.metrics.items():
        x, x2 = sample_pairs(data, split, n_pairs, METRIC_PAIR_OFFSET, rng)
        request = evaluate_metric(x2, module.metric).astype(np.float32)
        z_new, _ = editor.edit_latent(models.encode(x), x, np.zeros(x.shape[:2]), x,
                                      np.zeros(x.shape[:2]), {name: request}, SolveOptions())
        pred = models.decode(z_new)
        achieved = evaluate_metric(pred, module.metric)
        scale = CM if module.metric.unit == "m" else 1.0
        result["metrics"][name] = {
            "unit": "cm" if module.metric.unit == "m" else "deg",
            "abs_error": float(np.abs(achieved - request).mean() * scale),
            "abs_error_unedited": float(np.abs(evaluate_metric(x, module.metric) - request
                                               ).mean() * scale),
            "joints_moved_cm": float(np.linalg.norm(pred - x, axis=-1).mean() * CM),
        }
    pick = rng.choice(len(test), size=min(slider_poses, len(test)), replace=False)
    result["sliders"] = {
        method: sliders.sweep(editor, test[np.sort(pick)].astype(np.float64), options)
        for method, options in sliders.METHODS.items()}
    result["modules"] = {m["name"]: {"parameters": m.get("parameters"), "bytes": m.get("bytes")}
                         for m in models.manifest["modules"]}
    result["total_bytes"] = int(sum((Path(models.folder) / m["file"]).stat().st_size
                                    for m in models.manifest["modules"]))
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Autoencoder reconstruction MPJPE ({result['split']} split, {result['frames']} "
             f"frames): **{result['ae_mpjpe_cm']:.2f} cm**", "",
             "| effector set | method | effector error (cm) | median (cm) | "
             "non-effector MPJPE vs x' (cm) |", "|---|---|---|---|---|"]
    for set_name, methods in result["solvers"].items():
        for method, r in methods.items():
            lines.append(f"| {set_name} | {method} | {r['effector_cm']:.2f} | "
                         f"{r['effector_median_cm']:.2f} | {r['non_effector_mpjpe_cm']:.2f} |")
    lines += ["", "| metric | unit | abs error | unedited abs error | joints moved (cm) |",
              "|---|---|---|---|---|"]
    for name, r in result["metrics"].items():
        lines.append(f"| {name} | {r['unit']} | {r['abs_error']:.2f} | "
                     f"{r['abs_error_unedited']:.2f} | {r['joints_moved_cm']:.2f} |")
    lines += ["", sliders.markdown(result["sliders"])]
    lines += ["| module | parameters | ONNX bytes |", "|---|---|---|"]
    lines += [f"| {n} | {m['parameters']} | {m['bytes']} |" for n, m in result["modules"].items()]
    lines += ["", f"Total model size: {result['total_bytes'] / 1024:.0f} KiB"]
    return "\n".join(lines) + "\n"


def write_report(result: dict[str, Any], out: str | Path, name: str = "evaluation"
                 ) -> tuple[Path, Path]:
    out = Path(out)
    write_json(out / f"{name}.json", result)
    with atomic_open(out / f"{name}.md", "w") as fh:
        fh.write(markdown(result))
    with atomic_open(out / f"{name}.summary.md", "w") as fh:
        fh.write(sliders.markdown({k: v for k, v in result["sliders"].items()
                                   if k == sliders.DEFAULT_METHOD}))
    return out / f"{name}.json", out / f"{name}.md"
