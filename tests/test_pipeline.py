"""The edit pipeline on the shipped models: effectors, pins, lengths, modules, refinement,
other proportions, bad input; the fused module against the separate ones (tiny set)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import pipeline, reach_bounds, skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions

HANDS = skeleton.joint_indices(["l_hand", "r_hand"])
ENDS = skeleton.joint_indices(["l_hand", "r_hand", "l_foot", "r_foot", "head"])
PIN_TOLERANCE = 0.01  # m
OFFSET = 15  # frames between x and x'
# m: one edit in two units, to rounding, and to the step where rig IK's iterations stop
# inside the reach tolerance (0.1 mm): a step's accept test can fall either way on
# rounding, and one pose in centimetres ended 15.7 micrometres from its metre twin.
SAME_EDIT_M = 3e-5
# One pose of the 24 is one rig IK takes to its goals by a path that rounding changes (its
# damped steps part after 8 of them in the two units, and end 4 cm apart): both reach as
# near.
ILL_CONDITIONED_REACH_M = 1e-3
NETWORK_HAND_KEPT_M = 1e-6  # refinement off: the networks' hand, when in reach (was 6 cm off)
MIN_BEND_TOLERANCE = 1e-9  # of an arm's length: an elbow held at its least bend
AIM_TOLERANCE_M2 = 1e-9  # |shoulder->hand x shoulder->networks' hand|: in line


@pytest.fixture(scope="module")
def editor(shipped_models) -> PoseEditor:
    return PoseEditor(shipped_models)


@pytest.fixture(scope="module")
def pairs(manifold_clip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return manifold_clip[:-OFFSET:3], manifold_clip[OFFSET::3]


def _mask(joints: np.ndarray, n: int) -> np.ndarray:
    mask = np.zeros((n, skeleton.NUM_JOINTS))
    mask[:, joints] = 1.0
    return mask


def _effector_error(out: np.ndarray, x2: np.ndarray, joints: np.ndarray) -> np.ndarray:
    return np.linalg.norm(out[:, joints] - x2[:, joints], axis=-1)


@pytest.mark.parametrize("solver", ["universal", "chained", "classic"])
def test_effectors_pull_and_lengths_are_exact(editor: PoseEditor, pairs, solver: str) -> None:
    x, x2 = pairs
    mask = _mask(ENDS, len(x))
    out = editor.solve_arrays(x, mask, x2, options=SolveOptions(solver=solver)).positions
    assert _effector_error(out, x2, ENDS).mean() < _effector_error(x, x2, ENDS).mean()
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(x), atol=1e-9)


def test_refinement_lowers_effector_error(editor: PoseEditor, pairs) -> None:
    x, x2 = pairs
    mask = _mask(HANDS, len(x))
    plain = editor.solve_arrays(x, mask, x2, options=SolveOptions(refine_steps=0)).positions
    refined = editor.solve_arrays(x, mask, x2, options=SolveOptions(refine_steps=3)).positions
    assert np.median(_effector_error(refined, x2, HANDS)) < \
        0.5 * np.median(_effector_error(plain, x2, HANDS))


def test_without_refinement_the_hand_stays_where_the_networks_put_it(
        editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    """Refinement off: giving the rig its bone lengths back keeps the networks' hand (the arm
    is re-aimed there) instead of pulling it back along the bones the change stretched,
    unless that would bend the elbow less than pipeline.ELBOW_MIN_BEND_DEG: then the arm
    stays at that bend, pointing at the networks' hand."""
    x = manifold_clip[::3]
    mask = _mask(HANDS, len(x))
    targets = x.copy()
    targets[:, HANDS] += np.array([0.05, 0.1, -0.04])  # a drag of 12 cm, within reach
    fixed = editor.solve_arrays(x, mask, targets, options=SolveOptions(refine_steps=0)).positions
    raw = editor.solve_arrays(x, mask, targets, options=SolveOptions(
        refine_steps=0, fix_lengths=False)).positions
    np.testing.assert_allclose(skeleton.bone_lengths(fixed), skeleton.bone_lengths(x), atol=1e-9)
    kept = np.linalg.norm(fixed[:, HANDS] - raw[:, HANDS], axis=-1)
    # At the least bend the hand is cos(bend / 2) of the arm's length from the shoulder.
    shoulders = fixed[:, skeleton.joint_indices(["l_upperarm", "r_upperarm"])]
    bones = skeleton.bone_lengths(x)
    arm = bones[:, HANDS] + bones[:, skeleton.PARENTS[HANDS]]
    reach = np.linalg.norm(fixed[:, HANDS] - shoulders, axis=-1) / arm
    least = np.cos(np.radians(pipeline.ELBOW_MIN_BEND_DEG) / 2)
    at_min = np.abs(reach - least) < MIN_BEND_TOLERANCE
    # Measured: 3 of the 60 hands held at the bend (up to 2.7 mm short of the networks');
    # the others within 4e-16 m.
    assert kept[~at_min].max() < NETWORK_HAND_KEPT_M, kept[~at_min].max()
    assert (reach < least + MIN_BEND_TOLERANCE).all(), reach.max()
    aim = np.cross(fixed[:, HANDS] - shoulders, raw[:, HANDS] - shoulders)
    assert np.linalg.norm(aim, axis=-1)[at_min].max() < AIM_TOLERANCE_M2


