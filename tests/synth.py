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



# A CMU skeleton as converted from the original ASF files (the widely shared BVH set):
# LHipJoint, RHipJoint, LowerBack, Neck, the shoulders, the finger bases and thumbs sit at
# zero offset from their parents. Offsets in cm (ASF units x 5.644).
_ASF_CM = 5.644
CMU_ASF: tuple[tuple[str, str | None, tuple[float, float, float]], ...] = tuple(
    (n, p, tuple(v * _ASF_CM for v in o)) for n, p, o in (
        ("Hips", None, (0.0, 17.0, 0.0)),
        ("LHipJoint", "Hips", (0.0, 0.0, 0.0)),
        ("LeftUpLeg", "LHipJoint", (1.8559, -1.73949, 0.84976)),
        ("LeftLeg", "LeftUpLeg", (2.36836, -6.50702, 0.0)),
        ("LeftFoot", "LeftLeg", (2.53268, -6.95849, 0.0)),
        ("LeftToeBase", "LeftFoot", (0.15935, -0.43781, 1.94506)),
        ("RHipJoint", "Hips", (0.0, 0.0, 0.0)),
        ("RightUpLeg", "RHipJoint", (-1.68297, -1.73949, 0.84976)),
        ("RightLeg", "RightUpLeg", (-2.44709, -6.72334, 0.0)),
        ("RightFoot", "RightLeg", (-2.43843, -6.69953, 0.0)),
        ("RightToeBase", "RightFoot", (-0.20854, -0.57295, 2.02172)),
        ("LowerBack", "Hips", (0.0, 0.0, 0.0)),
        ("Spine", "LowerBack", (-0.0156, 2.23971, -0.03712)),
        ("Spine1", "Spine", (0.0549, 2.19225, -0.19086)),
        ("Neck", "Spine1", (0.0, 0.0, 0.0)),
        ("Neck1", "Neck", (-0.12403, 1.43168, 0.27585)),
        ("Head", "Neck1", (0.17855, 1.46173, -0.32578)),
        ("LeftShoulder", "Spine1", (0.0, 0.0, 0.0)),
        ("LeftArm", "LeftShoulder", (3.2765, 0.85634, 0.05396)),
        ("LeftForeArm", "LeftArm", (4.96755, 0.0, 0.0)),
        ("LeftHand", "LeftForeArm", (3.35751, 0.0, 0.0)),
        ("LeftFingerBase", "LeftHand", (0.0, 0.0, 0.0)),
        ("LeftHandIndex1", "LeftFingerBase", (0.79697, 0.0, 0.0)),
        ("LThumb", "LeftHand", (0.0, 0.0, 0.0)),
        ("RightShoulder", "Spine1", (0.0, 0.0, 0.0)),
        ("RightArm", "RightShoulder", (-3.24434, 1.02034, 0.34688)),
        ("RightForeArm", "RightArm", (-5.21859, 0.0, 0.0)),
        ("RightHand", "RightForeArm", (-3.36504, 0.0, 0.0)),
        ("RightFingerBase", "RightHand", (0.0, 0.0, 0.0)),
        ("RightHandIndex1", "RightFingerBase", (-0.62044, 0.0, 0.0)),
        ("RThumb", "RightHand", (0.0, 0.0, 0.0)),
    ))  # fmt: skip


def synthetic_bvh(frames: int = 40, seed: int = 0, frame_time: float = 1 / 30,
                  turn_deg_per_s: float = 30.0,
                  joints: tuple[tuple[str, str | None, tuple[float, float, float]], ...] = TPOSE,
                  amplitude_deg: float = ROTATION_AMPLITUDE_DEG) -> str:
    """A valid BVH text: 6 channels on the roots, 3 ZXY rotation channels on the rest.

    ``joints`` is a (name, parent, offset cm) table, parents first: :data:`TPOSE` (under an
    extra ``joint_Root``, whose child ``Hips`` carries the motion) or any other skeleton,
    whose root carries it (its offset's height is the hips' height)."""
    rng = np.random.default_rng(seed)
    names = [n for n, _, _ in joints]
    movers = 2 if joints[0][0] == "joint_Root" else 1  # joints with position channels
    hip_height = joints[movers - 1][2][1]
    lines = ["HIERARCHY"]

    def emit(index: int, depth: int) -> None:
        name, parent, offset = joints[index]
        if index < movers:
            offset = (0.0, 0.0, 0.0) if movers == 1 else offset
        pad = "  " * depth
        lines.append(f"{pad}{'ROOT' if parent is None else 'JOINT'} {name}")
        lines.append(f"{pad}{{")
        lines.append(f"{pad}  OFFSET {offset[0]:.4f} {offset[1]:.4f} {offset[2]:.4f}")
        chans = ("Xposition Yposition Zposition " if index < movers else "") + \
            "Zrotation Xrotation Yrotation"
        lines.append(f"{pad}  CHANNELS {6 if index < movers else 3} {chans}")
        children = [i for i, (_, p, _) in enumerate(joints) if p == name]
        for c in children:
            emit(c, depth + 1)
        if not children:
            lines.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET 0 0 0", f"{pad}  }}"])
        lines.append(f"{pad}}}")

    emit(0, 0)
    t = np.arange(frames) * frame_time
    phase = rng.uniform(0, 2 * np.pi, size=(len(names), 3))
    freq = rng.uniform(0.5, 1.5, size=(len(names), 3))
    rot = amplitude_deg * np.sin(2 * np.pi * freq[None] * t[:, None, None] + phase)
    rot[:, :movers] = 0.0  # the roots turn only through the yaw below
    values = [np.zeros((frames, 6)) for _ in range(movers)]
    values[-1][:, 0] = 100.0 * np.sin(0.3 * t)  # Hips X travel, cm
    values[-1][:, 1] = hip_height + 2.0 * np.sin(2 * np.pi * t)
    values[-1][:, 2] = 80.0 * t
    values[-1][:, 5] = turn_deg_per_s * t  # yaw (Y rotation)
    values += [rot[:, j] for j in range(movers, len(names))]
    motion = np.concatenate(values, axis=1)
    lines += ["MOTION", f"Frames: {frames}", f"Frame Time: {frame_time:.7f}"]
    lines += [" ".join(f"{v:.5f}" for v in row) for row in motion]
    return "\n".join(lines) + "\n"


