"""Propagation over an action: keys only inside the range, the change at each frame
following W(t), frames and keys outside untouched; the custom falloff curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import guard, propagation  # noqa: E402
from blender_addon.core import pipeline  # noqa: E402
from tests.blender import rigs  # noqa: E402
from tests.blender.test_editing import FULL_REACH_TOL_DEG, elbow_bend  # noqa: E402

CENTER = 40  # the edited frame of the 90-frame clip
RADIUS = 12
HAND_MOVE = 0.10  # m, world: the right hand moves this far towards the chest (reachable,
# whatever the arm does in the clip: a straight arm cannot push its hand further out)
# How closely the change at each frame follows W(t). Loose: a latent blend is not linear in
# W, and the development model set is barely trained (it misses targets by ~15 cm before
# the exact-reach pass); the shipped set can be held tighter.
PROFILE_CORRELATION = 0.8  # correlation of |displacement(t)| with W(t) over the window
LOW_WEIGHT = 0.25  # frames with W at most this ...
LOW_WEIGHT_SHARE = 0.6  # ... move less than this share of the edited frame's change
REACH_TOL = 0.01  # m
WRITE_REACH_TOL = 1e-4  # m: a reachable hand after the write's re-aim


def _hand_path(obj: bpy.types.Object, frames: np.ndarray) -> np.ndarray:
    """The right hand's world position at each frame, from Blender's evaluated pose."""
    scene = bpy.context.scene
    out = []
    for f in frames:
        scene.frame_set(int(f))
        out.append(rigs.mapped_heads(obj)["r_hand"])
    return np.array(out)


def _towards_chest(obj: bpy.types.Object, hand: np.ndarray) -> np.ndarray:
    chest = rigs.mapped_heads(obj)["chest"]
    return hand + HAND_MOVE * (chest - hand) / np.linalg.norm(chest - hand)


@pytest.fixture
def clip_rig(scene: bpy.types.Scene, bandai_bvh: Path) -> bpy.types.Object:
    """The 90-frame Bandai clip, mapped, at frame CENTER, with hand effectors."""
    obj = rigs.import_bvh(bandai_bvh)
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    scene.frame_set(CENTER)
    bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS")
    return obj


@pytest.mark.parametrize("curve", ["HAT", "SMOOTH"])
def test_propagation_follows_the_weight_curve(clip_rig: bpy.types.Object, curve: str) -> None:
    obj = clip_rig
    scene = bpy.context.scene
    p = scene.npe.propagation
    p.range_mode, p.radius, p.curve = "RADIUS", RADIUS, curve
    frames = np.arange(CENTER - RADIUS - 5, CENTER + RADIUS + 6)
    before_path = _hand_path(obj, frames)
    keys_before = rigs.keys(obj)
    scene.frame_set(CENTER)
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    target = _towards_chest(obj, np.array(hand.location))
    hand.location = target
    bpy.context.view_layer.update()
    window, w = propagation.weights(scene)

    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}

    inside = window[w > 0]
    lo, hi = inside.min(), inside.max()
    keys_after = rigs.keys(obj)
    assert keys_after.keys() == keys_before.keys()
    for channel, old in keys_before.items():
        new = keys_after[channel]
        old_out = old[(old[:, 0] < lo) | (old[:, 0] > hi)]
        new_out = new[(new[:, 0] < lo) | (new[:, 0] > hi)]
        assert np.array_equal(old_out, new_out), channel  # keys outside untouched
    after_path = _hand_path(obj, frames)
    moved = np.linalg.norm(after_path - before_path, axis=1)
    outside = (frames < lo) | (frames > hi)
    assert moved[outside].max() < 1e-5  # frames outside unchanged
    weight = np.interp(frames, window, w, left=0.0, right=0.0)
    c = int(np.flatnonzero(frames == CENTER)[0])
    assert np.linalg.norm(after_path[c] - target) < REACH_TOL
    assert np.corrcoef(moved, weight)[0, 1] > PROFILE_CORRELATION
    low = (weight <= LOW_WEIGHT) & ~outside
    assert (moved[low] < LOW_WEIGHT_SHARE * moved[c]).all()


def test_explicit_range_and_custom_curve(clip_rig: bpy.types.Object) -> None:
    scene = bpy.context.scene
    p = scene.npe.propagation
    p.range_mode, p.frame_start, p.frame_end = "START_END", CENTER - 5, CENTER + 20
    p.curve = "CUSTOM"  # makes the hidden curve node
    node = propagation.weight_curve_node()
    assert node is not None and node.id_data.use_fake_user
    points = node.mapping.curves[0].points
    points[0].location = (0.0, 1.0)
    points[-1].location = (1.0, 1.0)  # flat: full weight over the whole range
    node.mapping.update()
    frames, w = propagation.weights(scene)
    assert frames[0] == CENTER - 5 and frames[-1] == CENTER + 20
    assert np.allclose(w, 1.0)
    mode, shown = propagation.preview(scene, obj=clip_rig)
    assert mode == "EVERY_FRAME" and len(shown) > 2  # the clip is keyed on every frame
    keys_before = rigs.keys(obj := clip_rig)
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    hand.location = _towards_chest(obj, np.array(hand.location))
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}
    for channel, old in rigs.keys(obj).items():
        before = keys_before[channel]
        out = (before[:, 0] < CENTER - 5) | (before[:, 0] > CENTER + 20)
        assert np.array_equal(before[out], old[(old[:, 0] < CENTER - 5) |
                                               (old[:, 0] > CENTER + 20)])


def test_the_report_gives_the_miss_of_the_keyed_pose(clip_rig: bpy.types.Object) -> None:
    """The largest miss reported is the keyed pose's (after the exact-reach pass), as
    Blender shows it, not the models' before it."""
    import re

    obj = clip_rig
    scene = bpy.context.scene
    scene.npe.propagation.radius = RADIUS
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    hand.location = _towards_chest(obj, np.array(hand.location))
    bpy.context.view_layer.update()
    with guard.busy():
        outcome = propagation.propagate_edit(scene, obj, bpy.context.evaluated_depsgraph_get())
    found = re.search(r"largest effector miss at frame (\d+): ([\d.]+) cm", outcome.message)
    assert found is not None, outcome.message
    assert int(found.group(1)) == CENTER
    heads = rigs.mapped_heads(obj)
    real = max(np.linalg.norm(heads[e.joint] - np.array(e.empty.matrix_world.translation))
               for e in obj.npe.effectors)
    assert abs(float(found.group(2)) - real * 100) <= 0.051


