"""What each network learns: batch sampling and loss, one :class:`Task` per network kind.

A task is an ``nn.Module`` whose ``forward(*batch)`` returns the loss, so the training loop
can wrap it in DistributedDataParallel unchanged. Frozen parts (the autoencoder under a
solver or a metric network) have ``requires_grad`` off and are ignored by DDP.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from blender_addon.core import refine, skeleton
from blender_addon.core.metrics import MetricSpec, evaluate_metric, metric_formula
from training.data.dataset import PoseData
from training.data.pairs import METRIC_PAIR_OFFSET, SOLVER_PAIR_OFFSET
from training.data.rest_poses import rest_poses
from training.learning.nets import GroupSolver, MetricNet, PoseAutoencoder, UniversalSolver

OTHER_JOINTS_WEIGHT = 0.01  # k in the 2021 paper's loss

# The universal solver learns user drags as well as real motion. Each sample's targets
# come from one of these sources (probabilities), see UniversalSolverTask.batch:
SOLVER_MODES = {
    "pair": 0.30,  # x' within +-SOLVER_PAIR_OFFSET frames (the 2021 paper)
    "far": 0.15,  # x' within +-SOLVER_FAR_OFFSET frames
    "other": 0.15,  # targets from a pose of another clip (or x's mirror)
    "offset": 0.30,  # effectors moved 5-40 cm from x in a random direction (a drag)
    "null": 0.10,  # targets where the joints are: the edit must be the identity
}
SOLVER_FAR_OFFSET = 120  # frames, 4 s
DRAG_OFFSET_M = (0.05, 0.40)
DRAG_TWO_EFFECTORS = 0.3  # share of drags that move two end joints at once
DRAG_PIN_PROBABILITY = 0.5  # each other end joint (and the pelvis) held where it is
# Least-change weight pulling non-effectors to x where nothing asks them to move (drags,
# targets from other poses): 5x the paper's k towards x'; null edits: every joint to x.
KEEP_WEIGHT = 0.05
NULL_KEEP_WEIGHT = 1.0
# Null edits also pull the solver's latent to the input latent: a pose-space loss alone
# left latent moves as large as the latent itself that decode to about the same pose
# (joints 2-4 cm off); S(z, t) = z decodes to exactly the input through keep_details.
NULL_LATENT_WEIGHT = 0.1
REST_POSE_PROBABILITY = 0.1  # starting poses replaced by a synthetic T- or A-pose
AE_REST_POSE_PROBABILITY = 0.05  # so the autoencoder reconstructs rest poses too
MIRROR_TARGET_PROBABILITY = 0.25  # of "other" targets: x's own mirror image
# Full-body requests (hands, feet and head all effectors) are what the engine benchmark's
# hands+feet+head set asks, and with that many effectors the real next pose is well
# determined: a share of the effector sets are all five end joints, and real pairs with at
# least FULL_BODY_MIN_ENDS of them pull the other joints to x' with a weight near the
# effectors' own instead of the paper's k. Measured (engine benchmark, 1000 CMU test-split
# pairs, hands+feet+head, refined): non-effector MPJPE 1.94 -> 1.20 cm (classic FABRIK
# 3.18), Bandai Namco 2.02 -> 1.24 cm (FABRIK 3.40), for one-hand 10-25 cm drags moving the
# other joints 1.64 -> 1.86 cm (FABRIK 1.26). Drags keep KEEP_WEIGHT: a k of 0.2 on every
# pair instead gave 1.54 cm on pairs for 2.08 cm on drags.
FULL_BODY_SHARE = 0.25
FULL_BODY_MIN_ENDS = refine.FULL_BODY_MIN_ENDS  # the refinement's full-body rule too
FULL_BODY_OTHER_JOINTS_WEIGHT = 0.9

# Metric networks: pairs (near and far) and requests across the metric's range.
METRIC_MODES = {"pair": 0.5, "far": 0.1, "range": 0.4}
METRIC_FAR_OFFSET = 30  # frames
METRIC_RANGE_PERCENTILES = (0.5, 99.5)  # requested values drawn uniformly in between
METRIC_RANGE_KEEP = 0.1  # least-change weight to x on range requests
METRIC_RANGE_CONSISTENCY = 0.1  # weight of ((m(pred) - v) / std)^2 on range requests
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
END_JOINTS = tuple(skeleton.joint_indices(skeleton.END_JOINTS))


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
        feet = skeleton.joint_indices(["l_foot", "r_foot", "l_toe", "r_toe"])
        self.floor = float(np.median(poses[:, feet, 1].min(axis=1)))  # lowest foot joint
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
        return i, self.near(i, max_offset, gen)

    def near(self, i: torch.Tensor, max_offset: int | torch.Tensor, gen: torch.Generator
             ) -> torch.Tensor:
        """For each frame ``i``, a frame of its clip at most ``max_offset`` frames away."""
        u = torch.rand(i.shape, generator=gen)
        off = torch.floor(u * (2 * torch.as_tensor(max_offset) + 1)).long() - max_offset
        return torch.minimum(torch.maximum(i + off, self.first[i]), self.last[i])

    def rest(self, n: int, gen: torch.Generator) -> torch.Tensor:
        return rest_poses(n, gen, self.floor)


def sample_effectors(x: torch.Tensor, x2: torch.Tensor, gen: torch.Generator,
                     full_body: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random effector masks (1-6 joints, end joints preferred) plus pins, and weights;
    a ``full_body`` share of the sets also get all five end joints at full weight."""
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
    mask = mask.float()
    if full_body > 0:
        rows = torch.rand(n, generator=gen) < full_body
        ends = torch.zeros(j, dtype=torch.bool)
        ends[list(END_JOINTS)] = True
        mask[rows[:, None] & ends] = 1.0
        weights[rows[:, None] & ends] = 1.0
    return mask, weights


