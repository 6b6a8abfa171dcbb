"""Skeleton mapping: presets, auto-detection, JSON overrides, toe synthesis."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import mapping
from blender_addon.core.mapping import (
    PRESETS,
    TOE_PITCH_DEG,
    JointMap,
    MappingError,
    apply_mapping,
    detect_mapping,
    load_mapping_json,
    resolve_mapping,
    save_mapping_json,
)
from blender_addon.core.skeleton import BONE_LENGTHS, JOINT_INDEX, JOINTS, yup_to_blender

Rig = tuple[list[str], list[int]]
CENTER = ("pelvis", "spine", "chest", "neck", "head")
LIMBS = ("clavicle", "upperarm", "forearm", "hand", "thigh", "shin", "foot", "toe")


def build(pairs: Sequence[tuple[str, str | None]]) -> Rig:
    """Names and parent indices from (name, parent name) pairs."""
    names = [n for n, _ in pairs]
    return names, [-1 if p is None else names.index(p) for _, p in pairs]


def pairs_of(rig: Rig) -> list[tuple[str, str | None]]:
    """The (name, parent name) pairs of a rig: :func:`build` undone, to add joints to it."""
    names, parents = rig
    return [(n, None if p < 0 else names[p]) for n, p in zip(names, parents, strict=True)]


def chain(parent: str | None, *names: str) -> list[tuple[str, str | None]]:
    return [(n, names[i - 1] if i else parent) for i, n in enumerate(names)]


def expected(center: Sequence[str], left: Sequence[str | None], right: Sequence[str | None]):
    """The full canonical -> source map; a None toe is left out (synthesized)."""
    pairs = list(zip(CENTER, center, strict=True))
    pairs += [(f"l_{r}", n) for r, n in zip(LIMBS, left, strict=True)]
    pairs += [(f"r_{r}", n) for r, n in zip(LIMBS, right, strict=True)]
    named = dict(pairs)
    return {c: named[c] for c in JOINTS if named[c] is not None}


# --- synthetic rigs of each family -------------------------------------------------------


def bandai_rig() -> tuple[Rig, dict]:
    pairs = [("joint_Root", None), *chain("joint_Root", "Hips", "Spine", "Chest", "Neck", "Head")]
    for s in "LR":
        pairs += chain("Chest", *(f"{n}_{s}" for n in ("Shoulder", "UpperArm", "LowerArm", "Hand")))
        pairs += chain("Hips", *(f"{n}_{s}" for n in ("UpperLeg", "LowerLeg", "Foot", "Toes")))
    side = [f"{{}}_{s}" for s in "LR"]
    limbs = ("Shoulder", "UpperArm", "LowerArm", "Hand", "UpperLeg", "LowerLeg", "Foot", "Toes")
    return build(pairs), expected(
        ("Hips", "Spine", "Chest", "Neck", "Head"), *([f.format(n) for n in limbs] for f in side)
    )


def cmu_rig() -> tuple[Rig, dict]:
    pairs = chain(None, "Hips", "LowerBack", "Spine", "Spine1", "Neck", "Neck1", "Head")
    for s, c in (("Left", "L"), ("Right", "R")):
        pairs += chain("Hips", f"{c}HipJoint", f"{s}UpLeg", f"{s}Leg", f"{s}Foot", f"{s}ToeBase")
        pairs += chain("Spine1", *(f"{s}{n}" for n in ("Shoulder", "Arm", "ForeArm", "Hand")))
        pairs += chain(f"{s}Hand", f"{s}FingerBase", f"{s}HandIndex1")
        pairs += [(f"{c}Thumb", f"{s}Hand")]
    lim = ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase")
    return build(pairs), expected(
        ("Hips", "LowerBack", "Spine1", "Neck", "Head"),
        [f"Left{n}" for n in lim], [f"Right{n}" for n in lim],
    )  # fmt: skip


def mixamo_rig(prefix: str = "mixamorig:") -> tuple[Rig, dict]:
    p = prefix
    pairs = chain(None, *(p + n for n in ("Hips", "Spine", "Spine1", "Spine2", "Neck", "Head")))
    pairs += [(p + "HeadTop_End", p + "Head")]
    for s in ("Left", "Right"):
        arm = ("Shoulder", "Arm", "ForeArm", "Hand", "HandIndex1", "HandIndex2")
        pairs += chain(p + "Spine2", *(f"{p}{s}{n}" for n in arm))
        leg = ("UpLeg", "Leg", "Foot", "ToeBase", "Toe_End")
        pairs += chain(p + "Hips", *(f"{p}{s}{n}" for n in leg))
    lim = ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase")
    return build(pairs), expected(
        [p + n for n in ("Hips", "Spine", "Spine2", "Neck", "Head")],
        [f"{p}Left{n}" for n in lim], [f"{p}Right{n}" for n in lim],
    )  # fmt: skip


def _plain_rig(spine: Sequence[str], chest: str, sides: tuple[str, str],
               arm: Sequence[str], leg: Sequence[str], center: Sequence[str]
               ) -> tuple[Rig, dict]:
    """A chain of ``spine`` names from the root, arms (clavicle first) hanging from
    ``chest`` and legs (thigh first) from the root, each side's names behind its
    ``sides`` prefix; and the map expected (``center``: pelvis, spine, chest, neck, head)."""
    pairs = chain(None, *spine)
    for side in sides:
        pairs += chain(chest, *(side + n for n in arm))
        pairs += chain(spine[0], *(side + n for n in leg))
    return build(pairs), expected(center, *([side + n for n in (*arm, *leg)] for side in sides))


def lafan1_rig() -> tuple[Rig, dict]:
    """Ubisoft LaFAN1 (and Truebones): Mixamo's names, but ``LeftToe``, which the preset
    does not name: the toe is still the real joint below the foot, not a synthesized one."""
    return _plain_rig(("Hips", "Spine", "Spine1", "Spine2", "Neck", "Head"), "Spine2",
                      ("Left", "Right"), ("Shoulder", "Arm", "ForeArm", "Hand"),
                      ("UpLeg", "Leg", "Foot", "Toe"), ("Hips", "Spine", "Spine2", "Neck", "Head"))


def optitrack_rig(prefix: str = "Skeleton1_") -> tuple[Rig, dict]:
    """OptiTrack Motive: ``LUArm``/``LFArm`` and a ``Hip``-``Ab``-``Chest`` spine, each name
    behind the skeleton asset's name."""
    center = [prefix + n for n in ("Hip", "Ab", "Chest", "Neck", "Head")]
    return _plain_rig(center, prefix + "Chest", (prefix + "L", prefix + "R"),
                      ("Shoulder", "UArm", "FArm", "Hand"), ("Thigh", "Shin", "Foot", "Toe"),
                      center)


