"""A generated Rigify rig posed with its limbs in IK, as animators keep them: the IK/FK
switches are never changed, a solve places each IK limb's control and pole so that
Blender's IK shows the solved pose, and keys go on the controls the rig uses, so the
edit survives a frame change and the rest of the animation stays. Everything is read back
from the rig as Blender evaluates it."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

from mathutils import Matrix  # noqa: E402

from blender_addon import mapped_rig, rig_controls, rig_keys, rig_mapping  # noqa: E402

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
RESET_TOL = 1e-4  # m: Reset Edits puts the hands and feet back (IK placed within 0.05 mm)
RIGIFY_HAND_TOL = 1e-5  # m: Rigify's own snap and the add-on's put the hand alike (0.0003 mm)
IK_MOVE = (0.02, -0.03, 0.04)  # hand_ik.L moved by hand (local): well within reach
RIGIFY_PLANE_DEG = 1.0  # Rigify's twist search (no pole) stops within a degree (0.03 seen)


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
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}  # on those
    rig = bpy.data.objects[name]
    assert rig_keys.find_curve(rig, "hand_ik.L", "location", 0).evaluate(KEY_FRAME) \
        == pytest.approx(rig.pose.bones["hand_ik.L"].location[0], abs=1e-6)
    fk_keys = [fc for fc in rig_keys.channelbag(rig).fcurves if '"hand_fk.L"' in fc.data_path
               and any(abs(k.co[0] - KEY_FRAME) < 1e-3 for k in fc.keyframe_points)]
    assert not fk_keys  # a limb in IK is keyed on its IK controls only
    scene.frame_set(ANIM_FRAME)
    heads = _deform_heads(rig)
    assert max(np.linalg.norm(heads[n] - anim[n]) for n in anim) < ANIM_TOL
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)
    scene.frame_set(KEY_FRAME)
    again = _arm(rig, DEF_ARM)
    assert np.linalg.norm(again[2] - target) < HAND_TOL
    assert _plane_angle(again, solved) < PLANE_TOL_DEG
    print(f"FIGURES Rigify IK (pole {pole}): keyed frame's DEF-hand "
          f"{np.linalg.norm(again[2] - target) * 1000:.3f} mm from its empty, elbow plane "
          f"{_plane_angle(again, solved):.4f} deg, IK_FK unchanged; frame {ANIM_FRAME}: "
          f"{max(np.linalg.norm(heads[n] - anim[n]) for n in anim) * 1000:.4f} mm from its "
          "animation")


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


def _rigify_snap_props(rig: bpy.types.Object, fk_bone: str) -> dict[str, str]:
    """The properties the rig's own panel gives its "IK->FK" snap button for the limb of
    ``fk_bone``, read from the generated rig_ui script."""
    props: dict[str, str] = {}
    found: list[dict[str, str]] = []
    for line in bpy.data.texts["rig_ui.py"].as_string().splitlines():
        line = line.strip()
        if "operator(" in line:
            props = {}
            if "rigify_limb_ik2fk_" in line and "bake" not in line:
                found.append(props)
        elif line.startswith("props.") and " = " in line:
            key, value = line[len("props."):].split(" = ", 1)
            props[key] = ast.literal_eval(value)
    return next(p for p in found if fk_bone in p.get("fk_bones", ""))


def test_the_ik_placement_shows_what_rigifys_own_snap_shows(
        rigify_rig: bpy.types.Object) -> None:
    """After a 25 cm hand drag and Solve with the left arm in IK (no pole, as generated),
    Rigify's own "Snap IK->FK" (the rig_ui script's operator, run from the rig's text) from
    the IK controls at rest gives the arm the add-on showed: the same hand and elbow plane,
    up to Rigify's one-degree twist search. (With a pole, Rigify's match_pole_target, which
    compares whole rotations, twist included, left the elbow's plane 37.5 degrees off the
    solved one in this drag; the add-on's is within 0.001 degrees of it: see above.)"""
    rig = rigify_rig
    name = rig.name
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    rig = bpy.data.objects[name]
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    hand.matrix_world.translation = np.array(hand.matrix_world.translation) + HAND_DRAG
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    ours = _arm(rig, DEF_ARM)
    props = _rigify_snap_props(rig, "upper_arm_fk.L")
    for control in json.loads(props["ctrl_bones"]):
        rig.pose.bones[control].matrix_basis = Matrix.Identity(4)
    namespace: dict[str, object] = {"__name__": "rig_ui"}
    exec(compile(bpy.data.texts["rig_ui.py"].as_string(), "rig_ui.py", "exec", dont_inherit=True),
         namespace)
    try:
        snap = getattr(bpy.ops.pose, f"rigify_limb_ik2fk_{rig.data['rig_id']}")
        with bpy.context.temp_override(active_object=rig, object=rig):
            assert snap(**props) == {"FINISHED"}
        theirs = _arm(rig, DEF_ARM)
    finally:
        namespace["unregister"]()
    assert np.linalg.norm(theirs[2] - ours[2]) < RIGIFY_HAND_TOL
    assert _plane_angle(theirs, ours) < RIGIFY_PLANE_DEG


