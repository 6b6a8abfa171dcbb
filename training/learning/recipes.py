"""The training commands: build each network from a dataset and train it with :func:`fit`.

Output folder layout (``--out``, default ``runs/train``): ``ae.pt`` (the chosen
autoencoder), ``ae_<arch>.pt`` for each candidate, ``solver_universal.pt``,
``solver_<group>.pt``, ``metric_<name>.pt``, a ``.csv`` loss log beside each, and
``train_summary.json``.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blender_addon.core import skeleton
from blender_addon.core.fileio import write_json
from blender_addon.core.metrics import DEFAULT_METRICS, MetricSpec, metric_by_name
from training.data.dataset import PoseData
from training.learning.nets import GroupSolver, MetricNet, PoseAutoencoder, UniversalSolver
from training.learning.tasks import (
    EFFECTOR_GROUPS,
    METRIC_RANGE_PERCENTILES,
    AutoencoderTask,
    GroupSolverTask,
    MetricTask,
    PoseSampler,
    UniversalSolverTask,
)
from training.learning.train import (
    TrainConfig,
    barrier,
    distributed,
    fit,
    load_checkpoint,
    seed_everything,
)

AE_ARCHS: dict[str, dict[str, Any]] = {
    "seed": {"hidden": (200, 200), "latent": 64, "tied": True, "layernorm": False},
    "untied": {"hidden": (256, 256), "latent": 64, "tied": False, "layernorm": True},
}
UNIVERSAL_HIDDEN = (256, 256)
METRIC_HIDDEN = (128, 128)
# Budgets of train-all: (epochs, batches of 512 per epoch), a fixed number of samples per
# epoch whatever the data size (CMU: 1.36 M mirrored train frames; CMU + Bandai: 2.03 M),
# so one set trains in about 25 minutes on one CPU thread. Per-batch costs on one thread:
# autoencoder 6-9 ms, universal solver about 15 ms, group solver 8 ms, metric net 7.5 ms.
TRAIN_ALL_BUDGET = {"ae": (12, 1500), "universal": (20, 2000), "group": (5, 700),
                    "metric": (6, 700)}
TRAIN_ALL_EPOCHS = {k: v[0] for k, v in TRAIN_ALL_BUDGET.items()}
# The untied autoencoder won every comparison (Bandai: 1.5e-5 against 2.9e-5 validation
# loss), so train-all trains it alone; `train-ae --arch seed` still trains the paper's.
TRAIN_ALL_ARCHS = ("untied",)


@dataclass
class Run:
    """What every training command shares: the data, where to write, the loop settings."""
    data: PoseData
    out: Path
    cfg: TrainConfig

    def sampler(self, split: str, metrics: tuple[MetricSpec, ...] = ()) -> PoseSampler:
        return PoseSampler(self.data, split, mirror=split == "train", metrics=metrics)

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.data.mean), torch.from_numpy(self.data.std)


def build_autoencoder(config: dict[str, Any], mean: torch.Tensor, std: torch.Tensor
                      ) -> PoseAutoencoder:
    return PoseAutoencoder(mean, std, hidden=config["hidden"], latent=config["latent"],
                           tied=config["tied"], layernorm=config["layernorm"])


def load_autoencoder(path: Path) -> PoseAutoencoder:
    ckpt = load_checkpoint(path, "ae")
    sd = ckpt["best_state"] or ckpt["state_dict"]
    ae = build_autoencoder(ckpt["config"], sd["norm.mean"], sd["norm.std"])
    ae.load_state_dict(sd)
    return ae


def train_autoencoder(run: Run, arch: str) -> dict[str, Any]:
    if arch not in AE_ARCHS:
        raise ValueError(f"--arch must be one of {sorted(AE_ARCHS)}, got {arch!r}")
    seed_everything(run.cfg.seed)  # the initial weights depend on --seed only
    ae = build_autoencoder(AE_ARCHS[arch], *run.mean_std())
    result = fit(AutoencoderTask(ae), run.sampler("train"), run.sampler("val"), run.cfg,
                 run.out, f"ae_{arch}", "ae", ae.config)
    return {**result, "arch": arch}


def choose_autoencoder(run: Run, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Copy the candidate with the lowest validation loss to ``ae.pt``."""
    best = min(results, key=lambda r: r["best_val"])
    if distributed()[0] == 0:
        shutil.copyfile(run.out / f"{best['name']}.pt", run.out / "ae.pt")
    barrier()  # every rank goes on with the same, complete ae.pt
    return best


