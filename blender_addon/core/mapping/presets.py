"""The named presets: each rig family's bone names for the 21 canonical joints."""

from __future__ import annotations

from collections.abc import Sequence

from ..skeleton import JOINTS


def _sided(center: dict[str, str], left: dict[str, str], right: dict[str, str]) -> dict:
    """One preset in JOINTS order from its centre joints and the two sides' names."""
    limbs = {f"l_{k}": v for k, v in left.items()} | {f"r_{k}": v for k, v in right.items()}
    merged = center | limbs
    return {c: merged[c] for c in JOINTS if c in merged}


def _limb_names(fmt: str, roles: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    return {role: fmt.format(name) for role, name in zip(roles, names, strict=True)}


_LIMB_ORDER = ("clavicle", "upperarm", "forearm", "hand", "thigh", "shin", "foot", "toe")


def _preset(center: Sequence[str], fmt_l: str, fmt_r: str, limbs: Sequence[str]) -> dict:
    c = dict(zip(("pelvis", "spine", "chest", "neck", "head"), center, strict=True))
    return _sided(c, _limb_names(fmt_l, _LIMB_ORDER, limbs), _limb_names(fmt_r, _LIMB_ORDER, limbs))


_RIGIFY_LIMBS = ("shoulder", "upper_arm", "forearm", "hand", "thigh", "shin", "foot", "toe")


_RIGIFY_SPINE = ("spine", "spine.001", "spine.003", "spine.004", "spine.006")


# A generated Rigify rig posed through its FK controls (its DEF/ORG bones follow them by
# constraints): the torso control at the pelvis, the upper spine's FK controls, and the
# limbs' FK controls (they carry the solve; a limb left in IK gets its IK controls
# placed where they are, see blender_addon/rig_controls.py).
_RIGIFY_CONTROL_SPINE = ("torso", "spine_fk.002", "spine_fk.003", "neck", "head")


_RIGIFY_CONTROL_LIMBS = ("shoulder", "upper_arm_fk", "forearm_fk", "hand_fk", "thigh_fk",
                         "shin_fk", "foot_fk", "toe_fk")


# Control presets: a control rig's controls hang from mechanism bones by design, so the
# hierarchy check of _contradicted does not apply to them.
CONTROL_PRESETS = frozenset({"rigify_controls"})


PRESETS: dict[str, dict[str, str]] = {
    "bandai": _preset(
        ("Hips", "Spine", "Chest", "Neck", "Head"), "{}_L", "{}_R",
        ("Shoulder", "UpperArm", "LowerArm", "Hand", "UpperLeg", "LowerLeg", "Foot", "Toes"),
    ),
    "cmu": _preset(
        ("Hips", "LowerBack", "Spine1", "Neck", "Head"), "Left{}", "Right{}",
        ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase"),
    ),
    "mixamo": _preset(
        ("Hips", "Spine", "Spine2", "Neck", "Head"), "Left{}", "Right{}",
        ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase"),
    ),
    "daz": _preset(
        ("hip", "abdomen", "chest", "neck", "head"), "l{}", "r{}",
        ("Collar", "Shldr", "ForeArm", "Hand", "Thigh", "Shin", "Foot", "Toe"),
    ),
    # OptiTrack Motive's skeleton (its NatNet and FBX names, often behind "<asset>_").
    "optitrack": _preset(
        ("Hip", "Ab", "Chest", "Neck", "Head"), "L{}", "R{}",
        ("Shoulder", "UArm", "FArm", "Hand", "Thigh", "Shin", "Foot", "Toe"),
    ),
    "rigify_controls": _preset(_RIGIFY_CONTROL_SPINE, "{}.L", "{}.R", _RIGIFY_CONTROL_LIMBS),
    "rigify": _preset(
        tuple(f"DEF-{n}" for n in _RIGIFY_SPINE), "DEF-{}.L", "DEF-{}.R", _RIGIFY_LIMBS
    ),
    "metarig": _preset(_RIGIFY_SPINE, "{}.L", "{}.R", _RIGIFY_LIMBS),
}  # fmt: skip
