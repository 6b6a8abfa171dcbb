"""Is an edited pose still a human pose? Joint angles against the training data's range, and
the distance to the learned manifold (the autoencoder's residual).

Angles are measured on positions only: the bend at every joint with one child (knees,
elbows, ankles, spine, neck, ...: the angle between the bone into the joint and the bone out
of it) and the torso twist (the shoulder line against the hip line, about the vertical).
A pose is out of range when any angle lies outside the 0.1-99.9 percentile range of the
training split. Angles that barely vary in the training data (under
:data:`MIN_SPREAD_DEG` between those percentiles: a skeleton whose collar bones were never
animated, as in CMU) say nothing about plausibility and are left out (listed in the report).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.normalize import to_model_space

LOW_PERCENTILE, HIGH_PERCENTILE = 0.1, 99.9
MIN_SPREAD_DEG = 5.0
# Joints whose bend is measured: those with exactly one child (the chain's middle joints).
BEND_JOINTS = tuple(j for j in range(1, skeleton.NUM_JOINTS)
                    if int((skeleton.PARENTS == j).sum()) == 1)
_CHILD = {j: int(np.flatnonzero(skeleton.PARENTS == j)[0]) for j in BEND_JOINTS}
_SHOULDERS = skeleton.joint_indices(["l_upperarm", "r_upperarm"])
_HIPS = skeleton.joint_indices(["l_thigh", "r_thigh"])
ANGLE_NAMES = (*(f"{skeleton.JOINTS[j]} bend" for j in BEND_JOINTS), "torso twist")


def _angle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    cos = (u * v).sum(-1) / np.maximum(np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1),
                                       1e-12)
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def joint_angles(poses: np.ndarray) -> np.ndarray:
    """(B, 21, 3) -> (B, K) degrees, in the order of :data:`ANGLE_NAMES`."""
    p = np.asarray(poses, dtype=np.float64)
    parents = skeleton.PARENTS[list(BEND_JOINTS)]
    joints = np.array(BEND_JOINTS)
    children = np.array([_CHILD[j] for j in BEND_JOINTS])
    bends = _angle(p[:, joints] - p[:, parents], p[:, children] - p[:, joints])
    flat = np.array([1.0, 0.0, 1.0])
    shoulders = (p[:, _SHOULDERS[0]] - p[:, _SHOULDERS[1]]) * flat
    hips = (p[:, _HIPS[0]] - p[:, _HIPS[1]]) * flat
    twist = _angle(shoulders, hips)
    return np.concatenate([bends, twist[:, None]], axis=1)


@dataclass
class AngleRanges:
    """Per-angle bounds from training poses, and which angles are judged."""
    low: np.ndarray
    high: np.ndarray
    judged: np.ndarray  # (K,) bool: the angle varies enough in the data to be judged

    @classmethod
    def fit(cls, poses: np.ndarray) -> AngleRanges:
        angles = joint_angles(poses)
        low = np.percentile(angles, LOW_PERCENTILE, axis=0)
        high = np.percentile(angles, HIGH_PERCENTILE, axis=0)
        return cls(low, high, (high - low) >= MIN_SPREAD_DEG)

    @property
    def left_out(self) -> list[str]:
        return [n for n, j in zip(ANGLE_NAMES, self.judged, strict=True) if not j]

    def outside(self, poses: np.ndarray) -> np.ndarray:
        """(B,) True where any judged angle of the pose lies outside the range."""
        a = joint_angles(poses)
        return (((a < self.low) | (a > self.high)) & self.judged).any(axis=1)


def manifold_distance(models: ModelSet, poses: np.ndarray) -> np.ndarray:
    """(B,) mean joint distance (m, model space) between each pose and its autoencoding."""
    model, _ = to_model_space(np.asarray(poses, dtype=np.float64))
    recon = models.decode(models.encode(model.astype(np.float32))).astype(np.float64)
    return np.linalg.norm(recon - model, axis=-1).mean(axis=1)