def test_a_drag_update_shows_what_its_pause_keeps(editor: PoseEditor,
                                                  manifold_clip: np.ndarray) -> None:
    """``solve(drag=True)`` gives the pause's solve (to 0.1 mm: a drag update takes at most
    pipeline.DRAG_REFINE_STEPS chord steps), for a target within the arm's reach and for
    one beyond it, which both reach by leaning (rig IK from the re-aim, the least change):
    the pose does not jump when the drag pauses."""
    pose = manifold_clip[40]
    hand, shoulder = HANDS[1], skeleton.JOINT_INDEX["r_upperarm"]
    reach = skeleton.bone_lengths(pose)[[hand, skeleton.PARENTS[hand]]].sum()
    out = pose[hand] - pose[shoulder]
    near = pose[hand] + [0.05, 0.1, -0.04]
    far = pose[shoulder] + out / np.linalg.norm(out) * 1.4 * reach
    for target in (near, far):
        effectors = [Effector("r_hand", target)]
        drag = editor.solve(pose, effectors, drag=True)
        np.testing.assert_allclose(drag.positions, editor.solve(pose, effectors).positions,
                                   atol=1e-4)
        assert drag.effector_error.max() < 1e-4


# A hand dragged straight out from its shoulder to past its arm's reach (40 updates, the
# other ends held): the largest joint step between two updates while the targets stay
# within the rig's reach, over the target's own step, median over drags from 9 poses.
# Measured 5.7; 9.8 when rig IK started only where the straightened re-aim fell short (the
# elbow first straightened, then re-bent 18 degrees: 3-5 cm in one update).
RADIAL_STEPS = 40
RADIAL_OUT = 1.12  # of the arm's reach, from the shoulder
RADIAL_STEP_RATIO_MAX = 7.0


