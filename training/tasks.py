"""What each network learns: batch sampling and loss, one :class:`Task` per network kind.

A task is an ``nn.Module`` whose ``forward(*batch)`` returns the loss, so the training loop
can wrap it in DistributedDataParallel unchanged. Frozen parts (the autoencoder under a
solver or a metric network) have ``requires_grad`` off and are ignored by DDP.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from blender_addon.core import skeleton
from blender_addon.core.metrics import MetricSpec, evaluate_metric, metric_formula
from training.data import PoseData
from training.nets import GroupSolver, MetricNet, PoseAutoencoder, UniversalSolver

SOLVER_PAIR_OFFSET = 20  # frames: x' drawn from the same clip within +-20 frames of x
METRIC_PAIR_OFFSET = 10  # frames, the 2023 paper's n in [-10, 10]
OTHER_JOINTS_WEIGHT = 0.01  # k in the 2021 paper's loss
MIN_EFFECTORS, MAX_EFFECTORS = 1, 6
END_JOINT_PREFERENCE = 4.0  # hands, feet and head are drawn this much more often
PIN_MOVE_THRESHOLD = 0.02  # metres: a joint that moved less than this between x and x' may pin
PIN_PROBABILITY = 0.5
PARTIAL_WEIGHT_PROBABILITY = 0.3  # share of effectors given a weight below 1
MIN_EFFECTOR_WEIGHT = 0.2
METRIC_CONSISTENCY_WEIGHT = 0.01  # m^2 per squared std of the metric: same order as the pose loss

EFFECTOR_GROUPS: dict[str, tuple[str, ...]] = {
    "hands": ("l_hand", "r_hand"),
    "feet": ("l_foot", "r_foot"),
    "head": ("head",),
}
END_JOINTS = tuple(skeleton.joint_indices(["l_hand", "r_hand", "l_foot", "r_foot", "head"]))


class PoseSampler:
    """Frames of one split (optionally with their left/right mirror) and (x, x') pairs."""

    def __init__(self, data: PoseData, split: str, mirror: bool = False,
                 metrics: tuple[MetricSpec, ...] = ()) -> None:
        mask = data.split_mask(split)
        if not mask.any():
            raise ValueError(f"{data.path}: the {split} split is empty")
        poses = data.poses[mask].astype(np.float32)
        clip = data.clip[mask]
        if mirror:
            poses = np.concatenate([poses, skeleton.mirror_pose(poses)])
            clip = np.concatenate([clip, clip + int(data.clip.max()) + 1])
        starts = np.flatnonzero(np.r_[True, clip[1:] != clip[:-1]])
        lengths = np.diff(np.r_[starts, len(clip)])
        self.first = torch.from_numpy(np.repeat(starts, lengths))
        self.last = torch.from_numpy(np.repeat(starts + lengths - 1, lengths))
        self.poses = torch.from_numpy(poses)
        self.metric_values = torch.from_numpy(np.stack(
            [evaluate_metric(poses, s) for s in metrics], axis=-1).astype(np.float32)
        ) if metrics else None

    def __len__(self) -> int:
        return len(self.poses)

    def frames(self, n: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(len(self.poses), (n,), generator=gen)

    def pairs(self, n: int, max_offset: int, gen: torch.Generator
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frame x and a frame x' of the same clip at most ``max_offset`` frames away."""
        i = self.frames(n, gen)
        off = torch.randint(-max_offset, max_offset + 1, (n,), generator=gen)
        j = torch.minimum(torch.maximum(i + off, self.first[i]), self.last[i])
        return i, j


def sample_effectors(x: torch.Tensor, x2: torch.Tensor, gen: torch.Generator
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random effector masks (1-6 joints, end joints preferred) plus pins, and weights."""
    n, j = x.shape[0], skeleton.NUM_JOINTS
    pref = torch.ones(j)
    pref[list(END_JOINTS)] = END_JOINT_PREFERENCE
    gumbel = -torch.log(-torch.log(torch.rand(n, j, generator=gen).clamp_min(1e-9)))
    rank = torch.argsort(torch.argsort(torch.log(pref) + gumbel, dim=1, descending=True), dim=1)
    k = torch.randint(MIN_EFFECTORS, MAX_EFFECTORS + 1, (n, 1), generator=gen)
    mask = rank < k
    still = (x2 - x).norm(dim=-1) < PIN_MOVE_THRESHOLD
    mask |= still & (torch.rand(n, j, generator=gen) < PIN_PROBABILITY)
    partial = torch.rand(n, j, generator=gen) < PARTIAL_WEIGHT_PROBABILITY
    low = MIN_EFFECTOR_WEIGHT + (1 - MIN_EFFECTOR_WEIGHT) * torch.rand(n, j, generator=gen)
    weights = torch.where(partial, low, torch.ones(n, j)) * mask
    return mask.float(), weights


def effector_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                  weights: torch.Tensor) -> torch.Tensor:
    """The 2021 paper's loss: weighted effector MSE + k * MSE of the other joints."""
    sq = ((pred - target) ** 2).sum(-1)  # (B, 21)
    eff = (sq * weights).sum(1) / weights.sum(1).clamp_min(1e-6)
    other = (sq * (1 - mask)).sum(1) / (1 - mask).sum(1).clamp_min(1.0)
    return (eff + OTHER_JOINTS_WEIGHT * other).mean()


class Task(nn.Module):
    """A trainable network, how to draw a batch for it, and its loss."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        raise NotImplementedError


def _frozen(ae: PoseAutoencoder) -> PoseAutoencoder:
    ae.eval()
    for p in ae.parameters():
        p.requires_grad_(False)
    return ae


class AutoencoderTask(Task):
    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        return (sampler.poses[sampler.frames(n, gen)],)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pred = self.net(x).reshape(x.shape)
        return ((pred - x) ** 2).sum(-1).mean()


class UniversalSolverTask(Task):
    def __init__(self, net: UniversalSolver, ae: PoseAutoencoder) -> None:
        super().__init__(net)
        self.ae = _frozen(ae)

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        i, j = sampler.pairs(n, SOLVER_PAIR_OFFSET, gen)
        x, x2 = sampler.poses[i], sampler.poses[j]
        mask, weights = sample_effectors(x, x2, gen)
        return x, x2, mask, weights

    def forward(self, x: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.ae.encode(x)
        pred = self.ae.decode(self.net(z, mask, x2, weights)).reshape(x.shape)
        return effector_loss(pred, x2, mask, weights)


class GroupSolverTask(Task):
    def __init__(self, net: GroupSolver, ae: PoseAutoencoder) -> None:
        super().__init__(net)
        self.ae = _frozen(ae)
        mask = torch.zeros(skeleton.NUM_JOINTS)
        mask[net.joints] = 1.0
        self.register_buffer("mask", mask)

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        i, j = sampler.pairs(n, SOLVER_PAIR_OFFSET, gen)
        return sampler.poses[i], sampler.poses[j]

    def forward(self, x: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.ae.encode(x)
        pred = self.ae.decode(self.net(z, x2[:, self.net.joints])).reshape(x.shape)
        mask = self.mask.expand(x.shape[0], -1)
        return effector_loss(pred, x2, mask, mask)


class MetricTask(Task):
    """The 2023 paper's loss ``|x' - D(M(E(x), m(x')))|^2``, plus a consistency term
    ``w * ((m(D(...)) - m(x')) / std)^2`` so the edited pose really has the requested value
    (without it, metrics that vary little between neighbouring frames were not followed)."""

    def __init__(self, net: MetricNet, ae: PoseAutoencoder, metric_index: int,
                 spec: MetricSpec) -> None:
        super().__init__(net)
        self.ae = _frozen(ae)
        self.metric_index = metric_index
        self.spec = spec

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        i, j = sampler.pairs(n, METRIC_PAIR_OFFSET, gen)
        return sampler.poses[i], sampler.poses[j], sampler.metric_values[j, self.metric_index]

    def forward(self, x: torch.Tensor, x2: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.ae.encode(x)
        pred = self.ae.decode(self.net(z, value)).reshape(x.shape)
        achieved = metric_formula(pred, self.spec, torch)
        consistency = ((achieved - value) / self.net.value_std) ** 2
        return ((pred - x2) ** 2).sum(-1).mean() + METRIC_CONSISTENCY_WEIGHT * consistency.mean()