def _need_ae(run: Run) -> PoseAutoencoder:
    path = run.out / "ae.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no autoencoder yet; run `python -m training train-ae "
                                f"--data {run.data.path} --out {run.out}` first")
    return load_autoencoder(path)


def train_solver(run: Run, group: str) -> dict[str, Any]:
    ae = _need_ae(run)
    mean, std = run.mean_std()
    seed_everything(run.cfg.seed)
    if group == "universal":
        net = UniversalSolver(mean, std, ae.latent_size, UNIVERSAL_HIDDEN)
        task = UniversalSolverTask(net, ae)
    elif group in EFFECTOR_GROUPS:
        joints = skeleton.joint_indices(EFFECTOR_GROUPS[group]).tolist()
        net = GroupSolver(mean, std, ae.latent_size, joints)
        task = GroupSolverTask(net, ae)
    else:
        raise ValueError(f"--group must be universal or one of {sorted(EFFECTOR_GROUPS)}, "
                         f"got {group!r}")
    return fit(task, run.sampler("train"), run.sampler("val"), run.cfg, run.out,
               f"solver_{group}", "ik_universal" if group == "universal" else "ik_group",
               {**net.config, "group": group})


def train_metric(run: Run, spec: MetricSpec, ae: PoseAutoencoder | None = None
                 ) -> dict[str, Any]:
    """A metric network for ``spec`` on ``run.out``'s autoencoder, or on ``ae`` (a shipped
    set's, :func:`training.learning.add_metric.add_metric`)."""
    ae = ae or _need_ae(run)
    train = run.sampler("train", (spec,))
    values = train.metric_values[:, 0]
    seed_everything(run.cfg.seed)
    net = MetricNet(ae.latent_size, float(values.mean()), float(values.std()), METRIC_HIDDEN)
    lo, hi = np.percentile(values.numpy(), METRIC_RANGE_PERCENTILES)
    task = MetricTask(net, ae, 0, spec, (float(lo), float(hi)))
    result = fit(task, train, run.sampler("val", (spec,)), run.cfg, run.out,
                 f"metric_{spec.name}", "metric",
                 {**net.config, "spec": spec.to_dict(),
                  "range": [float(values.min()), float(values.max())]})
    return result


def resolve_metrics(names: list[str] | None, specs_file: str | None) -> tuple[MetricSpec, ...]:
    from blender_addon.core.metrics import load_metric_specs

    specs = tuple(load_metric_specs(specs_file)) if specs_file else DEFAULT_METRICS
    if not names:
        return specs
    return tuple(metric_by_name(n, specs) for n in names)


def train_all(run: Run, metrics: tuple[MetricSpec, ...], epochs: dict[str, int] | None = None,
              command: str | None = None, archs: tuple[str, ...] = TRAIN_ALL_ARCHS
              ) -> dict[str, Any]:
    """Every network of the default set, in dependency order; times each.

    Each kind trains for its :data:`TRAIN_ALL_BUDGET` (``epochs`` overrides the epochs;
    ``run.cfg.steps_per_epoch``, when set, the batches per epoch). ``command`` is the
    command line recorded in the summary (default: this process's).
    """
    epochs = {**TRAIN_ALL_EPOCHS, **(epochs or {})}
    start = time.perf_counter()
    command = command or " ".join(["python -m training", *sys.argv[1:]])
    summary: dict[str, Any] = {"command": command,
                               "data": str(run.data.path), "results": []}

    def with_epochs(kind: str) -> Run:
        steps = run.cfg.steps_per_epoch or TRAIN_ALL_BUDGET[kind][1]
        return Run(run.data, run.out, TrainConfig(**{**run.cfg.__dict__, "epochs": epochs[kind],
                                                     "steps_per_epoch": steps}))

    ae_results = [train_autoencoder(with_epochs("ae"), arch) for arch in archs]
    summary["autoencoders"] = ae_results
    summary["chosen_ae"] = choose_autoencoder(run, ae_results)["arch"]
    summary["results"].append(train_solver(with_epochs("universal"), "universal"))
    for group in EFFECTOR_GROUPS:
        summary["results"].append(train_solver(with_epochs("group"), group))
    for spec in metrics:
        summary["results"].append(train_metric(with_epochs("metric"), spec))
    summary["seconds"] = time.perf_counter() - start
    write_json(run.out / "train_summary.json", summary)
    return summary
