"""Rigs built in bpy for the add-on's tests and the Blender-side benchmark: a Mixamo-named
armature and a Rigify-like one (DEF bones, twist bones, extra spine bones, fingers), with
proportions unlike the models' actor; a Bandai Namco BVH clip imported with Blender's own
importer; a Rigify rig generated from the human metarig by the bundled Rigify add-on; and
a character exported and imported again through Blender's own FBX add-on."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import bpy
import numpy as np
from mathutils import Vector

# (name, parent, head, tail): metres, Blender axes (character faces -Y, its left is +X)
Bone = tuple[str, str | None, Sequence[float], Sequence[float]]


def build_armature(name: str, bones: Sequence[Bone], scale: float = 1.0,
                   unit: float = 1.0) -> bpy.types.Object:
    """An armature object from bone specs; coordinates are multiplied by ``unit`` (bones
    authored in centimetres, say) and the object is scaled by ``scale``."""
    data = bpy.data.armatures.new(name)
    obj = bpy.data.objects.new(name, data)
    bpy.context.scene.collection.objects.link(obj)
    obj.scale = (scale,) * 3
    view_layer = bpy.context.view_layer
    view_layer.objects.active = obj
    obj.select_set(True)
    bpy.ops.object.mode_set(mode="EDIT")
    for bone_name, parent, head, tail in bones:
        eb = data.edit_bones.new(bone_name)
        eb.head = Vector(head) * unit
        eb.tail = Vector(tail) * unit
        if parent:
            eb.parent = data.edit_bones[parent]
    bpy.ops.object.mode_set(mode="OBJECT")
    view_layer.update()
    return obj


def _side(x: float, left: bool) -> float:
    return x if left else -x


def mixamo_bones() -> list[Bone]:
    """A long-legged, short-armed Mixamo rig (namespaced names, fingers, end bones)."""
    bones: list[Bone] = [
        ("mixamorig:Hips", None, (0, 0, 1.05), (0, 0, 1.15)),
        ("mixamorig:Spine", "mixamorig:Hips", (0, 0, 1.15), (0, 0, 1.27)),
        ("mixamorig:Spine1", "mixamorig:Spine", (0, 0, 1.27), (0, 0, 1.38)),
        ("mixamorig:Spine2", "mixamorig:Spine1", (0, 0, 1.38), (0, 0, 1.52)),
        ("mixamorig:Neck", "mixamorig:Spine2", (0, 0.01, 1.58), (0, 0, 1.67)),
        ("mixamorig:Head", "mixamorig:Neck", (0, 0, 1.67), (0, 0, 1.85)),
        ("mixamorig:HeadTop_End", "mixamorig:Head", (0, 0, 1.85), (0, 0, 1.95)),
    ]
    for side, left in (("Left", True), ("Right", False)):
        x = lambda v, left=left: _side(v, left)  # noqa: E731 - local mirror helper
        p = f"mixamorig:{side}"
        bones += [
            (f"{p}Shoulder", "mixamorig:Spine2", (x(0.04), 0, 1.50), (x(0.15), 0, 1.50)),
            (f"{p}Arm", f"{p}Shoulder", (x(0.15), 0, 1.50), (x(0.25), 0.01, 1.30)),
            (f"{p}ForeArm", f"{p}Arm", (x(0.25), 0.01, 1.30), (x(0.32), -0.06, 1.10)),
            (f"{p}Hand", f"{p}ForeArm", (x(0.32), -0.06, 1.10), (x(0.35), -0.08, 1.02)),
            (f"{p}HandIndex1", f"{p}Hand", (x(0.35), -0.08, 1.02), (x(0.36), -0.09, 0.99)),
            (f"{p}HandIndex2", f"{p}HandIndex1", (x(0.36), -0.09, 0.99), (x(0.37), -0.10, 0.97)),
            (f"{p}UpLeg", "mixamorig:Hips", (x(0.10), 0, 1.00), (x(0.11), -0.03, 0.55)),
            (f"{p}Leg", f"{p}UpLeg", (x(0.11), -0.03, 0.55), (x(0.11), 0.02, 0.09)),
            (f"{p}Foot", f"{p}Leg", (x(0.11), 0.02, 0.09), (x(0.12), -0.10, 0.02)),
            (f"{p}ToeBase", f"{p}Foot", (x(0.12), -0.10, 0.02), (x(0.12), -0.17, 0.01)),
            (f"{p}Toe_End", f"{p}ToeBase", (x(0.12), -0.17, 0.01), (x(0.12), -0.22, 0.01)),
        ]
    return bones


# Fingers of the full-size rig: (name, offset along -Y from the hand's centre line, m).
FULL_FINGERS = (("thumb", -0.03), ("f_index", -0.015), ("f_middle", 0.0), ("f_ring", 0.015),
                ("f_pinky", 0.03))
FINGER_SEGMENT = 0.025  # m, each of a finger's three bones


def rigify_bones(full: bool = False) -> list[Bone]:
    """A Rigify-like deform rig: a root bone, seven spine bones, pelvis, twist (.001)
    bones, fingers, no toe end bones. Short legs, long arms.

    ``full``: the size of a real Rigify deform rig (79 bones: five fingers and four palm
    bones a hand, jaw, eyes, ears, both breasts), for benchmarks; the default rig (53
    bones, three fingers) is what the tests were written against.
    """
    z = (0.92, 1.02, 1.12, 1.22, 1.34, 1.46, 1.53, 1.62, 1.80)
    bones: list[Bone] = [("root", None, (0, 0, 0), (0, -0.3, 0))]
    names = ["DEF-spine"] + [f"DEF-spine.{i:03d}" for i in range(1, 7)]
    for i, name in enumerate(names):
        bones.append((name, names[i - 1] if i else "root", (0, 0, z[i]), (0, 0, z[i + 1])))
    bones.append(("DEF-breast.L", "DEF-spine.003", (0.1, -0.08, 1.30), (0.1, -0.14, 1.28)))
    if full:
        bones += [
            ("DEF-breast.R", "DEF-spine.003", (-0.1, -0.08, 1.30), (-0.1, -0.14, 1.28)),
            ("DEF-jaw", "DEF-spine.006", (0, -0.02, 1.68), (0, -0.09, 1.64)),
            ("DEF-eye.L", "DEF-spine.006", (0.03, -0.08, 1.72), (0.03, -0.10, 1.72)),
            ("DEF-eye.R", "DEF-spine.006", (-0.03, -0.08, 1.72), (-0.03, -0.10, 1.72)),
            ("DEF-ear.L", "DEF-spine.006", (0.07, 0.0, 1.71), (0.08, 0.02, 1.75)),
            ("DEF-ear.R", "DEF-spine.006", (-0.07, 0.0, 1.71), (-0.08, 0.02, 1.75)),
        ]
    for s, left in (("L", True), ("R", False)):
        x = lambda v, left=left: _side(v, left)  # noqa: E731 - local mirror helper
        bones += [
            (f"DEF-pelvis.{s}", "DEF-spine", (0, 0, 0.95), (x(0.14), -0.05, 1.02)),
            (f"DEF-thigh.{s}", "DEF-spine", (x(0.09), 0, 0.90), (x(0.10), -0.02, 0.70)),
            (f"DEF-thigh.{s}.001", f"DEF-thigh.{s}", (x(0.10), -0.02, 0.70),
             (x(0.10), -0.03, 0.50)),
            (f"DEF-shin.{s}", f"DEF-thigh.{s}.001", (x(0.10), -0.03, 0.50),
             (x(0.10), 0.0, 0.30)),
            (f"DEF-shin.{s}.001", f"DEF-shin.{s}", (x(0.10), 0.0, 0.30), (x(0.10), 0.02, 0.08)),
            (f"DEF-foot.{s}", f"DEF-shin.{s}.001", (x(0.10), 0.02, 0.08),
             (x(0.11), -0.09, 0.02)),
            (f"DEF-toe.{s}", f"DEF-foot.{s}", (x(0.11), -0.09, 0.02), (x(0.11), -0.15, 0.02)),
            (f"DEF-shoulder.{s}", "DEF-spine.003", (x(0.02), -0.02, 1.44),
             (x(0.17), 0.02, 1.44)),
            (f"DEF-upper_arm.{s}", f"DEF-shoulder.{s}", (x(0.18), 0.02, 1.43),
             (x(0.32), 0.03, 1.33)),
            (f"DEF-upper_arm.{s}.001", f"DEF-upper_arm.{s}", (x(0.32), 0.03, 1.33),
             (x(0.46), 0.04, 1.23)),
            (f"DEF-forearm.{s}", f"DEF-upper_arm.{s}.001", (x(0.46), 0.04, 1.23),
             (x(0.58), 0.0, 1.12)),
            (f"DEF-forearm.{s}.001", f"DEF-forearm.{s}", (x(0.58), 0.0, 1.12),
             (x(0.70), -0.04, 1.01)),
            (f"DEF-hand.{s}", f"DEF-forearm.{s}.001", (x(0.70), -0.04, 1.01),
             (x(0.76), -0.06, 0.96)),
        ]
        if not full:
            for finger in ("thumb", "f_index", "f_middle"):
                prev = f"DEF-hand.{s}"
                for k in range(1, 4):
                    name = f"DEF-{finger}.{k:02d}.{s}"
                    base = 0.76 + 0.025 * (k - 1)
                    bones.append((name, prev, (x(base), -0.06, 0.96 - 0.02 * (k - 1)),
                                  (x(base + 0.025), -0.06, 0.96 - 0.02 * k)))
                    prev = name
            continue
        for p, (finger, dy) in enumerate(FULL_FINGERS):
            y = -0.06 + dy
            if p:  # palm bones carry the four fingers, as in Rigify
                bones.append((f"DEF-palm.{p:02d}.{s}", f"DEF-hand.{s}", (x(0.71), -0.04, 1.0),
                              (x(0.76), y, 0.96)))
            prev = f"DEF-palm.{p:02d}.{s}" if p else f"DEF-hand.{s}"
            for k in range(1, 4):
                name = f"DEF-{finger}.{k:02d}.{s}"
                base = 0.76 + FINGER_SEGMENT * (k - 1)
                bones.append((name, prev, (x(base), y, 0.96 - 0.02 * (k - 1)),
                              (x(base + FINGER_SEGMENT), y, 0.96 - 0.02 * k)))
                prev = name
    return bones


def mixamo(scale: float = 1.0) -> bpy.types.Object:
    return build_armature("Mixamo", mixamo_bones(), scale=scale)


# Other tools' bone names on the Mixamo rig's bones: {mixamo name: name}, where "{s}" is
# the side as the tool writes it (its extra bones: :func:`other_tool_rig`).
_TOOL_SIDES = {"vroid": ("L", "R"), "reallusion": ("L", "R"), "advanced_skeleton": ("L", "R"),
               "second_life": ("Left", "Right")}
_TOOL_NAMES: dict[str, dict[str, str]] = {
    "vroid": {"Hips": "J_Bip_C_Hips", "Spine": "J_Bip_C_Spine", "Spine1": "J_Bip_C_Chest",
              "Spine2": "J_Bip_C_UpperChest", "Neck": "J_Bip_C_Neck", "Head": "J_Bip_C_Head",
              "HeadTop_End": "J_Adj_C_HeadTop", "Shoulder": "J_Bip_{s}_Shoulder",
              "Arm": "J_Bip_{s}_UpperArm", "ForeArm": "J_Bip_{s}_LowerArm",
              "Hand": "J_Bip_{s}_Hand", "HandIndex1": "J_Bip_{s}_Index1",
              "HandIndex2": "J_Bip_{s}_Index2", "UpLeg": "J_Bip_{s}_UpperLeg",
              "Leg": "J_Bip_{s}_LowerLeg", "Foot": "J_Bip_{s}_Foot",
              "ToeBase": "J_Bip_{s}_ToeBase", "Toe_End": "J_Bip_{s}_ToeBase_end"},
    "reallusion": {"Hips": "CC_Base_Hip", "Spine": "CC_Base_Waist", "Spine1": "CC_Base_Spine01",
                   "Spine2": "CC_Base_Spine02", "Neck": "CC_Base_NeckTwist01",
                   "Head": "CC_Base_Head", "HeadTop_End": "CC_Base_Head_end",
                   "Shoulder": "CC_Base_{s}_Clavicle", "Arm": "CC_Base_{s}_Upperarm",
                   "ForeArm": "CC_Base_{s}_Forearm", "Hand": "CC_Base_{s}_Hand",
                   "HandIndex1": "CC_Base_{s}_Index1", "HandIndex2": "CC_Base_{s}_Index2",
                   "UpLeg": "CC_Base_{s}_Thigh", "Leg": "CC_Base_{s}_Calf",
                   "Foot": "CC_Base_{s}_Foot", "ToeBase": "CC_Base_{s}_ToeBase",
                   "Toe_End": "CC_Base_{s}_ToeBase_end"},
    "advanced_skeleton": {"Hips": "Root_M", "Spine": "Spine1_M", "Spine1": "Spine2_M",
                          "Spine2": "Chest_M", "Neck": "Neck_M", "Head": "Head_M",
                          "HeadTop_End": "HeadEnd_M", "Shoulder": "Scapula_{s}",
                          "Arm": "Shoulder_{s}", "ForeArm": "Elbow_{s}", "Hand": "Wrist_{s}",
                          "HandIndex1": "IndexFinger1_{s}", "HandIndex2": "IndexFinger2_{s}",
                          "UpLeg": "Hip_{s}", "Leg": "Knee_{s}", "Foot": "Ankle_{s}",
                          "ToeBase": "Toes_{s}", "Toe_End": "ToesEnd_{s}"},
    "second_life": {"Hips": "mPelvis", "Spine": "mTorso", "Spine1": "mSpine3",
                    "Spine2": "mChest", "Neck": "mNeck", "Head": "mHead",
                    "HeadTop_End": "mSkull", "Shoulder": "mCollar{s}", "Arm": "mShoulder{s}",
                    "ForeArm": "mElbow{s}", "Hand": "mWrist{s}",
                    "HandIndex1": "mHandIndex1{s}", "HandIndex2": "mHandIndex2{s}",
                    "UpLeg": "mHip{s}", "Leg": "mKnee{s}", "Foot": "mAnkle{s}",
                    "ToeBase": "mFoot{s}", "Toe_End": "mToe{s}"},
}
TOOLS = tuple(_TOOL_NAMES)


def other_tool_rig(tool: str) -> bpy.types.Object:
    """The Mixamo rig's bones under the names and hierarchy quirks of another tool's rigs
    (one of :data:`TOOLS`): VRoid Studio (with more hair bones than body bones),
    Reallusion Character Creator / ActorCore (a root above the hips, and the legs on a
    pelvis bone of their own), AdvancedSkeleton, Second Life."""
    names = _TOOL_NAMES[tool]
    sides = dict(zip(("Left", "Right"), _TOOL_SIDES[tool], strict=True))

    def rename(mixamo_name: str | None) -> str | None:
        if mixamo_name is None:
            return None
        base = mixamo_name.removeprefix("mixamorig:")
        side = next((s for s in sides if base.startswith(s)), None)
        if side is None:
            return names[base]
        return names[base.removeprefix(side)].format(s=sides[side])

    hips, *rest = [(rename(n), rename(p), h, t) for n, p, h, t in mixamo_bones()]
    if tool == "reallusion":
        name, _, head, tail = hips
        rest = [(n, "CC_Base_Pelvis" if n.endswith("_Thigh") else p, h, t) for n, p, h, t in rest]
        bones = [("CC_Base_BoneRoot", None, (0, 0, 0), (0, 0, 0.1)),
                 (name, "CC_Base_BoneRoot", head, tail),
                 ("CC_Base_Pelvis", name, head, (head[0], head[1], head[2] - 0.1)), *rest]
    else:
        bones = [hips, *rest]
    if tool == "vroid":
        bones += [(f"J_Sec_Hair{k}_{strand:02d}",
                   "J_Bip_C_Head" if k == 1 else f"J_Sec_Hair{k - 1}_{strand:02d}",
                   (0.03 * strand - 0.15, 0.05, 1.90 - 0.05 * k),
                   (0.03 * strand - 0.15, 0.05, 1.85 - 0.05 * k))
                  for strand in range(1, 11) for k in range(1, 6)]
    return build_armature(tool, bones)


def rigify(scale: float = 0.01, full: bool = False) -> bpy.types.Object:
    """Authored in centimetres with the object at scale 0.01, like many imported rigs
    (``full``: the 79-bone size of a real Rigify deform rig, see :func:`rigify_bones`)."""
    obj = build_armature("Rigify", rigify_bones(full), scale=scale, unit=1.0 / scale)
    # Mixed rotation modes: the add-on must read and write each bone in its own.
    obj.pose.bones["DEF-forearm.L"].rotation_mode = "XYZ"
    obj.pose.bones["DEF-forearm.R"].rotation_mode = "ZXY"
    obj.pose.bones["DEF-upper_arm.R"].rotation_mode = "AXIS_ANGLE"
    return obj


KINDS = ("mixamo", "rigify", "bvh")


def build(kind: str, bvh: Path | None = None) -> bpy.types.Object:
    """A test rig of ``kind`` (one of KINDS), selected and active."""
    if kind == "mixamo":
        obj = mixamo()
    elif kind == "rigify":
        obj = rigify()
    elif kind == "bvh" and bvh is not None:
        obj = import_bvh(bvh)
    else:
        raise ValueError(f"unknown rig kind {kind!r} (or no BVH file given)")
    select_only(obj)
    return obj


def extract_bvh(archive: Path, member_suffix: str, out: Path) -> Path:
    """One clip out of a Bandai Namco archive (streamed; the archive is not unpacked)."""
    with tarfile.open(archive, "r:xz") as tar:
        for member in tar:
            if member.name.endswith(member_suffix):
                out.write_bytes(tar.extractfile(member).read())
                return out
    raise FileNotFoundError(f"{member_suffix} not in {archive}")


def import_bvh(path: Path, rotate_mode: str = "NATIVE") -> bpy.types.Object:
    """The clip through Blender's BVH importer (its Euler orders, or ``rotate_mode``:
    "QUATERNION" keys quaternions, as an FBX import does)."""
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.01, rotate_mode=rotate_mode,
                            axis_forward="-Z", axis_up="Y")
    obj = bpy.context.active_object
    assert obj is not None and obj.type == "ARMATURE"
    return obj


def select_only(obj: bpy.types.Object) -> None:
    """Make ``obj`` the only selected and the active object."""
    for other in bpy.context.view_layer.objects:
        other.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj


def mapped_heads(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    """World position of every mapped joint, read from Blender's evaluated pose."""
    bpy.context.view_layer.update()
    mw = obj.matrix_world
    return {item.joint: np.array(mw @ obj.pose.bones[item.bone].head)
            for item in obj.data.npe_mapping.joints if item.bone}