def test_an_ik_limb_the_addon_cannot_place_is_reported(rigify_rig: bpy.types.Object) -> None:
    """A limb in IK whose chain is not built as Rigify's are (here its hand no longer
    copies the IK chain's end): Map Rig says so and how to pose it, and switches nothing."""
    rig = rigify_rig
    org = rig.pose.bones["ORG-hand.L"]
    org.constraints.remove(org.constraints[1])  # the Copy Transforms from the IK chain
    _, _, notes = rig_mapping.map_rig(rig, "auto", bpy.context.view_layer)
    assert any(n.startswith("upper_arm_parent.L in IK, with an IK chain the add-on cannot "
                            "place: set IK_FK to 1") for n in notes), notes
    assert any(n.startswith("upper_arm_parent.R, thigh_parent.L, thigh_parent.R in IK: each "
                            "solve places") for n in notes), notes
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)


def test_reset_edits_brings_an_ik_limb_back(rigify_rig: bpy.types.Object) -> None:
    """Reset Edits after a Solve on limbs in IK: the base pose goes back on the FK
    controls and the IK controls follow, so the evaluated hands and feet are where they
    were before the drag."""
    rig = rigify_rig
    name = rig.name
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    rig = bpy.data.objects[name]
    ends = ("DEF-hand.L", "DEF-hand.R", "DEF-foot.L", "DEF-foot.R")
    before = _deform_heads(rig)
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    hand.matrix_world.translation = np.array(hand.matrix_world.translation) + HAND_DRAG
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    assert np.linalg.norm(_deform_heads(rig)["DEF-hand.L"] - before["DEF-hand.L"]) > 0.2
    assert bpy.ops.npe.reset_edits("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    after = _deform_heads(rig)
    assert max(np.linalg.norm(after[n] - before[n]) for n in ends) < RESET_TOL
    assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)


def test_a_limb_between_ik_and_fk_shows_the_solve(rigify_rig: bpy.types.Object) -> None:
    """The left arm half way between IK and FK (IK_FK 0.5): both of its chains are put
    on the solved pose, so the blend shows it; keys cover both sets of controls."""
    rig = rigify_rig
    name = rig.name
    rig.pose.bones["upper_arm_parent.L"]["IK_FK"] = 0.5
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    rig = bpy.data.objects[name]
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    target = np.array(hand.matrix_world.translation) + HAND_DRAG
    hand.matrix_world.translation = target
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    assert rig.pose.bones["upper_arm_parent.L"]["IK_FK"] == 0.5
    shown = _arm(rig, DEF_ARM)
    assert np.linalg.norm(shown[2] - target) < HAND_TOL
    assert _plane_angle(shown, _arm(rig, FK_ARM)) < PLANE_TOL_DEG
    keyed = set(rig_controls.keyed_bones(rig, _mapped(rig)))
    assert {"hand_fk.L", "hand_ik.L", "upper_arm_ik.L"} <= keyed


def test_turning_live_on_matches_fk_controls_to_ik_limbs(rigify_rig: bpy.types.Object) -> None:
    """An IK control moved while Live was off leaves the FK controls (a solve's start)
    elsewhere; turning Live on matches them on the next tick, so the first drag starts
    from the limb shown, not from a pose that pops at the pause."""
    from blender_addon import timeline

    scene = bpy.context.scene
    rig = rigify_rig
    name = rig.name
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[name]
    rig.pose.bones["hand_ik.L"].location = IK_MOVE  # by hand, Live off
    stale = max(np.linalg.norm(a - b) for a, b in zip(_arm(rig, FK_ARM), _arm(rig, DEF_ARM),
                                                       strict=True))
    assert stale > 10 * HAND_TOL, "the IK move left the FK controls in place: nothing to show"
    scene.npe.live = True
    try:
        assert name in timeline._TO_MATCH
        timeline._match_timer()  # the timer's work (background Blender runs no timers)
        rig = bpy.data.objects[name]
        gaps = [float(np.linalg.norm(a - b)) for a, b in zip(_arm(rig, FK_ARM),
                                                              _arm(rig, DEF_ARM), strict=True)]
        print(f"FK controls from the IK limb: {stale * 1000:.1f} mm before; after, elbow "
              f"{gaps[1] * 1000:.3f} mm, hand {gaps[2] * 1000:.5f} mm")
        assert gaps[2] < RIGIFY_HAND_TOL
        assert gaps[1] < ELBOW_TOL  # Rigify's IK chain stretches a little (see ELBOW_TOL)
        assert all(rig.pose.bones[h]["IK_FK"] == 0.0 for h in SWITCHES)
    finally:
        scene.npe.live = False