def xsens_rig() -> tuple[Rig, dict]:
    """Xsens MVN: a five-joint spine named by vertebrae (L5, L3, T12, T8)."""
    return _plain_rig(("Pelvis", "L5", "L3", "T12", "T8", "Neck", "Head"), "T8",
                      ("Left", "Right"), ("Shoulder", "UpperArm", "ForeArm", "Hand"),
                      ("UpperLeg", "LowerLeg", "Foot", "Toe"),
                      ("Pelvis", "L5", "T8", "Neck", "Head"))


def unreal_rig() -> tuple[Rig, dict]:
    """Unreal Engine's mannequin: side suffixes, ``calf`` and ``ball``."""
    spine = ("pelvis", "spine_01", "spine_02", "spine_03", "neck_01", "head")
    pairs = chain(None, *spine)
    for s in "lr":
        pairs += chain("spine_03", *(f"{n}_{s}" for n in ("clavicle", "upperarm", "lowerarm",
                                                           "hand")))
        pairs += chain("pelvis", *(f"{n}_{s}" for n in ("thigh", "calf", "foot", "ball")))
    lim = ("clavicle", "upperarm", "lowerarm", "hand", "thigh", "calf", "foot", "ball")
    return build(pairs), expected(("pelvis", "spine_01", "spine_03", "neck_01", "head"),
                                  *([f"{n}_{s}" for n in lim] for s in "lr"))


def style100_rig() -> tuple[Rig, dict]:
    """100STYLE: Chest..Chest4, collar/shoulder/elbow/wrist and hip/knee/ankle/toe."""
    return _plain_rig(("Hips", "Chest", "Chest2", "Chest3", "Chest4", "Neck", "Head"), "Chest4",
                      ("Left", "Right"), ("Collar", "Shoulder", "Elbow", "Wrist"),
                      ("Hip", "Knee", "Ankle", "Toe"), ("Hips", "Chest", "Chest4", "Neck", "Head"))


def rokoko_rig() -> tuple[Rig, dict]:
    """Rokoko: Spine1..Spine4 and Thigh/Shin/Foot/Toe."""
    return _plain_rig(("Hips", "Spine1", "Spine2", "Spine3", "Spine4", "Neck", "Head"), "Spine4",
                      ("Left", "Right"), ("Shoulder", "Arm", "ForeArm", "Hand"),
                      ("Thigh", "Shin", "Foot", "Toe"),
                      ("Hips", "Spine1", "Spine4", "Neck", "Head"))


def character1_rig() -> tuple[Rig, dict]:
    """MotionBuilder HumanIK naming: a common prefix, four spine joints, roll helpers."""
    p = "Character1_"
    spine = ("Hips", "Spine", "Spine1", "Spine2", "Spine3", "Neck", "Head")
    pairs = [(p + "Reference", None), *chain(p + "Reference", *(p + n for n in spine))]
    for s in ("Left", "Right"):
        pairs += chain(p + "Spine3", *(f"{p}{s}{n}" for n in ("Shoulder", "Arm", "ForeArm")))
        pairs += [(f"{p}{s}Hand", f"{p}{s}ForeArm"), (f"{p}{s}ArmRoll", f"{p}{s}Arm")]
        pairs += [(f"{p}{s}ForeArmRoll", f"{p}{s}ForeArm")]
        pairs += chain(p + "Hips", *(f"{p}{s}{n}" for n in ("UpLeg", "Leg", "Foot", "ToeBase")))
        pairs += [(f"{p}{s}UpLegRoll", f"{p}{s}UpLeg"), (f"{p}{s}LegRoll", f"{p}{s}Leg")]
    lim = ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase")
    return build(pairs), expected(
        [p + n for n in ("Hips", "Spine", "Spine3", "Neck", "Head")],
        [f"{p}Left{n}" for n in lim], [f"{p}Right{n}" for n in lim],
    )  # fmt: skip


