"""What the networks learn from: rest poses, user-style drags, null edits, metric requests
across the range (batches drawn from a small synthetic dataset)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blender_addon.core import skeleton
from blender_addon.core.metrics import metric_by_name
from blender_addon.core.normalize import facing_yaw
from training.data.dataset import PoseData
from training.data.rest_poses import rest_poses
from training.learning.nets import MetricNet, PoseAutoencoder, UniversalSolver
from training.learning.tasks import (
    DRAG_JOINTS,
    DRAG_OFFSET_M,
    END_JOINTS,
    FULL_BODY_MIN_ENDS,
    FULL_BODY_OTHER_JOINTS_WEIGHT,
    FULL_BODY_SHARE,
    KEEP_WEIGHT,
    METRIC_RANGE_PERCENTILES,
    NULL_KEEP_WEIGHT,
    OTHER_JOINTS_WEIGHT,
    MetricTask,
    PoseSampler,
    UniversalSolverTask,
    sample_drags,
)

BATCH = 2000
J = skeleton.JOINT_INDEX


@pytest.fixture(scope="module")
def sampler(tiny_data: Path) -> PoseSampler:
    spec = metric_by_name("l_knee_bend")
    return PoseSampler(PoseData.load(tiny_data), "train", mirror=True, metrics=(spec,))


def test_rest_poses_are_t_and_a_poses_in_model_space() -> None:
    gen = torch.Generator().manual_seed(0)
    poses = rest_poses(500, gen, floor=0.07).double().numpy()
    np.testing.assert_allclose(skeleton.bone_lengths(poses),
                               np.broadcast_to(skeleton.BONE_LENGTHS, (500, 21)), atol=1e-5)
    assert np.abs(facing_yaw(poses)).max() < np.deg2rad(8)
    np.testing.assert_allclose(poses[:, 0, [0, 2]], 0.0, atol=1e-6)
    feet = skeleton.joint_indices(["l_foot", "r_foot", "l_toe", "r_toe"])
    np.testing.assert_allclose(poses[:, feet, 1].min(axis=1), 0.07, atol=1e-5)
    arm = poses[:, J["l_hand"]] - poses[:, J["l_upperarm"]]
    drop = np.degrees(np.arctan2(-arm[:, 1], arm[:, 0]))
    t_pose, a_pose = drop < 15, (drop > 25) & (drop < 55)
    assert (t_pose | a_pose).mean() > 0.98  # T-poses and A-poses only (2 degree jitter)
    assert 0.4 < t_pose.mean() < 0.6
    assert (poses[:, J["head"], 1] > poses[:, J["chest"], 1]).all()


def test_drags_move_one_or_two_end_joints_and_pin_others() -> None:
    gen = torch.Generator().manual_seed(1)
    x = rest_poses(BATCH, gen)
    targets, mask, weights = sample_drags(x, gen)
    moved = (targets - x).norm(dim=-1)
    is_moved = moved > 0
    assert ((moved[is_moved] >= DRAG_OFFSET_M[0] - 1e-6)
            & (moved[is_moved] <= DRAG_OFFSET_M[1] + 1e-6)).all()
    counts = is_moved.sum(1)
    assert set(counts.tolist()) == {1, 2}
    assert 0.2 < (counts == 2).float().mean() < 0.4
    allowed = torch.zeros(21, dtype=torch.bool)
    allowed[list(DRAG_JOINTS)] = True
    assert not (mask.bool() & ~allowed).any()  # only hands, feet, head, pelvis
    assert (mask.bool() | ~is_moved).all()  # every moved joint is an effector
    pins = mask.bool() & ~is_moved
    assert 0.3 < pins.float().sum() / (~is_moved[:, allowed]).float().sum() < 0.7
    assert torch.equal(weights, mask)


def test_universal_batches_mix_pairs_drags_and_null_edits(sampler: PoseSampler) -> None:
    ae = PoseAutoencoder(torch.zeros(63), torch.ones(63))
    task = UniversalSolverTask(UniversalSolver(torch.zeros(63), torch.ones(63), 64), ae)
    gen = torch.Generator().manual_seed(2)
    x, x2, keep, mask, weights, k = task.batch(sampler, BATCH, gen)
    full_body_pair = k == FULL_BODY_OTHER_JOINTS_WEIGHT
    pair, null = (k == OTHER_JOINTS_WEIGHT) | full_body_pair, k == NULL_KEEP_WEIGHT
    drag_or_other = k == KEEP_WEIGHT
    assert (pair | null | drag_or_other).all()
    assert 0.35 < pair.float().mean() < 0.5 and 0.05 < null.float().mean() < 0.15
    # real pairs that ask for (nearly) the whole body follow x' closely; the others keep k
    ends = mask[:, list(END_JOINTS)].sum(1)
    assert torch.equal(full_body_pair, pair & (ends >= FULL_BODY_MIN_ENDS))
    five = pair & (ends == len(END_JOINTS))
    assert FULL_BODY_SHARE < five.float().sum() / pair.float().sum() < FULL_BODY_SHARE + 0.15
    assert torch.equal(keep[pair], x2[pair])  # real pairs: the others follow x'
    assert torch.equal(keep[~pair], x[~pair])  # drags, other poses, null: the others stay
    assert torch.equal(x2[null], x[null])  # null edits ask for nothing
    assert (mask.sum(1) >= 1).all() and (weights <= mask).all()
    # a share of the starting poses are rest poses (exact canonical T/A-poses, arms level
    # or down at 30-50 degrees), which the synthetic clips never hold
    def straight(a: str, b: str, bones: list[int]) -> torch.Tensor:
        reach = (x[:, J[b]] - x[:, J[a]]).norm(dim=-1)
        return reach > 0.995 * float(skeleton.BONE_LENGTHS[bones].sum())

    rest = (straight("l_upperarm", "l_hand", [7, 8]) & straight("r_upperarm", "r_hand", [11, 12])
            & straight("l_thigh", "l_foot", [14, 15]) & straight("r_thigh", "r_foot", [18, 19])
            & straight("pelvis", "head", [1, 2, 3, 4]))
    assert 0.05 < rest.float().mean() < 0.15
    pred = x.clone()  # the identity scores zero on null edits and > 0 elsewhere
    sq = ((pred - x2) ** 2).sum(-1)
    assert float((sq[null] * weights[null]).sum()) == 0.0
    assert float((sq[drag_or_other] * weights[drag_or_other]).sum()) > 0.0


def test_metric_requests_span_the_range(sampler: PoseSampler) -> None:
    spec = metric_by_name("l_knee_bend")
    values = sampler.metric_values[:, 0].numpy()
    lo, hi = np.percentile(values, METRIC_RANGE_PERCENTILES)
    ae = PoseAutoencoder(torch.zeros(63), torch.ones(63))
    task = MetricTask(MetricNet(64, float(values.mean()), float(values.std())), ae, 0, spec,
                      (float(lo), float(hi)))
    gen = torch.Generator().manual_seed(3)
    x, x2, value, ranged = task.batch(sampler, BATCH, gen)
    r = ranged.bool()
    assert 0.3 < r.float().mean() < 0.5
    assert torch.equal(x2[r], x[r])
    v = value[r].numpy()
    assert v.min() >= lo - 1e-4 and v.max() <= hi + 1e-4
    assert v.max() - v.min() > 0.8 * (hi - lo)  # across the whole range, not near x
    with torch.no_grad():
        assert float(task(x, x2, value, ranged)) > 0


def test_metric_reach_reports_every_metric(tiny_set) -> None:
    from blender_addon.core.metrics import DEFAULT_METRICS
    from training.evaluation.metric_reach import DELTAS, markdown, metric_reach

    result = metric_reach(tiny_set.runs, tiny_set.data, poses=40, split="train")
    assert set(result["metrics"]) == {s.name for s in DEFAULT_METRICS}
    for row in result["metrics"].values():
        cells = [row[f"{d:+g}"] for d in DELTAS]
        assert all(c is None or (np.isfinite(c["reach"]) and c["poses"] >= 10) for c in cells)
    assert any(c is not None for row in result["metrics"].values()
               for c in (row[f"{d:+g}"] for d in DELTAS))
    assert markdown(result).count("\n") == len(DEFAULT_METRICS) + 1


def test_solver_check_reports_drags_and_null_edits(tiny_set) -> None:
    from training.evaluation.solver_check import solver_check

    result = solver_check(tiny_set.runs, tiny_set.data, n=64, split="train")
    figures = {k: v for k, v in result.items() if k.endswith(("_mm", "_cm", "_cm_mean"))}
    assert len(figures) == 12
    flat = [v for f in figures.values() for v in (f if isinstance(f, list) else [f])]
    assert all(np.isfinite(v) and v >= 0 for v in flat)
    lo, hi = result["null_hands_max_joint_mm"]
    assert lo <= hi
