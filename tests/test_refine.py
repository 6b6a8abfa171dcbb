"""The refinement's pieces on their own: the length-fixing Jacobian against a finite
difference, and the exact-reach pass (limb ends on reachable targets, bone lengths kept)."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import exact_reach, native, pipeline, refine, rigid_branches, skeleton
from blender_addon.core.normalize import set_bone_lengths
from blender_addon.core.pipeline import Effector, PoseEditor
from blender_addon.core.refine import _fixed

FD_STEP = 1e-7
JACOBIAN_ATOL = 1e-6
TOLERANCE = 1e-4  # m, the engine's REACH_TOLERANCE
HANDS = skeleton.joint_indices(["l_hand", "r_hand"])
RIGID_GAIN = 0.6  # the rows cut how far the branches bend (by about half here)
HAND_MISS_RATIO = 1.05  # the hands' miss before the exact-reach pass, with rows / without
SAME_M = 1e-9  # float64 around the same float32 decoder: equal but for rounding
DRAG_M = 0.15  # a hand dragged this far


def _drags(pose: np.ndarray, n: int, seed: int = 0) -> list[list[Effector]]:
    """Hands, feet and head as effectors, the right hand dragged in a random direction."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = rng.normal(size=3)
        effs = [Effector(j, pose[skeleton.JOINT_INDEX[j]]) for j in skeleton.END_JOINTS]
        effs[skeleton.END_JOINTS.index("r_hand")] = Effector(
            "r_hand", pose[skeleton.JOINT_INDEX["r_hand"]] + DRAG_M * d / np.linalg.norm(d))
        out.append(effs)
    return out


