"""Rig mapping in Blender: presets and auto-detection on three rig families, the bone
pickers, JSON save/load, and the add-on surviving a new file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import mapped_rig  # noqa: E402
from blender_addon.core.skeleton import JOINTS  # noqa: E402
from tests.blender import rigs  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_scene")

EXPECTED = {  # a few joints per rig that a wrong detection would get wrong
    "mixamo": {"pelvis": "mixamorig:Hips", "chest": "mixamorig:Spine2",
               "l_hand": "mixamorig:LeftHand", "r_toe": "mixamorig:RightToeBase"},
    "rigify": {"pelvis": "DEF-spine", "spine": "DEF-spine.001", "chest": "DEF-spine.003",
               "head": "DEF-spine.006", "l_upperarm": "DEF-upper_arm.L",
               "l_forearm": "DEF-forearm.L", "r_thigh": "DEF-thigh.R", "r_toe": "DEF-toe.R"},
    "bvh": {"pelvis": "Hips", "chest": "Chest", "l_hand": "Hand_L", "r_toe": "Toes_R"},
}


def test_addon_stays_registered_across_new_files() -> None:
    bpy.ops.wm.read_homefile(use_empty=True)
    assert hasattr(bpy.types.Scene, "npe") and hasattr(bpy.types.Armature, "npe_mapping")
    assert hasattr(bpy.ops.npe, "map_rig")
    from blender_addon import live

    assert live.on_load_post in bpy.app.handlers.load_post


@pytest.mark.parametrize("kind", rigs.KINDS)
def test_map_rig_finds_every_joint(kind: str, rig_of_kind: Callable) -> None:
    obj = rig_of_kind(kind)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    assert mapped_rig.mapping_problems(obj.data) == []
    mapping = mapped_rig.mapping_dict(obj.data)
    assert set(mapping) == set(JOINTS)
    for joint, bone in EXPECTED[kind].items():
        assert mapping[joint] == bone


def test_explicit_preset_and_a_preset_that_does_not_fit() -> None:
    obj = rigs.rigify()
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="rigify") == {"FINISHED"}
    assert obj.data.npe_mapping.source == "rigify"
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="mixamo") == {"FINISHED"}
    assert "unmapped" in mapped_rig.mapping_problems(obj.data)[0]


def test_unmappable_rig_lists_its_unmapped_joints() -> None:
    bones = [("a", None, (0, 0, 0), (0, 0, 1)), ("b", "a", (0, 0, 1), (0, 0, 2))]
    obj = rigs.build_armature("Stick", bones)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    problems = mapped_rig.mapping_problems(obj.data)
    assert problems and "l_hand" in problems[0] and "pelvis" in problems[0]
    assert len(obj.data.npe_mapping.joints) == len(JOINTS)  # pickers for every joint


def test_bone_picker_edits_the_mapping() -> None:
    obj = rigs.mixamo()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto")
    item = next(i for i in obj.data.npe_mapping.joints if i.joint == "chest")
    item.bone = "mixamorig:Spine1"
    assert obj.data.npe_mapping.source == "edited"
    assert mapped_rig.mapping_dict(obj.data)["chest"] == "mixamorig:Spine1"
    assert mapped_rig.rig_for(obj).joint_bones[JOINTS.index("chest")] == \
        list(obj.data.bones.keys()).index("mixamorig:Spine1")
    item.bone = "mixamorig:Spine"  # already the spine: used twice
    assert any("twice" in p for p in mapped_rig.mapping_problems(obj.data))


def test_save_and_load_mapping(tmp_path: Path) -> None:
    obj = rigs.rigify()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto")
    before = mapped_rig.mapping_dict(obj.data)
    path = tmp_path / "rigify_map.json"
    assert bpy.ops.npe.save_mapping("EXEC_DEFAULT", filepath=str(path)) == {"FINISHED"}
    obj.data.npe_mapping.joints.clear()
    assert bpy.ops.npe.load_mapping("EXEC_DEFAULT", True, filepath=str(path)) == {"FINISHED"}
    assert mapped_rig.mapping_dict(obj.data) == before
    path.write_text('{"joints": {"chest": "no-such-bone"}}')
    message = rigs.cancelled(bpy.ops.npe.load_mapping, "EXEC_DEFAULT", True,
                             filepath=str(path))
    assert "no-such-bone" in message
    assert mapped_rig.mapping_dict(obj.data) == before


def test_a_loaded_mapping_is_checked_whole(tmp_path: Path) -> None:
    """A file that names one bone for two joints, or a bone the rig lacks, is refused and
    the complete mapping stays (no half-replaced 2-joint mapping)."""
    obj = rigs.mixamo()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    before = mapped_rig.mapping_dict(obj.data)
    source = obj.data.npe_mapping.source
    path = tmp_path / "twice.json"
    path.write_text('{"joints": {"l_hand": "mixamorig:LeftHand", '
                    '"r_hand": "mixamorig:LeftHand"}}')
    message = rigs.cancelled(bpy.ops.npe.load_mapping, "EXEC_DEFAULT", True,
                             filepath=str(path))
    assert "mixamorig:LeftHand" in message and "twice" in message and "not changed" in message
    assert mapped_rig.mapping_dict(obj.data) == before
    assert obj.data.npe_mapping.source == source
    path.write_text('{"joints": {"l_hand": "mixamorig:LeftHand", "r_hand": "Hand_R"}}')
    message = rigs.cancelled(bpy.ops.npe.load_mapping, "EXEC_DEFAULT", True,
                             filepath=str(path))
    assert "Hand_R" in message and "not changed" in message
    assert mapped_rig.mapping_dict(obj.data) == before


def test_selecting_properties_are_not_remembered() -> None:
    """Blender remembers operator properties between calls unless SKIP_SAVE: a call that
    leaves out a preset or an index must mean the default, not the last call's value."""
    obj = rigs.rigify()
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="mixamo") == {"FINISHED"}
    assert "unmapped" in mapped_rig.mapping_problems(obj.data)[0]
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}  # auto again
    assert mapped_rig.mapping_problems(obj.data) == []
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS") == {"FINISHED"}
    assert bpy.ops.npe.remove_effectors("EXEC_DEFAULT", True, all=True) == {"FINISHED"}
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True) == {"FINISHED"}  # hands
    assert len(obj.npe.effectors) == 2
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="FEET") == {"FINISHED"}
    assert bpy.ops.npe.remove_effectors("EXEC_DEFAULT", True, index=0) == {"FINISHED"}
    assert [e.joint for e in obj.npe.effectors] == ["r_hand", "l_foot", "r_foot"]
    assert bpy.ops.npe.remove_effectors("EXEC_DEFAULT", True) == {"FINISHED"}  # the active
    assert len(obj.npe.effectors) == 2