def effector_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                  weights: torch.Tensor, keep: torch.Tensor | None = None,
                  k: torch.Tensor | float = OTHER_JOINTS_WEIGHT) -> torch.Tensor:
    """The 2021 paper's loss: weighted effector MSE + k * MSE of the other joints towards
    ``keep`` (default the target pose; x itself for drags), k per sample or one number."""
    sq = ((pred - target) ** 2).sum(-1)  # (B, 21)
    eff = (sq * weights).sum(1) / weights.sum(1).clamp_min(1e-6)
    sq_keep = sq if keep is None else ((pred - keep) ** 2).sum(-1)
    other = (sq_keep * (1 - mask)).sum(1) / (1 - mask).sum(1).clamp_min(1.0)
    return (eff + k * other).mean()


def _choice(probs: dict[str, float], n: int, gen: torch.Generator) -> torch.Tensor:
    """n draws of mode indices (in dict order) with the given probabilities."""
    return torch.multinomial(torch.tensor(list(probs.values())), n, replacement=True,
                             generator=gen)


def _random_directions(n: int, gen: torch.Generator) -> torch.Tensor:
    d = torch.randn(n, 3, generator=gen)
    return d / d.norm(dim=-1, keepdim=True).clamp_min(1e-9)


DRAG_JOINTS = (*END_JOINTS, skeleton.ROOT)


