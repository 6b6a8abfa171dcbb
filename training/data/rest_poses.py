"""Synthetic rest poses (T-pose and A-pose) in model space, for training.

Users start posing from a rig's rest pose, which mocap rarely contains; the autoencoder
and the universal solver see these among their starting poses. Bones take the canonical
lengths (model space gives every pose those), directions get a little random variation.
"""

from __future__ import annotations

import torch

from blender_addon.core import skeleton

# Bone directions (bone PARENTS[j] -> j) of a rest pose facing +Z with the left side at +X.
_STRAIGHT = {
    "spine": (0, 1, 0), "chest": (0, 1, 0), "neck": (0, 1, 0), "head": (0, 1, 0),
    "l_clavicle": (1, 0, 0), "r_clavicle": (-1, 0, 0),
    "l_thigh": (1, 0, 0), "r_thigh": (-1, 0, 0),
    "l_shin": (0, -1, 0), "r_shin": (0, -1, 0), "l_foot": (0, -1, 0), "r_foot": (0, -1, 0),
    "l_toe": (0, -0.43, 0.9), "r_toe": (0, -0.43, 0.9),
}  # fmt: skip
_ARM_BONES = ("upperarm", "forearm", "hand")
T_POSE_DROP_DEG = (0.0, 10.0)  # arms below horizontal
A_POSE_DROP_DEG = (30.0, 50.0)
LEG_SPREAD_DEG = (0.0, 6.0)  # each leg away from vertical, outwards
DIRECTION_NOISE = 0.04  # per-bone direction jitter (about 2 degrees)


def _uniform(lo_hi: tuple[float, float], n: int, gen: torch.Generator) -> torch.Tensor:
    return lo_hi[0] + (lo_hi[1] - lo_hi[0]) * torch.rand(n, generator=gen)


def rest_poses(n: int, gen: torch.Generator, floor: float = 0.0) -> torch.Tensor:
    """``n`` model-space rest poses (n, 21, 3): half T-poses, half A-poses.

    ``floor``: height of the lowest foot joint, as in the data (model space keeps the
    source's pelvis height, so the ankles stand a little above y = 0).
    """
    dirs = torch.zeros(n, skeleton.NUM_JOINTS, 3)
    for name, d in _STRAIGHT.items():
        dirs[:, skeleton.JOINT_INDEX[name]] = torch.tensor(d, dtype=torch.float32)
    a_pose = torch.rand(n, generator=gen) < 0.5
    drop = torch.where(a_pose, _uniform(A_POSE_DROP_DEG, n, gen),
                       _uniform(T_POSE_DROP_DEG, n, gen)).deg2rad()
    spread = _uniform(LEG_SPREAD_DEG, n, gen).deg2rad()
    for side, sign in (("l", 1.0), ("r", -1.0)):
        arm = torch.stack([sign * drop.cos(), -drop.sin(), torch.zeros(n)], dim=-1)
        for bone in _ARM_BONES:
            dirs[:, skeleton.JOINT_INDEX[f"{side}_{bone}"]] = arm
        leg = torch.stack([sign * spread.sin(), -spread.cos(), torch.zeros(n)], dim=-1)
        for bone in ("shin", "foot"):
            dirs[:, skeleton.JOINT_INDEX[f"{side}_{bone}"]] = leg
    dirs[:, 1:] += DIRECTION_NOISE * torch.randn(n, skeleton.NUM_JOINTS - 1, 3, generator=gen)
    dirs[:, 1:] = dirs[:, 1:] / dirs[:, 1:].norm(dim=-1, keepdim=True)
    bones = dirs * torch.as_tensor(skeleton.BONE_LENGTHS, dtype=torch.float32)[:, None]
    ancestors = torch.as_tensor(skeleton.ANCESTORS, dtype=torch.float32)
    pose = torch.einsum("jk,nkc->njc", ancestors, bones)
    feet = skeleton.joint_indices(["l_foot", "r_foot", "l_toe", "r_toe"])
    pose[..., 1] += floor - pose[:, feet, 1].min(dim=1).values[:, None]
    return pose