def daz_rig() -> tuple[Rig, dict]:
    """Poser/DAZ classic BVH: no toes (the legs end at the feet)."""
    pairs = chain(None, "hip", "abdomen", "chest", "neck", "head")
    for s in "lr":
        pairs += chain("chest", *(s + n for n in ("Collar", "Shldr", "ForeArm", "Hand")))
        pairs += chain("hip", *(s + n for n in ("Thigh", "Shin", "Foot")))
    lim = ("Collar", "Shldr", "ForeArm", "Hand", "Thigh", "Shin", "Foot")
    return build(pairs), expected(
        ("hip", "abdomen", "chest", "neck", "head"),
        [*(f"l{n}" for n in lim), None], [*(f"r{n}" for n in lim), None],
    )  # fmt: skip


def genesis_rig() -> tuple[Rig, dict]:
    """DAZ Genesis 8-like: hip above pelvis, split spine, Bend/Twist limb bones."""
    spine = ("abdomenLower", "abdomenUpper", "chestLower", "chestUpper", "neckLower", "neckUpper")
    pairs = [("hip", None), ("pelvis", "hip"), *chain("hip", *spine, "head")]
    for s in "lr":
        arm = ("Collar", "ShldrBend", "ShldrTwist", "ForearmBend", "ForearmTwist", "Hand")
        pairs += chain("chestUpper", *(s + n for n in arm))
        pairs += [(f"{s}Pectoral", "chestUpper"), (f"{s}Thumb1", f"{s}Hand")]
        leg = ("ThighBend", "ThighTwist", "Shin", "Foot", "Metatarsals", "Toe", "BigToe")
        pairs += chain("pelvis", *(s + n for n in leg))
        pairs += [(f"{s}SmallToe1", f"{s}Toe")]
    lim = ("Collar", "ShldrBend", "ForearmBend", "Hand", "ThighBend", "Shin", "Foot", "Toe")
    return build(pairs), expected(
        ("hip", "abdomenLower", "chestUpper", "neckLower", "head"),
        [f"l{n}" for n in lim], [f"r{n}" for n in lim],
    )  # fmt: skip


RIGIFY_LIMBS = ("shoulder", "upper_arm", "forearm", "hand", "thigh", "shin", "foot", "toe")
RIGIFY_SPINE = ("spine", "spine.001", "spine.003", "spine.004", "spine.006")


def rigify_rig(prefix: str = "DEF-", flat: bool = False) -> tuple[Rig, dict]:
    """Rigify deform (or ORG) bones, parented like a generated rig, or not at all."""
    p = prefix
    pairs = chain(None, *(f"{p}spine" + (f".{i:03d}" if i else "") for i in range(7)))

    def segments(n: str, s: str) -> list[str]:  # deform limbs have a twist segment (.001)
        return [f"{p}{n}.{s}", f"{p}{n}.{s}.001"] if p == "DEF-" else [f"{p}{n}.{s}"]

    for s in "LR":
        pairs += chain(
            f"{p}spine.003", f"{p}shoulder.{s}", *segments("upper_arm", s), *segments("forearm", s)
        )
        pairs += [(f"{p}hand.{s}", pairs[-1][0]), (f"{p}breast.{s}", f"{p}spine.003")]
        pairs += chain(f"{p}spine", f"{p}pelvis.{s}", *segments("thigh", s), *segments("shin", s))
        pairs += chain(pairs[-1][0], f"{p}foot.{s}", f"{p}toe.{s}")
    if flat:
        pairs = [(n, None) for n, _ in pairs]
    return build(pairs), expected(
        [p + n for n in RIGIFY_SPINE],
        [f"{p}{n}.L" for n in RIGIFY_LIMBS], [f"{p}{n}.R" for n in RIGIFY_LIMBS],
    )  # fmt: skip


def metarig() -> tuple[Rig, dict]:
    pairs = chain(None, *(("spine." + f"{i:03d}") if i else "spine" for i in range(7)))
    for s in "LR":
        pairs += chain("spine.003", *(f"{n}.{s}" for n in RIGIFY_LIMBS[:4]))
        pairs += [(f"pelvis.{s}", "spine"), (f"breast.{s}", "spine.003")]
        pairs += chain("spine", *(f"{n}.{s}" for n in RIGIFY_LIMBS[4:]))
        pairs += [(f"heel.02.{s}", f"foot.{s}")]
    return build(pairs), expected(
        RIGIFY_SPINE, [f"{n}.L" for n in RIGIFY_LIMBS], [f"{n}.R" for n in RIGIFY_LIMBS]
    )


