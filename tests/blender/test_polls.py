"""Every operator greys out where it cannot run, and Blender's tooltip says why: no
armature, an unmapped one, or what else it lacks."""

from __future__ import annotations

import pytest

bpy = pytest.importorskip("bpy")

from tests.blender import rigs  # noqa: E402

# Operators that need nothing selected (the scene is enough).
NEED_NOTHING = {"load_models", "weight_curve"}


def _operators() -> list[str]:
    return sorted(name for name in dir(bpy.ops.npe) if not name.startswith("_"))


def _refusal(name: str) -> str | None:
    """The poll's message when the operator cannot run now, else None."""
    op = getattr(bpy.ops.npe, name)
    if op.poll():
        return None
    try:
        op("EXEC_DEFAULT")
    except RuntimeError as exc:
        return str(exc)
    raise AssertionError(f"npe.{name} ran although its poll said no")


def test_every_operator_says_why_it_is_unavailable(scene: bpy.types.Scene) -> None:
    names = _operators()
    assert len(names) >= 14
    for name in names:  # nothing selected
        said = _refusal(name)
        if name in NEED_NOTHING:
            assert said is None, name
        else:
            assert said is not None and "Select an armature" in said, (name, said)

    obj = rigs.mixamo()
    rigs.select_only(obj)
    unmapped = {name: _refusal(name) for name in names}
    assert unmapped["map_rig"] is None and unmapped["load_mapping"] is None
    for name in ("solve", "add_effectors", "insert_keyframe", "reset_edits", "clean_pose",
                 "measure", "save_mapping"):
        assert "click Map Rig" in unmapped[name], (name, unmapped[name])

    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    mapped = {name: _refusal(name) for name in names}
    for name in ("solve", "add_effectors", "insert_keyframe", "reset_edits", "clean_pose",
                 "measure", "save_mapping", "map_rig"):
        assert mapped[name] is None, (name, mapped[name])
    assert "no effectors" in mapped["remove_effectors"]
    assert "No metric request" in mapped["apply_metrics"]
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    assert _refusal("remove_effectors") is None
    rigs.select_only(obj.npe.effectors[0].empty)  # an effector stands for its armature
    assert _refusal("solve") is None

    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.select_only(obj)
    bpy.ops.object.mode_set(mode="EDIT")
    assert "Edit Mode" in _refusal("solve")
    bpy.ops.object.mode_set(mode="OBJECT")
