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


def test_a_linked_overridden_character_is_mapped_dragged_and_keyed(
        fresh_scene: bpy.types.Scene, models_dir: Path, tmp_path: Path) -> None:
    library = tmp_path / "character.blend"
    _library(library)
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