def generic_rig() -> tuple[Rig, dict]:
    """Odd case and separators, side words and letters in every position."""
    pairs = chain(None, "HIPS", "spine_01", "SPINE-02", "Spine.03", "neck", "HEAD")
    left_arm = ("left_clavicle", "left_upper_arm", "left_fore_arm", "left_hand")
    right_arm = ("RIGHT-CLAVICLE", "RIGHT-UPPERARM", "RIGHT-FOREARM", "RIGHT-HAND")
    left_leg = ("left_up_leg", "Left Lower Leg", "L_Foot", "l.toes")
    right_leg = ("Thigh R", "shin.r", "Foot_R", "ToeBase-R")
    pairs += chain("Spine.03", *left_arm) + chain("Spine.03", *right_arm)
    pairs += chain("HIPS", *left_leg) + chain("HIPS", *right_leg)
    pairs += [("left_hand_twist", "left_fore_arm"), ("RIGHT-FOREARM-ROLL", "RIGHT-FOREARM")]
    center = ("HIPS", "spine_01", "Spine.03", "neck", "HEAD")
    return build(pairs), expected(center, left_arm + left_leg, right_arm + right_leg)


def smpl_rig() -> tuple[Rig, dict]:
    """SMPL joint names: hip/knee/ankle, shoulder below collar, 'foot' is the ball."""
    return _plain_rig(("pelvis", "spine1", "spine2", "spine3", "neck", "head"), "spine3",
                      ("left_", "right_"), ("collar", "shoulder", "elbow", "wrist"),
                      ("hip", "knee", "ankle", "foot"),
                      ("pelvis", "spine1", "spine3", "neck", "head"))


def smpl24_rig() -> tuple[Rig, dict]:
    """All 24 SMPL joints: a ``hand`` at the knuckles below each wrist (the wrist is the
    hand joint)."""
    rig, want = smpl_rig()
    pairs = pairs_of(rig)
    pairs += [(f"{side}hand", f"{side}wrist") for side in ("left_", "right_")]
    return build(pairs), want


def asf_rig() -> tuple[Rig, dict]:
    """Acclaim ASF skeletons (CMU's and HDM05's own, and BVH converted from them): bones
    named anatomically (``lhumerus``, ``lradius``, ``lfemur``, ``ltibia``), a ``hipjoint``
    from the root to each hip, a wrist above each hand."""
    pairs = chain(None, "root", "lowerback", "upperback", "thorax", "lowerneck", "upperneck",
                  "head")
    arm, leg = ("clavicle", "humerus", "radius", "wrist"), ("femur", "tibia", "foot", "toes")
    for s in "lr":
        pairs += chain("thorax", *(s + n for n in arm), f"{s}hand", f"{s}thumb")
        pairs += chain("root", f"{s}hipjoint", *(s + n for n in leg))
    return build(pairs), expected(("root", "lowerback", "thorax", "lowerneck", "head"),
                                  *([s + n for n in (*arm, *leg)] for s in "lr"))


def vroid_rig() -> tuple[Rig, dict]:
    """VRoid Studio (VRM): ``J_Bip_C_`` / ``J_Bip_L_`` names beside more ``J_Sec_`` hair
    and bust bones than body bones, fingers under the hands."""
    rig, want = _plain_rig(
        tuple(f"J_Bip_C_{n}" for n in ("Hips", "Spine", "Chest", "UpperChest", "Neck", "Head")),
        "J_Bip_C_UpperChest", ("J_Bip_L_", "J_Bip_R_"),
        ("Shoulder", "UpperArm", "LowerArm", "Hand"), ("UpperLeg", "LowerLeg", "Foot", "ToeBase"),
        tuple(f"J_Bip_C_{n}" for n in ("Hips", "Spine", "UpperChest", "Neck", "Head")))
    pairs = pairs_of(rig)
    for strand in range(1, 13):
        pairs += chain("J_Bip_C_Head", *(f"J_Sec_Hair{k}_{strand:02d}" for k in range(1, 6)))
    for s in "LR":
        pairs += chain("J_Bip_C_UpperChest", f"J_Sec_{s}_Bust1", f"J_Sec_{s}_Bust2")
        pairs += [(f"J_Adj_{s}_FaceEye", "J_Bip_C_Head")]
        for finger in ("Thumb", "Index", "Middle", "Ring", "Little"):
            pairs += chain(f"J_Bip_{s}_Hand", *(f"J_Bip_{s}_{finger}{k}" for k in (1, 2, 3)))
    return build(pairs), want


