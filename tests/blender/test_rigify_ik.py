"""A generated Rigify rig posed with its limbs in IK, as animators keep them: the IK/FK
switches are never changed, a solve places each IK limb's control and pole so that
Blender's IK shows the solved pose, and keys go on the controls the rig uses, so the
edit survives a frame change and the rest of the animation stays. Everything is read back
from the rig as Blender evaluates it."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

from blender_addon import mapped_rig, rig_controls  # noqa: E402

SWITCHES = ("upper_arm_parent.L", "upper_arm_parent.R", "thigh_parent.L", "thigh_parent.R")
HAND_DRAG = np.array([0.0, -0.15, 0.20])  # m, world: the left hand's empty, 25 cm
KEY_FRAME = 10  # the edit is keyed here
ANIM_FRAME = 30  # 20 frames away: the IK animation's own key
ANIM_HAND = (0.05, -0.04, 0.08)  # hand_ik.L's location (local) in the animation
HAND_TOL = 1e-3  # m: the evaluated DEF-hand.L on its empty (the bar)
PLANE_TOL_DEG = 2.0  # the elbow's plane as solved (the bar)
# m: the evaluated elbow (DEF-forearm.L) from where the solve put it, in its plane: Rigify's
# IK chains stretch a little (ik_stretch 0.1) as Blender's IK moves them, and bend less or
# more for it (measured 1.3-2.4 mm)
ELBOW_TOL = 5e-3
ANIM_TOL = 1e-5  # m: the animation's frame shows its own pose (float32 keys)
FEET_TOL = 1e-4  # m: the planted feet's deform bones stay (as in test_production_rigs)


def _world(rig: bpy.types.Object, bone: str) -> np.ndarray:
    return np.array(rig.matrix_world @ rig.pose.bones[bone].head)


def _deform_heads(rig: bpy.types.Object) -> dict[str, np.ndarray]:
    bpy.context.view_layer.update()
    return {pb.name: _world(rig, pb.name) for pb in rig.pose.bones if pb.bone.use_deform}


def _plane(points: list[np.ndarray]) -> np.ndarray:
    """The unit normal of the plane through shoulder, elbow and wrist."""
    normal = np.cross(points[1] - points[0], points[2] - points[0])
    return normal / np.linalg.norm(normal)


def _arm(rig: bpy.types.Object, bones: tuple[str, str, str]) -> list[np.ndarray]:
    bpy.context.view_layer.update()
    return [_world(rig, b) for b in bones]


DEF_ARM = ("DEF-upper_arm.L", "DEF-forearm.L", "DEF-hand.L")
FK_ARM = ("upper_arm_fk.L", "forearm_fk.L", "hand_fk.L")


def _plane_angle(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return float(np.degrees(np.arccos(np.clip(abs(_plane(a) @ _plane(b)), -1.0, 1.0))))


def _key(rig: bpy.types.Object, bones: list[str], frame: int) -> None:
    """Key location and rotation (in each bone's mode) of ``bones`` at ``frame``."""
    for name in bones:
        pb = rig.pose.bones[name]
        mode = pb.rotation_mode
        rotation = {"QUATERNION": "rotation_quaternion",
                    "AXIS_ANGLE": "rotation_axis_angle"}.get(mode, "rotation_euler")
        for path in ("location", rotation):
            pb.keyframe_insert(path, frame=frame, group=name)


def _mapped(rig: bpy.types.Object) -> list[str]:
    return list(mapped_rig.mapping_dict(rig.data).values())


@pytest.mark.parametrize("pole", [False, True], ids=["no-pole", "pole"])
def test_an_ik_limb_stays_in_ik_and_shows_the_keyed_edit(
        rigify_rig: bpy.types.Object, pole: bool) -> None:
    """Limbs in IK (with and without Rigify's pole target), an IK animation keyed at frame
    30; at frame 10 the left hand's empty dragged 25 cm, Solve, keys on the bones
    :func:`rig_controls.keyed_bones` names: the evaluated DEF-hand.L is on the empty, the
    elbow in the plane the solve gave, the feet where they were, every switch still 0;
    frame 30 shows its animation, frame 10 the edit again."""
    scene = bpy.context.scene
    rig = rigify_rig
    name = rig.name
    for holder in SWITCHES:
        rig.pose.bones[holder]["pole_vector"] = pole
    scene.frame_set(ANIM_FRAME)
    rig.pose.bones["hand_ik.L"].location = ANIM_HAND
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)
    animated = rig_controls.keyed_bones(rig, _mapped(rig))
    assert {"hand_ik.L", "foot_ik.L", "upper_arm_ik.L", "toe_ik.R"} <= set(animated)
    assert ("upper_arm_ik_target.L" in animated) == pole
    assert not {"hand_fk.L", "thigh_fk.R", "toe_fk.L"} & set(animated)
    assert "torso" in animated and "shoulder.L" in animated  # no switch: FK as mapped
    _key(rig, animated, ANIM_FRAME)
    anim = _deform_heads(rig)

    scene.frame_set(KEY_FRAME)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    rig = bpy.data.objects[name]
    feet = {n: p for n, p in _deform_heads(rig).items() if n.startswith(("DEF-foot", "DEF-toe"))}
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    target = np.array(hand.matrix_world.translation) + HAND_DRAG
    hand.matrix_world.translation = target
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    solved = _arm(rig, FK_ARM)  # the solve's pose, carried by the FK controls
    shown = _arm(rig, DEF_ARM)
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)
    assert np.linalg.norm(shown[2] - target) < HAND_TOL
    assert _plane_angle(shown, solved) < PLANE_TOL_DEG
    assert np.linalg.norm(shown[1] - solved[1]) < ELBOW_TOL
    heads = _deform_heads(rig)
    assert max(np.linalg.norm(heads[n] - p) for n, p in feet.items()) < FEET_TOL

    keyed = rig_controls.keyed_bones(rig, _mapped(rig))
    assert keyed == animated
    _key(rig, keyed, KEY_FRAME)
    scene.frame_set(ANIM_FRAME)
    heads = _deform_heads(rig)
    assert max(np.linalg.norm(heads[n] - anim[n]) for n in anim) < ANIM_TOL
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)
    scene.frame_set(KEY_FRAME)
    again = _arm(rig, DEF_ARM)
    assert np.linalg.norm(again[2] - target) < HAND_TOL
    assert _plane_angle(again, solved) < PLANE_TOL_DEG


