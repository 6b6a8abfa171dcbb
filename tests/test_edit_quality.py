"""What a user sees of an edit, on the shipped models: a null edit changes nothing, planted
feet stay, body follow trades motion of the rest of the body, sliders reach their request
in the rig's units, propagation gives each frame W(t) of the edit."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import pipeline, skeleton
from blender_addon.core.normalize import set_bone_lengths, to_model_space
from blender_addon.core.pipeline import (
    PLANTED_TOE_HEIGHT,
    Effector,
    PoseEditor,
    SolveOptions,
)
from blender_addon.core.propagate import curve_warning, propagate, weight_curve
from blender_addon.core.skeleton import BONE_LENGTHS
from tests.synth import rig_reachable_hand_drags
from tests.test_normalize import tpose
from tests.test_rigid_branches import BRANCHES, branch_shape
from training.evaluation.plausibility import ANGLE_NAMES, joint_angles

NULL_EDIT_M = 1e-3  # the bound: every joint within 1 mm
REACH_M = 1e-3
PLANTED_DRIFT_M = 3e-3
HANDS = ("l_hand", "r_hand")
ALL_ENDS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
FEET = skeleton.joint_indices(["l_foot", "l_toe", "r_foot", "r_toe"])
SLIDER_SHARE = (0.9, 1.1)  # achieved / requested change (median over poses)
OTHERS_HELD = {"deg": 3.0, "m": 0.02}  # the bound on the metrics not asked for
# Lowering the hands 20 cm with the feet planted needs the knees, elbows or trunk to bend
# (median over these 10 poses, default options: right knee 4.8 degrees, right elbow 4.2,
# spine 5.2, clavicles 3.3). Held only by the metrics, the body used to lean its straight
# legs over the planted feet instead (the pelvis 16 cm off over the feet, up to 28; every
# metric within 2 degrees); the balance hold (core/refine.balance) halves that lean.
FORCED = {("hands_height", -0.2): {"knee_bend": 5.5, "elbow_bend": 5.0, "spine_flexion": 6.0,
                                  "shoulders_openness": 4.0}}


def _rig(clip: np.ndarray, arm_scale: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The clip on a rig with longer arms and another unit scale, and its lengths."""
    lengths = skeleton.bone_lengths(clip[0]) * scale
    lengths[skeleton.joint_indices(["l_forearm", "l_hand", "r_forearm", "r_hand"])] *= arm_scale
    return set_bone_lengths(clip * scale, lengths), lengths


def _on_floor(clip: np.ndarray) -> np.ndarray:
    """The clip lowered so its lowest toe touches the floor in every frame."""
    toes = skeleton.joint_indices(["l_toe", "r_toe"])
    low = clip[:, toes, 1].min(axis=1) - 0.5 * PLANTED_TOE_HEIGHT
    return clip - low[:, None, None] * np.array([0.0, 1.0, 0.0])


@pytest.mark.parametrize("arm_scale, scale", [(1.0, 1.0), (1.2, 0.01), (0.9, 100.0)])
@pytest.mark.parametrize("joints", [HANDS, ALL_ENDS])
def test_null_edit_changes_nothing(shipped_models, manifold_clip, arm_scale, scale,
                                   joints) -> None:
    clip, lengths = _rig(manifold_clip[::6], arm_scale, scale)
    editor = PoseEditor(shipped_models, lengths)
    for pose in clip:
        effs = [Effector(j, pose[skeleton.JOINT_INDEX[j]]) for j in joints]
        out = editor.solve(pose, effs).positions[0]
        assert np.abs(out - pose).max() < NULL_EDIT_M * scale
        values = {k: float(v[0]) for k, v in editor.metric_values(pose[None]).items()}
        out = editor.solve(pose, effs, values).positions[0]
        assert np.abs(out - pose).max() < NULL_EDIT_M * scale


def test_null_propagation_changes_nothing(shipped_models, manifold_clip) -> None:
    editor = PoseEditor(shipped_models)
    center = 45
    w = weight_curve(len(manifold_clip), center, 30.0, "smooth")
    effs = [Effector(j, manifold_clip[center, skeleton.JOINT_INDEX[j]]) for j in HANDS]
    out = propagate(editor, manifold_clip, center, w, effs)
    assert np.abs(out - manifold_clip).max() < NULL_EDIT_M


