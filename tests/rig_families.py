"""Synthetic skeletons of the rig families the mapping must recognise (names and parents,
as their tools export them) and the canonical map each should give: test data for
``tests/test_mapping.py``."""

from __future__ import annotations

from collections.abc import Sequence

from blender_addon.core.skeleton import JOINTS

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