def _variant(drop: tuple[str, ...] = (), **offsets: tuple[float, float, float]
             ) -> tuple[tuple[str, str | None, tuple[float, float, float]], ...]:
    """:data:`TPOSE` with some joints' offsets replaced (cm) and some joints left out."""
    return tuple((n, p, offsets.get(n, o)) for n, p, o in TPOSE if n not in drop)


# Skeletons the engine must keep the bone lengths of (issue 47), beside CMU_ASF:
DEGENERATE_SKELETONS = {
    "cmu_asf": CMU_ASF,
    # two joints at one place: both hips on the pelvis, the spine joint on the pelvis, the
    # head on the neck
    "coincident": _variant(UpperLeg_L=(0.0, 0.0, 0.0), UpperLeg_R=(0.0, 0.0, 0.0),
                           Spine=(0.0, 0.0, 0.0), Head=(0.0, 0.0, 0.0)),
    # very short bones: a 2 mm neck, 1 mm clavicles, 3 mm hips, 4 mm toes
    "short": _variant(Head=(0.0, 0.2, 0.0), UpperArm_L=(0.1, 0.0, 0.0),
                      UpperArm_R=(-0.1, 0.0, 0.0), UpperLeg_L=(0.3, 0.0, 0.0),
                      UpperLeg_R=(-0.3, 0.0, 0.0), Toes_L=(0.0, -0.2, 0.35),
                      Toes_R=(0.0, -0.2, 0.35)),
    # extra spine and neck joints (Mixamo-like names, five spine and three neck bones)
    "long_spine": (
        ("Hips", None, (0.0, 93.0, 0.0)),
        ("Spine", "Hips", (0.0, 8.0, 0.0)), ("Spine1", "Spine", (0.0, 8.0, 0.0)),
        ("Spine2", "Spine1", (0.0, 8.0, 0.0)), ("Spine3", "Spine2", (0.0, 8.0, 0.0)),
        ("Neck", "Spine3", (0.0, 8.0, 0.0)), ("Neck1", "Neck", (0.0, 4.0, 0.0)),
        ("Neck2", "Neck1", (0.0, 4.0, 0.0)), ("Head", "Neck2", (0.0, 5.0, 0.0)),
        ("LeftShoulder", "Spine3", (5.0, 5.0, 0.0)), ("LeftArm", "LeftShoulder", (8.0, 0.0, 0.0)),
        ("LeftForeArm", "LeftArm", (26.0, 0.0, 0.0)), ("LeftHand", "LeftForeArm", (24.0, 0.0, 0.0)),
        ("RightShoulder", "Spine3", (-5.0, 5.0, 0.0)),
        ("RightArm", "RightShoulder", (-8.0, 0.0, 0.0)),
        ("RightForeArm", "RightArm", (-26.0, 0.0, 0.0)),
        ("RightHand", "RightForeArm", (-24.0, 0.0, 0.0)),
        ("LeftUpLeg", "Hips", (9.0, -4.0, 0.0)), ("LeftLeg", "LeftUpLeg", (0.0, -42.0, 0.0)),
        ("LeftFoot", "LeftLeg", (0.0, -42.0, 0.0)),
        ("LeftToeBase", "LeftFoot", (0.0, -5.0, 12.0)),
        ("RightUpLeg", "Hips", (-9.0, -4.0, 0.0)), ("RightLeg", "RightUpLeg", (0.0, -42.0, 0.0)),
        ("RightFoot", "RightLeg", (0.0, -42.0, 0.0)),
        ("RightToeBase", "RightFoot", (0.0, -5.0, 12.0)),
    ),
    # toe-less feet: the legs end at the ankles (the toes are synthesized)
    "toeless": _variant(drop=("Toes_L", "Toes_R")),
}  # fmt: skip


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