def _hand_drags(clip: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One hand moved 10-25 cm in a random direction from each pose, as a user drags it."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(len(clip), 3))
    d *= rng.uniform(0.10, 0.25, (len(clip), 1)) / np.linalg.norm(d, axis=1, keepdims=True)
    mask = np.zeros(clip.shape[:2])
    mask[:, skeleton.JOINT_INDEX["l_hand"]] = 1.0
    targets = clip.copy()
    targets[:, skeleton.JOINT_INDEX["l_hand"]] += d
    return mask, targets


def test_planted_feet_stay_and_the_hand_arrives(shipped_models, manifold_clip) -> None:
    clip = _on_floor(manifold_clip[::3])
    editor = PoseEditor(shipped_models)
    mask, targets = _hand_drags(clip)
    held = editor.solve_arrays(clip, mask, targets).positions
    free = editor.solve_arrays(clip, mask, targets,
                               options=SolveOptions(keep_planted_feet=False)).positions
    drift = np.linalg.norm(held[:, FEET] - clip[:, FEET], axis=-1)
    assert np.percentile(drift, 90) < PLANTED_DRIFT_M
    assert np.linalg.norm(free[:, FEET] - clip[:, FEET], axis=-1).mean() > drift.mean()
    hand = skeleton.JOINT_INDEX["l_hand"]
    reach = np.linalg.norm(held[:, hand] - targets[:, hand], axis=-1)
    assert np.median(reach) < REACH_M


@pytest.mark.parametrize("beyond", [(0.19, 0.0, 0.0), (0.15, 0.0, 0.15), (0.12, 0.1, -0.1)])
def test_from_a_t_pose_a_target_out_of_reach_is_reached_by_leaning(shipped_models,
                                                                  beyond) -> None:
    """A user's first drag: from the rig's own T-pose (longer arms), the hand's target
    beyond the stretched arm. The body leans (clavicle, trunk) so the hand gets there with
    the elbow still bent as real ones are, the head carried by the chest, and the planted
    feet stay."""
    lengths = BONE_LENGTHS.copy()
    lengths[skeleton.joint_indices(["l_forearm", "l_hand"])] *= 1.2
    pose = tpose(lengths)
    hand, shoulder = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["l_upperarm"]
    target = pose[hand] + np.asarray(beyond)
    arm = np.linalg.norm(pose[hand] - pose[shoulder])
    assert np.linalg.norm(target - pose[shoulder]) > arm  # the arm alone cannot get there
    out = PoseEditor(shipped_models, lengths).solve(pose, [Effector("l_hand", target)]).positions
    assert np.linalg.norm(out[0, hand] - target) < REACH_M
    assert np.linalg.norm(out[0, FEET] - pose[FEET], axis=-1).max() < PLANTED_DRIFT_M
    # Measured 18.0 degrees at the elbow and 0.7-3.2 at the neck (straight in the T-pose);
    # 17.8-18.9 and 0.7-3.3 before the least change held the stance (the last re-aim
    # straightened an arm FABRIK left within its 0.1 mm tolerance of the bend's reach by up
    # to 0.2 degrees); before the fallback kept the bend: 0.2-6.0 and 3.6-13.4; with a least
    # bend of 12 degrees, 12.0-13.4 at the elbow.
    bends = dict(zip(ANGLE_NAMES, joint_angles(out)[0], strict=True))
    assert bends["l_forearm bend"] > pipeline.ELBOW_MIN_BEND_DEG - ELBOW_SLACK_DEG
    assert bends["neck bend"] < NECK_BEND_DEG


ELBOW_SLACK_DEG = 0.3
NECK_BEND_DEG = 5.0
FULL_REACH_SLACK_DEG = 0.05  # measured 5.005 degrees (0.005 before the cap)


def test_a_hand_dragged_past_its_reach_keeps_a_bend(shipped_models, manifold_clip) -> None:
    """Every other end held, the left hand dragged 60 cm straight out from its shoulder,
    past anything the body can reach: the arm stops FULL_REACH_BEND_DEG short of straight
    (it locked straight, and a spread edit's elbow path then had a corner at the edited
    frame: two CMU test clips over 1.1x their own largest acceleration), the hand as far
    out as that bend lets it go."""
    editor = PoseEditor(shipped_models)
    hand, shoulder = skeleton.JOINT_INDEX["l_hand"], skeleton.JOINT_INDEX["l_upperarm"]
    elbow_bend = ANGLE_NAMES.index("l_forearm bend")
    for pose in manifold_clip[::15]:
        out_dir = pose[hand] - pose[shoulder]
        target = pose[hand] + 0.6 * out_dir / np.linalg.norm(out_dir)
        effs = [Effector(j, target if j == "l_hand" else pose[skeleton.JOINT_INDEX[j]])
                for j in ALL_ENDS]
        bend = joint_angles(editor.solve(pose, effs).positions)[0, elbow_bend]
        assert abs(bend - pipeline.FULL_REACH_BEND_DEG) < FULL_REACH_SLACK_DEG


def test_body_follow_moves_the_rest_of_the_body(shipped_models, manifold_clip) -> None:
    clip = manifold_clip[::3]
    editor = PoseEditor(shipped_models)
    mask, targets = _hand_drags(clip, seed=1)
    others = np.flatnonzero(mask[0] == 0)
    moved = {}
    for follow in (0.0, 1.0):
        out = editor.solve_arrays(clip, mask, targets,
                                  options=SolveOptions(body_follow=follow)).positions
        moved[follow] = np.linalg.norm(out[:, others] - clip[:, others], axis=-1).mean()
        hand = skeleton.JOINT_INDEX["l_hand"]
        assert np.median(np.linalg.norm(out[:, hand] - targets[:, hand], axis=-1)) < REACH_M
    assert moved[0.0] < moved[1.0]


def _lying(clip: np.ndarray) -> np.ndarray:
    """The clip turned to lie on its back, its lowest joint on the floor."""
    turn = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])  # -90 deg about X
    out = clip @ turn.T
    return out - out[..., 1].min(axis=-1)[..., None, None] * np.array([0.0, 1.0, 0.0])


