"""A production character: linked from another .blend and library-overridden, it can be
mapped, dragged and keyed (every property of the add-on on objects and armatures is
library-overridable)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from blender_addon import metric_requests, rig_keys  # noqa: E402
from blender_addon.core.models import default_models_dir  # noqa: E402
from tests.blender import rigs  # noqa: E402

COLLECTION = "Character"
HAND_MOVE = np.array([0.08, -0.12, 0.10])  # m, world
REACH_M = 1e-3
ELBOW_MORE = 30.0  # degrees asked of the left elbow


def _library(path: Path) -> None:
    """A .blend whose "Character" collection holds the Mixamo-style rig."""
    bpy.ops.wm.read_homefile(use_empty=True)
    obj = rigs.mixamo()
    coll = bpy.data.collections.new(COLLECTION)
    bpy.context.scene.collection.children.link(coll)
    for other in list(obj.users_collection):
        other.objects.unlink(obj)
    coll.objects.link(obj)
    bpy.ops.wm.save_as_mainfile(filepath=str(path))


def _overridden(library: Path, models_dir: Path) -> bpy.types.Object:
    """A new file with the library's character linked and overridden: its armature."""
    bpy.ops.wm.read_homefile(use_empty=True)
    scene = bpy.context.scene
    if models_dir != default_models_dir():
        scene.npe.model_set = str(models_dir)
    with bpy.data.libraries.load(str(library), link=True) as (_src, dst):
        dst.collections = [COLLECTION]
    linked = dst.collections[0]
    instance = bpy.data.objects.new(COLLECTION, None)
    instance.instance_type = "COLLECTION"
    instance.instance_collection = linked
    scene.collection.objects.link(instance)
    override = linked.override_hierarchy_create(scene, bpy.context.view_layer,
                                                reference=instance, do_fully_editable=True)
    obj = next(o for o in override.all_objects if o.type == "ARMATURE")
    assert obj.override_library is not None and obj.library is None
    return obj


def test_a_linked_overridden_character_is_mapped_dragged_and_keyed(
        fresh_scene: bpy.types.Scene, models_dir: Path, tmp_path: Path) -> None:
    library = tmp_path / "character.blend"
    _library(library)
    obj = _overridden(library, models_dir)
    scene = bpy.context.scene

    rigs.select_only(obj)
    assert obj.data.library is not None  # the armature data stays linked ...
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    assert obj.data.library is None and obj.data.override_library is not None  # ... till mapped
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    goal = np.array(hand.location) + HAND_MOVE
    hand.location = goal
    rigs.select_only(obj)
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal) < REACH_M
    # Its metric sliders (ID properties on the override) request as on a local rig.
    elbow = obj.npe.metrics["l_elbow_bend"]
    elbow.enabled = True
    start = elbow.measured
    elbow.set_requested(start + ELBOW_MORE)
    now = metric_requests.measure(scene, obj)["l_elbow_bend"]
    assert abs(now - (start + ELBOW_MORE)) < 0.5 * ELBOW_MORE
    elbow.enabled = False
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal) < REACH_M
    assert bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True) == {"FINISHED"}
    bag = rig_keys.channelbag(obj)
    assert bag is not None and len(bag.fcurves) > 0
    scene.frame_set(scene.frame_current + 5)
    scene.frame_set(scene.frame_current - 5)  # the keys give the edit back
    assert np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal) < REACH_M

    # Saved and opened again, as a shot file is: the mapping, the effectors, the requests
    # (their sliders' values too) and the keyed edit are all still there.
    asked = elbow.requested
    shot = tmp_path / "shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(shot))
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    obj = next(o for o in bpy.data.objects if o.type == "ARMATURE" and o.override_library)
    assert len(obj.data.npe_mapping.joints) == len(rigs.mapped_heads(obj))
    assert {e.joint for e in obj.npe.effectors} >= {"l_hand", "r_hand"}
    assert obj.npe.metrics["l_elbow_bend"].requested == pytest.approx(asked, abs=1e-4)
    assert np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal) < REACH_M


ANIMATED_FRAMES = 30  # the library's action: every bone keyed on each frame, arms swinging
SPREAD_FRAME = 15


def test_a_linked_action_is_layered_not_keyed(fresh_scene: bpy.types.Scene, models_dir: Path,
                                             tmp_path: Path) -> None:
    """The character's action comes linked from the library: its keys cannot change in
    the shot (written anyway, a spread reported done, left the hand 111 mm off its target,
    and a reload dropped it). Keys, Every Frame and Insert Keyframe refuse and name the
    action; a Layer (a local action on a new track of the override) reaches the target and
    is still there once the shot is saved and opened again."""
    library = tmp_path / "animated.blend"
    _library(library)
    obj = next(o for o in bpy.data.objects if o.type == "ARMATURE")
    for f in range(1, ANIMATED_FRAMES + 1):
        swing = 0.4 * np.sin(f / 5.0)
        for pb in obj.pose.bones:
            pb.rotation_mode = "QUATERNION"
            if pb.name.endswith("Arm"):
                pb.rotation_quaternion = (np.cos(swing / 2), np.sin(swing / 2), 0.0, 0.0)
            pb.keyframe_insert("rotation_quaternion", frame=f)
            if pb.parent is None:  # the hips travel, as mocap keys them
                pb.keyframe_insert("location", frame=f)
    bpy.ops.wm.save_as_mainfile(filepath=str(library))
    obj = _overridden(library, models_dir)
    scene = bpy.context.scene
    assert obj.animation_data.action.library is not None
    scene.frame_start, scene.frame_end = 1, ANIMATED_FRAMES
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    scene.frame_set(SPREAD_FRAME)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    goal = np.array(hand.location) + HAND_MOVE
    hand.location = goal
    rigs.select_only(obj)
    for mode in ("KEYS", "EVERY_FRAME"):
        with pytest.raises(RuntimeError, match=r"is linked from .*pick Layer"):
            bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                    radius=8)
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    with pytest.raises(RuntimeError, match=r"is linked from .*to key this pose"):
        bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="LAYER", range_mode="RADIUS",
                                   radius=8) == {"FINISHED"}
    assert np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal) < REACH_M
    shot = tmp_path / "animated_shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(shot))
    bpy.ops.wm.open_mainfile(filepath=str(shot))
    obj = next(o for o in bpy.data.objects if o.type == "ARMATURE" and o.override_library)
    bpy.context.scene.frame_set(SPREAD_FRAME + 1)
    bpy.context.scene.frame_set(SPREAD_FRAME)
    reopened = np.linalg.norm(rigs.mapped_heads(obj)["r_hand"] - goal)
    print(f"FIGURES linked action, layer reopened: hand {reopened * 1e3:.4f} mm off its goal")
    assert reopened < REACH_M
