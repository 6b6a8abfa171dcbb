"""A null edit as a user makes it, in real Blender: effectors added on the rig's own joints
and nothing moved, then Solve, or Live switched on and the drag's pause, leave every bone
where Blender evaluated it before (issue 15: within 1 mm), on the test rigs and on a
generated Rigify rig read back through its deform bones."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

from blender_addon import live  # noqa: E402

NULL_TOL = 1e-3  # m: the largest move of any bone head a null edit may cause (the issue)


def _heads(obj: bpy.types.Object) -> np.ndarray:
    """World heads of every bone, as Blender evaluates them."""
    bpy.context.view_layer.update()
    mw = obj.matrix_world
    return np.array([mw @ pb.head for pb in obj.pose.bones])


def _largest_move(before: np.ndarray, obj: bpy.types.Object) -> float:
    return float(np.linalg.norm(_heads(obj) - before, axis=-1).max())


def test_null_solve_changes_nothing(rig: bpy.types.Object) -> None:
    before = _heads(rig)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS") == {"FINISHED"}
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert _largest_move(before, rig) < NULL_TOL


def test_null_live_changes_nothing(rig: bpy.types.Object) -> None:
    scene = bpy.context.scene
    before = _heads(rig)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    scene.npe.live = True
    bpy.context.view_layer.update()  # the handler runs; nothing was moved
    live.drag_paused()
    scene.npe.live = False
    assert _largest_move(before, rig) < NULL_TOL


def test_null_solve_on_a_generated_rigify_rig(rigify_rig: bpy.types.Object) -> None:
    rig = rigify_rig
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    before = _heads(rig)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS") == {"FINISHED"}
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    assert _largest_move(before, rig) < NULL_TOL