def sample_drags(x: torch.Tensor, gen: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """User-style drags from x: one or two of the hands, feet, head and pelvis moved
    5-40 cm in a random direction, the other ones pinned with probability 1/2.
    Returns targets, mask and weights."""
    n = x.shape[0]
    cand = torch.tensor(DRAG_JOINTS)
    order = torch.argsort(torch.rand(n, len(cand), generator=gen), dim=1)
    moved = torch.zeros(n, skeleton.NUM_JOINTS, dtype=torch.bool)
    rows = torch.arange(n)
    moved[rows, cand[order[:, 0]]] = True
    two = torch.rand(n, generator=gen) < DRAG_TWO_EFFECTORS
    moved[rows[two], cand[order[two, 1]]] = True
    length = DRAG_OFFSET_M[0] + (DRAG_OFFSET_M[1] - DRAG_OFFSET_M[0]) * torch.rand(
        n, skeleton.NUM_JOINTS, 1, generator=gen)
    offsets = _random_directions(n * skeleton.NUM_JOINTS, gen).reshape(n, -1, 3) * length
    targets = x + offsets * moved[..., None]
    pinned = torch.zeros_like(moved)
    pinned[:, cand] = torch.rand(n, len(cand), generator=gen) < DRAG_PIN_PROBABILITY
    mask = moved | (pinned & ~moved)
    return targets, mask.float(), mask.float()


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
        x = sampler.poses[sampler.frames(n, gen)].clone()
        rest = torch.rand(n, generator=gen) < AE_REST_POSE_PROBABILITY
        x[rest] = sampler.rest(int(rest.sum()), gen)
        return (x,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pred = self.net(x).reshape(x.shape)
        return ((pred - x) ** 2).sum(-1).mean()


class UniversalSolverTask(Task):
    def __init__(self, net: UniversalSolver, ae: PoseAutoencoder) -> None:
        super().__init__(net)
        self.ae = _frozen(ae)

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        """(x, targets, keep, mask, weights, k): one of :data:`SOLVER_MODES` per sample.

        Real pairs pull the other joints to x' with the paper's k; drags and targets from
        other poses keep them near x (:data:`KEEP_WEIGHT`); null edits keep every joint."""
        names = list(SOLVER_MODES)
        mode = _choice(SOLVER_MODES, n, gen)
        i = sampler.frames(n, gen)
        x = sampler.poses[i].clone()
        rest = torch.rand(n, generator=gen) < REST_POSE_PROBABILITY
        x[rest] = sampler.rest(int(rest.sum()), gen)
        is_mode = {m: mode == names.index(m) for m in names}
        is_mode["other"] |= rest & (is_mode["pair"] | is_mode["far"])  # no clip to pair in
        is_mode["pair"] &= ~rest
        is_mode["far"] &= ~rest
        offset = torch.where(is_mode["far"], SOLVER_FAR_OFFSET, SOLVER_PAIR_OFFSET)
        x2 = sampler.poses[sampler.near(i, offset, gen)].clone()
        other = sampler.poses[sampler.frames(n, gen)]
        mirror = torch.rand(n, generator=gen) < MIRROR_TARGET_PROBABILITY
        x_mirror = x[:, torch.from_numpy(skeleton.MIRROR)] * torch.tensor([-1.0, 1.0, 1.0])
        x2[is_mode["other"]] = torch.where(mirror[:, None, None], x_mirror, other)[
            is_mode["other"]]
        x2[is_mode["null"]] = x[is_mode["null"]]
        mask, weights = sample_effectors(x, x2, gen, FULL_BODY_SHARE)
        drag_t, drag_m, drag_w = sample_drags(x, gen)
        drag = is_mode["offset"]
        x2[drag], mask[drag], weights[drag] = drag_t[drag], drag_m[drag], drag_w[drag]
        # half the null edits with a user's effector set (one or two end joints, some
        # pins), not moved: the set a user has before the first drag
        user_null = is_mode["null"] & (torch.rand(n, generator=gen) < 0.5)
        mask[user_null], weights[user_null] = drag_m[user_null], drag_w[user_null]
        keep = torch.where((is_mode["pair"] | is_mode["far"])[:, None, None], x2, x)
        k = torch.full((n,), KEEP_WEIGHT)
        k[is_mode["pair"] | is_mode["far"]] = OTHER_JOINTS_WEIGHT
        k[is_mode["null"]] = NULL_KEEP_WEIGHT
        full_body = mask[:, list(END_JOINTS)].sum(1) >= FULL_BODY_MIN_ENDS
        k[(is_mode["pair"] | is_mode["far"]) & full_body] = FULL_BODY_OTHER_JOINTS_WEIGHT
        return x, x2, keep, mask, weights, k

    def forward(self, x: torch.Tensor, x2: torch.Tensor, keep: torch.Tensor,
                mask: torch.Tensor, weights: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.ae.encode(x)
        z_new = self.net(z, mask, x2, weights)
        pred = self.ae.decode(z_new).reshape(x.shape)
        null = (k == NULL_KEEP_WEIGHT).float()
        latent = (((z_new - z) ** 2).mean(-1) * null).mean()
        return effector_loss(pred, x2, mask, weights, keep, k) + NULL_LATENT_WEIGHT * latent


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
    (without it, metrics that vary little between neighbouring frames were not followed).

    Besides pairs n in [-10, 10] frames apart (and some up to 30 apart), 40% of the
    requests are values drawn across the metric's whole data range: there is no x' for
    them, so the loss keeps the pose near x and weighs the consistency term more, which
    teaches the network to follow large requests."""

    def __init__(self, net: MetricNet, ae: PoseAutoencoder, metric_index: int,
                 spec: MetricSpec, value_range: tuple[float, float] | None = None) -> None:
        super().__init__(net)
        self.ae = _frozen(ae)
        self.metric_index = metric_index
        self.spec = spec
        self.value_range = value_range

    def batch(self, sampler: PoseSampler, n: int, gen: torch.Generator) -> tuple:
        values = sampler.metric_values[:, self.metric_index]
        if self.value_range is None:
            lo, hi = np.percentile(values.numpy(), METRIC_RANGE_PERCENTILES)
            self.value_range = (float(lo), float(hi))
        mode = _choice(METRIC_MODES, n, gen)
        i = sampler.frames(n, gen)
        far = mode == list(METRIC_MODES).index("far")
        j = sampler.near(i, torch.where(far, METRIC_FAR_OFFSET, METRIC_PAIR_OFFSET), gen)
        x, x2, value = sampler.poses[i], sampler.poses[j].clone(), values[j].clone()
        ranged = mode == list(METRIC_MODES).index("range")
        lo, hi = self.value_range
        value[ranged] = lo + (hi - lo) * torch.rand(int(ranged.sum()), generator=gen)
        x2[ranged] = x[ranged]
        return x, x2, value, ranged.float()

    def forward(self, x: torch.Tensor, x2: torch.Tensor, value: torch.Tensor,
                ranged: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            z = self.ae.encode(x)
        pred = self.ae.decode(self.net(z, value)).reshape(x.shape)
        achieved = metric_formula(pred, self.spec, torch)
        consistency = ((achieved - value) / self.net.value_std) ** 2
        pose = ((pred - x2) ** 2).sum(-1).mean(-1)
        pose_w = torch.where(ranged > 0, METRIC_RANGE_KEEP, 1.0)
        cons_w = torch.where(ranged > 0, METRIC_RANGE_CONSISTENCY, METRIC_CONSISTENCY_WEIGHT)
        return (pose_w * pose + cons_w * consistency).mean()
