"""Train a metric network onto a shipped model set (``python -m training add-metric``).

A slider is a metric spec plus a network trained on the set's own autoencoder. The sets
ship as ONNX without their checkpoints, so this rebuilds the autoencoder from the set's
``encoder.onnx`` and ``decoder.onnx`` weights, trains the metric network exactly as
``train-all`` does (:func:`training.learning.recipes.train_metric`), checks the exported graph
against torch and puts it in the set: a new slider, or one whose definition changed,
without retraining anything else. The manifest (rewritten atomically) records the command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from blender_addon.core import models as core_models
from blender_addon.core.fileio import write_json
from blender_addon.core.metrics import MetricSpec
from training.export.jacobian import autoencoder_from_onnx
from training.export.model_set import PARITY_BATCH, Exported, write_module
from training.learning.nets import MetricNet
from training.learning.recipes import Run, train_metric
from training.learning.train import load_checkpoint


def _replace(items: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """``items`` with the one named as ``new`` replaced in place, or ``new`` appended."""
    names = [m["name"] for m in items]
    if new["name"] in names:
        return [new if m["name"] == new["name"] else m for m in items]
    return [*items, new]


def add_metric(models: str | Path, run: Run, spec: MetricSpec, command: str | None = None
               ) -> dict[str, Any]:
    """Train ``spec``'s network on ``run.data`` with the set's autoencoder and put it in the
    set (replacing a module of the same name); returns its manifest entry."""
    folder = Path(models)
    manifest = core_models.read_manifest(folder)
    ae = autoencoder_from_onnx(folder, manifest, ("encoder", "decoder"))
    latent = ae.latent_size
    if latent != manifest["latent_size"]:
        raise ValueError(f"{folder / core_models.MANIFEST_NAME}: latent_size "
                         f"{manifest['latent_size']} but its autoencoder has {latent}")
    result = train_metric(run, spec, ae)
    ckpt = load_checkpoint(run.out / f"{result['name']}.pt", "metric")
    cfg = ckpt["config"]
    net = MetricNet(latent, 0.0, 1.0, cfg["hidden"])
    net.load_state_dict(ckpt["best_state"] or ckpt["state_dict"])
    item = Exported(f"metric_{spec.name}", "metric", net, (),
                    {"config": cfg, "metric": cfg["spec"], "range": cfg["range"]})
    gen = torch.Generator().manual_seed(run.cfg.seed)
    pick = torch.randint(len(run.data.poses), (PARITY_BATCH,), generator=gen)
    real = torch.from_numpy(run.data.poses[pick.numpy()].astype("float32"))
    lo, hi = cfg["range"]
    values = lo + (hi - lo) * torch.rand(PARITY_BATCH, 1, generator=gen)
    with torch.no_grad():
        example = (ae.encode(real), values)
    entry, err = write_module(item, example, folder, latent)
    manifest["modules"] = _replace(manifest["modules"], entry)
    manifest["metrics"] = _replace(manifest.get("metrics", []),
                                   entry["metric"] | {"range": entry["range"]})
    manifest.setdefault("parity_max_abs_error", {})[item.name] = err
    training = manifest.setdefault("training", {})
    training.setdefault("validation", {})[result["name"]] = {
        "best_val_loss": float(result["best_val"]), "epochs": int(result["epochs"])}
    training.setdefault("added_metrics", {})[spec.name] = {
        "command": command or " ".join(["python -m training", *sys.argv[1:]]),
        "data": str(run.data.path), "seconds": round(float(result["seconds"]), 1)}
    write_json(folder / core_models.MANIFEST_NAME, manifest)
    return entry | {"best_val": result["best_val"], "seconds": result["seconds"]}