def test_a_rig_whose_limb_has_no_length_is_refused_unchanged() -> None:
    """Issue 47: a forearm bone whose head sits on the shoulder (a helper bone mapped as the
    elbow) leaves the arm nothing to bend: Map Rig names the joints and why, and changes
    nothing (no half-filled mapping)."""
    bones = [(n, p, (h if n != "mixamorig:LeftForeArm" else next(
        b[2] for b in rigs.mixamo_bones() if b[0] == "mixamorig:LeftArm")), t)
        for n, p, h, t in rigs.mixamo_bones()]
    obj = rigs.build_armature("NoForearm", bones)
    rigs.select_only(obj)
    message = rigs.cancelled(bpy.ops.npe.map_rig, "EXEC_DEFAULT", True, preset="auto")
    for word in ("l_forearm", "mixamorig:LeftForeArm", "l_upperarm", "upper arm",
                 "not changed"):
        assert word in message, message
    assert len(obj.data.npe_mapping.joints) == 0 and obj.data.npe_mapping.source == ""


def test_cmu_asf_rig_with_zero_length_joints_maps_and_keeps_lengths(
        scene: bpy.types.Scene, tmp_path: Path) -> None:
    """CMU's ASF-converted BVH (hips, lower back, neck and shoulders on their parents),
    imported by Blender's importer: Map Rig maps it, and a solve with a hand moved and the
    other ends held keeps every bone's length, read from the rig Blender evaluates."""
    import numpy as np

    from tests.synth import CMU_ASF, synthetic_bvh

    path = tmp_path / "cmu_asf.bvh"
    path.write_text(synthetic_bvh(10, 0, joints=CMU_ASF))
    obj = rigs.import_bvh(path)
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    assert mapped_rig.mapping_problems(obj.data) == []
    distances = rigs.joint_distances(obj)
    assert distances[JOINTS.index("l_clavicle")] < 1e-6  # a zero-length joint, mapped
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS") == {"FINISHED"}
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "l_hand")
    hand.location = np.array(hand.location) + np.array([0.05, -0.08, 0.10])
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert np.linalg.norm(rigs.mapped_heads(obj)["l_hand"] - np.array(hand.location)) < 0.01
    assert np.abs(rigs.joint_distances(obj) - distances).max() < 1e-4
