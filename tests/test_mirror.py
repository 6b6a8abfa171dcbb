"""Mirror Edit's arithmetic (core/mirror.py): the change reflected in the body's own frame,
the side found, the effectors and pins, and a real solve of the plan."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import mirror
from blender_addon.core.normalize import rotate_y
from blender_addon.core.pipeline import Effector, PoseEditor
from blender_addon.core.skeleton import (
    BONE_LENGTHS,
    JOINT_INDEX,
    NUM_JOINTS,
    PARENTS,
    bone_lengths,
    mirror_pose,
)
from tests.synth import TPOSE_DIRECTIONS

J = JOINT_INDEX
TURN = np.radians(37.0)  # the body's facing: turned away from every world axis
PLACE = np.array([0.7, 0.0, -1.3])  # m: and away from the origin
MOVE = 0.20  # m: the hand's edit
LEG = BONE_LENGTHS[J["l_shin"]] + BONE_LENGTHS[J["l_foot"]]
# Arms hanging a little out and forward, elbows bent: a standing pose, symmetric.
STANDING = {"l_upperarm": (1, -0.3, 0), "l_forearm": (0.2, -1, 0.1), "l_hand": (0.1, -1, 0.4),
            "r_upperarm": (-1, -0.3, 0), "r_forearm": (-0.2, -1, 0.1),
            "r_hand": (-0.1, -1, 0.4)}  # fmt: skip
REACH_TOL = 1e-3  # m: full-weight effectors and pins are placed exactly by the solve
ELBOW_TOL = 0.015  # m: an elbow held at shape weight lands this close to its target (8 mm)
LENGTH_TOL = 1e-6  # m: the solve keeps the rig's bone lengths


def standing(turn: float = TURN, place: np.ndarray = PLACE) -> np.ndarray:
    """A symmetric standing pose, facing ``turn`` (yaw) at ``place``."""
    dirs = {**TPOSE_DIRECTIONS, **STANDING}
    pos = np.zeros((NUM_JOINTS, 3))
    pos[0] = (0.0, LEG, 0.0)
    for name, d in dirs.items():
        j = J[name]
        d = np.asarray(d, dtype=np.float64)
        pos[j] = pos[PARENTS[j]] + BONE_LENGTHS[j] * d / np.linalg.norm(d)
    return rotate_y(pos, turn) + place


def body(v: tuple[float, float, float], turn: float = TURN) -> np.ndarray:
    """A vector given in the body's frame (left +X, up +Y, forward +Z) in core space."""
    return rotate_y(np.asarray(v, dtype=np.float64), turn)


def test_a_forward_move_of_the_left_hand_moves_the_right_hand_forward() -> None:
    base = standing()
    edited = base.copy()
    edited[J["l_hand"]] += body((0.0, 0.0, MOVE))
    edited[J["l_forearm"]] += body((0.0, 0.0, 0.5 * MOVE))
    targets = mirror.mirrored_targets(base, edited, "left")
    assert np.allclose(targets[J["r_hand"]] - base[J["r_hand"]], body((0, 0, MOVE)), atol=1e-12)
    assert np.allclose(targets[J["r_forearm"]] - base[J["r_forearm"]],
                       body((0, 0, 0.5 * MOVE)), atol=1e-12)
    # The rest keeps the edited pose: the edited side and the centre line.
    rest = np.ones(NUM_JOINTS, bool)
    rest[mirror.side_joints("right")] = False
    assert np.array_equal(targets[rest], edited[rest])


def test_a_sideways_move_is_reflected_across_the_turned_body() -> None:
    """Out to the left becomes out to the right *of the body*: the world's X would give
    another direction for a body turned 37 degrees."""
    base = standing()
    edited = base.copy()
    out_left = body((MOVE, 0.05, 0.0))
    edited[J["l_hand"]] += out_left
    change = mirror.mirrored_targets(base, edited, "left")[J["r_hand"]] - base[J["r_hand"]]
    assert np.allclose(change, body((-MOVE, 0.05, 0.0)), atol=1e-12)
    world_x_mirror = out_left * np.array([-1.0, 1.0, 1.0])
    assert np.linalg.norm(change - world_x_mirror) > 0.1  # the world's plane is not the body's