def test_a_body_lying_down_keeps_the_rest_of_the_body(shipped_models, manifold_clip,
                                                      monkeypatch) -> None:
    """A body lying on its back, which the mocap hardly shows: the learned idea of how the
    body joins a hand drag is not trusted there (the drag takes the least change, whatever
    body follow says; issue 47), while a standing body still follows."""
    standing = manifold_clip[::3]
    lying = _lying(standing)
    editor = PoseEditor(shipped_models)
    assert (editor._start(standing).familiarity == 1.0).all()
    assert (editor._start(lying).familiarity == 0.0).all()
    mask, targets = _hand_drags(lying, seed=3)
    others = np.flatnonzero(mask[0] == 0)

    def moved(options: SolveOptions) -> float:
        out = PoseEditor(shipped_models).solve_arrays(lying, mask, targets, options=options)
        return float(np.linalg.norm(out.positions[:, others] - lying[:, others], axis=-1).mean())

    default, still = moved(SolveOptions()), moved(SolveOptions(body_follow=0.0))
    # (each where the solve reads it: the start pose's and the contacts' stages)
    monkeypatch.setattr(pipeline.start, "FAMILIAR_TILT_DEG", 179.0)  # trusted, as before
    monkeypatch.setattr(pipeline.start, "UNFAMILIAR_TILT_DEG", 180.0)
    monkeypatch.setattr(pipeline.contacts, "LEAST_CHANGE_TILT_DEG", 180.0)  # nor, by its tilt,
    monkeypatch.setattr(pipeline.contacts, "LOW_PELVIS_HEIGHT", -np.inf)  # its low pelvis
    monkeypatch.setattr(pipeline.contacts, "CONTACT_HEIGHT", -np.inf)  # nor what touches
    # the floor
    trusted = moved(SolveOptions())
    # measured: 1.61 cm, as with body follow 0; trusted as a standing body's: 1.96
    assert default == pytest.approx(still, rel=1e-9) and default < 0.9 * trusted


