"""Pose metrics: values on constructed poses, batching, mirroring, JSON specs and errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from blender_addon.core.metrics import (
    DEFAULT_METRICS,
    MetricSpec,
    evaluate_metric,
    evaluate_metrics,
    load_metric_specs,
    metric_by_name,
)
from blender_addon.core.skeleton import BONE_LENGTHS, JOINT_INDEX, NUM_JOINTS, PARENTS, mirror_pose
from tests.synth import TPOSE_DIRECTIONS

J = JOINT_INDEX
L = {name: BONE_LENGTHS[i] for name, i in JOINT_INDEX.items()}  # bone lengths by joint name
LEG = L["l_shin"] + L["l_foot"]
NAMES = [s.name for s in DEFAULT_METRICS]



def pose_from(dirs: dict[str, tuple[float, float, float]] | None = None) -> np.ndarray:
    """FK of the T-pose with some bone directions replaced; pelvis at leg height."""
    all_dirs = {**TPOSE_DIRECTIONS, **(dirs or {})}
    pos = np.zeros((NUM_JOINTS, 3))
    pos[0] = (0.0, LEG, 0.0)
    for name, d in all_dirs.items():
        j = J[name]
        d = np.asarray(d, dtype=np.float64)
        pos[j] = pos[PARENTS[j]] + BONE_LENGTHS[j] * d / np.linalg.norm(d)
    return pos


def values(pose: np.ndarray) -> dict[str, float]:
    return dict(zip(NAMES, evaluate_metrics(pose).tolist(), strict=True))


def test_default_metrics_are_the_documented_ones():
    assert NAMES == [
        "spine_flexion", "shoulders_openness", "legs_spread", "l_elbow_bend", "r_elbow_bend",
        "l_knee_bend", "r_knee_bend", "feet_distance", "hands_height", "head_tilt",
    ]  # fmt: skip
    assert all(s.description for s in DEFAULT_METRICS)
    assert [s.unit for s in DEFAULT_METRICS] == ["deg"] * 7 + ["m", "m", "deg"]


def test_tpose_values():
    v = values(pose_from())
    for name in ("spine_flexion", "l_elbow_bend", "r_elbow_bend", "l_knee_bend", "r_knee_bend"):
        assert v[name] == pytest.approx(0.0, abs=1e-6), name
    assert v["head_tilt"] == pytest.approx(0.0, abs=1e-6)
    # shoulders_openness = angle(l_upperarm - l_clavicle, r_clavicle - r_upperarm): the
    # T-pose's clavicles lie on one line across the chest.
    assert v["shoulders_openness"] == pytest.approx(0.0, abs=1e-6)
    # legs_spread = angle(pelvis - r_shin, l_shin - pelvis): knees straight below the hips,
    # u = (hip, thigh, 0), v = (hip, -thigh, 0) -> 2 atan(thigh / hip).
    hip, thigh = L["l_thigh"], L["l_shin"]
    assert v["legs_spread"] == pytest.approx(np.degrees(2 * np.arctan2(thigh, hip)), abs=1e-9)
    assert v["feet_distance"] == pytest.approx(2 * L["l_thigh"], abs=1e-12)
    assert v["hands_height"] == pytest.approx(LEG + L["spine"] + L["chest"], abs=1e-12)


@pytest.mark.parametrize("shrug_deg", [5.0, 20.0])
def test_shoulders_openness_of_a_known_shrug(shrug_deg):
    # Each clavicle raised by the same angle: the two bones meet at twice that angle, and
    # a hunch (both swung forward) opens it the same way.
    a = np.radians(shrug_deg)
    shrug = pose_from({"l_upperarm": (np.cos(a), np.sin(a), 0),
                       "r_upperarm": (-np.cos(a), np.sin(a), 0)})
    assert values(shrug)["shoulders_openness"] == pytest.approx(2 * shrug_deg, abs=1e-9)
    hunch = pose_from({"l_upperarm": (np.cos(a), 0, np.sin(a)),
                       "r_upperarm": (-np.cos(a), 0, np.sin(a))})
    assert values(hunch)["shoulders_openness"] == pytest.approx(2 * shrug_deg, abs=1e-9)
    # One side alone: the angle is that side's.
    one = pose_from({"l_upperarm": (np.cos(a), np.sin(a), 0)})
    assert values(one)["shoulders_openness"] == pytest.approx(shrug_deg, abs=1e-9)


@pytest.mark.parametrize("alpha_deg", [0.0, 15.0, 30.0, 45.0])
def test_legs_spread_of_a_known_abduction(alpha_deg):
    a = np.radians(alpha_deg)
    pose = pose_from(
        {
            "l_shin": (np.sin(a), -np.cos(a), 0),
            "l_foot": (np.sin(a), -np.cos(a), 0),
            "r_shin": (-np.sin(a), -np.cos(a), 0),
            "r_foot": (-np.sin(a), -np.cos(a), 0),
        }
    )
    hip, thigh = L["l_thigh"], L["l_shin"]
    expected = np.degrees(2 * np.arctan2(thigh * np.cos(a), hip + thigh * np.sin(a)))
    v = values(pose)
    assert v["legs_spread"] == pytest.approx(expected, abs=1e-9)
    assert v["feet_distance"] == pytest.approx(2 * (hip + LEG * np.sin(a)), abs=1e-12)
    assert v["l_knee_bend"] == pytest.approx(0.0, abs=1e-5)  # arccos near 1: ~1e-6 deg


def test_bends_and_tilts():
    pose = pose_from(
        {
            "l_hand": (0, 0, 1),  # left forearm forward: 90 degrees at the elbow
            "r_hand": (-1, -1, 0),  # right forearm 45 degrees down
            "l_foot": (0, -np.cos(np.radians(40)), -np.sin(np.radians(40))),  # knee 40 deg
            "head": (0, np.cos(np.radians(30)), np.sin(np.radians(30))),  # head 30 deg fwd
        }
    )
    v = values(pose)
    assert v["l_elbow_bend"] == pytest.approx(90.0)
    assert v["r_elbow_bend"] == pytest.approx(45.0)
    assert v["l_knee_bend"] == pytest.approx(40.0)
    assert v["r_knee_bend"] == pytest.approx(0.0, abs=1e-6)
    assert v["head_tilt"] == pytest.approx(30.0)
    assert v["spine_flexion"] == pytest.approx(0.0, abs=1e-6)
    # Hands: left at shoulder height, right 45 degrees down by the forearm length.
    shoulder_y = LEG + L["spine"] + L["chest"]
    assert v["hands_height"] == pytest.approx(shoulder_y - 0.5 * L["r_hand"] / np.sqrt(2))


def test_spine_flexion_of_a_forward_bend():
    bend = np.radians(35)
    up = (0, np.cos(bend), np.sin(bend))
    pose = pose_from({"spine": up, "chest": up, "neck": up, "head": up})
    v = values(pose)
    assert v["spine_flexion"] == pytest.approx(35.0)
    assert v["head_tilt"] == pytest.approx(35.0)


def test_batched_evaluation_matches_pose_by_pose():
    rng = np.random.default_rng(0)
    poses = pose_from() + 0.1 * rng.standard_normal((3, 4, NUM_JOINTS, 3))
    batched = evaluate_metrics(poses)
    assert batched.shape == (3, 4, len(DEFAULT_METRICS)) and batched.dtype == np.float64
    for i in range(3):
        for t in range(4):
            np.testing.assert_allclose(batched[i, t], evaluate_metrics(poses[i, t]), rtol=1e-12)
            for m, spec in enumerate(DEFAULT_METRICS):
                assert batched[i, t, m] == pytest.approx(float(evaluate_metric(poses[i, t], spec)))
    assert evaluate_metric(poses, DEFAULT_METRICS[0]).shape == (3, 4)
    np.testing.assert_allclose(evaluate_metrics(poses.astype(np.float32)), batched, atol=1e-3)
    assert evaluate_metrics(poses, []).shape == (3, 4, 0)


def test_mirror_swaps_left_and_right_metrics():
    rng = np.random.default_rng(1)
    poses = pose_from() + 0.1 * rng.standard_normal((10, NUM_JOINTS, 3))
    a, b = evaluate_metrics(poses), evaluate_metrics(mirror_pose(poses))
    idx = {n: i for i, n in enumerate(NAMES)}
    for left, right in (("l_elbow_bend", "r_elbow_bend"), ("l_knee_bend", "r_knee_bend")):
        np.testing.assert_allclose(b[:, idx[left]], a[:, idx[right]], atol=1e-9)
        np.testing.assert_allclose(b[:, idx[right]], a[:, idx[left]], atol=1e-9)
    assert not np.allclose(a[:, idx["l_elbow_bend"]], a[:, idx["r_elbow_bend"]])
    for name in ("spine_flexion", "shoulders_openness", "legs_spread", "feet_distance"):
        np.testing.assert_allclose(b[:, idx[name]], a[:, idx[name]], atol=1e-9)
    for name in ("hands_height", "head_tilt"):
        np.testing.assert_allclose(b[:, idx[name]], a[:, idx[name]], atol=1e-9)


def test_zero_length_vectors_give_finite_zero_without_warnings():
    pose = pose_from()
    pose[J["l_hand"]] = pose[J["l_forearm"]]
    pose[J["neck"]] = pose[J["pelvis"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = values(pose)
        everything_at_once = evaluate_metrics(np.zeros((2, NUM_JOINTS, 3)))
    assert v["l_elbow_bend"] == 0.0 and v["spine_flexion"] == 0.0
    assert np.all(np.isfinite(everything_at_once))


def test_axis_angles():
    pose = pose_from()
    for axis, expected in (("up", 90), ("down", 90), ("left", 0), ("right", 180), ("forward", 90)):
        spec = MetricSpec("arm", "angle", ("l_upperarm", "l_forearm"), axis=axis)
        assert evaluate_metric(pose, spec) == pytest.approx(expected), axis


def test_json_round_trip(tmp_path):
    dicts = [s.to_dict() for s in DEFAULT_METRICS]
    assert dicts[0]["a"] == ["pelvis", "neck"] and dicts[0]["b"] == "up"
    assert dicts[1]["a"] == ["l_clavicle", "l_upperarm"]
    assert dicts[1]["b"] == ["r_upperarm", "r_clavicle"]
    assert dicts[7]["joints"] == ["l_foot", "r_foot"]
    text = json.dumps(dicts)
    assert [MetricSpec.from_dict(d) for d in json.loads(text)] == list(DEFAULT_METRICS)
    path = tmp_path / "metrics.json"
    path.write_text(text)
    assert load_metric_specs(path) == list(DEFAULT_METRICS)
    # The short forms of the documentation parse too, with units following the kind.
    short = [
        {"name": "spine_flexion", "kind": "angle", "a": ["pelvis", "neck"], "b": "up"},
        {"name": "feet_distance", "kind": "distance", "joints": ["l_foot", "r_foot"]},
        {"name": "hands_height", "kind": "height", "joints": ["l_hand", "r_hand"]},
    ]
    specs = [MetricSpec.from_dict(d) for d in short]
    assert [s.unit for s in specs] == ["deg", "m", "m"]
    assert specs[1] == MetricSpec("feet_distance", "distance", ("l_foot", "r_foot"))
    np.testing.assert_allclose(
        evaluate_metrics(pose_from(), specs),
        evaluate_metrics(pose_from(), [metric_by_name(s.name) for s in specs]),
    )


def test_metric_by_name():
    assert metric_by_name("head_tilt").joints == ("neck", "head")
    with pytest.raises(KeyError, match="spine_flexion"):
        metric_by_name("nope")


@pytest.mark.parametrize(
    "spec, needle",
    [
        ({"name": "bad", "kind": "angle", "a": ["pelvis", "nek"], "b": "up"}, "'nek'"),
        ({"name": "bad", "kind": "twist", "joints": ["pelvis"]}, "'twist'"),
        ({"name": "bad", "kind": "angle", "a": ["pelvis", "neck"], "b": "sideways"}, "sideways"),
        ({"name": "bad", "kind": "angle", "a": ["pelvis", "neck"]}, "'b'"),
        ({"name": "bad", "kind": "distance", "joints": ["l_foot"]}, "2 joints"),
        ({"name": "bad", "kind": "height", "joints": []}, "at least 1"),
        ({"kind": "height", "joints": ["head"]}, "'name'"),
        ({"name": "bad", "joints": ["head"]}, "'kind'"),
        ({"name": "bad", "kind": "angle", "a": ["pelvis"], "b": "up"}, "'a'"),
        ({"name": "bad", "kind": "height", "joints": ["head"], "descripton": ""}, "descripton"),
        ({"name": "bad", "kind": "height", "joints": ["head"], "unit": "deg"}, "unit"),
    ],
)
def test_bad_specs_raise_value_error_naming_the_problem(spec, needle):
    with pytest.raises(ValueError, match=needle) as err:
        MetricSpec.from_dict(spec, source="my.json")
    assert "my.json" in str(err.value)
    if "name" in spec:
        assert "'bad'" in str(err.value)


def test_unknown_joint_lists_the_canonical_joints():
    with pytest.raises(ValueError, match="unknown joint 'l_wrist'") as err:
        MetricSpec("wrist_height", "height", ("l_wrist",))
    assert "wrist_height" in str(err.value) and "l_hand" in str(err.value)


def test_load_metric_specs_errors_name_file_and_spec(tmp_path):
    path = tmp_path / "custom.json"
    good = {"name": "ok", "kind": "distance", "joints": ["l_hand", "r_hand"]}
    path.write_text(json.dumps([good, {"name": "broken", "kind": "height", "joints": ["x"]}]))
    with pytest.raises(ValueError, match=r"custom\.json \[spec 1\]: metric spec 'broken'"):
        load_metric_specs(path)
    path.write_text(json.dumps([good, good]))
    with pytest.raises(ValueError, match="duplicate"):
        load_metric_specs(path)
    path.write_text(json.dumps(good))
    with pytest.raises(ValueError, match="list"):
        load_metric_specs(path)
    path.write_text("[{")
    with pytest.raises(ValueError, match=r"custom\.json"):
        load_metric_specs(path)
