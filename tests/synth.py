"""Small synthetic mocap made by the tests themselves: BVH text and model-space poses.

The skeleton is a T-pose with Bandai Namco joint names (Y up, facing +Z, left at +X,
centimetres) under an extra ``joint_Root``; the motion is smooth seeded sinusoids on
every joint plus root travel and turning, so clips look like (very stiff) mocap.
"""

from __future__ import annotations

import numpy as np

# name, parent, offset (cm) in a T-pose facing +Z with the left side at +X
TPOSE: tuple[tuple[str, str | None, tuple[float, float, float]], ...] = (
    ("joint_Root", None, (0.0, 0.0, 0.0)),
    ("Hips", "joint_Root", (0.0, 93.0, 0.0)),
    ("Spine", "Hips", (0.0, 15.7, 0.0)),
    ("Chest", "Spine", (0.0, 9.0, 0.0)),
    ("Neck", "Chest", (0.0, 16.4, 0.0)),
    ("Head", "Neck", (0.0, 6.5, 0.0)),
    ("Shoulder_L", "Chest", (5.0, 12.9, 0.0)),
    ("UpperArm_L", "Shoulder_L", (5.3, 0.0, 0.0)),
    ("LowerArm_L", "UpperArm_L", (24.3, 0.0, 0.0)),
    ("Hand_L", "LowerArm_L", (22.3, 0.0, 0.0)),
    ("Shoulder_R", "Chest", (-5.0, 12.9, 0.0)),
    ("UpperArm_R", "Shoulder_R", (-5.3, 0.0, 0.0)),
    ("LowerArm_R", "UpperArm_R", (-24.3, 0.0, 0.0)),
    ("Hand_R", "LowerArm_R", (-22.3, 0.0, 0.0)),
    ("UpperLeg_L", "Hips", (6.8, 0.0, 0.0)),
    ("LowerLeg_L", "UpperLeg_L", (0.0, -39.1, 0.0)),
    ("Foot_L", "LowerLeg_L", (0.0, -41.0, 0.0)),
    ("Toes_L", "Foot_L", (0.0, -5.0, 10.6)),
    ("UpperLeg_R", "Hips", (-6.8, 0.0, 0.0)),
    ("LowerLeg_R", "UpperLeg_R", (0.0, -39.1, 0.0)),
    ("Foot_R", "LowerLeg_R", (0.0, -41.0, 0.0)),
    ("Toes_R", "Foot_R", (0.0, -5.0, 10.6)),
)
ROTATION_AMPLITUDE_DEG = 25.0

# Canonical-skeleton bone directions of a T-pose facing +Z (left = +X): spine up, arms
# out, legs down, toes forward (bone PARENTS[j] -> j, by joint name).
TPOSE_DIRECTIONS = {
    "spine": (0, 1, 0), "chest": (0, 1, 0), "neck": (0, 1, 0), "head": (0, 1, 0),
    "l_clavicle": (1, 0, 0), "l_upperarm": (1, 0, 0), "l_forearm": (1, 0, 0), "l_hand": (1, 0, 0),
    "r_clavicle": (-1, 0, 0), "r_upperarm": (-1, 0, 0), "r_forearm": (-1, 0, 0),
    "r_hand": (-1, 0, 0),
    "l_thigh": (1, 0, 0), "l_shin": (0, -1, 0), "l_foot": (0, -1, 0), "l_toe": (0, 0, 1),
    "r_thigh": (-1, 0, 0), "r_shin": (0, -1, 0), "r_foot": (0, -1, 0), "r_toe": (0, 0, 1),
}  # fmt: skip



