"""The canonical 21-joint skeleton every part of the project speaks.

Conventions, fixed once for the whole code base:

- Positions are arrays of shape ``(..., 21, 3)`` in metres, joints in the order of
  ``JOINTS``; the last axis is ``(x, y, z)`` with **Y up** (BVH's convention). The bpy
  layer converts Blender's Z-up world with :func:`blender_to_yup` / :func:`yup_to_blender`.
- In model space a body faces **+Z** and its left side is **+X**, so the sagittal plane
  is ``x = 0`` and :func:`mirror_pose` is a reflection of X plus a left/right swap.
- Bone ``j`` is the segment from ``PARENTS[j]`` to ``j``; its length is ``BONE_LENGTHS[j]``
  (the pelvis, a root, has length 0).
"""

from __future__ import annotations

import numpy as np

JOINTS: tuple[str, ...] = (
    "pelvis", "spine", "chest", "neck", "head",
    "l_clavicle", "l_upperarm", "l_forearm", "l_hand",
    "r_clavicle", "r_upperarm", "r_forearm", "r_hand",
    "l_thigh", "l_shin", "l_foot", "l_toe",
    "r_thigh", "r_shin", "r_foot", "r_toe",
)  # fmt: skip
NUM_JOINTS = len(JOINTS)
JOINT_INDEX: dict[str, int] = {name: i for i, name in enumerate(JOINTS)}

_PARENT_NAMES: dict[str, str | None] = {
    "pelvis": None, "spine": "pelvis", "chest": "spine", "neck": "chest", "head": "neck",
    "l_clavicle": "chest", "l_upperarm": "l_clavicle", "l_forearm": "l_upperarm",
    "l_hand": "l_forearm",
    "r_clavicle": "chest", "r_upperarm": "r_clavicle", "r_forearm": "r_upperarm",
    "r_hand": "r_forearm",
    "l_thigh": "pelvis", "l_shin": "l_thigh", "l_foot": "l_shin", "l_toe": "l_foot",
    "r_thigh": "pelvis", "r_shin": "r_thigh", "r_foot": "r_shin", "r_toe": "r_foot",
}  # fmt: skip
PARENTS: np.ndarray = np.array(
    [-1 if _PARENT_NAMES[n] is None else JOINT_INDEX[_PARENT_NAMES[n]] for n in JOINTS],
    dtype=np.int64,
)
ROOT = JOINT_INDEX["pelvis"]
# The parents as the compiled kernels read them (int64, contiguous; read-only).
SKELETON_PARENTS = np.ascontiguousarray(PARENTS, dtype=np.int64)
SKELETON_PARENTS.flags.writeable = False
# What the panel calls each joint: where it is on the body, in an animator's words
# (``l_hand`` is the wrist, the hand's pivot).
JOINT_LABELS: dict[str, str] = {
    "pelvis": "Pelvis", "spine": "Spine", "chest": "Chest", "neck": "Neck", "head": "Head",
    **{f"{s}_{j}": f"{side} {label}" for s, side in (("l", "Left"), ("r", "Right"))
       for j, label in (("clavicle", "Collarbone"), ("upperarm", "Shoulder"),
                        ("forearm", "Elbow"), ("hand", "Hand"), ("thigh", "Hip"),
                        ("shin", "Knee"), ("foot", "Foot"), ("toe", "Toes"))},
}
# The chains' ends: what a user grabs first, and a full-body request when most of them move.
END_JOINTS: tuple[str, ...] = ("l_hand", "r_hand", "l_foot", "r_foot", "head")

# Kinematic chains from the pelvis, each a path of joint indices that starts at a
# sub-base (the pelvis, or the chest where the arms branch off) and ends at an end
# effector. FABRIK walks these; the chest is the upper body's sub-base.
CHAINS: tuple[tuple[int, ...], ...] = tuple(
    tuple(JOINT_INDEX[n] for n in chain)
    for chain in (
        ("pelvis", "spine", "chest", "neck", "head"),
        ("chest", "l_clavicle", "l_upperarm", "l_forearm", "l_hand"),
        ("chest", "r_clavicle", "r_upperarm", "r_forearm", "r_hand"),
        ("pelvis", "l_thigh", "l_shin", "l_foot", "l_toe"),
        ("pelvis", "r_thigh", "r_shin", "r_foot", "r_toe"),
    )
)
END_EFFECTORS: tuple[int, ...] = tuple(chain[-1] for chain in CHAINS)
SUB_BASE = JOINT_INDEX["chest"]