def test_a_full_body_request_gets_the_whole_learned_answer(shipped_models,
                                                           manifold_clip) -> None:
    """Body follow is about drags of a limb: hands, feet and head all moved several
    centimetres (refine.full_body_share 1), or a dragged pelvis, give the same pose
    whatever it says, and a one-hand drag does not."""
    x, x2 = manifold_clip[:-15:4], manifold_clip[15::4]
    ends = skeleton.joint_indices(["l_hand", "r_hand", "l_foot", "r_foot", "head"])
    full = np.linalg.norm(x2[:, ends] - x[:, ends], axis=-1)
    x, x2 = x[np.sort(full, axis=1)[:, 1] > 0.05], x2[np.sort(full, axis=1)[:, 1] > 0.05]
    assert len(x) >= 5
    mask = np.zeros(x.shape[:2])
    mask[:, ends] = 1.0
    outs = [PoseEditor(shipped_models).solve_arrays(
        x, mask, x2, options=SolveOptions(body_follow=f)).positions for f in (0.0, 1.0)]
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-9)
    pelvis = skeleton.JOINT_INDEX["pelvis"]
    mask = np.zeros(x.shape[:2])
    mask[:, pelvis] = 1.0
    targets = x.copy()
    targets[:, pelvis] += [0.05, -0.12, 0.04]
    outs = [PoseEditor(shipped_models).solve_arrays(
        x, mask, targets, options=SolveOptions(body_follow=f)).positions for f in (0.0, 1.0)]
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-9)
    mask, targets = _hand_drags(x, seed=2)
    outs = [PoseEditor(shipped_models).solve_arrays(
        x, mask, targets, options=SolveOptions(body_follow=f)).positions for f in (0.0, 1.0)]
    assert np.abs(outs[0] - outs[1]).max() > 1e-3


@pytest.mark.parametrize("metric, delta", [
    ("l_knee_bend", 20.0), ("spine_flexion", 10.0), ("feet_distance", 0.10), ("head_tilt", 10.0),
    # these moved another metric by 4-20 degrees while the sliders held it loosely
    ("hands_height", -0.2), ("spine_flexion", 40.0)])
@pytest.mark.parametrize("scale", [1.0, 0.01])
def test_sliders_reach_the_request_in_rig_units(shipped_models, manifold_clip, metric, delta,
                                                scale) -> None:
    """The request is met and the metrics nobody asked about stay (the planted feet held
    as firmly: bending the knees behind the sliders' back would move them)."""
    clip, lengths = _rig(manifold_clip[::9], 1.0, scale)
    editor = PoseEditor(shipped_models, lengths)
    unit = editor.models.metrics[metric].metric.unit
    step = delta * scale if unit == "m" else delta
    now = editor.metric_values(clip)
    lo, hi = editor.metric_ranges(clip)[metric]
    inside = (now[metric] + step > lo) & (now[metric] + step < hi)
    assert inside.sum() >= 3
    out = editor.solve_arrays(clip[inside], np.zeros((inside.sum(), 21)), clip[inside],
                              metrics={metric: now[metric][inside] + step}).positions
    got = editor.metric_values(out)
    share = (got[metric] - now[metric][inside]) / step
    assert SLIDER_SHARE[0] < np.median(share) < SLIDER_SHARE[1]
    for name, module in editor.models.metrics.items():  # the others held, in rig units
        if name != metric:
            bound = OTHERS_HELD[module.metric.unit] * (scale if module.metric.unit == "m" else 1)
            for joint, forced in FORCED.get((metric, delta), {}).items():
                bound = forced if name.endswith(joint) else bound
            assert np.median(np.abs(got[name] - now[name][inside])) < bound, name


# Opening these poses' shoulders 20 degrees: the other metrics change by 0.007 degrees /
# 0.044 cm (median), the joints off the arms by 0.4 mm (median of each pose's largest).
# Answered by the networks first (a latent that never saw a shrug): 0.55 degrees / 0.81 cm
# and 17 mm, the hands lowered and the trunk bent; from the pose as it stands but with the
# body held as loosely as in other slider edits, 1.5 mm (the chest turned up to 0.6 degrees).
SHRUG_OTHERS = {"deg": 0.1, "m": 0.002}
SHRUG_BODY_M = 0.001