def test_an_fk_limb_stays_in_fk(rigify_rig: bpy.types.Object) -> None:
    """The left arm switched to FK by the animator, the rest in IK: a 25 cm drag of the
    left hand's empty and Solve pose the arm through its FK controls as before, its switch
    stays 1 and its IK controls do not move; keys go on its FK controls."""
    rig = rigify_rig
    name = rig.name
    rig.pose.bones["upper_arm_parent.L"]["IK_FK"] = 1.0
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    rig = bpy.data.objects[name]
    ik_hand = np.array(rig.pose.bones["hand_ik.L"].matrix_basis)
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    target = np.array(hand.matrix_world.translation) + HAND_DRAG
    hand.matrix_world.translation = target
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    assert rig.pose.bones["upper_arm_parent.L"]["IK_FK"] == 1.0
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES[1:])
    shown = _arm(rig, DEF_ARM)
    assert np.linalg.norm(shown[2] - target) < HAND_TOL
    assert np.array_equal(np.array(rig.pose.bones["hand_ik.L"].matrix_basis), ik_hand)
    keyed = set(rig_controls.keyed_bones(rig, _mapped(rig)))
    assert {"upper_arm_fk.L", "forearm_fk.L", "hand_fk.L", "hand_ik.R"} <= keyed
    assert not {"hand_ik.L", "upper_arm_ik.L", "hand_fk.R"} & keyed
