"""The networks of the seed papers, plus the universal solver.

Every network carries the dataset's pose mean/std as buffers, so exported graphs take and
return model-space positions in metres: the engine never normalizes features itself.

- :class:`PoseAutoencoder`: E/D over the 63-float pose vector (2021 paper: two hidden
  layers of 200 ReLU units, latent 64, decoder the transposed replica with tied weights).
- :class:`UniversalSolver`: (latent, per-joint mask/target/weight) -> latent, any subset
  of effectors (the paper's future work, ProtoRes' idea in a small network).
- :class:`GroupSolver`: the 2021 paper's specialized solver, one per fixed target group.
- :class:`MetricNet`: (latent, requested metric value) -> latent (2023 paper).
- :class:`FusedUniversal`: encoder, universal solver and decoder in one exported graph.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from blender_addon.core import skeleton

POSE_DIM = skeleton.NUM_JOINTS * 3
EFFECTOR_FEATURES = 5  # mask, target x/y/z, weight
SEED_HIDDEN = (200, 200)
SEED_LATENT = 64
GROUP_HIDDEN = (126, 126, 126)  # the 2021 paper's specialized solvers


def mlp(sizes: Sequence[int], layernorm: bool = False) -> nn.Sequential:
    """Linear layers with ReLU (and optional LayerNorm) between, linear output."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            if layernorm:
                layers.append(nn.LayerNorm(b))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class PoseNormalizer(nn.Module):
    """Dataset mean/std as buffers: metres in, unit-variance features out, and back."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).reshape(-1))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32).reshape(-1))

    def forward(self, pose: torch.Tensor) -> torch.Tensor:
        return (pose.reshape(pose.shape[0], -1) - self.mean) / self.std

    def inverse(self, features: torch.Tensor) -> torch.Tensor:
        return features * self.std + self.mean


class PoseAutoencoder(nn.Module):
    """Pose vector (B, 63) metres <-> latent (B, latent)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, hidden: Sequence[int] = SEED_HIDDEN,
                 latent: int = SEED_LATENT, tied: bool = True, layernorm: bool = False) -> None:
        super().__init__()
        if tied and layernorm:
            raise ValueError("tied weights and LayerNorm cannot be combined (the seed "
                             "decoder is the encoder's exact transpose)")
        self.config = {"hidden": list(hidden), "latent": latent, "tied": tied,
                       "layernorm": layernorm}
        self.norm = PoseNormalizer(mean, std)
        sizes = [POSE_DIM, *hidden, latent]
        self.encoder = mlp(sizes, layernorm)
        self.tied = tied
        if tied:
            enc = [m for m in self.encoder if isinstance(m, nn.Linear)]
            self.dec_bias = nn.ParameterList(
                nn.Parameter(torch.zeros(m.in_features)) for m in reversed(enc))
        else:
            self.decoder = mlp(sizes[::-1], layernorm)

    @property
    def latent_size(self) -> int:
        return self.config["latent"]

    def encode(self, pose: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.norm(pose))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        if self.tied:
            enc = [m for m in self.encoder if isinstance(m, nn.Linear)]
            h = z
            for i, (m, b) in enumerate(zip(reversed(enc), self.dec_bias, strict=True)):
                h = nn.functional.linear(h, m.weight.t(), b)
                if i < len(enc) - 1:
                    h = torch.relu(h)
        else:
            h = self.decoder(z)
        return self.norm.inverse(h)

    def forward(self, pose: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(pose))


class Encoder(nn.Module):
    """Export wrapper: pose (B, 21, 3) -> latent."""

    def __init__(self, ae: PoseAutoencoder) -> None:
        super().__init__()
        self.ae = ae

    def forward(self, pose: torch.Tensor) -> torch.Tensor:
        return self.ae.encode(pose)


class Decoder(nn.Module):
    """Export wrapper: latent -> pose (B, 21, 3)."""

    def __init__(self, ae: PoseAutoencoder) -> None:
        super().__init__()
        self.ae = ae

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.ae.decode(z).reshape(-1, skeleton.NUM_JOINTS, 3)


class UniversalSolver(nn.Module):
    """(latent, mask (B,21), targets (B,21,3) metres, weights (B,21)) -> latent.

    Targets are normalized with the pose statistics so every joint's input has unit
    scale; the output is a residual on the input latent, so "no effector" means "no edit".
    """

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, latent: int,
                 hidden: Sequence[int] = (256, 256), layernorm: bool = True) -> None:
        super().__init__()
        self.config = {"hidden": list(hidden), "latent": latent, "layernorm": layernorm}
        self.norm = PoseNormalizer(mean, std)
        self.net = mlp([latent + skeleton.NUM_JOINTS * EFFECTOR_FEATURES, *hidden, latent],
                       layernorm)

    def forward(self, z: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        t = self.norm(targets).reshape(-1, skeleton.NUM_JOINTS, 3) * mask[..., None]
        feats = torch.cat([mask[..., None], t, (weights * mask)[..., None]], dim=-1)
        return z + self.net(torch.cat([z, feats.reshape(z.shape[0], -1)], dim=-1))


class FusedUniversal(nn.Module):
    """Export wrapper: encoder -> universal solver -> decoder as one graph, so the add-on's
    common edit (effectors only) is one session call instead of three.

    (pose, mask, targets, weights) -> (edited pose, reconstruction D(E(pose)), edited
    latent): the engine adds ``pose - reconstruction`` back (keep_details) and keeps the
    latent for refinement. Both latents go through the decoder as one batch.
    """

    def __init__(self, ae: PoseAutoencoder, solver: UniversalSolver) -> None:
        super().__init__()
        self.ae = ae
        self.solver = solver

    def forward(self, pose: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
                weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.ae.encode(pose)
        z_new = self.solver(z, mask, targets, weights)
        both = self.ae.decode(torch.cat([z_new, z])).reshape(2, -1, skeleton.NUM_JOINTS, 3)
        return both[0], both[1], z_new


class GroupSolver(nn.Module):
    """The 2021 paper's specialized solver: (latent, targets of one fixed group) -> latent."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, latent: int,
                 joints: Sequence[int], hidden: Sequence[int] = GROUP_HIDDEN) -> None:
        super().__init__()
        self.config = {"hidden": list(hidden), "latent": latent, "joints": list(joints)}
        self.norm = PoseNormalizer(mean, std)
        self.register_buffer("joints", torch.as_tensor(list(joints), dtype=torch.long))
        self.net = mlp([latent + 3 * len(joints), *hidden, latent])

    def forward(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """targets: (B, G, 3) metres, in the group's joint order."""
        idx = (self.joints[:, None] * 3 + torch.arange(3)).reshape(-1)
        t = (targets.reshape(z.shape[0], -1) - self.norm.mean[idx]) / self.norm.std[idx]
        return z + self.net(torch.cat([z, t], dim=-1))


class MetricNet(nn.Module):
    """(latent, requested value (B, 1) in the metric's unit) -> latent."""

    def __init__(self, latent: int, value_mean: float, value_std: float,
                 hidden: Sequence[int] = (128, 128)) -> None:
        super().__init__()
        self.config = {"hidden": list(hidden), "latent": latent}
        self.register_buffer("value_mean", torch.tensor(float(value_mean)))
        self.register_buffer("value_std", torch.tensor(max(float(value_std), 1e-6)))
        self.net = mlp([latent + 1, *hidden, latent])

    def forward(self, z: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        v = (value.reshape(-1, 1) - self.value_mean) / self.value_std
        return z + self.net(torch.cat([z, v], dim=-1))


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