@pytest.mark.parametrize("delta", [-5.0, 20.0])
def test_the_shoulders_slider_turns_the_clavicles_alone(shipped_models, manifold_clip,
                                                        delta) -> None:
    """A shoulders request is the clavicles' turn: the arms are carried, the rest of the
    body and the other metrics stay."""
    clip = manifold_clip[::9]
    editor = PoseEditor(shipped_models)
    now = editor.metric_values(clip)
    lo, hi = editor.metric_ranges(clip)["shoulders_openness"]
    inside = (now["shoulders_openness"] + delta > lo) & (now["shoulders_openness"] + delta < hi)
    assert inside.sum() >= 3
    x = clip[inside]
    out = editor.solve_arrays(x, np.zeros(x.shape[:2]), x,
                              metrics={"shoulders_openness": now["shoulders_openness"][inside]
                                       + delta}).positions
    got = editor.metric_values(out)
    share = (got["shoulders_openness"] - now["shoulders_openness"][inside]) / delta
    assert SLIDER_SHARE[0] < np.median(share) < SLIDER_SHARE[1]
    for name, module in editor.models.metrics.items():
        if name != "shoulders_openness":
            change = np.median(np.abs(got[name] - now[name][inside]))
            assert change < SHRUG_OTHERS[module.metric.unit], (name, change)
    arms = skeleton.joint_indices([f"{s}_{j}" for s in "lr" for j in ("upperarm", "forearm",
                                                                        "hand")])
    body = np.setdiff1d(np.arange(skeleton.NUM_JOINTS), arms)
    moved = np.linalg.norm(out[:, body] - x[:, body], axis=-1).max(axis=1)
    assert np.median(moved) < SHRUG_BODY_M, moved


HEAD_DRAGS_M = (0.08, 0.12, 0.16)  # along the floor, in 8 directions
HEAD_DIRECTIONS = 8


def test_a_head_dragged_along_the_floor_leans_the_body_to_it(shipped_models,
                                                             synthetic_clip) -> None:
    """A head dragged 8-16 cm along the floor in any direction, from poses of another
    studio's proportions: the body leans over its planted feet until the head is there
    (the settling shift converges: with four projection passes 3 % of these drags stopped
    short, a foot left millimetres out of its leg's reach and the lean dropped), and the
    planted feet stay."""
    x = synthetic_clip[::3]
    editor = PoseEditor(shipped_models)
    head = skeleton.JOINT_INDEX["head"]
    mask = np.zeros(x.shape[:2])
    mask[:, head] = 1.0
    feet = pipeline.planted_feet(to_model_space(x)[0])
    for angle in np.linspace(0.0, 2.0 * np.pi, HEAD_DIRECTIONS, endpoint=False):
        for d in HEAD_DRAGS_M:
            targets = x.copy()
            targets[:, head] += d * np.array([np.cos(angle), 0.0, np.sin(angle)])
            result = editor.solve_arrays(x, mask, targets)
            assert result.effector_error[:, head].max() < REACH_M, (angle, d)
            drift = np.linalg.norm(result.positions - x, axis=-1)[feet]
            assert drift.max(initial=0.0) < PLANTED_DRIFT_M, (angle, d)


LEAN_M = 0.11  # the pelvis's move over the feet, lowering the hands 20 cm (8.1 cm measured)


def test_lowering_the_hands_keeps_the_body_over_its_feet(shipped_models, manifold_clip,
                                                         monkeypatch) -> None:
    """A slider edit the held metrics resist is not met by leaning straight legs over the
    planted feet: the balance hold halves how far the pelvis moves over them."""
    from blender_addon.core import refine

    clip, lengths = _rig(manifold_clip[::9], 1.0, 1.0)
    editor = PoseEditor(shipped_models, lengths)
    want = {"hands_height": editor.metric_values(clip)["hands_height"] - 0.2}
    ankles = skeleton.joint_indices(["l_foot", "r_foot"])

    def lean() -> float:
        out = editor.solve_arrays(clip, np.zeros(clip.shape[:2]), clip, metrics=want).positions
        off = [(p[:, 0] - p[:, ankles].mean(axis=1))[:, [0, 2]] for p in (clip, out)]
        return float(np.median(np.linalg.norm(off[1] - off[0], axis=-1)))

    held = lean()
    monkeypatch.setattr(refine, "BALANCE_WEIGHT", 0.0)
    assert held < LEAN_M
    assert held < 0.7 * lean()


def test_metric_values_are_in_the_rig_units(shipped_models, manifold_clip) -> None:
    pose = manifold_clip[10:11]
    values = PoseEditor(shipped_models).metric_values(pose)
    small = PoseEditor(shipped_models).metric_values(pose * 0.01)
    for name, module in shipped_models.metrics.items():
        factor = 0.01 if module.metric.unit == "m" else 1.0
        np.testing.assert_allclose(small[name], values[name] * factor, rtol=1e-6, atol=1e-9)