def reallusion_rig() -> tuple[Rig, dict]:
    """Reallusion Character Creator / ActorCore: every name behind ``CC_Base_``, the legs on
    a ``Pelvis`` bone under the ``Hip`` that also carries the spine, a twist bone as the
    neck, twist bones on the limbs and fingers."""
    pairs = chain(None, "CC_Base_BoneRoot", "CC_Base_Hip", "CC_Base_Pelvis")
    spine = ("CC_Base_Waist", "CC_Base_Spine01", "CC_Base_Spine02", "CC_Base_NeckTwist01",
             "CC_Base_NeckTwist02", "CC_Base_Head")
    pairs += chain("CC_Base_Hip", *spine)
    arm, leg = ("Clavicle", "Upperarm", "Forearm", "Hand"), ("Thigh", "Calf", "Foot", "ToeBase")
    for s in "LR":
        pairs += chain("CC_Base_Spine02", *(f"CC_Base_{s}_{n}" for n in arm))
        pairs += chain("CC_Base_Pelvis", *(f"CC_Base_{s}_{n}" for n in leg))
        for bone in ("Upperarm", "Forearm", "Thigh", "Calf"):
            pairs += [(f"CC_Base_{s}_{bone}Twist01", f"CC_Base_{s}_{bone}")]
        pairs += chain(f"CC_Base_{s}_Hand", *(f"CC_Base_{s}_Index{k}" for k in (1, 2, 3)))
    return build(pairs), expected(
        ("CC_Base_Hip", "CC_Base_Waist", "CC_Base_Spine02", "CC_Base_NeckTwist01", "CC_Base_Head"),
        *([f"CC_Base_{s}_{n}" for n in (*arm, *leg)] for s in "LR"))


def advanced_skeleton_rig() -> tuple[Rig, dict]:
    """AdvancedSkeleton (Maya): ``_M`` on the centre joints, ``Scapula``/``Shoulder``/
    ``Elbow``/``Wrist`` and ``Hip``/``Knee``/``Ankle``/``Toes``, twist ``Part`` joints."""
    pairs = chain(None, "Root_M", "Spine1_M", "Spine2_M", "Chest_M", "Neck_M", "Head_M")
    arm, leg = ("Scapula", "Shoulder", "Elbow", "Wrist"), ("Hip", "Knee", "Ankle", "Toes")
    for s in "LR":
        pairs += chain("Chest_M", *(f"{n}_{s}" for n in arm))
        pairs += chain("Root_M", *(f"{n}_{s}" for n in leg), f"ToesEnd_{s}")
        pairs += [(f"ShoulderPart1_{s}", f"Shoulder_{s}"), (f"ElbowPart1_{s}", f"Elbow_{s}")]
    return build(pairs), expected(
        ("Root_M", "Spine1_M", "Chest_M", "Neck_M", "Head_M"),
        *([f"{n}_{s}" for n in (*arm, *leg)] for s in "LR"))


def second_life_rig() -> tuple[Rig, dict]:
    """Second Life avatars: an ``m`` glued before every name, sides as suffixes, and an
    ankle, a foot at the ball and a toe at the tip (the ball is the canonical toe)."""
    pairs = chain(None, "mPelvis", "mTorso", "mChest", "mNeck", "mHead")
    arm, leg = ("Collar", "Shoulder", "Elbow", "Wrist"), ("Hip", "Knee", "Ankle", "Foot")
    for s in ("Left", "Right"):
        pairs += chain("mChest", *(f"m{n}{s}" for n in arm))
        pairs += chain("mPelvis", *(f"m{n}{s}" for n in leg), f"mToe{s}")
    return build(pairs), expected(("mPelvis", "mTorso", "mChest", "mNeck", "mHead"),
                                  *([f"m{n}{s}" for n in (*arm, *leg)] for s in ("Left", "Right")))


FAMILIES = {  # rig builder -> the preset auto-detection should pick ("auto": the heuristic)
    "bandai": (bandai_rig, "bandai"),
    "cmu": (cmu_rig, "cmu"),
    "mixamo": (mixamo_rig, "mixamo"),
    "mixamo-bare": (lambda: mixamo_rig(""), "mixamo"),
    "mixamo-other-namespace": (lambda: mixamo_rig("mixamorig7:"), "mixamo"),
    "lafan1": (lafan1_rig, "mixamo"),
    "optitrack": (optitrack_rig, "optitrack"),
    "optitrack-bare": (lambda: optitrack_rig(""), "optitrack"),
    "xsens": (xsens_rig, "auto"),
    "unreal": (unreal_rig, "auto"),
    "100style": (style100_rig, "auto"),
    "rokoko": (rokoko_rig, "auto"),
    "character1": (character1_rig, "auto"),
    "daz": (daz_rig, "daz"),
    "genesis": (genesis_rig, "auto"),
    "rigify": (rigify_rig, "rigify"),
    "rigify-unparented": (lambda: rigify_rig(flat=True), "rigify"),
    "rigify-org": (lambda: rigify_rig("ORG-"), "rigify"),
    "metarig": (metarig, "metarig"),
    "generic": (generic_rig, "auto"),
    "smpl": (smpl_rig, "auto"),
    "smpl24": (smpl24_rig, "auto"),
    "asf": (asf_rig, "auto"),
    "vroid": (vroid_rig, "auto"),
    "reallusion": (reallusion_rig, "auto"),
    "advanced-skeleton": (advanced_skeleton_rig, "auto"),
    "second-life": (second_life_rig, "auto"),
}
HEURISTIC_FAMILIES = ("bandai", "cmu", "mixamo", "lafan1", "xsens", "unreal", "100style",
                      "rokoko", "character1", "daz", "genesis", "generic", "smpl", "smpl24",
                      "asf", "vroid", "reallusion", "advanced-skeleton", "second-life")