SPARSE_KEYS = (1, 11, 21, 31, 41)  # an animator's keys: every tenth frame, Bezier between
SPARSE_RADIUS = 5


def test_a_hand_keyed_action_keeps_its_frames_outside_the_range(
        scene: bpy.types.Scene) -> None:
    """Every Frame mode on keys every tenth frame and the root's location never keyed, an
    edit at frame 21 propagated over 17-25: every frame outside the range stays where it
    was (the new keys reshaped the curves up to the keys before and after, and the root's
    new location keys held their edge values over the whole action: frames outside moved
    4-25 mm)."""
    obj = rigs.mixamo()
    rigs.select_only(obj)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    rng = np.random.default_rng(0)
    for f in SPARSE_KEYS:
        for pb in obj.pose.bones:
            pb.rotation_mode = "QUATERNION"
            q = np.r_[1.0, rng.normal(0.0, 0.15, 3)]
            pb.rotation_quaternion = q / np.linalg.norm(q)
            pb.keyframe_insert("rotation_quaternion", frame=f)
    frames = np.arange(SPARSE_KEYS[0], SPARSE_KEYS[-1] + 1)
    center = SPARSE_KEYS[2]

    def heads() -> np.ndarray:
        out = []
        for f in frames:
            scene.frame_set(int(f))
            out.append(np.array(list(rigs.mapped_heads(obj).values())))
        return np.array(out)

    before = heads()
    scene.frame_set(center)
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="HANDS") == {"FINISHED"}
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    hand.location = np.array(hand.location) + np.array([0.05, -0.10, 0.10])
    bpy.context.view_layer.update()
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.npe.propagation.radius = SPARSE_RADIUS
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME") == {"FINISHED"}
    moved = np.linalg.norm(heads() - before, axis=-1).max(axis=1)
    outside = np.abs(frames - center) >= SPARSE_RADIUS
    assert moved[outside].max() < 1e-5, moved
    assert moved[frames == center][0] > 0.05  # the edit is there


HELD_TOL = 1e-3  # m on a 1.7 m body: a held end stays put, the edited frame is its Solve
SWAY_FRAMES = 60
LEFT_HAND_MOVE = np.array([0.05, 0.10, 0.08])  # m, world: up, out and forward


def solve_a_left_hand_drag(rig: bpy.types.Object, move: np.ndarray) -> None:
    """Hands, feet and head as effectors, the left hand's empty moved by ``move`` (world),
    and Solve."""
    assert bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS") == {"FINISHED"}
    hand = next(e.empty for e in rig.npe.effectors if e.joint == "l_hand")
    hand.matrix_world.translation = np.array(hand.matrix_world.translation) + move
    bpy.context.view_layer.update()
    assert bpy.ops.npe.solve("EXEC_DEFAULT", True) == {"FINISHED"}