def test_out_of_range_requests_are_clamped_and_said(shipped_models, manifold_clip) -> None:
    editor = PoseEditor(shipped_models)
    pose = manifold_clip[20]
    hi = editor.metric_ranges(pose[None])["l_elbow_bend"][1]
    result = editor.solve(pose, metrics={"l_elbow_bend": hi + 90.0})
    assert any("l_elbow_bend" in n and "clamped" in n for n in result.notes)
    assert editor.metric_values(result.positions)["l_elbow_bend"][0] < hi + 5.0


def test_propagation_follows_the_weight_curve(shipped_models, manifold_clip) -> None:
    editor = PoseEditor(shipped_models)
    clip, center = manifold_clip, 45
    w = weight_curve(len(clip), center, 20.0, "hat")
    hand = skeleton.JOINT_INDEX["l_hand"]
    move = np.array([0.0, 0.15, 0.1])
    effs = [Effector("l_hand", clip[center, hand] + move)]
    out = propagate(editor, clip, center, w, effs)
    single = editor.solve(clip[center], effs).positions[0]
    assert np.abs(out[center] - single).max() < NULL_EDIT_M
    np.testing.assert_array_equal(out[w == 0], clip[w == 0])
    # The hand's share of its move (turned with the body) at every edited frame.
    share = np.linalg.norm(out[:, hand] - clip[:, hand], axis=-1) / np.linalg.norm(move)
    live = w > 0
    np.testing.assert_allclose(share[live], w[live], atol=0.05)


def test_constant_falloff_warns() -> None:
    assert "pops" in curve_warning("constant")
    assert curve_warning("smooth") is None


def test_default_options_are_the_documented_ones() -> None:
    options = SolveOptions()
    assert options.refine_steps == 3 and options.keep_planted_feet
    assert 0.0 <= options.body_follow <= 1.0
    with pytest.raises(ValueError, match="body_follow"):
        PoseEditor(None).solve(np.zeros((21, 3)), options=SolveOptions(body_follow=1.5))


RIGID_M = 1e-9  # a branch's shape: unchanged to rounding
HELD_FEET_M = 1e-4  # planted feet, from a rest pose: measured up to 0.033 mm


@pytest.mark.parametrize("joints", [HANDS, ALL_ENDS])
@pytest.mark.parametrize("move", [(-0.15, 0.25, 0.0), (-0.25, -0.1, 0.2), (-0.1, 0.0, 0.3)])
def test_a_drag_from_a_rest_pose_is_one_the_rig_can_take(shipped_models, joints, move) -> None:
    """From a rest pose with straight legs, a large hand drag: the pelvis and the chest keep
    their shape (each is one rigid bone on a rig, which can show nothing else), the planted
    feet (or pinned ankles, and their toes) stay although the legs have no slack, the hand
    is reached and the pinned head stays."""
    pose = tpose()
    hand = skeleton.JOINT_INDEX["l_hand"]
    effectors = [Effector(j, pose[skeleton.JOINT_INDEX[j]] + (move if j == "l_hand" else 0.0))
                 for j in joints]
    out = PoseEditor(shipped_models, skeleton.bone_lengths(pose)).solve(pose, effectors)
    out = out.positions[0]
    assert np.linalg.norm(out[hand] - effectors[0].target) < REACH_M
    for idx in BRANCHES:
        np.testing.assert_allclose(branch_shape(out, idx), branch_shape(pose, idx), atol=RIGID_M)
    assert np.linalg.norm(out[FEET] - pose[FEET], axis=-1).max() < HELD_FEET_M
    pins = skeleton.joint_indices([j for j in joints if j != "l_hand"])
    assert np.linalg.norm(out[pins] - pose[pins], axis=-1).max() < REACH_M


def test_a_hand_a_rig_can_reach_over_pins_is_reached(shipped_models, synthetic_clip) -> None:
    """The left hand dragged where some rig pose puts it with both feet (and, in half the
    drags, the head and the other hand) pinned, the trunk bending to get there: default
    options reach every one, the pins held. Rig-shaped FABRIK's iterations, the engine's
    last resort before, had left 5 of these 1,800 drags 2.5-58 mm short (measured)."""
    x, mask, t = rig_reachable_hand_drags(synthetic_clip)
    out = PoseEditor(shipped_models).solve_arrays(x, mask, t).positions
    err = np.where(mask > 0, np.linalg.norm(out - t, axis=-1), 0.0).max(axis=1)
    assert err.max() < REACH_M, np.sort(err)[-5:]