def heuristic(rig: Rig) -> dict[str, str]:
    """The name + structure heuristic alone (presets bypassed), as source names."""
    names, parents = rig
    infos = mapping._describe(names)
    found = mapping._Detector(infos, mapping._Tree(parents), {}).run()
    return {c: names[found[c]] for c in JOINTS if c in found}


def shuffled(rig: Rig, seed: int) -> Rig:
    """The same skeleton with its joints listed in another order (Blender bone order)."""
    names, parents = rig
    perm = np.random.default_rng(seed).permutation(len(names))
    new_index = {int(old): new for new, old in enumerate(perm)}
    return [names[i] for i in perm], [-1 if parents[i] < 0 else new_index[parents[i]] for i in perm]


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_detection_maps_every_family(family: str) -> None:
    make, preset = FAMILIES[family]
    (names, parents), want = make()
    jm = detect_mapping(names, parents)
    assert jm.joints == want
    assert jm.source == preset
    assert set(jm.synthesized) == {"l_toe", "r_toe"} - set(want)


@pytest.mark.parametrize("family", HEURISTIC_FAMILIES)
def test_heuristic_alone_agrees_in_any_joint_order(family: str) -> None:
    rig, want = FAMILIES[family][0]()
    assert heuristic(rig) == want
    for seed in range(3):
        assert heuristic(shuffled(rig, seed)) == want


@pytest.mark.parametrize("preset", ["bandai", "cmu", "mixamo", "daz", "optitrack", "rigify",
                                    "metarig"])
def test_presets_by_name(preset: str) -> None:
    make = {"bandai": bandai_rig, "cmu": cmu_rig, "mixamo": mixamo_rig, "daz": daz_rig,
            "optitrack": optitrack_rig, "rigify": rigify_rig,
            "metarig": metarig}[preset]  # fmt: skip
    (names, parents), want = make()
    jm = resolve_mapping(names, parents, preset)
    assert (jm.joints, jm.source) == (want, preset)
    assert set(PRESETS[preset]) <= set(JOINTS)
    assert preset in jm.summary() and f"left arm: {want['l_clavicle']}," in jm.summary()


def test_preset_that_does_not_fit_names_the_missing_source_joints() -> None:
    (names, parents), _ = bandai_rig()
    with pytest.raises(MappingError, match="LowerBack"):
        resolve_mapping(names, parents, "cmu")


def test_full_generated_rigify_rig_prefers_deform_bones() -> None:
    (def_names, def_parents), want = rigify_rig()
    (org_names, org_parents), _ = rigify_rig("ORG-")
    controls = ["root", "torso", "hips", "chest", "neck", "head", "shoulder.L", "shoulder.R",
                "thigh_fk.L", "MCH-thigh_parent.L", "upper_arm_fk.L"]  # fmt: skip
    names = org_names + controls + def_names
    parents = org_parents + [-1] * len(controls)
    parents += [p + len(org_names) + len(controls) if p >= 0 else -1 for p in def_parents]
    jm = detect_mapping(names, parents)
    assert (jm.joints, jm.source) == (want, "rigify")


def test_rigify_twist_bones_are_never_mapped() -> None:
    (names, parents), _ = rigify_rig()
    for jm in (detect_mapping(names, parents), resolve_mapping(names, parents, "metarig")):
        assert not any(n.endswith(".001") and "spine" not in n for n in jm.joints.values())


def test_chest_is_the_clavicles_parent() -> None:
    (names, parents), _ = character1_rig()  # Spine..Spine3: the clavicles hang from Spine3
    jm = detect_mapping(names, parents)
    assert jm.joints["chest"] == "Character1_Spine3"
    assert jm.joints["spine"] == "Character1_Spine"
    # clavicles on Spine2: chest follows and neck is the next joint up (a Mixamo-named rig
    # like this one fits the mixamo preset too, whose neck is Neck: check the heuristic)
    for s in ("Left", "Right"):
        parents[names.index(f"Character1_{s}Shoulder")] = names.index("Character1_Spine2")
    found = heuristic((names, parents))
    assert (found["chest"], found["neck"]) == ("Character1_Spine2", "Character1_Spine3")