def synthetic_bvh(frames: int = 40, seed: int = 0, frame_time: float = 1 / 30,
                  turn_deg_per_s: float = 30.0) -> str:
    """A valid BVH text: 6 channels on the roots, 3 ZXY rotation channels on the rest."""
    rng = np.random.default_rng(seed)
    names = [n for n, _, _ in TPOSE]
    lines = ["HIERARCHY"]

    def emit(index: int, depth: int) -> None:
        name, parent, offset = TPOSE[index]
        pad = "  " * depth
        lines.append(f"{pad}{'ROOT' if parent is None else 'JOINT'} {name}")
        lines.append(f"{pad}{{")
        lines.append(f"{pad}  OFFSET {offset[0]:.4f} {offset[1]:.4f} {offset[2]:.4f}")
        chans = ("Xposition Yposition Zposition " if index < 2 else "") + \
            "Zrotation Xrotation Yrotation"
        lines.append(f"{pad}  CHANNELS {6 if index < 2 else 3} {chans}")
        children = [i for i, (_, p, _) in enumerate(TPOSE) if p == name]
        for c in children:
            emit(c, depth + 1)
        if not children:
            lines.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET 0 0 0", f"{pad}  }}"])
        lines.append(f"{pad}}}")

    emit(0, 0)
    t = np.arange(frames) * frame_time
    phase = rng.uniform(0, 2 * np.pi, size=(len(names), 3))
    freq = rng.uniform(0.5, 1.5, size=(len(names), 3))
    rot = ROTATION_AMPLITUDE_DEG * np.sin(2 * np.pi * freq[None] * t[:, None, None] + phase)
    rot[:, :2] = 0.0  # the roots turn only through the yaw below
    values = [np.zeros((frames, 6)), np.zeros((frames, 6))]
    values[1][:, 0] = 100.0 * np.sin(0.3 * t)  # Hips X travel, cm
    values[1][:, 1] = 93.0 + 2.0 * np.sin(2 * np.pi * t)
    values[1][:, 2] = 80.0 * t
    values[1][:, 5] = turn_deg_per_s * t  # yaw (Y rotation)
    values += [rot[:, j] for j in range(2, len(names))]
    motion = np.concatenate(values, axis=1)
    lines += ["MOTION", f"Frames: {frames}", f"Frame Time: {frame_time:.7f}"]
    lines += [" ".join(f"{v:.5f}" for v in row) for row in motion]
    return "\n".join(lines) + "\n"


def rig_reachable_hand_drags(poses: np.ndarray, seeds: int = 20
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(poses, mask, targets): the left hand dragged to where a rig pose puts it with the
    feet (and, every other seed, the head and right hand) pinned where they are: each pose
    turned at random as a rig turns it (the trunk bent, the arm swung, the pelvis moved),
    then its pinned joints brought back by :func:`blender_addon.core.rig_ik.solve`; only
    the poses whose pins came back to 1 micrometre are kept, so every drag is reachable
    by construction. The turns' sizes are the spreads (radians) below."""
    from blender_addon.core import rig_ik, skeleton

    joints = skeleton.JOINT_INDEX
    turns = {"pelvis": 0.2, "spine": 0.3, "chest": 0.3, "l_clavicle": 0.2,
             "l_upperarm": 0.6, "l_forearm": 0.5, "r_upperarm": 0.5}
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        step = np.zeros((len(poses), rig_ik._PARAMS))
        step[:, :3] = rng.normal(0.0, 0.08, (len(poses), 3))
        for name, size in turns.items():
            k = 3 + 3 * rig_ik._PIVOT_OF[joints[name]]
            step[:, k:k + 3] = rng.normal(0.0, size, (len(poses), 3))
        turned = rig_ik._apply(poses, step)
        pins = np.zeros(poses.shape[:2], dtype=bool)
        pins[:, [joints["l_foot"], joints["r_foot"]]] = True
        if seed % 2 == 0:
            pins[:, [joints["head"], joints["r_hand"]]] = True
        back = rig_ik.solve(turned, pins, np.where(pins[..., None], poses, turned), 1e-7)
        ok = np.where(pins, np.linalg.norm(back - poses, axis=-1), 0.0).max(axis=1) < 1e-6
        mask = pins.astype(np.float64)
        mask[:, joints["l_hand"]] = 1.0
        targets = poses.copy()
        targets[:, joints["l_hand"]] = back[:, joints["l_hand"]]
        out.append((poses[ok], mask[ok], targets[ok]))
    return tuple(np.concatenate(a) for a in zip(*out, strict=True))  # type: ignore[return-value]