def test_without_refinement_planted_feet_and_pins_are_held(shipped_models, manifold_clip
                                                            ) -> None:
    """Live drags with refinement off: the dragged hand goes where the networks put it, and
    the planted feet (or a pinned head) are re-aimed to where they are held."""
    clip = _on_floor(manifold_clip[::3])
    editor = PoseEditor(shipped_models)
    mask, targets = _hand_drags(clip)
    mask[:, skeleton.JOINT_INDEX["head"]] = 1.0  # pinned where it is
    out = editor.solve_arrays(clip, mask, targets,
                              options=SolveOptions(refine_steps=0)).positions
    held = [*FEET, skeleton.JOINT_INDEX["head"]]
    drift = np.linalg.norm(out[:, held] - clip[:, held], axis=-1)
    assert np.percentile(drift, 90) < HELD_FEET_M


def test_a_rig_value_outside_the_data_range_widens_it(shipped_models) -> None:
    """A T-pose's clavicles lie in line (0 degrees), below anything CMU shows: the slider's
    range starts at the rig's own value, a request from there is not clamped (no jump to
    the data's range) and is met, and asking for the value it has changes nothing."""
    from tests.test_metrics import pose_from

    pose = pose_from()
    editor = PoseEditor(shipped_models)
    data_lo, data_hi = editor.metric_ranges(pose[None], widen=False)["shoulders_openness"]
    lo, hi = editor.metric_ranges(pose[None])["shoulders_openness"]
    assert data_lo > 10.0 and lo == pytest.approx(0.0, abs=1e-6) and hi == data_hi
    result = editor.solve(pose, metrics={"shoulders_openness": 10.0})
    assert not any("clamped" in n for n in result.notes), result.notes
    got = editor.metric_values(result.positions)["shoulders_openness"][0]
    assert abs(got - 10.0) < 0.5
    same = editor.solve(pose, metrics={"shoulders_openness": 0.0}).positions[0]
    assert np.abs(same - pose).max() < NULL_EDIT_M


HELD_ARM_BEND_DEG = 4.0  # the held arm at the start: straighter than ELBOW_MIN_BEND_DEG
HELD_ARM_KEPT = 1e-6  # of the arm's length: how much straighter or more bent it may end
LEFT_HAND_IN_M = 0.05


def _straightened_right_arm(pose: np.ndarray, bend_deg: float) -> np.ndarray:
    """``pose`` (21, 3) with its right forearm turned about the elbow so the arm bends by
    ``bend_deg`` only (in the arm's own plane), the hand going along."""
    s, e, h = skeleton.joint_indices(["r_upperarm", "r_forearm", "r_hand"])
    upper, fore = pose[e] - pose[s], pose[h] - pose[e]
    u = upper / np.linalg.norm(upper)
    side = fore - u * (fore @ u)
    side = side / np.linalg.norm(side) if np.linalg.norm(side) > 1e-9 else np.cross(u, [0, 0, 1])
    angle = np.radians(bend_deg)
    out = pose.copy()
    out[h] = pose[e] + np.linalg.norm(fore) * (np.cos(angle) * u + np.sin(angle) * side)
    return out


def _extension(pose: np.ndarray, side: str = "r") -> float:
    s, e, h = skeleton.joint_indices([f"{side}_upperarm", f"{side}_forearm", f"{side}_hand"])
    return float(np.linalg.norm(pose[h] - pose[s])
                 / (np.linalg.norm(pose[e] - pose[s]) + np.linalg.norm(pose[h] - pose[e])))