# ------------------------------------------------------------------ production rigs

REPO = Path(__file__).resolve().parents[2]
RIGIFY_RIG = "rig"  # the name rigify_generate gives the generated rig
GENERATE_TIMEOUT_S = 600
FBX_NAME = "character.fbx"
SWING_RAD = 0.5  # the FBX test animation's arm swing amplitude


def generate_rigify() -> bpy.types.Object:
    """Blender's human metarig with its defaults, generated by the bundled Rigify add-on
    (706 bones in 4.5): the generated rig, selected and active; the metarig removed."""
    bpy.ops.preferences.addon_enable(module="rigify")
    bpy.ops.object.armature_human_metarig_add()
    meta = bpy.context.active_object
    bpy.ops.pose.rigify_generate()
    rig = bpy.context.active_object
    bpy.data.objects.remove(meta)
    bpy.context.view_layer.update()
    select_only(rig)
    return rig


def rigify_blend(path: Path) -> Path:
    """A .blend with only a generated Rigify rig, made once at ``path`` in a child process:
    Rigify's generation takes seconds and can leave bpy 4.5 hanging at exit."""
    if not path.is_file():
        env = {**os.environ, "BLENDER_USER_RESOURCES": tempfile.mkdtemp(prefix="npe-rigify-")}
        subprocess.run([sys.executable, "-m", "training.blender_side.rigs", "rigify",
                        str(path)], cwd=REPO, env=env, check=True, timeout=GENERATE_TIMEOUT_S,
                       stdout=subprocess.DEVNULL)
    return path