def test_biped_like_clavicles_under_the_neck() -> None:
    pairs = [("Bip01", None), *chain("Bip01", "Bip01 Pelvis", "Bip01 Spine", "Bip01 Spine1",
                                     "Bip01 Neck", "Bip01 Head")]  # fmt: skip
    for s in "LR":
        arm = ("Clavicle", "UpperArm", "Forearm", "Hand")
        pairs += chain("Bip01 Neck", *(f"Bip01 {s} {n}" for n in arm))
        pairs += chain(
            "Bip01 Spine", *(f"Bip01 {s} {n}" for n in ("Thigh", "Calf", "Foot", "Toe0"))
        )
    names, parents = build(pairs)
    jm = detect_mapping(names, parents)
    assert [jm.joints[c] for c in CENTER] == [
        "Bip01 Pelvis", "Bip01 Spine", "Bip01 Spine1", "Bip01 Neck", "Bip01 Head"
    ]  # fmt: skip
    assert (jm.joints["l_thigh"], jm.joints["r_toe"]) == ("Bip01 L Thigh", "Bip01 R Toe0")


def test_missing_hand_lists_it_with_close_source_names() -> None:
    (names, parents), _ = bandai_rig()
    names[names.index("Hand_L")] = "Hnd_L"
    with pytest.raises(MappingError) as err:
        detect_mapping(names, parents)
    message = str(err.value)
    assert "l_hand" in message and "Hnd_L" in message
    assert "r_hand" not in message


def test_missing_spine_joints_are_listed() -> None:
    names, parents = build(
        [*chain(None, "Hips", "Chest", "Head")]
        + [p for s in "LR" for p in chain("Chest", f"Shoulder_{s}", f"UpperArm_{s}",
                                          f"LowerArm_{s}", f"Hand_{s}")]
        + [p for s in "LR" for p in chain("Hips", f"UpperLeg_{s}", f"LowerLeg_{s}", f"Foot_{s}")]
    )  # fmt: skip
    with pytest.raises(MappingError, match=r"spine .*neck "):
        detect_mapping(names, parents)


# --- JSON maps -----------------------------------------------------------------------------


def test_json_round_trip_and_override(tmp_path: Path) -> None:
    (names, parents), want = cmu_rig()
    jm = detect_mapping(names, parents)
    path = tmp_path / "cmu_map.json"
    save_mapping_json(path, jm)
    assert load_mapping_json(path) == want
    assert [p.name for p in tmp_path.iterdir()] == ["cmu_map.json"]  # no temp file left
    again = resolve_mapping(names, parents, path)
    assert (again.joints, again.source) == (want, str(path))
    # a partial override: the rest is still detected
    path.write_text(json.dumps({"joints": {"spine": "Spine"}}))
    partial = resolve_mapping(names, parents, str(path))
    assert partial.joints == want | {"spine": "Spine"}
    # a bare {canonical: source} object works too
    path.write_text(json.dumps({"spine": "Spine"}))
    assert load_mapping_json(path) == {"spine": "Spine"}


def test_override_anchors_the_heuristic(tmp_path: Path) -> None:
    (names, parents), want = character1_rig()
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"joints": {"chest": "Character1_Spine2"}}))
    jm = resolve_mapping(names, parents, path)
    assert jm.joints == want | {"chest": "Character1_Spine2", "neck": "Character1_Spine3"}


def test_bad_json_overrides_name_the_file(tmp_path: Path) -> None:
    (names, parents), _ = bandai_rig()
    cases = {
        "ghost.json": ({"joints": {"l_hand": "Hand_Left"}}, "Hand_Left"),
        "unknown.json": ({"joints": {"left_hand": "Hand_L"}}, "left_hand"),
        "typed.json": ({"joints": {"l_hand": 3}}, "l_hand"),
        "broken.json": ("{not json", "cannot read"),
        "twice.json": ({"joints": {"chest": "Spine"}}, "twice"),
    }
    for file, (content, needle) in cases.items():
        path = tmp_path / file
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(MappingError) as err:
            resolve_mapping(names, parents, path)
        assert file in str(err.value) or "twice" in str(err.value)
        assert needle in str(err.value)
    with pytest.raises(MappingError, match="neither"):
        resolve_mapping(names, parents, tmp_path / "absent.json")


# --- applying a map --------------------------------------------------------------------------


def test_apply_mapping_picks_the_source_joints() -> None:
    (names, parents), want = mixamo_rig()
    jm = detect_mapping(names, parents)
    positions = np.random.default_rng(0).normal(size=(5, len(names), 3))
    out, notes = apply_mapping(jm, names, positions)
    assert out.shape == (5, 21, 3) and notes == []
    for canon, src in want.items():
        np.testing.assert_array_equal(out[:, JOINT_INDEX[canon]], positions[:, names.index(src)])


def standing_daz(
    scale: float, yaw_deg: float, frames: int = 3
) -> tuple[JointMap, list, np.ndarray]:
    """DAZ (toeless) positions: a standing body of ``scale`` x canonical size, turned by yaw."""
    (names, parents), _ = daz_rig()
    jm = resolve_mapping(names, parents, "auto", has_end_site=lambda n: False)
    rng = np.random.default_rng(1)
    pos = rng.normal(scale=0.3, size=(len(names), 3))  # irrelevant joints anywhere
    shin = BONE_LENGTHS[JOINT_INDEX["l_foot"]] * scale
    for s, x in (("l", 0.1), ("r", -0.1)):
        pos[names.index(f"{s}Thigh")] = (x, 0.9, 0.02)
        pos[names.index(f"{s}Shin")] = (x, 0.5, 0.05)
        pos[names.index(f"{s}Foot")] = (x, 0.5 - shin, 0.05)
    yaw = np.radians(yaw_deg)
    rot = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
    return jm, names, np.repeat((pos @ rot.T)[None], frames, axis=0)


