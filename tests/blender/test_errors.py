"""Bad input: every operator cancels with an error report that says what to do, and
changes nothing (pose, keys, effectors compared before and after)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import errors, live, model_sets, preferences  # noqa: E402
from tests.blender import rigs  # noqa: E402


def _state(obj: bpy.types.Object) -> tuple:
    return (rigs.pose_matrices(obj).tobytes(), tuple(sorted(rigs.keys(obj).items(),
            key=lambda kv: kv[0])).__repr__(), len(obj.npe.effectors))


def _assert_cancels(obj: bpy.types.Object, op: Callable, expect: str, **kwargs: object) -> None:
    before = _state(obj)
    message = rigs.cancelled(op, "EXEC_DEFAULT", True, **kwargs)
    assert expect.lower() in message.lower(), message
    assert _state(obj) == before


@pytest.fixture
def posed(mixamo_rig: bpy.types.Object) -> bpy.types.Object:
    """The Mixamo rig with hand effectors, the right one moved, a few keys."""
    bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS")
    bpy.ops.npe.insert_keyframe("EXEC_DEFAULT", True)
    hand = mixamo_rig.npe.effectors[1].empty
    hand.location = np.array(hand.location) + np.array([0.05, -0.1, 0.1])
    return mixamo_rig


def test_no_armature_selected(posed: bpy.types.Object) -> None:
    bpy.context.view_layer.objects.active = None
    for op in (bpy.ops.npe.solve, bpy.ops.npe.map_rig, bpy.ops.npe.add_effectors,
               bpy.ops.npe.clean_pose, bpy.ops.npe.spread_edit, bpy.ops.npe.insert_keyframe):
        _assert_cancels(posed, op, "Select an armature")
    mesh = bpy.data.objects.new("Plain", None)
    bpy.context.scene.collection.objects.link(mesh)
    rigs.select_only(mesh)
    _assert_cancels(posed, bpy.ops.npe.solve, "Select an armature")


def test_unmapped_rig(scene: bpy.types.Scene) -> None:
    obj = rigs.mixamo()
    rigs.select_only(obj)
    for op in (bpy.ops.npe.solve, bpy.ops.npe.add_effectors, bpy.ops.npe.clean_pose,
               bpy.ops.npe.insert_keyframe):
        _assert_cancels(obj, op, "Map Rig")
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    next(i for i in obj.data.npe_mapping.joints if i.joint == "l_forearm").bone = ""
    _assert_cancels(obj, bpy.ops.npe.add_effectors, "l_forearm")


@pytest.mark.parametrize("damage", ["missing", "corrupt_manifest", "corrupt_onnx"])
def test_broken_model_folder(posed: bpy.types.Object, models_dir: Path, tmp_path: Path,
                             damage: str) -> None:
    broken = tmp_path / "broken_models"
    shutil.copytree(models_dir, broken)
    preferences.get_preferences().model_folder = str(broken)
    bpy.context.scene.npe.model_set = str(broken)
    if damage == "missing":
        shutil.rmtree(broken)
    elif damage == "corrupt_manifest":
        (broken / "manifest.json").write_text('{"format_version": 1, "modules": [')
    else:
        (broken / "decoder.onnx").write_bytes(b"not a model")
    model_sets.forget()
    # Reported, never silently replaced by another set (the shipped one, say).
    expect = "missing" if damage == "missing" else "models"
    _assert_cancels(posed, bpy.ops.npe.solve, expect)
    _assert_cancels(posed, bpy.ops.npe.spread_edit, expect)
    assert bpy.context.scene.npe.model_set == str(broken)
    if damage == "missing":
        labels = [item[1] for item in model_sets.items(bpy.context, str(broken))]
        assert "broken_models (missing)" in labels
    posed.npe.solver = "classic"  # needs no models: still works
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}


def test_the_chosen_model_set_stays_chosen(scene: bpy.types.Scene, models_dir: Path,
                                           tmp_path: Path) -> None:
    """A folder of model sets gains and loses sets: the choice stays on its folder."""
    sets = tmp_path / "sets"
    for name in ("b_set", "c_set"):
        shutil.copytree(models_dir, sets / name)
    preferences.get_preferences().model_folder = str(sets)
    scene.npe.model_set = str(sets / "c_set")
    assert model_sets.folder(scene) == sets / "c_set"
    shutil.copytree(models_dir, sets / "a_set")  # sorts first: the menu shifts
    shutil.rmtree(sets / "b_set")
    model_sets.forget()
    assert scene.npe.model_set == str(sets / "c_set")
    assert model_sets.folder(scene) == sets / "c_set"
    listed = [item[0] for item in model_sets.items(bpy.context, str(sets / "c_set"))
              if not item[0].startswith(model_sets.SHIPPED_PREFIX)]  # shipped sub-sets
    assert listed == [model_sets.DEFAULT_SET, str(sets / "a_set"), str(sets / "c_set")]
    scene.npe.model_set = "DEFAULT"
    assert scene.npe.model_path == "" and model_sets.folder(scene) != sets / "c_set"


def test_effector_empty_deleted(posed: bpy.types.Object) -> None:
    bpy.data.objects.remove(posed.npe.effectors[0].empty)
    for op in (bpy.ops.npe.solve, bpy.ops.npe.spread_edit):
        _assert_cancels(posed, op, "remove the effector")
    bpy.context.scene.npe.live = True  # live mode reports instead of raising
    posed.npe.effectors[1].empty.location.x += 0.01
    before = _state(posed)
    bpy.context.view_layer.update()
    assert "deleted" in errors.STATUS[posed.name]
    assert _state(posed) == before
    assert bpy.ops.npe.remove_effectors("EXEC_DEFAULT", True, index=0) == {"FINISHED"}
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}


def test_invalid_target_changes_nothing(posed: bpy.types.Object) -> None:
    posed.npe.effectors[1].empty.location = (float("nan"), 0.0, 1.0)
    bpy.context.view_layer.update()
    _assert_cancels(posed, bpy.ops.npe.solve, "invalid")


def test_edit_mode_and_other_refusals(posed: bpy.types.Object) -> None:
    bpy.ops.object.mode_set(mode="EDIT")
    message = rigs.cancelled(bpy.ops.npe.solve, "EXEC_DEFAULT", True)
    assert "Edit Mode" in message
    bpy.ops.object.mode_set(mode="OBJECT")
    posed.npe.solver = "classic"
    _assert_cancels(posed, bpy.ops.npe.spread_edit, "Neural")
    posed.npe.solver = "universal"
    _assert_cancels(posed, bpy.ops.npe.apply_metrics, "metric request")
    bpy.ops.npe.remove_effectors("EXEC_DEFAULT", True, all=True)
    _assert_cancels(posed, bpy.ops.npe.solve, "Nothing to solve")


def test_spread_edit_without_an_action(mixamo_rig: bpy.types.Object) -> None:
    bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS")
    _assert_cancels(mixamo_rig, bpy.ops.npe.spread_edit, "no action")


def test_unregister_removes_only_our_handlers(addon: None) -> None:
    def foreign(*_args: object) -> None:
        pass

    handlers = bpy.app.handlers
    handlers.depsgraph_update_post.append(foreign)
    handlers.load_post.append(foreign)
    try:
        bpy.context.scene.npe.live = True
        assert live.on_depsgraph_update in handlers.depsgraph_update_post
        live.unregister()
        assert live.on_depsgraph_update not in handlers.depsgraph_update_post
        assert live.on_load_post not in handlers.load_post
        assert foreign in handlers.depsgraph_update_post and foreign in handlers.load_post
    finally:
        live.register()
        bpy.context.scene.npe.live = False
        handlers.depsgraph_update_post.remove(foreign)
        handlers.load_post.remove(foreign)