MIRROR: np.ndarray = np.array(
    [
        JOINT_INDEX["r_" + n[2:]] if n.startswith("l_")
        else JOINT_INDEX["l_" + n[2:]] if n.startswith("r_")
        else i
        for i, n in enumerate(JOINTS)
    ],
    dtype=np.int64,
)  # fmt: skip

# Canonical bone lengths in metres: the Bandai Namco Research Motion actor, measured
# from the data (`python -m training prepare` prints them; a real-data test pins them).
BONE_LENGTHS: np.ndarray = np.array(
    [
        0.0, 0.1574, 0.0899, 0.1638, 0.0646,
        0.1392, 0.0535, 0.2433, 0.2229,
        0.1392, 0.0535, 0.2433, 0.2229,
        0.0683, 0.3908, 0.4099, 0.1175,
        0.0683, 0.3908, 0.4099, 0.1175,
    ],
    dtype=np.float64,
)  # fmt: skip

# Children lists and a parents-before-children order, for FK-like sweeps.
CHILDREN: tuple[tuple[int, ...], ...] = tuple(
    tuple(int(c) for c in np.flatnonzero(PARENTS == j)) for j in range(NUM_JOINTS)
)

# ANCESTORS[j, k] = 1 when bone k lies on the path from the pelvis to joint j (k = j
# included, the pelvis excluded): joint positions are ``pelvis + ANCESTORS @ bone_vectors``,
# which lets bone-length changes run as one matrix product instead of a joint loop.
ANCESTORS: np.ndarray = np.zeros((NUM_JOINTS, NUM_JOINTS))
for _j in range(1, NUM_JOINTS):
    _k = _j
    while _k != ROOT:
        ANCESTORS[_j, _k] = 1.0
        _k = int(PARENTS[_k])
del _j, _k
DEPTHS: np.ndarray = ANCESTORS.sum(axis=1).astype(np.int64)


def joint_indices(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Indices of canonical joint names; an unknown name is an error that lists them all."""
    unknown = [n for n in names if n not in JOINT_INDEX]
    if unknown:
        raise KeyError(
            f"unknown joint name(s) {unknown}; canonical joints are: {', '.join(JOINTS)}"
        )
    return np.array([JOINT_INDEX[n] for n in names], dtype=np.int64)


def bone_lengths(positions: np.ndarray) -> np.ndarray:
    """Length of every bone, shape ``(..., 21)``; the root's is 0."""
    positions = np.asarray(positions)
    vec = positions - positions[..., np.maximum(PARENTS, 0), :]
    return np.linalg.norm(vec, axis=-1)


def mirror_pose(positions: np.ndarray) -> np.ndarray:
    """Reflect across the sagittal plane x = 0 and swap left and right joints.

    Applied to model-space poses it mirrors the body (left becomes right); applying it
    twice gives back the input exactly.
    """
    mirrored = np.array(positions, copy=True)[..., MIRROR, :]
    mirrored[..., 0] *= -1.0
    return mirrored


def blender_to_yup(positions: np.ndarray) -> np.ndarray:
    """Blender's Z-up, -Y-forward axes to the core's Y-up axes: (x, y, z) -> (x, z, -y)."""
    p = np.asarray(positions)
    return np.stack([p[..., 0], p[..., 2], -p[..., 1]], axis=-1)


def yup_to_blender(positions: np.ndarray) -> np.ndarray:
    """Inverse of :func:`blender_to_yup`: (x, y, z) -> (x, -z, y)."""
    p = np.asarray(positions)
    return np.stack([p[..., 0], -p[..., 2], p[..., 1]], axis=-1)