def test_a_held_straight_arm_keeps_its_own_bend(manifold_clip) -> None:
    """The solve's end steps, from an answer that left the right arm nearly straight (bent
    4 degrees, straighter than the 18 degrees a hand goal's elbow keeps where it can) with
    the right hand held there and the left hand's goal moved within its arm's reach: the
    held arm keeps its own
    bend (before, 1.17 % of its length shorter, its clavicle shrugged towards the
    hand). The re-aim kept every hand goal's elbow at 18 degrees and shrugged the held
    arm's clavicle to get there, so a propagated edit whose held arm straightened past 18
    degrees on the way popped its elbow out by 41 mm in one frame (a Bandai Namco test
    clip, both hands held: 2.83x the clip's largest acceleration, 1.07x since)."""
    from blender_addon.core.pipeline.finish import _reach_exactly

    poses = np.array([_straightened_right_arm(p, HELD_ARM_BEND_DEG)
                      for p in manifold_clip[::9]])
    r_hand, l_hand = skeleton.JOINT_INDEX["r_hand"], skeleton.JOINT_INDEX["l_hand"]
    mask = np.zeros(poses.shape[:2])
    mask[:, [r_hand, l_hand]] = 1.0
    targets = poses.copy()  # the left hand 5 cm towards its shoulder: the arm alone bends
    shoulder = poses[:, skeleton.JOINT_INDEX["l_upperarm"]]
    inward = shoulder - poses[:, l_hand]
    targets[:, l_hand] += LEFT_HAND_IN_M * inward / np.linalg.norm(inward, axis=-1)[:, None]
    lengths = skeleton.bone_lengths(poses)
    tolerance = np.full(len(poses), pipeline.REACH_TOLERANCE)
    out = _reach_exactly(poses.copy(), poses, mask, targets, mask, lengths, tolerance)
    assert np.linalg.norm(out[:, r_hand] - poses[:, r_hand], axis=-1).max() < REACH_M
    assert np.linalg.norm(out[:, l_hand] - targets[:, l_hand], axis=-1).max() < REACH_M
    kept = [_extension(o) - _extension(p) for o, p in zip(out, poses, strict=True)]
    print(f"\nFIGURES held straight arm: extension change {min(kept):+.5f} to "
          f"{max(kept):+.5f} of its length over {len(kept)} poses")
    assert max(abs(k) for k in kept) < HELD_ARM_KEPT, kept


STRAIGHT_LIMB_DRAGS_M = (0.001, 0.003, 0.01, 0.03, 0.05, 0.1)  # the end forwards, T-pose


@pytest.mark.parametrize("joint, angle, refine, least", [
    ("l_hand", "l_forearm bend", pipeline.DEFAULT_REFINE_STEPS, pipeline.ELBOW_MIN_BEND_DEG),
    ("l_hand", "l_forearm bend", 0, pipeline.ELBOW_MIN_BEND_DEG),
    ("l_foot", "l_shin bend", 0, pipeline.NETWORK_LEAST_BEND_DEG)])
def test_a_straight_limb_bends_on_as_its_end_is_dragged(shipped_models, joint: str,
                                                         angle: str, refine: int,
                                                         least: float) -> None:
    """From a T-pose (elbows and knees straight), a hand or a foot dragged forwards by a
    growing amount: the limb's least bend (the elbow's 18 degrees; refinement off, the
    knee's 10) is asked in step with the drag, in full at pipeline.LEAST_BEND_DRAG_M, so
    the bend grows as the drag does (the elbow, refined: 0.21, 0.64, 3.60, 10.81, 18.02 and
    18.02 degrees for 1 mm to 10 cm). Asked at once, it jumped: the elbow 0.64 degrees at
    3 mm, 18.02 at 1 cm (refinement off: 0.44, then 18.02), the knee 0.25 at 1 cm, 10.0 at
    3 cm."""
    pose = tpose(BONE_LENGTHS.copy())
    editor = PoseEditor(shipped_models)
    end = skeleton.JOINT_INDEX[joint]
    k = ANGLE_NAMES.index(angle)
    options = SolveOptions(refine_steps=refine)
    bends = np.array([joint_angles(editor.solve(pose, [Effector(
        joint, pose[end] + (0.0, 0.0, step))], options=options).positions)[0, k]
        for step in STRAIGHT_LIMB_DRAGS_M])
    print(f"\nFIGURES straight limb dragged ({joint}, refine {refine}): {np.round(bends, 2)} "
          "degrees")
    asked = least * np.minimum(np.array(STRAIGHT_LIMB_DRAGS_M) / pipeline.LEAST_BEND_DRAG_M,
                               1.0)
    assert (bends < asked + ELBOW_SLACK_DEG).all(), (bends, asked)
    assert (np.diff(bends) > -ELBOW_SLACK_DEG).all()
    reached = STRAIGHT_LIMB_DRAGS_M.index(pipeline.LEAST_BEND_DRAG_M)
    assert bends[reached:].min() > least - ELBOW_SLACK_DEG