@pytest.mark.parametrize("yaw_deg", [0.0, 90.0, -135.0])
def test_synthesized_toe_points_forward_and_down(yaw_deg: float) -> None:
    scale = 1.5
    jm, names, pos = standing_daz(scale, yaw_deg)
    assert jm.synthesized["l_toe"] == "canonical offset from lFoot"
    out, notes = apply_mapping(jm, names, pos)
    yaw = np.radians(yaw_deg)
    forward = np.array([np.sin(yaw), 0.0, np.cos(yaw)])  # +Z turned about Y
    pitch = np.radians(TOE_PITCH_DEG)
    direction = np.cos(pitch) * forward - np.sin(pitch) * np.array([0.0, 1.0, 0.0])
    length = BONE_LENGTHS[JOINT_INDEX["l_toe"]] * scale
    for s in "lr":
        toe = out[:, JOINT_INDEX[f"{s}_toe"]] - out[:, JOINT_INDEX[f"{s}_foot"]]
        np.testing.assert_allclose(toe, np.broadcast_to(direction * length, toe.shape), atol=1e-9)
    assert len(notes) == 2 and all("no End Site" in n for n in notes)
    # Blender's Z-up world gives the same toes in its own axes
    out_z, _ = apply_mapping(jm, names, yup_to_blender(pos), up_axis=2)
    np.testing.assert_allclose(out_z, yup_to_blender(out), atol=1e-9)


def test_toe_at_the_end_site_when_there_is_one() -> None:
    jm, names, pos = standing_daz(1.0, 0.0)
    foot = names.index("lFoot")
    end = pos[:, foot] + np.array([0.0, -0.06, 0.12])
    out, notes = apply_mapping(jm, names, pos, end_positions={foot: end})
    np.testing.assert_allclose(out[:, JOINT_INDEX["l_toe"]], end)
    assert "lFoot's End Site" in notes[0] and "no End Site" in notes[1]
    # a placeholder End Site (shorter than 1 mm) falls back to the canonical offset
    stub = pos[:, foot] + 0.0004
    out, notes = apply_mapping(jm, names, pos, end_positions={foot: stub})
    toe = out[:, JOINT_INDEX["l_toe"]] - out[:, JOINT_INDEX["l_foot"]]
    np.testing.assert_allclose(np.linalg.norm(toe, axis=-1), BONE_LENGTHS[JOINT_INDEX["l_toe"]])
    assert "shorter than 1 mm" in notes[0]
    (names2, parents2), _ = daz_rig()
    jm2 = resolve_mapping(names2, parents2, "daz", has_end_site=lambda n: n == "lFoot")
    assert jm2.synthesized == {"l_toe": "from lFoot's End Site",
                               "r_toe": "canonical offset from rFoot"}  # fmt: skip


def test_apply_mapping_rejects_a_map_for_another_rig() -> None:
    (names, parents), _ = bandai_rig()
    jm = detect_mapping(names, parents)
    (other, _), _ = cmu_rig()
    with pytest.raises(MappingError, match="Chest"):
        apply_mapping(jm, other, np.zeros((1, len(other), 3)))


# --- real data -----------------------------------------------------------------------------


def bvh_hierarchy(lines: Sequence[str]) -> tuple[list[str], list[int], set[str]]:
    """Joint names, parents, and the joints with an End Site, from BVH HIERARCHY lines."""
    names: list[str] = []
    parents: list[int] = []
    ends: set[str] = set()
    stack: list[int] = []
    pending = -1
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0] == "MOTION":
            break
        if words[0] in ("ROOT", "JOINT"):
            names.append(words[1])
            parents.append(stack[-1] if stack else -1)
            pending = len(names) - 1
        elif words[0] == "End":
            ends.add(names[stack[-1]])
            pending = stack[-1]  # the End Site's braces keep its joint on the stack
        elif words[0] == "{":
            stack.append(pending)
        elif words[0] == "}":
            stack.pop()
    return names, parents, ends


@pytest.mark.realdata
def test_real_bandai_file_auto_detects_the_bandai_preset(bandai_small_archive: Path) -> None:
    with tarfile.open(bandai_small_archive, "r|xz") as tar:
        member = next(m for m in tar if m.isfile() and m.name.endswith(".bvh"))
        text = tar.extractfile(member).read().decode("utf-8", errors="replace")
    names, parents, ends = bvh_hierarchy(text.splitlines())
    assert names[0] == "joint_Root" and len(names) == 22
    jm = resolve_mapping(names, parents, "auto", has_end_site=ends.__contains__)
    assert (jm.source, jm.joints, jm.synthesized) == ("bandai", PRESETS["bandai"], {})
