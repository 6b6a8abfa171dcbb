"""Posing the rig itself (issue 45): Neural Grab on the selected bones' joints, pins
toggled from the viewport, effectors on the joint a bone moves, rig controls as effectors
in Live mode. Read back from the rig as Blender evaluates it."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

from blender_addon import grab, mapped_rig, pins, rig_io  # noqa: E402
from blender_addon.core.skeleton import JOINT_INDEX  # noqa: E402
from tests.blender import rigs  # noqa: E402

HAND_GRAB = np.array([0.0, -0.12, 0.16])  # m, world: the right hand 20 cm forward and up
REACH_TOL = 1e-3  # m: a grabbed joint ends this close to its target (as evaluated)
FEET_TOL = 1e-4  # m: planted feet move less than this
CANCEL_TOL = 1e-5  # pose-matrix entries: a cancel restores every bone
UNDO_TOL = 1e-4  # m: confirm + undo restores every joint
MID_GRAB_M = 0.10  # m: a knee or an elbow grabbed this far
END_TOL = 0.01  # m: the pinned end below a grabbed knee or elbow stays this close
LENGTH_TOL = 1e-4  # m: no bone length changes more
FEET = ("l_foot", "l_toe", "r_foot", "r_toe")


def shown(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    """World joints as Blender evaluates the rig, on the bones that show them."""
    bpy.context.view_layer.update()
    info = mapped_rig.rig_for(obj, fresh=True)
    mw = rig_io.world_matrix(obj)
    joints = rig_io.evaluated_joints(obj, info) @ mw[:3, :3].T + mw[:3, 3]
    return {j: joints[i] for j, i in JOINT_INDEX.items()}


def pose_mode(obj: bpy.types.Object, bones: list[str]) -> None:
    rigs.select_only(obj)
    bpy.ops.object.mode_set(mode="POSE")
    rigs.select_bones(obj, bones)


def mapped_bone(obj: bpy.types.Object, joint: str) -> str:
    return mapped_rig.mapping_dict(obj.data)[joint]


def _grab_right_hand(obj: bpy.types.Object) -> None:
    name = obj.name
    pose_mode(obj, [mapped_bone(obj, "r_hand")])
    before = shown(obj)
    matrices = rigs.pose_matrices(obj)
    scene = bpy.context.scene

    # The modal operator's steps: a drag, then cancel: every bone back exactly.
    g = grab.begin(scene, obj)
    assert g.joints == ("r_hand",)
    for k in (1, 2, 3):
        grab.update(scene, obj, g, HAND_GRAB * k / 3)
    assert np.linalg.norm(shown(obj)["r_hand"] - before["r_hand"]) > 0.1
    grab.cancel(obj, g)
    assert np.abs(rigs.pose_matrices(obj) - matrices).max() < CANCEL_TOL

    # The exec path (as transform.translate's value): confirm is one undo step.
    bpy.ops.ed.undo_push(message="before the grab")
    assert bpy.ops.npe.neural_grab("EXEC_DEFAULT", True, offset=HAND_GRAB.tolist()) \
        == {"FINISHED"}
    obj = bpy.data.objects[name]
    after = shown(obj)
    miss = np.linalg.norm(after["r_hand"] - (before["r_hand"] + HAND_GRAB))
    feet = max(np.linalg.norm(after[f] - before[f]) for f in FEET)
    print(f"{name}: hand miss {miss * 1e3:.3f} mm, feet {feet * 1e3:.4f} mm")
    assert miss < REACH_TOL
    assert feet < FEET_TOL
    bpy.ops.ed.undo()
    obj = bpy.data.objects[name]
    undone = shown(obj)
    assert max(np.linalg.norm(undone[j] - before[j]) for j in before) < UNDO_TOL


def test_grab_right_hand(rig: bpy.types.Object) -> None:
    _grab_right_hand(rig)


def test_grab_right_hand_generated_rigify(rigify_rig: bpy.types.Object) -> None:
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    _grab_right_hand(rigify_rig)