RIGIFY_SWITCHES = ("upper_arm_parent.L", "upper_arm_parent.R", "thigh_parent.L",
                   "thigh_parent.R")  # a generated rig's limbs' IK/FK switch holders


def limbs_to_fk(obj: bpy.types.Object) -> None:
    """Switch a generated Rigify rig's limbs to FK (``IK_FK`` = 1), as an animator posing
    through FK controls has them."""
    for switch in RIGIFY_SWITCHES:
        obj.pose.bones[switch]["IK_FK"] = 1.0


def open_rigify(path: Path) -> bpy.types.Object:
    """Open a file made by :func:`rigify_blend`: its rig, selected and active."""
    bpy.ops.wm.open_mainfile(filepath=str(path))
    rig = bpy.data.objects[RIGIFY_RIG]
    select_only(rig)
    return rig


def fbx_character(folder: Path, automatic_bone_orientation: bool,
                  frames: int = 0) -> bpy.types.Object:
    """The Mixamo-named rig (``mixamorig:`` names) authored in centimetres with the object
    at scale 0.01, exported and imported again through Blender's own FBX add-on (bone
    axes as its importer makes them, "Automatic Bone Orientation" on or off). ``frames``:
    with an animation of that many frames (the arms swing), baked by the exporter."""
    bpy.ops.preferences.addon_enable(module="io_scene_fbx")
    src = build_armature("Character", mixamo_bones(), scale=0.01, unit=100.0)
    select_only(src)
    if frames:
        _swing_arms(src, frames)
    path = folder / FBX_NAME
    bpy.ops.export_scene.fbx(filepath=str(path), use_selection=True,
                             object_types={"ARMATURE"}, add_leaf_bones=False,
                             bake_anim=bool(frames), bake_anim_use_nla_strips=False,
                             bake_anim_use_all_actions=False)
    data = src.data
    bpy.data.objects.remove(src)
    bpy.data.armatures.remove(data)
    bpy.ops.import_scene.fbx(filepath=str(path),
                             automatic_bone_orientation=automatic_bone_orientation)
    obj = next(o for o in bpy.context.selected_objects if o.type == "ARMATURE")
    select_only(obj)
    return obj


def _swing_arms(obj: bpy.types.Object, frames: int) -> None:
    """Key frames 1..``frames``: both upper arms swing forward and back (keyframe_insert:
    a test rig's few keys)."""
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    for f in range(1, frames + 1):
        angle = SWING_RAD * np.sin(2.0 * np.pi * (f - 1) / max(frames - 1, 1))
        for side in ("Left", "Right"):
            pb = obj.pose.bones[f"mixamorig:{side}Arm"]
            pb.rotation_mode = "QUATERNION"
            pb.rotation_quaternion = (np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0)
            pb.keyframe_insert("rotation_quaternion", frame=f)
    scene.frame_set(1)


if __name__ == "__main__":  # python -m training.blender_side.rigs rigify OUT.blend
    if sys.argv[1:2] != ["rigify"] or len(sys.argv) != 3:
        raise SystemExit("usage: python -m training.blender_side.rigs rigify OUT.blend")
    bpy.ops.wm.read_homefile(use_empty=True)
    generate_rigify()
    bpy.ops.wm.save_as_mainfile(filepath=sys.argv[2])
    sys.stdout.flush()
    os._exit(0)  # skip bpy's teardown (it can hang after rigify_generate)