def test_a_hand_dragged_out_past_reach_moves_the_body_step_by_step(
        editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    ratios = []
    for k, pose in enumerate(manifold_clip[::10]):
        side = "lr"[k % 2]
        hand, elbow, shoulder = (skeleton.JOINT_INDEX[f"{side}_{j}"]
                                 for j in ("hand", "forearm", "upperarm"))
        reach = skeleton.bone_lengths(pose)[[elbow, hand]].sum()
        out = pose[hand] - pose[shoulder]
        end = pose[shoulder] + out / np.linalg.norm(out) * RADIAL_OUT * reach
        previous, largest = None, 0.0
        for share in np.linspace(0.0, 1.0, RADIAL_STEPS + 1)[1:]:
            effectors = [Effector(skeleton.JOINTS[j], pose[j] + share * (end - pose[j])
                                  if j == hand else pose[j]) for j in ENDS]
            shown = editor.solve(pose, effectors, drag=True).positions[0]
            mask, targets, _ = editor.effector_arrays(pose[None], effectors)
            over, _ = reach_bounds.beyond_reach(pose[None], mask > 0, targets)
            if previous is not None and over.max() <= pipeline.MISS_NOTE_M:
                largest = max(largest, np.linalg.norm(shown - previous, axis=-1).max())
            previous = shown
        ratios.append(largest / (np.linalg.norm(end - pose[hand]) / RADIAL_STEPS))
    assert np.median(ratios) < RADIAL_STEP_RATIO_MAX, ratios


def test_a_drag_reuses_its_start_pose_and_gives_what_a_fresh_editor_gives(
        shipped_models, manifold_clip: np.ndarray) -> None:
    """A single pose's start-pose preparation is kept between solves (a drag's updates share
    it): the answers are exactly a fresh editor's, whatever was solved in between, kept
    arrays cannot be changed by a caller, and new rig lengths drop what was kept."""
    kept = PoseEditor(shipped_models)
    poses = manifold_clip[[10, 40, 10]]
    moves = np.array([[0.05, 0.1, -0.04], [0.0, -0.08, 0.1], [0.12, 0.02, 0.0]])
    for pose, move in zip(poses, moves, strict=True):
        effs = [Effector("r_hand", pose[HANDS[1]] + move), Effector("l_foot", pin=True)]
        fresh = PoseEditor(shipped_models).solve(pose, effs, drag=True).positions
        np.testing.assert_array_equal(kept.solve(pose, effs, drag=True).positions, fresh)
    start = kept._start(poses[:1])
    assert start is kept._start(poses[:1].copy())
    with pytest.raises(ValueError, match="read-only"):
        start.model[0, 0, 0] = 1.0
    kept.lengths = skeleton.bone_lengths(poses[0]) * 1.1
    assert kept._start(poses[:1]) is not start


def test_pins_hold_while_hands_move(editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    pose = manifold_clip[40]
    effs = [Effector("l_hand", pose[HANDS[0]] + [0.1, 0.15, 0.1]),
            Effector("l_foot", pin=True), Effector("r_foot", pin=True)]
    out = editor.solve(pose, effs, options=SolveOptions(refine_steps=3)).positions[0]
    feet = skeleton.joint_indices(["l_foot", "r_foot"])
    assert np.linalg.norm(out[feet] - pose[feet], axis=-1).max() < PIN_TOLERANCE
    assert np.linalg.norm(out[HANDS[0]] - effs[0].target) < \
        np.linalg.norm(pose[HANDS[0]] - effs[0].target)


def test_average_and_sequence(editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    pose = manifold_clip[10]
    metric = next(iter(editor.models.metrics))
    effs = [Effector("r_hand", pose[HANDS[1]] + [0.0, 0.2, 0.0])]
    avg = editor.solve(pose, effs, {metric: 30.0}, SolveOptions(combine="average"))
    seq = editor.solve(pose, effs, {metric: 30.0}, SolveOptions(combine="sequence"))
    assert not np.allclose(avg.positions, seq.positions)
    # With one module the two modes are the same edit.
    one_a = editor.solve(pose, effs, options=SolveOptions(combine="average")).positions
    one_s = editor.solve(pose, effs, options=SolveOptions(combine="sequence")).positions
    np.testing.assert_allclose(one_a, one_s, atol=1e-6)


def test_no_request_keeps_the_pose(editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    pose = manifold_clip[5]
    np.testing.assert_allclose(editor.solve(pose).positions[0], pose, atol=1e-6)


@pytest.mark.parametrize("arm_scale, rig_scale", [(1.2, 1.0), (1.2, 0.01), (1.0, 100.0)])
def test_other_proportions_and_scales(shipped_models, manifold_clip: np.ndarray,
                                      arm_scale: float, rig_scale: float) -> None:
    lengths = skeleton.bone_lengths(manifold_clip[0])
    arms = skeleton.joint_indices(["l_forearm", "l_hand", "r_forearm", "r_hand"])
    lengths[arms] *= arm_scale
    lengths *= rig_scale
    from blender_addon.core.normalize import set_bone_lengths

    clip = set_bone_lengths(manifold_clip * rig_scale, lengths)
    editor = PoseEditor(shipped_models, lengths)
    x, x2 = clip[:-OFFSET:4], clip[OFFSET::4]
    mask = _mask(HANDS, len(x))
    out = editor.solve_arrays(x, mask, x2, options=SolveOptions(refine_steps=3)).positions
    np.testing.assert_allclose(skeleton.bone_lengths(out), np.broadcast_to(lengths, out.shape[:2]),
                               atol=1e-9 * rig_scale)
    assert np.median(_effector_error(out, x2, HANDS)) < \
        0.5 * np.median(_effector_error(x, x2, HANDS))


def test_clean_pose_projects_and_fixes_lengths(editor: PoseEditor,
                                               manifold_clip: np.ndarray) -> None:
    pose = manifold_clip[20:21]
    rough = pose + np.random.default_rng(0).normal(0, 0.03, pose.shape)
    clean = editor.clean_pose(rough)
    np.testing.assert_allclose(skeleton.bone_lengths(clean), skeleton.bone_lengths(rough),
                               atol=1e-9)
    again = editor.clean_pose(clean)
    assert np.abs(again - clean).mean() < np.abs(clean - rough).mean()


def test_bad_input_is_a_clear_error(editor: PoseEditor, manifold_clip: np.ndarray) -> None:
    pose = manifold_clip[0]
    with pytest.raises(ValueError, match="l_hand"):
        editor.solve(pose, [Effector("l_hand", [np.nan, 0.0, 0.0])])
    for target in (None, [0.0, 1.0], [[0.0, 1.0, 2.0]], "abc", [0.0, "x", 1.0]):
        with pytest.raises(ValueError, match="'r_hand': target must be 3 finite numbers"):
            editor.solve(pose, [Effector("l_hand", pose[10]), Effector("r_hand", target)])
    with pytest.raises(ValueError, match="elbow"):
        editor.solve(pose, [Effector("elbow", [0.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="shape"):
        editor.solve_arrays(pose, np.zeros(21), pose)
    with pytest.raises(ValueError, match="unknown metric"):
        editor.solve(pose, metrics={"no_such_metric": 1.0})
    with pytest.raises(ValueError, match="weight"):
        editor.solve(pose, [Effector("head", pose[4], weight=0.0)])
    with pytest.raises(ValueError, match="solver"):
        editor.solve(pose, options=SolveOptions(solver="magic"))
    bad = pose.copy()
    bad[7] = np.inf
    with pytest.raises(ValueError, match="l_forearm"):
        editor.solve(bad)


FUSED_TOLERANCE = 1e-5  # m, and latent units: one graph vs three sessions


@pytest.fixture(scope="module")
def fused_and_separate(tiny_set, tmp_path_factory) -> tuple[ModelSet, ModelSet]:
    """The tiny exported set, with its fused module and without it (an older set)."""
    import json
    import shutil

    from blender_addon.core.models import MANIFEST_NAME

    folder = Path(shutil.copytree(tiny_set.models, tmp_path_factory.mktemp("unfused") / "m"))
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != "ik_universal_fused"]
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return ModelSet(tiny_set.models), ModelSet(folder)


@pytest.mark.parametrize("joints", [["l_hand", "r_hand"],
                                    ["l_hand", "r_hand", "l_foot", "r_foot", "head"]])
@pytest.mark.parametrize("options", [
    SolveOptions(), SolveOptions(keep_details=False), SolveOptions(fix_lengths=False),
    SolveOptions(refine_steps=2), SolveOptions(solver="chained"),
], ids=["default", "no-details", "no-length-fix", "refined", "chained"])
@pytest.mark.parametrize("rig_lengths", [False, True], ids=["measured", "rig"])
@pytest.mark.usefixtures("numpy_only")  # the compiled networks: test_compiled_networks
def test_fused_module_gives_the_separate_modules_edit(fused_and_separate, manifold_clip,
                                                      joints, options, rig_lengths,
                                                      monkeypatch) -> None:
    fused_set, separate_set = fused_and_separate
    lengths = skeleton.bone_lengths(manifold_clip[0]) if rig_lengths else None
    fused, separate = PoseEditor(fused_set, lengths), PoseEditor(separate_set, lengths)
    calls = []
    module = fused_set.modules["ik_universal_fused"]
    run_all = module.run_all
    monkeypatch.setattr(module, "run_all", lambda *a: calls.append(1) or run_all(*a))
    for frame in (10, 40, 70):
        pose, target = manifold_clip[frame], manifold_clip[frame + 15]
        effs = [Effector(j, target[skeleton.JOINT_INDEX[j]]) for j in joints]
        a = fused.solve(pose, effs, options=options)
        b = separate.solve(pose, effs, options=options)
        np.testing.assert_allclose(a.positions, b.positions, atol=FUSED_TOLERANCE)
        np.testing.assert_allclose(a.latent, b.latent, atol=FUSED_TOLERANCE)
        np.testing.assert_allclose(a.effector_error, b.effector_error, atol=FUSED_TOLERANCE)
        assert a.notes == b.notes
    assert len(calls) == (0 if options.solver == "chained" else 3)


@pytest.mark.usefixtures("numpy_only")
def test_metric_requests_and_no_effectors_skip_the_fused_module(fused_and_separate,
                                                                manifold_clip) -> None:
    """The fused graph is encoder -> universal -> decoder only: anything else falls back."""
    fused_set, separate_set = fused_and_separate
    fused, separate = PoseEditor(fused_set), PoseEditor(separate_set)
    pose = manifold_clip[30]
    metric = next(iter(fused_set.metrics))
    effs = [Effector("l_hand", pose[HANDS[0]] + [0.0, 0.1, 0.0])]
    for args in ((effs, {metric: 20.0}), ((), None)):
        np.testing.assert_allclose(fused.solve(pose, *args).positions,
                                   separate.solve(pose, *args).positions, rtol=0,
                                   atol=FUSED_TOLERANCE)


@pytest.mark.parametrize("rig_scale", [0.01, 100.0])
@pytest.mark.parametrize("options", [SolveOptions(), SolveOptions(refine_steps=0),
                                     SolveOptions(fix_lengths=False)],
                         ids=["default", "network alone", "model lengths"])
def test_the_edit_does_not_depend_on_the_rigs_units(editor: PoseEditor, pairs,
                                                    rig_scale: float,
                                                    options: SolveOptions) -> None:
    """A rig in centimetres (or in units of 10 m) gets the metre rig's edit, scaled: every
    tolerance and offset is on the models' body, not in the rig's units."""
    x, x2 = pairs
    mask = _mask(ENDS, len(x))
    metres = editor.solve_arrays(x, mask, x2, options=options).positions
    scaled = editor.solve_arrays(x * rig_scale, mask, x2 * rig_scale,
                                 options=options).positions
    apart = np.abs(scaled / rig_scale - metres).max(axis=(1, 2))
    assert np.sort(apart)[-2] < SAME_EDIT_M, apart
    # the odd one out reaches as near in both units
    reach = [_effector_error(out, x2, ENDS) for out in (metres, scaled / rig_scale)]
    np.testing.assert_allclose(reach[1], reach[0], atol=ILL_CONDITIONED_REACH_M)


def _hand_drags(n: int, seed: int) -> np.ndarray:
    """(n, 3) moves of 10-25 cm in random directions: a user's hand drags."""
    rng = np.random.default_rng(seed)
    moves = rng.normal(size=(n, 3))
    return moves * (rng.uniform(0.10, 0.25, n) / np.linalg.norm(moves, axis=1))[:, None]


# A stylized character: a big head on a short neck, short legs, long arms (factors on the
# canonical bone lengths). The drag tests' figures hold on such a body as on a person's.
CARTOON = {"head": 2.0, "neck": 0.5, "l_shin": 0.65, "r_shin": 0.65, "l_foot": 0.65,
           "r_foot": 0.65, "l_upperarm": 1.3, "r_upperarm": 1.3, "l_forearm": 1.25,
           "r_forearm": 1.25, "l_hand": 1.25, "r_hand": 1.25}
# The other joints' displacement over classic FABRIK's on that body (issue 15 asks for at
# most 1.5x): 1.15x, 1.36x with every target offset scaled by the legs alone.
STYLIZED_OTHERS_OVER_FABRIK = 1.25


def test_a_hand_drag_on_a_stylized_body(shipped_models, manifold_clip: np.ndarray) -> None:
    """One hand dragged 10-25 cm on cartoon proportions: reached, planted feet held, the
    other joints moved hardly more than classic FABRIK moves them, and a null edit
    changes nothing."""
    from blender_addon.core.normalize import set_bone_lengths, to_model_space
    from blender_addon.core.pipeline import planted_feet

    lengths = skeleton.bone_lengths(manifold_clip[0]).copy()
    for joint, factor in CARTOON.items():
        lengths[skeleton.JOINT_INDEX[joint]] *= factor
    feet = skeleton.joint_indices(["l_foot", "l_toe", "r_foot", "r_toe"])
    poses = set_bone_lengths(manifold_clip[::3], np.broadcast_to(lengths, (30, 21)))
    poses[..., 1] -= poses[:, feet, 1].min(axis=1)[:, None]  # the shorter legs on the floor
    editor = PoseEditor(shipped_models, lengths)
    moves = _hand_drags(len(poses), seed=3)
    hand = skeleton.JOINT_INDEX["r_hand"]
    assert planted_feet(to_model_space(poses)[0])[:, feet].any(axis=1).sum() >= 20
    others = {}
    for name, options in (("default", SolveOptions()), ("classic", SolveOptions(solver="classic"))):
        moved = []
        for pose, move in zip(poses, moves, strict=True):
            result = editor.solve(pose, [Effector("r_hand", pose[hand] + move)], options=options)
            out = result.positions[0]
            moved.append(np.delete(np.linalg.norm(out - pose, axis=-1), hand).mean())
            if name == "default":
                assert result.effector_error.max() < 1e-3
                planted = planted_feet(to_model_space(pose[None])[0])[0, feet]
                assert np.linalg.norm(out[feet] - pose[feet], axis=-1)[planted].max(
                    initial=0.0) < 1e-3
                null = editor.solve(pose, [Effector("r_hand", pose[hand])])
                assert np.abs(null.positions[0] - pose).max() < 1e-6
        others[name] = float(np.mean(moved))
    assert others["default"] <= STYLIZED_OTHERS_OVER_FABRIK * others["classic"]


LOCKED_ELBOW_DEG = 5.0  # an elbow straighter than this reads as locked (it was 0.16)


def test_a_hand_drag_keeps_the_elbow_bent_where_it_can(shipped_models,
                                                       manifold_clip: np.ndarray) -> None:
    """One hand dragged 10-25 cm from 30 poses: every target reached, and no elbow locked
    straight; where a target lies beyond the bent arm's reach the clavicle turns first and
    the arm straightens only as far as it must (the old re-aim straightened 5 of these 30
    elbows fully; with a least bend of 12 degrees 3 still bent less than it, none now:
    the straightest three at 18.02 degrees)."""
    from blender_addon.core.pipeline import ELBOW_MIN_BEND_DEG
    from training.evaluation.plausibility import ANGLE_NAMES, joint_angles

    editor = PoseEditor(shipped_models)
    poses = manifold_clip[::3]
    moves = _hand_drags(len(poses), seed=5)
    hand, elbow = skeleton.JOINT_INDEX["r_hand"], ANGLE_NAMES.index("r_forearm bend")
    bends = []
    for pose, move in zip(poses, moves, strict=True):
        result = editor.solve(pose, [Effector("r_hand", pose[hand] + move)])
        assert result.effector_error.max() < 1e-3
        bends.append(joint_angles(result.positions)[0, elbow])
    assert min(bends) > LOCKED_ELBOW_DEG
    assert np.mean(np.array(bends) >= ELBOW_MIN_BEND_DEG) >= 0.9