def test_the_plane_is_the_skeletons_mirror_for_a_body_facing_front() -> None:
    """Facing +Z at the origin with a symmetric base, the mirror of the change is
    :func:`skeleton.mirror_pose` of the edited pose on the other side."""
    base = standing(turn=0.0, place=np.zeros(3))
    rng = np.random.default_rng(0)
    edited = base + 0.05 * rng.standard_normal(base.shape)
    targets = mirror.mirrored_targets(base, edited, "left")
    right = mirror.side_joints("right")
    assert np.allclose(targets[right], mirror_pose(edited)[right], atol=1e-12)


def test_mirroring_back_gives_the_edited_side() -> None:
    base = standing()
    rng = np.random.default_rng(1)
    edited = base + 0.05 * rng.standard_normal(base.shape)
    there = mirror.mirrored_targets(base, edited, "left")
    back = mirror.mirrored_targets(base, there, "right")
    left = mirror.side_joints("left")
    assert np.allclose(back[left], edited[left], atol=1e-12)


def test_the_edited_side_is_found() -> None:
    base = standing()
    edited = base.copy()
    edited[J["r_foot"]] += body((0.0, 0.15, 0.1))
    edited[J["r_toe"]] += body((0.0, 0.15, 0.1))
    edited[J["l_hand"]] += body((0.0, 0.0, 0.02))  # a smaller change of the other side
    edited[J["r_hand"]] += body((0.0, 0.0, 0.03))  # an arm the solve adjusted a little
    assert mirror.edited_side(base, edited) == "right"
    plan = mirror.plan(base, edited)
    assert plan.source == "right"
    assert plan.moved == ("l_foot", "l_shin", "l_toe")  # the whole leg takes the shape
    assert plan.weights == (1.0, mirror.SHAPE_WEIGHT, mirror.SHAPE_WEIGHT)
    assert plan.change == pytest.approx(np.linalg.norm([0.15, 0.1]))


def test_a_limb_the_trunk_carries_is_not_an_edit() -> None:
    """The upper body leaning 20 degrees sideways, the arms hanging as they were: the hands
    moved some 12 cm, but no limb changed its shape."""
    base = standing()
    pivot = base[J["spine"]]  # the bend is the spine bone's: the pelvis keeps its shape
    lean = np.radians(20.0)
    forward = body((0.0, 0.0, 1.0))
    k = np.array([[0.0, -forward[2], forward[1]], [forward[2], 0.0, -forward[0]],
                  [-forward[1], forward[0], 0.0]])
    turn = np.eye(3) + np.sin(lean) * k + (1.0 - np.cos(lean)) * k @ k  # Rodrigues
    upper = [J[n] for n in ("chest", "neck", "head")] \
        + [J[p + n] for p in ("l_", "r_") for n in ("clavicle", "upperarm", "forearm", "hand")]
    edited = base.copy()
    edited[upper] = (base[upper] - pivot) @ turn.T + pivot
    assert np.linalg.norm(edited[J["l_hand"]] - base[J["l_hand"]]) > 0.1
    assert max(mirror.limb_changes(base, edited).values()) < 1e-12
    with pytest.raises(mirror.NothingToMirror, match="no arm or leg changed its shape"):
        mirror.plan(base, edited)