@pytest.mark.parametrize("forearm_scale", [1.0, 1.3], ids=["rigid", "scaled"])
def test_fk_controls_are_matched_in_one_update_where_their_parents_carry_them(
        rigify_rig: bpy.types.Object, forearm_scale: float) -> None:
    """The FK->IK match sets every level of a chain in one update, each control under its
    parent as the level above moves it. A scaled FK forearm breaks that (the hand's parent
    takes the forearm's rotation, not its scale: in one go the hand came out 1.3x its
    size), and the controls are then matched a level at a time. Either way they end on
    the limb shown, scale included."""
    from blender_addon import fk_match, ik_snap

    rig = rigify_rig
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[rig.name]
    rig.pose.bones["forearm_fk.L"].scale = (forearm_scale,) * 3  # left by the animator
    rig.pose.bones["hand_ik.L"].location = IK_MOVE
    bpy.context.view_layer.update()
    limbs = [limb for limb in rig_controls.ik_limbs(rig, _mapped(rig))
             if limb.holder == "upper_arm_parent.L"]
    poses = fk_match._fk_pose(rig, limbs[0])
    updates = []

    class _Counted:  # the view layer, its updates counted
        def update(self) -> None:
            updates.append(1)
            bpy.context.view_layer.update()

    assert fk_match.match_fk(rig, limbs, _Counted()) == limbs
    misses = [ik_snap.matrix_gap(rig.pose.bones[n].matrix, m)  # scale included
              for n, m in zip(limbs[0].fk, poses, strict=True)]
    gap = float(np.linalg.norm(_arm(rig, FK_ARM)[2] - _arm(rig, DEF_ARM)[2]))
    print(f"forearm scale {forearm_scale}: {len(updates)} updates, controls off by "
          f"{max(misses):.2e}, hand {gap * 1000:.5f} mm")
    one_go = 2  # the frame seen, then every level set
    assert len(updates) == one_go + (0 if forearm_scale == 1.0 else len(limbs[0].fk))
    assert max(misses) < fk_match.FOLLOW_TOL
    assert gap < RIGIFY_HAND_TOL


KINEMATIC_TOL = 1e-5  # armature units: the rig's kinematics against Blender's evaluation


IK_PARENT_TORSO = 2  # Rigify's IK_parent: the hand's IK control under the torso


@pytest.mark.parametrize("ik_parent", [None, IK_PARENT_TORSO], ids=["root", "torso"])
def test_a_drag_step_places_ik_controls_where_the_written_fk_pose_goes(
        rigify_rig: bpy.types.Object, ik_parent: int | None) -> None:
    """A drag's update writes the FK controls and takes one placement step without
    evaluating the rig: the FK controls' matrices come from the rig's parents and rest
    offsets (``rig_io.kinematic_matrices``), which equal Blender's evaluation of them, and
    the IK ends land on the FK ends at the next evaluation within Blender's IK shortfall
    (the drag's bound, ``rigs.DRAG_PLACE_TOL``); the pause places them exactly. With the
    hand's IK control under the torso, which the write turns, a step set under its parent
    as last evaluated would miss by the torso's turn (4.6 mm in a Live drag): that update
    evaluates the rig and places them in one pass, as before."""
    from blender_addon import ik_snap, rig_io
    from blender_addon.core.quaternions import quat_multiply
    from tests.blender import rigs

    rig = rigify_rig
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    rig = bpy.data.objects[rig.name]
    if ik_parent is not None:
        rig.pose.bones["upper_arm_parent.L"]["IK_parent"] = ik_parent
        rig.update_tag()
    info = mapped_rig.rig_for(rig)
    limbs = rig_controls.ik_limbs(rig, _mapped(rig))
    bpy.context.view_layer.update()
    pose = rig_io.read_pose(rig, info)
    quats = pose.quats.copy()
    turned = [info.names.index(n) for n in ("upper_arm_fk.L", "forearm_fk.L", "spine_fk.001",
                                            "thigh_fk.R", "torso")]
    quats[turned] = quat_multiply(np.array([np.cos(0.15), np.sin(0.15), 0.0, 0.0]),
                                  quats[turned])  # 17 degrees about X
    updates = []
    counted = lambda *_args: updates.append(1)  # noqa: E731 - the rig's evaluations
    bpy.app.handlers.depsgraph_update_post.append(counted)
    try:
        with rig_controls.dragging():
            written = rig_io.write_pose(rig, info, quats, pose.locations, pose)
    finally:
        bpy.app.handlers.depsgraph_update_post.remove(counted)
    names = [n for limb in limbs for n in limb.fk_controls]
    predicted = rig_io.kinematic_matrices(info, written, names)
    gap = rigs.ik_end_gap(rig)  # (evaluates the rig)
    off = max(ik_snap.matrix_gap(predicted[n], rig.pose.bones[n].matrix) for n in names)
    rig_controls.follow_pending()  # the drag's pause
    exact = rigs.ik_end_gap(rig)
    print(f"\nFIGURES kinematic FK matrices off Blender's by {off:.2e}; IK ends "
          f"{gap * 1e3:.3f} mm from the FK ends after one step, {exact * 1e3:.4f} mm placed")
    assert len(updates) == (0 if ik_parent is None else 2)  # (one placement pass: two)
    assert set(predicted) == set(names)
    assert off < KINEMATIC_TOL
    assert gap < rigs.DRAG_PLACE_TOL
    assert exact < ik_snap.PLACE_TOL
