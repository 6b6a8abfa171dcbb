"""Hands and knees on the floor hold in Blender as planted feet do (issue 47), read back from
the rig Blender evaluates: a character lying face down, one hand lifted."""

from __future__ import annotations

import math

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from tests.blender import rigs  # noqa: E402

HELD_M = 1e-4  # a held contact stays this close (float32 matrices, the engine's tolerance)
REACH_M = 0.01  # the dragged hand ends this close to its empty (as test_editing)
FLOOR_M = 0.05  # the lowest joint's height once the rig lies down
HAND_MOVE = np.array([0.0, -0.05, 0.12])  # m, world: the left hand lifted off the floor


def _lying_mixamo() -> bpy.types.Object:
    """The Mixamo-named rig turned to lie face down (object rotation), just off the
    floor, mapped."""
    obj = rigs.mixamo()
    obj.rotation_euler = (math.radians(90.0), 0.0, 0.0)
    bpy.context.view_layer.update()
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True, preset="auto") == {"FINISHED"}
    low = min(p[2] for p in rigs.mapped_heads(obj).values())
    obj.location = (0.0, 0.0, FLOOR_M - low)
    bpy.context.view_layer.update()
    return obj


@pytest.mark.usefixtures("scene")
def test_a_body_lying_face_down_keeps_its_hand_and_knees_on_the_floor() -> None:
    obj = _lying_mixamo()
    heads = rigs.mapped_heads(obj)
    down = [j for j in ("r_hand", "l_shin", "r_shin") if heads[j][2] < 0.12]
    assert "r_hand" in down and len(down) >= 2, {j: heads[j][2] for j in heads}
    rigs.select_bones(obj, ["mixamorig:LeftHand"])
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="SELECTED") == {"FINISHED"}
    assert [e.joint for e in obj.npe.effectors] == ["l_hand"]  # the right hand left free
    left = obj.npe.effectors[0].empty
    left.location = np.array(left.location) + HAND_MOVE
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    after = rigs.mapped_heads(obj)
    assert np.linalg.norm(after["l_hand"] - np.array(left.location)) < REACH_M
    for joint in down:
        assert np.linalg.norm(after[joint] - heads[joint]) < HELD_M, joint