def test_the_plan_moves_the_other_side_and_holds_the_edited_one() -> None:
    base = standing()
    edited = base.copy()
    edited[J["l_hand"]] += body((0.0, 0.1, MOVE))
    edited[J["l_forearm"]] += body((0.0, 0.05, 0.1))
    plan = mirror.plan(base, edited)
    assert plan.source == "left"
    assert plan.moved == ("r_hand", "r_forearm")
    assert plan.weights == (1.0, mirror.SHAPE_WEIGHT)
    assert plan.held == ("l_hand", "l_forearm") and plan.held_weights == plan.weights
    assert plan.blocked == ()
    effs = plan.effectors()
    assert [(e.joint, e.weight, e.pin) for e in effs] == [
        ("r_hand", 1.0, False), ("r_forearm", mirror.SHAPE_WEIGHT, False),
        ("l_hand", 1.0, False), ("l_forearm", mirror.SHAPE_WEIGHT, False)]
    for e in effs:
        assert np.array_equal(e.target, plan.targets[J[e.joint]])
    assert np.array_equal(effs[2].target, edited[J["l_hand"]])  # held where the edit put it


def test_a_pinned_joint_is_not_moved() -> None:
    base = standing()
    edited = base.copy()
    edited[J["l_hand"]] += body((0.0, 0.0, MOVE))
    plan = mirror.plan(base, edited, pinned=("r_hand",))
    assert plan.moved == plan.held == () and plan.blocked == ("r_hand",)


def test_no_edit_is_an_error() -> None:
    base = standing()
    with pytest.raises(mirror.NothingToMirror, match="nothing to mirror"):
        mirror.plan(base, base.copy())
    edited = base.copy()
    edited[J["l_hand"]] += body((0.0, 0.0, MOVE))
    with pytest.raises(mirror.NothingToMirror, match=r"right side has no edit.*left side has"):
        mirror.plan(base, edited, side="right")
    small = base.copy()
    small[J["l_hand"]] += body((0.0, 0.0, 0.5 * mirror.SHAPE_TOL))
    with pytest.raises(mirror.NothingToMirror, match="no arm or leg changed its shape"):
        mirror.plan(base, small)
    with pytest.raises(ValueError, match="side must be one of"):
        mirror.plan(base, edited, side="up")
    with pytest.raises(ValueError, match="unknown pinned joint"):
        mirror.plan(base, edited, pinned=("l_wrist",))
    bad = edited.copy()
    bad[J["head"], 1] = np.nan
    with pytest.raises(ValueError, match=r"edited: non-finite values at joint.*head"):
        mirror.plan(base, bad)


def test_the_plan_solves_onto_the_mirrored_targets(shipped_models) -> None:
    """The real engine: the left hand pulled 20 cm forward by an edit from the base pose,
    then the mirror solved from the same base pose: the right hand lands on its mirrored
    target, 20 cm forward of its base place, and the left hand stays."""
    editor = PoseEditor(shipped_models)
    base = standing()
    goal = base[J["l_hand"]] + body((0.0, 0.0, MOVE))
    user = [Effector("l_hand", goal), Effector("r_hand", base[J["r_hand"]])]
    edited = editor.solve(base, user).positions[0]
    assert np.linalg.norm(edited[J["l_hand"]] - goal) < REACH_TOL
    plan = mirror.plan(base, edited)
    assert plan.moved == ("r_hand", "r_forearm") and plan.held == ("l_hand", "l_forearm")
    solved = editor.solve(base, plan.effectors()).positions[0]
    right = solved[J["r_hand"]] - base[J["r_hand"]]
    assert np.linalg.norm(right - body((0.0, 0.0, MOVE))) < REACH_TOL
    assert np.linalg.norm(solved[J["l_hand"]] - edited[J["l_hand"]]) < REACH_TOL
    # The elbows, held softly, take the edit's shape and its mirror.
    for joint in ("l_forearm", "r_forearm"):
        miss = np.linalg.norm(solved[J[joint]] - plan.targets[J[joint]])
        assert miss < ELBOW_TOL, (joint, miss)
    assert np.abs(bone_lengths(solved) - bone_lengths(base)).max() < LENGTH_TOL
