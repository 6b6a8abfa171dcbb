"""The training loop: epochs, validation, CSV log, checkpoints, resume, early stopping, DDP.

Checkpoints hold only tensors and plain values, so they load with
``torch.load(weights_only=True)``. Under ``torchrun`` the task is wrapped in
DistributedDataParallel (NCCL on GPUs, gloo on CPUs); each rank draws its own batches and
rank 0 alone writes files.
"""

from __future__ import annotations

import csv
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import distributed as dist
from torch import nn

from blender_addon.core import skeleton
from blender_addon.core.fileio import atomic_open
from training.learning.tasks import PoseSampler, Task

CHECKPOINT_VERSION = 1
VAL_SEED_OFFSET = 10_000  # validation batches are the same every epoch


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or made for another skeleton or network."""


@dataclass
class TrainConfig:
    epochs: int = 20
    batch_size: int = 512
    lr: float = 1e-3
    steps_per_epoch: int = 0  # 0: one pass over the train split
    val_batches: int = 16
    patience: int = 4  # epochs without validation improvement before stopping
    lr_floor: float = 0.05  # cosine decay of the learning rate to lr * lr_floor at the end
    seed: int = 0
    device: str = "cpu"
    resume: bool = False
    progress: bool = True


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - legacy global seed for any library that uses it


def distributed() -> tuple[int, int]:
    """(rank, world size), joining the process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def barrier() -> None:
    """Wait for every rank (a no-op outside torchrun), e.g. until rank 0 has written files."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here; use --device cpu")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {name!r}")
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(name)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    with atomic_open(path) as fh:
        torch.save(payload, fh)


def load_checkpoint(path: str | Path, kind: str | None = None) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``) and check skeleton and kind."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle/zip errors vary; the message must name the file
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path}: unknown checkpoint format")
    if tuple(ckpt.get("joints", ())) != skeleton.JOINTS:
        raise CheckpointError(f"{path}: skeleton mismatch: checkpoint joints "
                              f"{ckpt.get('joints')} differ from the canonical skeleton")
    if kind is not None and ckpt.get("kind") != kind:
        raise CheckpointError(f"{path}: a {ckpt.get('kind')!r} checkpoint, expected {kind!r}")
    return ckpt


def fit(task: Task, train: PoseSampler, val: PoseSampler, cfg: TrainConfig, out: Path,
        name: str, kind: str, net_config: dict[str, Any]) -> dict[str, Any]:
    """Train ``task.net``; writes ``out/name.pt`` (best + last state) and ``out/name.csv``."""
    from tqdm import tqdm

    rank, world = distributed()
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed)
    task.to(device)
    ckpt_path, log_path = out / f"{name}.pt", out / f"{name}.csv"
    params = [p for p in task.net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    state = {"epoch": 0, "best_val": math.inf, "bad_epochs": 0, "best_state": None}
    if cfg.resume and ckpt_path.is_file():
        ckpt = load_checkpoint(ckpt_path, kind)
        task.net.load_state_dict(ckpt["state_dict"])
        opt.load_state_dict(ckpt["optimizer"])
        state.update({k: ckpt[k] for k in ("epoch", "best_val", "bad_epochs", "best_state")})
    elif rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        log_path.unlink(missing_ok=True)
    model: nn.Module = task
    if world > 1:
        model = nn.parallel.DistributedDataParallel(
            task, device_ids=[device.index] if device.type == "cuda" else None)
    steps = cfg.steps_per_epoch or max(1, len(train) // (cfg.batch_size * world))
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + rank + state["epoch"] * 7919)
    start = time.perf_counter()
    total_steps = cfg.epochs * steps
    for epoch in range(state["epoch"], cfg.epochs):
        task.net.train()
        total = 0.0
        bar = tqdm(range(steps), desc=f"{name} {epoch + 1}/{cfg.epochs}", leave=False,
                   disable=not cfg.progress or rank != 0)
        for step in bar:
            done = (epoch * steps + step) / total_steps
            for group in opt.param_groups:  # from the step count alone, so resume agrees
                group["lr"] = cfg.lr * (cfg.lr_floor + (1 - cfg.lr_floor)
                                        * 0.5 * (1 + math.cos(math.pi * done)))
            batch = [t.to(device) for t in task.batch(train, cfg.batch_size, gen)]
            loss = model(*batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
        train_loss = total / steps
        val_loss = evaluate_loss(task, val, cfg, device)
        improved = val_loss < state["best_val"]
        if improved:
            state["best_state"] = {k: v.detach().cpu().clone()
                                   for k, v in task.net.state_dict().items()}
        state.update(epoch=epoch + 1, best_val=min(val_loss, state["best_val"]),
                     bad_epochs=0 if improved else state["bad_epochs"] + 1)
        if rank == 0:
            _append_csv(log_path, {"epoch": epoch + 1, "train_loss": train_loss,
                                   "val_loss": val_loss, "elapsed_s": time.perf_counter() - start})
            save_checkpoint(ckpt_path, {
                "version": CHECKPOINT_VERSION, "kind": kind, "name": name,
                "joints": list(skeleton.JOINTS), "config": net_config,
                "train_config": asdict(cfg), "state_dict": task.net.state_dict(),
                "optimizer": opt.state_dict(), **state,
            })
            tqdm.write(f"{name} epoch {epoch + 1}: train {train_loss:.3e}  val {val_loss:.3e}"
                       f"{'  *' if improved else ''}")
        if not improved and state["bad_epochs"] >= cfg.patience:
            break
    barrier()  # the other ranks may read the checkpoint rank 0 just wrote
    if state["best_state"] is not None:
        task.net.load_state_dict(state["best_state"])
    return {"name": name, "best_val": state["best_val"], "epochs": state["epoch"],
            "seconds": time.perf_counter() - start}


@torch.no_grad()
def evaluate_loss(task: Task, sampler: PoseSampler, cfg: TrainConfig,
                  device: torch.device) -> float:
    """Mean loss over fixed, seeded validation batches."""
    task.net.eval()
    gen = torch.Generator().manual_seed(cfg.seed + VAL_SEED_OFFSET)
    losses = [float(task(*[t.to(device) for t in task.batch(sampler, cfg.batch_size, gen)]))
              for _ in range(cfg.val_batches)]
    return float(np.mean(losses))


def _append_csv(path: Path, row: dict[str, float]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)