def _poses(synthetic_clip: np.ndarray, n: int) -> np.ndarray:
    return synthetic_clip[:: max(1, len(synthetic_clip) // n)][:n]


def test_fixed_jacobian_matches_a_finite_difference(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    pose = _poses(synthetic_clip, 3) + rng.normal(0, 0.01, (3, 21, 3))  # lengths off a bit
    lengths = skeleton.bone_lengths(synthetic_clip[:3]) * 1.1
    jac = rng.normal(size=(3, 63, 4))  # d pose / d (4 variables)
    fixed, dfixed = _fixed(pose, lengths, jac)
    np.testing.assert_allclose(fixed, set_bone_lengths(pose, lengths), atol=1e-12)
    for k in range(4):
        step = (jac[:, :, k] * FD_STEP).reshape(pose.shape)  # central difference
        fd = (set_bone_lengths(pose + step, lengths) - set_bone_lengths(pose - step, lengths)
              ).reshape(3, 63) / (2 * FD_STEP)
        np.testing.assert_allclose(dfixed[:, :, k], fd, atol=JACOBIAN_ATOL)


def test_exact_reach_puts_limb_ends_on_reachable_targets(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(1)
    pose = _poses(synthetic_clip, 20)
    lengths = skeleton.bone_lengths(pose)
    targets = pose.copy()
    targets[:, HANDS] += rng.normal(0, 0.03, (len(pose), 2, 3))  # a few cm: within reach
    goals = np.zeros(pose.shape[:2], dtype=bool)
    goals[:, HANDS] = True
    out = exact_reach.solve(pose, goals, targets, lengths, TOLERANCE)
    reach = np.linalg.norm(out[:, HANDS] - targets[:, HANDS], axis=-1)
    shoulder_to_target = np.linalg.norm(
        targets[:, HANDS] - pose[:, skeleton.joint_indices(["l_upperarm", "r_upperarm"])],
        axis=-1)
    arm = lengths[:, skeleton.joint_indices(["l_forearm", "r_forearm"])] + lengths[:, HANDS]
    reachable = shoulder_to_target < arm
    assert reachable.mean() > 0.5
    assert (reach[reachable] < TOLERANCE).all()
    np.testing.assert_allclose(skeleton.bone_lengths(out), lengths, atol=1e-9)
    # Only the arms move: their two bones, and the clavicle (shoulder) turned towards a
    # hand beyond the arm's reach, which gets nearer than the arm alone would take it.
    shoulders = skeleton.joint_indices(["l_upperarm", "r_upperarm"])
    untouched = ~np.isin(np.arange(21), skeleton.joint_indices(
        ["l_upperarm", "l_forearm", "l_hand", "r_upperarm", "r_forearm", "r_hand"]))
    np.testing.assert_allclose(out[:, untouched], pose[:, untouched], atol=1e-12)
    np.testing.assert_allclose(out[:, shoulders][reachable], pose[:, shoulders][reachable],
                               atol=1e-12)
    assert (reach[~reachable] < (shoulder_to_target - arm)[~reachable]).all()


def test_a_head_beyond_the_necks_reach_bends_the_trunk(synthetic_clip: np.ndarray) -> None:
    """A head goal beyond the straightened neck's reach: the trunk bends at the spine
    joint (the spine -> chest and chest -> head segments re-aimed), the head lands on it,
    bone lengths, the pelvis with the spine's start and the legs stay."""
    head, chest, spine = (skeleton.JOINT_INDEX[j] for j in ("head", "chest", "spine"))
    pose = _poses(synthetic_clip, 20)
    lengths = skeleton.bone_lengths(pose)
    reach = lengths[:, head] + lengths[:, skeleton.JOINT_INDEX["neck"]]
    # The head turned 30 degrees about the spine joint (sideways), 1 % nearer to it.
    tilt = np.radians(30.0)
    rel = pose[:, head] - pose[:, spine]
    side = np.cross(rel, [0.0, 0.0, 1.0])
    side /= np.linalg.norm(side, axis=-1, keepdims=True)
    targets = pose.copy()
    targets[:, head] = pose[:, spine] + 0.99 * (np.cos(tilt) * rel + np.sin(tilt) * side
                                                * np.linalg.norm(rel, axis=-1, keepdims=True))
    beyond_neck = np.linalg.norm(targets[:, head] - pose[:, chest], axis=-1) > reach
    goals = np.zeros(pose.shape[:2], dtype=bool)
    goals[:, head] = True
    trunk = np.linalg.norm(pose[:, chest] - pose[:, spine], axis=-1)
    neck = np.linalg.norm(pose[:, head] - pose[:, chest], axis=-1)
    reachable = beyond_neck & (np.linalg.norm(targets[:, head] - pose[:, spine], axis=-1)
                               < trunk + neck)
    assert reachable.mean() > 0.5
    out = exact_reach.solve(pose, goals, targets, lengths, TOLERANCE)
    miss = np.linalg.norm(out[:, head] - targets[:, head], axis=-1)
    assert (miss[reachable] < TOLERANCE).all(), miss
    np.testing.assert_allclose(skeleton.bone_lengths(out), lengths, atol=1e-9)
    kept = skeleton.joint_indices(["pelvis", "spine"] + [f"{s}_{j}" for s in "lr"
                                                         for j in ("thigh", "shin", "foot", "toe")])
    np.testing.assert_allclose(out[:, kept], pose[:, kept], atol=1e-12)
    # The chest's branch turned as one (the rig's chest bone): its shape is the pose's.
    branch = skeleton.joint_indices(["neck", "l_clavicle", "r_clavicle"])
    before = pose[:, branch, None] - pose[:, None, branch]
    after = out[:, branch, None] - out[:, None, branch]
    np.testing.assert_allclose(np.linalg.norm(after, axis=-1), np.linalg.norm(before, axis=-1),
                               atol=1e-9)


LEG_SLACK = 0.98  # of a leg's length: the hip to ankle distance of a leg with a bent knee


def test_a_head_beyond_the_trunks_reach_leans_the_body(synthetic_clip: np.ndarray) -> None:
    """A head goal a little beyond the whole trunk's reach from the spine joint, feet held
    where they stand: the body leans into it (the least shift, what hangs below the hips
    re-aimed to the held feet), and every goal lands on its target with the bone lengths
    and the pelvis's and chest's shapes kept: no FABRIK needed."""
    head, spine = skeleton.JOINT_INDEX["head"], skeleton.JOINT_INDEX["spine"]
    feet = skeleton.joint_indices(["l_foot", "r_foot", "l_toe", "r_toe"])
    pose = _poses(synthetic_clip, 60)
    lengths = skeleton.bone_lengths(pose)
    # Knees with some bend: a straight leg cannot follow a shift of the hips (FABRIK's).
    hips, ankles = (skeleton.joint_indices([f"{s}_{j}" for s in "lr"]) for j in ("thigh", "foot"))
    extended = np.linalg.norm(pose[:, hips] - pose[:, ankles], axis=-1) / (
        lengths[:, ankles] + lengths[:, skeleton.joint_indices(["l_shin", "r_shin"])])
    bent = extended.max(axis=1) < LEG_SLACK
    pose, lengths = pose[bent], lengths[bent]
    assert len(pose) >= 10
    trunk = lengths[:, skeleton.joint_indices(["chest", "neck", "head"])].sum(axis=1)
    rng = np.random.default_rng(5)
    # Leaning over: the trunk's direction tipped 45 degrees towards a random side, so the
    # body moves mostly along the floor (lifted, a straight leg could not follow).
    up = pose[:, head] - pose[:, spine]
    up /= np.linalg.norm(up, axis=-1, keepdims=True)
    side = np.cross(up, rng.normal(size=(len(pose), 3)))
    side /= np.linalg.norm(side, axis=-1, keepdims=True)
    direction = (up + side) / np.sqrt(2.0)
    beyond = rng.uniform(0.002, 0.01, len(pose))  # m past the trunk in line
    targets = pose.copy()
    targets[:, head] = pose[:, spine] + (trunk + beyond)[:, None] * direction
    goals = np.zeros(pose.shape[:2], dtype=bool)
    goals[:, [head, *feet]] = True
    out = exact_reach.solve(pose, goals, targets, lengths, TOLERANCE)
    miss = np.where(goals, np.linalg.norm(out - targets, axis=-1), 0.0).max(axis=1)
    assert (miss < TOLERANCE).all(), miss
    np.testing.assert_allclose(skeleton.bone_lengths(out), lengths, atol=1e-9)
    shift = np.linalg.norm(out[:, spine] - pose[:, spine], axis=-1)
    assert (shift >= beyond - 1e-6).all() and (shift < 1.5 * beyond + 1e-3).all()
    for parent, children in (("pelvis", ["spine", "l_thigh", "r_thigh"]),
                             ("chest", ["neck", "l_clavicle", "r_clavicle"])):
        branch = skeleton.joint_indices([parent, *children])
        before = np.linalg.norm(pose[:, branch, None] - pose[:, None, branch], axis=-1)
        after = np.linalg.norm(out[:, branch, None] - out[:, None, branch], axis=-1)
        np.testing.assert_allclose(after, before, atol=1e-9)


def test_effector_weight_rises_smoothly_with_a_full_body_request(synthetic_clip: np.ndarray
                                                                 ) -> None:
    """Local requests (pins, one to three moved ends) keep the drag weights; they move
    geometrically with the fourth-most-moved end to the full-body weights, no jump."""
    pose = np.repeat(_poses(synthetic_clip, 1), 5, axis=0)
    ends = skeleton.joint_indices(skeleton.END_JOINTS)
    mask = np.zeros(pose.shape[:2])
    mask[:, ends] = 1.0  # every end an effector: moved or pinned where it is
    targets = pose.copy()
    step = refine.FULL_BODY_MOVE * np.array([0.0, 0.5, 1.0, 2.0, 1.0])
    targets[:, ends[:3], 1] += 0.3  # three ends moved far
    targets[:4, ends[3], 1] += step[:4]  # the fourth: not, half, just, twice the scale
    targets[4, ends[3:], 1] += step[4]  # row 4: the fourth and fifth, at the scale
    share = refine.full_body_share(mask, targets, pose)
    np.testing.assert_allclose(share, [0.0, 0.5, 1.0, 1.0, 1.0])
    low, high = refine.EFFECTOR_WEIGHT, refine.FULL_BODY_EFFECTOR_WEIGHT
    np.testing.assert_allclose(refine.effector_weights(share),
                               [low, np.sqrt(low * high), high, high, high])
    # The hold on the other joints falls the same way, from firm to the full-body one.
    hold, loose = refine.LEAST_CHANGE, refine.FULL_BODY_LEAST_CHANGE
    np.testing.assert_allclose(refine.least_change_weights(share),
                               [hold, np.sqrt(hold * loose), loose, loose, loose])
    mask[1, ends[3]] = 0.0  # no effector there: its target does not count
    assert refine.full_body_share(mask, targets, pose)[1] == 0.0


def test_rigid_rows_jacobian_matches_a_finite_difference(synthetic_clip: np.ndarray) -> None:
    rng = np.random.default_rng(2)
    pose = _poses(synthetic_clip, 3) + rng.normal(0, 0.01, (3, 21, 3))
    spans = refine.rigid_spans(_poses(synthetic_clip, 3))
    jac = rng.normal(size=(3, 63, 4))
    _, rjac = refine._rigid_block(pose, jac, spans)
    for k in range(4):
        step = (jac[:, :, k] * FD_STEP).reshape(pose.shape)
        fd = (refine._rigid_block(pose + step, None, spans)[0]
              - refine._rigid_block(pose - step, None, spans)[0]) / (2 * FD_STEP)
        np.testing.assert_allclose(rjac[:, :, k], fd, atol=JACOBIAN_ATOL)
    # The start pose's own spans: nothing to correct.
    np.testing.assert_allclose(refine._rigid_block(_poses(synthetic_clip, 3), None, spans)[0],
                               0.0, atol=1e-12)


def test_the_refinement_keeps_what_a_rig_holds_rigid(shipped_models, manifold_clip) -> None:
    """Both hands dragged 15 cm, refined in model space: with the start's branch spans, the
    distances between the pelvis's and the chest's children (one bone each on a rig) stay
    much nearer the start's than without, and the hands get as near their targets."""
    from blender_addon.core.normalize import to_model_space

    model, _ = to_model_space(manifold_clip[::9])
    b = len(model)
    z = shipped_models.encode(model.astype(np.float32))
    lengths = skeleton.bone_lengths(model)
    weights = np.zeros((b, 21))
    weights[:, HANDS] = 1.0
    targets = model.copy()
    targets[:, HANDS] += np.array([0.0, 0.15, 0.05])
    offset = model - shipped_models.decode(z).astype(np.float64)
    spans = refine.rigid_spans(model)
    out = {}
    for name, given in (("without", None), ("with", spans)):
        _, pose, _ = refine.refine(shipped_models, z, offset, model, targets, weights, None,
                                   np.ones(b), 3, np.zeros((b, 2)), lengths, spans=given)
        out[name] = pose
    off = {k: np.abs(refine.rigid_spans(p) - spans).max(axis=1) for k, p in out.items()}
    assert np.median(off["with"]) < RIGID_GAIN * np.median(off["without"]), off
    miss = {k: np.median(np.linalg.norm(p[:, HANDS] - targets[:, HANDS], axis=-1))
            for k, p in out.items()}
    assert miss["with"] < HAND_MISS_RATIO * miss["without"], miss


def test_shrug_jacobian_matches_a_finite_difference(synthetic_clip: np.ndarray) -> None:
    """The clavicles' turns: their columns exact at any turn, the other variables' columns
    carried through the turn exactly where it is zero (the refinement's first Jacobian)."""
    rng = np.random.default_rng(3)
    pose = _poses(synthetic_clip, 3)
    jac = rng.normal(size=(3, 63, 4))
    turn = rng.normal(0, 0.2, (3, 4))
    _, tjac = refine._shrugged(pose, turn, jac)
    assert tjac.shape == (3, 63, 8)
    for k in range(4):
        step = np.zeros_like(turn)
        step[:, k] = FD_STEP
        fd = (refine._shrugged(pose, turn + step)[0] - refine._shrugged(pose, turn - step)[0])
        np.testing.assert_allclose(tjac[:, :, 4 + k], fd.reshape(3, 63) / (2 * FD_STEP),
                                   atol=JACOBIAN_ATOL)
    zero = np.zeros_like(turn)
    _, tjac = refine._shrugged(pose, zero, jac)
    for k in range(4):
        step = (jac[:, :, k] * FD_STEP).reshape(pose.shape)
        fd = (refine._shrugged(pose + step, zero)[0] - refine._shrugged(pose - step, zero)[0])
        np.testing.assert_allclose(tjac[:, :, k], fd.reshape(3, 63) / (2 * FD_STEP),
                                   atol=JACOBIAN_ATOL)


def test_a_shrug_turns_the_clavicles_and_carries_the_arms(synthetic_clip: np.ndarray) -> None:
    """Bone lengths kept, only the arms moved (carried as they hang, not swung), and the
    shoulders metric (the angle between the clavicle bones) changed by at most the turns;
    positive elevation turns lower both shoulders, protraction turns move them forward or
    back."""
    from blender_addon.core.metrics import evaluate_metric, metric_by_name

    pose = _poses(synthetic_clip, 4)
    turn = np.array([[0.1, 0.1, 0, 0], [-0.2, -0.2, 0, 0], [0.05, 0, 0, 0], [0, 0, 0.1, 0.1]])
    out, _ = refine._shrugged(pose, turn)
    np.testing.assert_allclose(skeleton.bone_lengths(out), skeleton.bone_lengths(pose),
                               atol=1e-12)
    arms = np.r_[refine._SHRUG_NEXT, refine._SHRUG_BELOW.ravel()]
    still = np.setdiff1d(np.arange(skeleton.NUM_JOINTS), arms)
    np.testing.assert_array_equal(out[:, still], pose[:, still])
    # The arms hang as they did: each shoulder moves, its arm's bones keep their directions.
    below = refine._SHRUG_BELOW.ravel()
    np.testing.assert_allclose(out[:, below] - out[:, skeleton.PARENTS[below]],
                               pose[:, below] - pose[:, skeleton.PARENTS[below]], atol=1e-12)
    shoulders = skeleton.joint_indices(["l_upperarm", "r_upperarm"])
    lowered = (out[:, shoulders, 1] - pose[:, shoulders, 1]).sum(axis=1)
    assert lowered[0] < 0 < lowered[1] and abs(lowered[3]) < 1e-3
    forward = np.abs(out[:, shoulders, 2] - pose[:, shoulders, 2]).sum(axis=1)
    assert forward[3] > 5 * abs(lowered[3])
    spec = metric_by_name("shoulders_openness")
    assert refine.moves_shoulders(spec)
    assert not refine.moves_shoulders(metric_by_name("l_elbow_bend"))
    change = np.abs(evaluate_metric(out, spec) - evaluate_metric(pose, spec))
    # At most the turns (each clavicle's own turn changes the angle by at most its own).
    assert (change <= np.degrees(np.abs(turn).sum(axis=1)) + 1e-9).all()
    assert change[1] > change[0] > 0 and change[3] > 0


def test_a_held_angle_at_its_kink_keeps_its_cost_but_no_gradient() -> None:
    """Clavicles in line (0 degrees): any move opens the angle, so a forward difference
    points every way; held there, the row has no gradient. Off the kink it has one."""
    from blender_addon.core.metrics import evaluate_metric, metric_by_name
    from tests.test_metrics import pose_from

    spec = metric_by_name("shoulders_openness")
    line = pose_from()[None]
    raised = pose_from({"l_upperarm": (1.0, 0.2, 0.0), "r_upperarm": (-1.0, 0.2, 0.0)})[None]
    for pose, at_kink in ((line, True), (raised, False)):
        value = evaluate_metric(pose, spec)
        rows = refine.MetricRows([spec], [value], [np.full(1, refine.HOLD_WEIGHT)])
        res, grad = refine._metric_block(pose, rows)
        np.testing.assert_allclose(res, 0.0, atol=1e-9)
        assert (np.abs(grad).max() == 0.0) == at_kink


def test_forward_difference_probes_skip_the_rigid_fit_only_where_it_cannot_see(
        synthetic_clip: np.ndarray) -> None:
    """The metric rows' probes, as a rig shows them: only coordinates of the joints the
    rigid fit reads (rigid_branches.FIT_JOINTS) go through it; moving any other joint moves
    it alone, so the shortcut gives the full fit's probes."""
    from blender_addon.core.rigid_branches import keep_rigid

    rng = np.random.default_rng(3)
    start = synthetic_clip[:6]
    pose = synthetic_clip[10:16] + rng.normal(scale=0.02, size=start.shape)
    shown = keep_rigid(pose, start)
    fast = refine._probes(pose, shown, start)
    full = refine._as_rig_shows(pose[:, None] + refine._EYE_POSE[None], start)
    np.testing.assert_allclose(fast, full, atol=1e-12)
    assert len(rigid_branches.FIT_JOINTS) < skeleton.NUM_JOINTS


@pytest.mark.usefixtures("with_kernels")
def test_a_kernel_refinement_off_the_numpy_steps_is_refused(shipped_models, manifold_clip,
                                                            monkeypatch) -> None:
    """The first refinement on the kernels is checked against the numpy steps: one that
    disagrees switches the kernels off for the session, and the solve takes numpy's."""
    monkeypatch.setattr(native, "_refused", None)
    monkeypatch.setattr(refine.native_run, "_native_checked", False)
    # (onnxruntime's networks on both sides: the compiled ones would answer the first before
    # the refusal)
    monkeypatch.setattr(pipeline.networks, "compiled_universal", lambda models: None)
    real = refine.native_run._refine_native

    def off(*args):
        latent, pose, shift = real(*args)
        return latent, pose + 1e-6, shift

    monkeypatch.setattr(refine.native_run, "_refine_native", off)
    pose = manifold_clip[30]
    effs = _drags(pose, 1)[0]
    got = PoseEditor(shipped_models).solve(pose, effs).positions
    assert native.kernels() is None and "effector refinement" in native._refused
    with native.switched_off():
        want = PoseEditor(shipped_models).solve(pose, effs).positions
    # (the start pose was prepared by the kernels before the refusal: the same to rounding)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
