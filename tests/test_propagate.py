"""Clip propagation: weight curves, untouched frames, the edited frame, proportional change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import skeleton
from blender_addon.core.normalize import facing_yaw, rotate_y
from blender_addon.core.pipeline import Effector, PoseEditor
from blender_addon.core.propagate import (
    beyond_held,
    interpolate_changes,
    propagate,
    smooth_changes,
    weight_curve,
)
from training.reports.results import BVH_SUITE_CLIPS, PROPAGATION_CLIPS

CENTER, RADIUS = 45, 20
SPINE_FLEXION_CHANGE_DEG = 15.0
# Every end held, the left hand moved 10-30 cm at CENTER and propagated over RADIUS (smooth
# curve): the propagated clip's largest joint acceleration against the clip's own, over
# POP_DRAGS drags. Measured: median 3.9x, worst 10.1x with each frame kept as solved (a
# frame's last resort differing from its neighbours' pops), 2.2x and 8.3x smoothed; 2.2x
# and 11.3x since single solves finish with rig IK's least change before FABRIK; 2.2x and
# 6.6x since a goal beyond the rig's reach at CENTER is spread as far as CENTER reached it
# (its neighbours had leaned for the rest and let go). The hand keeps to its path (W(t) of
# the move made at CENTER) within REACH_M in all but OFF_PATH_DRAGS of the 3 drags that
# take it beyond the rig's reach (before: 34-99 mm off in all 3; now 20 and 1.9 mm). At the
# edited frame itself, in the drags whose edited frame reaches its goals: worst 5.7x with
# its neighbours smoothed but not blended into it, 2.3x blended. Smoothed and settled twice
# (propagate.SETTLE_ROUNDS): median 1.5x, worst 5.6x, 1.7x at the edited frame.
POP_DRAGS = 16
POP_MEDIAN_MAX, POP_WORST_MAX = 2.0, 6.5
EDITED_POP_MAX = 2.0
REACH_M, OFF_PATH_DRAGS, BEYOND_DRAGS = 1e-3, 2, 3
HANDS_APART_M = 2.2  # further than any arm span
HALF_SHARE_TOLERANCE = 0.05  # issue 49: the hand's share at W = 0.5 in 0.45-0.55
# The propagation benchmark's Bandai Namco BVH suite, its clip 14 (a bow held almost still:
# its own largest acceleration 2.1 mm/frame²) with its seeded move, hands, feet and head
# held: the hips' largest acceleration within two frames of the edited frame. 17.8 mm/frame²
# while the settled neighbours' least change held the stance at the clip's pose, 6.6 since
# it holds the pose they were smoothed to.
SETTLED_CLIP, SETTLED_HIPS_ACC_MAX_MM = 14, 8.0
# The same suite's clip 17 with its seeded move, hands, feet and head held: the largest
# acceleration against the clip's own. 1.97x at the held right elbow while the solves chose
# its bend plane afresh each frame and the smoothing averaged them; 1.00x since a limb not
# dragged is bent in its own plane turned W(t) of the edited frame's turn.
HELD_PLANE_CLIP, HELD_PLANE_POP_MAX = 17, 1.1
PLANE_SPIN_FRAMES, PLANE_TOLERANCE_DEG = 9, 1e-6
# The same suite's clip 3 with its seeded move, both hands held: the largest acceleration
# against the clip's own. 1.83x with the changes smoothed and settled once, 0.91x twice
# (propagate.SETTLE_ROUNDS).
ROUNDS_CLIP, ROUNDS_POP_MAX = 3, 1.1
# The propagation benchmark's Bandai Namco test clip 8 (dataset-1_walk_happy_001, prepared as
# ``prepare`` makes it, its first 120 frames), its seeded move (seed 0 over the suite's 19
# clips there: 20 cm), hands, feet and head
# held: the hand lies beyond the rig's reach from frame 61 to 73. 1.24x the clip's largest
# acceleration while each of those frames leaned to the edge its held legs allow, 1.09x
# since the second round leaves them where the smoothing puts them; the hand's largest
# miss 64 -> 74 mm, the held goals within REACH_M.
BEYOND_CLIP, BEYOND_MOVES, BEYOND_SOURCE = 8, 19, "dataset-1_walk_happy_001.bvh"
BEYOND_POP_MAX = 1.1
BEYOND_MISS_MAX_M = 0.08
ROUNDING_M = 1e-7  # a straight elbow's offset from its arm's line, read back in float32
FLOAT32_HELD_TOL_M = 1e-5  # held targets rounded to float32: 1.1e-6 m off the exact ones
# (3.6 mm while float rounding counted as a drag)


@pytest.mark.parametrize("kind", ["hat", "smooth", "constant"])
def test_curve_shapes(kind: str) -> None:
    w = weight_curve(100, CENTER, RADIUS, kind)
    assert w[CENTER] == 1.0 and w[CENTER - RADIUS - 1] == 0.0 and w[CENTER + RADIUS + 1] == 0.0
    assert ((w >= 0) & (w <= 1)).all()
    np.testing.assert_allclose(w[CENTER - 10:CENTER], w[CENTER + 10:CENTER:-1])  # symmetric
    if kind == "hat":
        assert w[CENTER + RADIUS // 2] == pytest.approx(0.5)
    if kind == "smooth":
        assert w[CENTER + RADIUS // 2] == pytest.approx(0.5)
        assert w[CENTER + 2] > 1 - 2 / RADIUS  # flat top, unlike the hat


def test_custom_curve_and_range() -> None:
    w = weight_curve(100, CENTER, RADIUS, "custom", samples=[1.0, 1.0, 0.0])
    assert w[CENTER + RADIUS // 2] == pytest.approx(1.0)
    assert w[CENTER + 3 * RADIUS // 4] == pytest.approx(0.5)
    clipped = weight_curve(100, CENTER, RADIUS, "hat", start=40, end=50)
    assert clipped[39] == 0 and clipped[51] == 0 and clipped[40] > 0
    with pytest.raises(ValueError, match="custom"):
        weight_curve(100, CENTER, RADIUS, "custom", samples=[1.0])
    with pytest.raises(ValueError, match="outside"):
        weight_curve(100, 100, RADIUS)


def test_propagation_weights(shipped_models, manifold_clip: np.ndarray) -> None:
    editor = PoseEditor(shipped_models)
    clip = manifold_clip
    w = weight_curve(len(clip), CENTER, RADIUS, "hat")
    hand = skeleton.JOINT_INDEX["l_hand"]
    effs = [Effector("l_hand", clip[CENTER, hand] + [0.0, 0.2, 0.1])]
    metric = "spine_flexion"
    request = {metric: float(editor.metric_values(clip[CENTER:CENTER + 1])[metric][0])
               + SPINE_FLEXION_CHANGE_DEG}
    out = propagate(editor, clip, CENTER, w, effs, request)
    np.testing.assert_array_equal(out[w == 0], clip[w == 0])  # bit-identical
    single = editor.solve(clip[CENTER], effs, request).positions[0]
    # The same solve, batched with the other frames: float noise only (1 micrometre).
    np.testing.assert_allclose(out[CENTER], single, atol=1e-6)
    moved = np.linalg.norm(out - clip, axis=-1).mean(axis=1)
    inside = w > 0
    assert np.corrcoef(moved[inside], w[inside])[0, 1] > 0.95
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(clip), atol=1e-9)


def test_propagation_bad_input(shipped_models, manifold_clip: np.ndarray) -> None:
    editor = PoseEditor(shipped_models)
    w = weight_curve(len(manifold_clip), CENTER, RADIUS)
    with pytest.raises(ValueError, match="weights"):
        propagate(editor, manifold_clip, CENTER, w[:-1])
    with pytest.raises(ValueError, match="metric_mode"):
        propagate(editor, manifold_clip, CENTER, w, metric_mode="relative")
    with pytest.raises(ValueError, match="outside"):
        propagate(editor, manifold_clip, len(manifold_clip), w)


def test_smoothing_keeps_an_even_edit_and_softens_a_pop() -> None:
    w = weight_curve(60, 30, 20)
    change = w[:, None] * np.array([0.1, -0.2, 0.05])  # the same edit, scaled by W(t)
    np.testing.assert_allclose(smooth_changes(change, w), change, atol=1e-15)
    popped = change.copy()
    popped[24] += [0.05, 0.0, 0.0]  # one frame solved unlike its neighbours
    smoothed = smooth_changes(popped, w)
    assert abs(smoothed[24, 0] - change[24, 0]) < 0.25 * 0.05
    np.testing.assert_array_equal(smoothed[w == 0], 0.0)
    # The edited frame keeps its change and its neighbours blend into it.
    np.testing.assert_allclose(smooth_changes(change, w, anchor=30), change, atol=1e-15)
    anchored = smooth_changes(popped, w, anchor=24)
    np.testing.assert_array_equal(anchored[24], popped[24])
    for near in (23, 25):
        assert abs(anchored[near, 0] - popped[near, 0] - 0.05) < 0.25 * 0.05
    np.testing.assert_array_equal(anchored[w == 0], 0.0)


def test_a_held_body_propagates_without_pops(shipped_models, manifold_clip: np.ndarray
                                             ) -> None:
    editor = PoseEditor(shipped_models)
    clip = manifold_clip
    rng = np.random.default_rng(0)
    own = np.linalg.norm(clip[2:] - 2 * clip[1:-1] + clip[:-2], axis=-1).max()
    ratios, off_path, beyond, at_edit = [], 0, 0, []
    w = weight_curve(len(clip), CENTER, RADIUS)
    hand = skeleton.JOINT_INDEX["l_hand"]
    for _ in range(POP_DRAGS):
        move = rng.normal(size=3)
        move *= rng.uniform(0.1, 0.3) / np.linalg.norm(move)
        effs = [Effector(j, clip[CENTER, skeleton.JOINT_INDEX[j]] + (move if j == "l_hand"
                                                                     else 0.0))
                for j in ("l_hand", "r_hand", "l_foot", "r_foot", "head")]
        out = propagate(editor, clip, CENTER, w, effs)
        acc = np.linalg.norm(out[2:] - 2 * out[1:-1] + out[:-2], axis=-1).max(axis=1) / own
        ratios.append(acc.max())
        # The hand's path: W(t) of the move made at CENTER (as far as it got there: a
        # target beyond the rig's reach is asked only as far as the edited frame reached),
        # turned with the body.
        single = editor.solve(clip[CENTER], effs)
        made = single.positions[0, hand] - clip[CENTER, hand]
        beyond += int(single.effector_error.max() > REACH_M)
        move_body = rotate_y(made, -facing_yaw(clip[CENTER]))
        path = clip[:, hand] + rotate_y(move_body * w[:, None], facing_yaw(clip))
        off_path += int(np.linalg.norm(out[:, hand] - path, axis=-1).max() > REACH_M)
        np.testing.assert_allclose(out[CENTER], single.positions[0], atol=1e-6)  # its solve
        if single.effector_error.max() < REACH_M:  # centred on CENTER - 1, CENTER, CENTER + 1
            at_edit.append(acc[CENTER - 2:CENTER + 1].max())
    assert np.median(ratios) < POP_MEDIAN_MAX and max(ratios) < POP_WORST_MAX, ratios
    assert off_path <= OFF_PATH_DRAGS and beyond <= BEYOND_DRAGS
    assert len(at_edit) == POP_DRAGS - beyond and max(at_edit) < EDITED_POP_MAX, at_edit


def test_a_target_beyond_reach_is_spread_as_far_as_the_edited_frame_got(
        shipped_models, manifold_clip: np.ndarray) -> None:
    """Both hands held, the left one pulled to 2.2 m from the right: no pose reaches it.
    The neighbours carry W(t) of the move the edited frame made, not of the one asked (a
    hand at W = 0.5 had moved 2.2 times the edited frame's move on a CMU clip)."""
    editor = PoseEditor(shipped_models)
    clip = manifold_clip
    w = weight_curve(len(clip), CENTER, RADIUS)
    left, right = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["r_hand"]
    away = clip[CENTER, left] - clip[CENTER, right]
    target = clip[CENTER, right] + HANDS_APART_M * away / np.linalg.norm(away)
    effs = [Effector("l_hand", target), Effector("r_hand", clip[CENTER, right])]
    out = propagate(editor, clip, CENTER, w, effs)
    single = editor.solve(clip[CENTER], effs)
    assert single.effector_error[0, left] > REACH_M  # beyond reach indeed
    yaw = facing_yaw(clip)
    change = rotate_y(out[:, left] - clip[:, left], -yaw)  # body space
    made = change[CENTER]
    share = change @ made / (made @ made)
    half = np.flatnonzero(np.abs(w - 0.5) < 0.05)
    assert np.abs(share[half] - 0.5).max() < HALF_SHARE_TOLERANCE, share[half]
    assert share.max() < 1.0 + HALF_SHARE_TOLERANCE, share.max()  # never past the edited frame


def test_interpolated_changes_follow_a_smooth_edit() -> None:
    live = np.arange(10, 90)
    change = np.sin(live / 15.0)[:, None] * np.array([0.1, -0.2, 0.05])
    solved = np.zeros(len(live), dtype=bool)
    solved[::8] = solved[-1] = solved[37] = True
    out = interpolate_changes(live, solved, change)
    np.testing.assert_array_equal(out[solved], change[solved])
    # Cubic between samples 8 frames (0.53 rad of the sine) apart: measured 1.0e-3, 0.5 %.
    assert np.abs(out - change).max() < 2e-3


# A range longer than SOLVED_FRAMES is solved on that many frames, the rest interpolated:
# on the models' clip, the hand moved 20 cm over 79 frames solved on 20 of them against all
# 79: measured 0.14 mm mean, 10.2 mm worst joint; the edited frame and the hand's path exact.
# Since settled frames are re-aimed plainly, 0.18 mm and 28.2 mm: the worst is the elbow
# where the frames solved all pop (largest acceleration 48.3 mm/frame², 56.8 before) and
# the interpolated ones no longer do (14.3, the clip's own; 50.6 before).
STRIDED_SOLVED = 20
STRIDED_MEAN_MM, STRIDED_WORST_MM = 0.5, 35.0
POP_MARGIN = 1.1  # issue 49: at most 1.1x the clip's own largest acceleration


def test_a_long_range_is_solved_on_a_subset(shipped_models, manifold_clip: np.ndarray,
                                            monkeypatch) -> None:
    import blender_addon.core.propagate as module

    editor = PoseEditor(shipped_models)
    clip = manifold_clip
    w = weight_curve(len(clip), CENTER, 40)
    hand = skeleton.JOINT_INDEX["l_hand"]
    effs = [Effector(j, clip[CENTER, skeleton.JOINT_INDEX[j]] + ([0.0, 0.15, 0.1]
                                                                 if j == "l_hand" else 0.0))
            for j in ("l_hand", "r_hand", "l_foot", "r_foot", "head")]
    whole = propagate(editor, clip, CENTER, w, effs)
    monkeypatch.setattr(module, "SOLVED_FRAMES", STRIDED_SOLVED)
    strided = propagate(editor, clip, CENTER, w, effs)
    np.testing.assert_array_equal(strided[w == 0], clip[w == 0])
    np.testing.assert_allclose(strided[CENTER], editor.solve(clip[CENTER], effs).positions[0],
                               atol=1e-6)
    diff = np.linalg.norm(strided - whole, axis=-1) * 1e3
    assert diff.mean() < STRIDED_MEAN_MM and diff.max() < STRIDED_WORST_MM, \
        (diff.mean(), diff.max())
    largest = [np.linalg.norm(c[2:] - 2 * c[1:-1] + c[:-2], axis=-1).max()
               for c in (strided, whole, clip)]
    assert largest[0] <= max(largest[1], POP_MARGIN * largest[2]), largest  # no new pop
    move_body = rotate_y(np.array([0.0, 0.15, 0.1]), -facing_yaw(clip[CENTER]))
    path = clip[:, hand] + rotate_y(move_body * w[:, None], facing_yaw(clip))
    assert np.linalg.norm(strided[:, hand] - path, axis=-1).max() < REACH_M
    np.testing.assert_allclose(skeleton.bone_lengths(strided), skeleton.bone_lengths(clip),
                               atol=1e-9)


def test_settled_neighbours_keep_the_body_they_were_smoothed_to(shipped_models,
                                                                 bandai_dir) -> None:
    """The edited frame is its own solve and its neighbours are smoothed into it, then
    settled on their goals by rig IK's least change. That least change held the stance
    (pelvis and legs) at the clip's own pose: it pulled the neighbours' pelvis a centimetre
    back from where the smoothing had put it, next to the edited frame's, and the hips
    jumped there. It holds the smoothed pose now."""
    _, frame, out = _suite_spread(shipped_models, bandai_dir, SETTLED_CLIP,
                                  "hands, feet, head")
    hips = out[:, skeleton.joint_indices(["l_thigh", "r_thigh"])]
    acc = np.linalg.norm(hips[2:] - 2 * hips[1:-1] + hips[:-2], axis=-1).max(axis=1) * 1000
    near = acc[frame - 3:frame + 2].max()  # centred on frame - 2 ... frame + 2
    print(f"\nFIGURES settled neighbours: hips {near:.1f} mm/frame² near the edited frame")
    assert near < SETTLED_HIPS_ACC_MAX_MM


def _suite_spread(models, bandai_dir: Path, index: int, case: str
                  ) -> tuple[np.ndarray, int, np.ndarray]:
    """The propagation benchmark's Bandai Namco BVH clip ``index`` (T, 21, 3), its edited
    frame and the clip spread with its seeded move (seed 0, the suite's), the ends of
    ``case`` held."""
    from training.evaluation import benchmark
    from training.evaluation import propagation_quality as quality

    clips, _ = benchmark.load_clips(None, [str(bandai_dir)], "auto", "auto",
                                    int(BVH_SUITE_CLIPS), "auto")
    chosen = quality.usable(clips, int(PROPAGATION_CLIPS))
    clip = chosen[index]
    move = quality.hand_moves(len(chosen), seed=0)[index]
    frame = len(clip) // 2
    effs = quality.drag(clip, frame, quality.CASES[case], move)
    return clip, frame, propagate(PoseEditor(models), clip, frame,
                                  weight_curve(len(clip), frame, quality.RADIUS), effs)


def _suite_pop(models, bandai_dir: Path, index: int, case: str) -> float:
    """That spread's largest acceleration against the clip's own (:func:`_suite_spread`)."""
    clip, _, out = _suite_spread(models, bandai_dir, index, case)
    acc = np.linalg.norm(out[2:] - 2 * out[1:-1] + out[:-2], axis=-1).max()
    return float(acc / np.linalg.norm(clip[2:] - 2 * clip[1:-1] + clip[:-2], axis=-1).max())


def test_a_held_limb_bends_in_its_own_plane_turned_with_the_edit(shipped_models,
                                                                bandai_dir) -> None:
    """A limb the animator did not drag keeps its clip's bend plane, turned W(t) of the
    way the edited frame turned it: the frames' own solves chose a nearly straight limb's
    plane afresh each frame, and the smoothing averaged those into a spinning elbow."""
    ratio = _suite_pop(shipped_models, bandai_dir, HELD_PLANE_CLIP, "hands, feet, head")
    print(f"\nFIGURES held plane: largest acceleration {ratio:.2f}x the clip's own")
    assert ratio < HELD_PLANE_POP_MAX


def test_a_corner_the_settle_leaves_is_smoothed_again(shipped_models, bandai_dir) -> None:
    """The settle re-aims each limb from its smoothed pose, which can put a corner back
    where a limb meets full extension; a second round of smoothing and settling rounds
    it off."""
    ratio = _suite_pop(shipped_models, bandai_dir, ROUNDS_CLIP, "both hands")
    print(f"\nFIGURES settled twice: largest acceleration {ratio:.2f}x the clip's own")
    assert ratio < ROUNDS_POP_MAX


def test_a_goal_beyond_reach_is_not_leaned_for_frame_by_frame(shipped_models,
                                                             bandai_dir) -> None:
    """Frames where the dragged hand stays beyond the rig's reach, the other ends held,
    are settled in the second round without that goal: each had leaned to the edge of
    what its held legs allow, that edge moved as a leg straightened, and the pelvis and
    knee jumped."""
    from blender_addon.core.bvh import iter_bvh_texts
    from training.data.dataset import process_clip
    from training.evaluation import propagation_quality as quality

    archive = bandai_dir / "bandai-namco-dataset-1.tar.xz"
    source, text = next((s, t) for s, t in iter_bvh_texts([archive])
                        if s.endswith(BEYOND_SOURCE))
    clip = process_clip(source, text, "auto", "auto").poses[:quality.WINDOW].astype(float)
    move = quality.hand_moves(BEYOND_MOVES, seed=0)[BEYOND_CLIP]
    frame = len(clip) // 2
    w = weight_curve(len(clip), frame, quality.RADIUS)
    effs = quality.drag(clip, frame, quality.CASES["hands, feet, head"], move)
    out = propagate(PoseEditor(shipped_models), clip, frame, w, effs)
    ratio = quality.accelerations(out).max() / quality.accelerations(clip).max()
    held = skeleton.joint_indices(list(quality.CASES["hands, feet, head"]))
    miss = np.linalg.norm(out[:, held] - quality.goal_path(clip, frame, w, effs, out), axis=-1)
    print(f"\nFIGURES beyond reach: largest acceleration {ratio:.3f}x the clip's own, "
          f"hand {miss[:, 0].max() * 1e3:.1f} mm short at most")
    assert ratio < BEYOND_POP_MAX
    assert miss[:, 0].max() > REACH_M  # beyond reach indeed
    assert miss[:, 0].max() < BEYOND_MISS_MAX_M and miss[:, 1:].max() < REACH_M


def test_beyond_held_names_a_dragged_goal_the_held_ones_keep_out_of_reach(
        manifold_clip: np.ndarray) -> None:
    """A hand dragged further from the held head than the body stretches is named; the
    same hand moved off its held elbow (a pose turned by hand holds every joint) is not,
    nor is a held goal."""
    pose = manifold_clip[CENTER:CENTER + 1]
    hand, head = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["head"]
    dragged = np.zeros(skeleton.NUM_JOINTS, dtype=bool)
    dragged[hand] = True
    ends = np.zeros((1, skeleton.NUM_JOINTS))
    ends[0, skeleton.joint_indices(["l_hand", "r_hand", "l_foot", "r_foot", "head"])] = 1.0
    targets = pose.copy()
    targets[0, hand] += HANDS_APART_M * (pose[0, hand] - pose[0, head]) \
        / np.linalg.norm(pose[0, hand] - pose[0, head])
    named = beyond_held(pose, ends, targets, ends, dragged)
    assert named[0, hand] and named.sum() == 1
    assert not beyond_held(pose, ends, pose, ends, dragged).any()  # nothing moved
    every = np.ones((1, skeleton.NUM_JOINTS))
    off_elbow = pose.copy()  # 5 cm past the forearm's length from the held elbow
    elbow = skeleton.JOINT_INDEX["l_forearm"]
    off_elbow[0, hand] += 0.05 * (pose[0, hand] - pose[0, elbow]) \
        / np.linalg.norm(pose[0, hand] - pose[0, elbow])
    assert not beyond_held(pose, every, off_elbow, every, dragged).any()


def test_bend_planes_follow_the_clip_turned_by_the_edit(manifold_clip: np.ndarray) -> None:
    """Smoothed frames whose elbow planes spin come back in the clip's plane turned W(t)
    of the edited frame's turn, averaged with their own by bend; a dragged arm's stays."""
    from blender_addon.core.propagate import bend_plane_turns, turn_bend_planes

    clip = manifold_clip[:PLANE_SPIN_FRAMES]
    shoulder, elbow, hand = skeleton.joint_indices(["r_upperarm", "r_forearm", "r_hand"])
    axis = clip[:, hand] - clip[:, shoulder]
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)

    def side(p: np.ndarray) -> np.ndarray:
        s = p[:, elbow] - p[:, shoulder]
        return s - axis * np.sum(s * axis, -1, keepdims=True)

    def turned(p: np.ndarray, angle: np.ndarray) -> np.ndarray:
        s = side(p)
        out = p.copy()
        out[:, elbow] += (s * np.cos(angle)[:, None] + np.cross(axis, s)
                          * np.sin(angle)[:, None]) - s
        return out

    spin = np.deg2rad(np.where(np.arange(len(clip)) % 2, 60.0, -60.0))  # noisy planes
    ahead = turned(clip, spin)
    edited = len(clip) // 2
    solved = turned(clip, np.full(len(clip), np.deg2rad(40.0)))[edited]  # turned 40 degrees
    w = np.linspace(0.0, 1.0, len(clip))
    dragged = np.zeros(skeleton.NUM_JOINTS, dtype=bool)
    turns = bend_plane_turns(clip[edited], solved)
    got = turn_bend_planes(ahead, clip, w, turns, dragged)
    own, new = side(clip), side(got)
    angle = np.degrees(np.arctan2(np.sum(np.cross(own, new) * axis, -1), np.sum(own * new, -1)))
    # the clip's plane turned 40 W(t) and the spinning one (+-60), bent alike: half way
    assert np.abs(angle - 0.5 * (40.0 * w + np.degrees(spin))).max() < PLANE_TOLERANCE_DEG
    np.testing.assert_allclose(np.linalg.norm(new, axis=-1), np.linalg.norm(side(ahead), axis=-1))
    dragged[skeleton.JOINT_INDEX["r_hand"]] = True
    np.testing.assert_allclose(turn_bend_planes(ahead, clip, w, turns, dragged)[:, elbow],
                               ahead[:, elbow])


