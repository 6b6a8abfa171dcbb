"""The skeleton's tables as the refinement reads them (a pose flattened joint-major)."""

from __future__ import annotations

from .. import skeleton

_POSE_DIM = skeleton.NUM_JOINTS * 3

_ENDS = skeleton.joint_indices(skeleton.END_JOINTS)

_BONE_SUMS = skeleton.ANCESTORS[:, 1:]  # joints relative to the pelvis from bone vectors

_PARENTS = skeleton.PARENTS[1:]