def test_a_control_rig_holds_its_ends_and_keys_its_solve(rigify_rig: bpy.types.Object
                                                        ) -> None:
    """Blender's generated Rigify rig (its neck bends over two bones, so a written pose is
    not exactly the one Blender shows), a keyed clip, every end an effector and the left
    hand moved: the held ends stay where they were on every frame and the edited frame is
    the pose Solve gives, read back from the evaluated rig (without a correction from it,
    the held head moved 5.1 mm). The limbs are switched to FK first, as an animator
    propagating through FK controls has them (propagation keys the FK controls only)."""
    rig = rigify_rig
    scene = bpy.context.scene  # the Rigify file's own
    rigs.limbs_to_fk(rig)
    assert bpy.ops.npe.map_rig("EXEC_DEFAULT", True) == {"FINISHED"}
    torso = rig.pose.bones["torso"]
    for f in range(1, SWAY_FRAMES + 1):  # the torso control swaying, keyed on every frame
        torso.location = (0.03 * np.sin(f / 8.0), 0.0, 0.02 * np.sin(f / 5.0))
        torso.keyframe_insert("location", frame=f)
    frames = np.arange(CENTER - RADIUS, CENTER + RADIUS + 1) - 10  # inside the keyed clip
    center = CENTER - 10
    held = ("r_hand", "l_foot", "r_foot", "head")

    def ends() -> np.ndarray:
        out = []
        for f in frames:
            scene.frame_set(int(f))
            heads = rigs.mapped_heads(rig)
            out.append([heads[j] for j in held])
        return np.array(out)

    before = ends()
    scene.frame_set(center)
    solve_a_left_hand_drag(rig, LEFT_HAND_MOVE)
    solved = np.array(list(rigs.mapped_heads(rig).values()))
    p = scene.npe.propagation
    p.range_mode, p.radius, p.curve = "RADIUS", RADIUS, "SMOOTH"
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}
    after = ends()
    assert np.linalg.norm(after - before, axis=-1).max() < HELD_TOL
    scene.frame_set(center)
    keyed = np.array(list(rigs.mapped_heads(rig).values()))
    assert np.linalg.norm(keyed - solved, axis=-1).max() < HELD_TOL


def test_without_refinement_the_edited_frame_reaches_its_empty(clip_rig: bpy.types.Object
                                                               ) -> None:
    """Refinement off, the networks alone may leave a reachable hand millimetres short at
    the edited frame: the spread's write puts it on its empty (as Solve's does), and only
    a goal beyond the rig's reach stays where the solve left it."""
    obj = clip_rig
    scene = bpy.context.scene
    obj.npe.refine_steps = 0
    scene.npe.propagation.range_mode, scene.npe.propagation.radius = "RADIUS", RADIUS
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    target = _towards_chest(obj, np.array(hand.location)) + np.array([0.0, 0.0, 0.15])
    hand.location = target
    bpy.context.view_layer.update()
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}
    miss = float(np.linalg.norm(_hand_path(obj, [CENTER])[0] - target))
    print(f"\nFIGURES spread edit, refinement off: edited hand miss {miss * 1000:.4f} mm")
    assert miss < WRITE_REACH_TOL


def test_a_hand_beyond_the_rig_keeps_its_elbow_bent(clip_rig: bpy.types.Object) -> None:
    """The right hand's empty pulled a metre away from the left hand goal: no pose reaches
    it, and the spread keeps the edited frame's arm as the solve left it, bent
    (pipeline.FULL_REACH_BEND_DEG), not re-aimed onto the empty and locked straight."""
    obj = clip_rig
    scene = bpy.context.scene
    scene.npe.propagation.range_mode, scene.npe.propagation.radius = "RADIUS", RADIUS
    heads = rigs.mapped_heads(obj)
    away = heads["r_hand"] - heads["l_hand"]
    hand = next(e.empty for e in obj.npe.effectors if e.joint == "r_hand")
    hand.location = np.array(hand.location) + away / np.linalg.norm(away)
    bpy.context.view_layer.update()
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True) == {"FINISHED"}
    scene.frame_set(CENTER)
    bend = elbow_bend(obj, "r")
    print(f"\nFIGURES spread edit beyond reach: edited frame's elbow bend {bend:.3f} deg")
    assert abs(bend - pipeline.FULL_REACH_BEND_DEG) < FULL_REACH_TOL_DEG