def test_a_held_target_read_back_in_float32_still_counts_as_held(shipped_models,
                                                                 manifold_clip: np.ndarray
                                                                 ) -> None:
    """Blender's empties hold a joint to float32 rounding: such a target is held, not
    dragged, so its limb's bend plane is turned with the clip's as an exact one's is."""
    editor = PoseEditor(shipped_models)
    clip = manifold_clip
    w = weight_curve(len(clip), CENTER, RADIUS)
    move = np.array([0.15, 0.1, 0.1])
    ends = ("l_hand", "r_hand", "l_foot", "r_foot", "head")

    def spread(rounding) -> np.ndarray:
        effs = [Effector(j, rounding(clip[CENTER, skeleton.JOINT_INDEX[j]])
                         + (move if j == "l_hand" else 0.0)) for j in ends]
        return propagate(editor, clip, CENTER, w, effs)

    exact = spread(lambda p: p)
    read_back = spread(lambda p: p.astype(np.float32).astype(np.float64))
    print(f"\nFIGURES float32 held: {np.abs(read_back - exact).max():.2e} m")
    np.testing.assert_allclose(read_back, exact, atol=FLOAT32_HELD_TOL_M)


def test_a_limb_straight_at_the_edited_frame_has_no_plane_to_turn(
        manifold_clip: np.ndarray) -> None:
    """A limb straight at the edited frame has no plane there to read a turn from (its
    side is rounding): the frames around keep their own planes. Read from the rounding, a
    null spread on a Rigify rig turned an elbow 8 mm."""
    from blender_addon.core.propagate import bend_plane_turns, turn_bend_planes

    clip = manifold_clip[:PLANE_SPIN_FRAMES].copy()
    shoulder, elbow, hand = skeleton.joint_indices(["r_upperarm", "r_forearm", "r_hand"])
    edited = len(clip) // 2
    straight = clip[edited].copy()
    along = straight[hand] - straight[shoulder]
    along /= np.linalg.norm(along)
    upper = np.linalg.norm(straight[elbow] - straight[shoulder])
    straight[elbow] = straight[shoulder] + upper * along
    clip[edited] = straight
    solved = straight.copy()
    solved[elbow] += ROUNDING_M * np.cross(along, [0.0, 1.0, 0.0])  # its side: rounding
    turns = bend_plane_turns(straight, solved)
    got = turn_bend_planes(clip, clip, np.linspace(0.0, 1.0, len(clip)), turns,
                           np.zeros(skeleton.NUM_JOINTS, dtype=bool))
    np.testing.assert_allclose(got, clip, atol=1e-12)
