"""Bone lengths on degenerate skeletons (issue 47): zero-length joints (CMU's ASF-converted
BVH puts the hips, lower back, neck, shoulders and finger bases on their parents), two joints
at one place, very short bones, extra spine and neck joints, toe-less feet. Every method on
every effector set keeps every bone's length, in the engine and through ``python -m training
benchmark --bvh``; the compiled kernels and numpy agree on them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from blender_addon.core import exact_reach, native, skeleton
from blender_addon.core.mapping import MappingError
from blender_addon.core.pipeline import PoseEditor
from tests.synth import DEGENERATE_SKELETONS, TPOSE, synthetic_bvh
from training.data.dataset import canonical_clip
from training.evaluation.benchmark import METHODS, accuracy, sample_pairs
from training.evaluation.evaluate import EFFECTOR_SETS, fixed_mask, random_effector_masks

PAIRS = 60
MAX_LENGTH_ERROR_MM = 0.1  # the target; measured at most 3e-12 mm after the fix
CLIPS = 2
FRAMES = 90
AGREES_M = 1e-12  # kernels against numpy: the same steps in the same order


def _clips(name: str) -> list[np.ndarray]:
    joints = DEGENERATE_SKELETONS[name]
    return [canonical_clip(f"{name}_{s}.bvh", synthetic_bvh(FRAMES, s, joints=joints))[0]
            for s in range(CLIPS)]


def test_the_skeletons_are_degenerate() -> None:
    """What the skeletons hold, as mapped: zero-length and very short canonical bones."""
    lengths = {name: skeleton.bone_lengths(_clips(name)[0][0]) for name in DEGENERATE_SKELETONS}
    index = skeleton.JOINT_INDEX
    for joint in ("spine", "neck", "l_clavicle", "r_clavicle"):  # CMU ASF: on their parents
        assert lengths["cmu_asf"][index[joint]] < 1e-9
    for joint in ("l_thigh", "r_thigh", "spine", "head"):
        assert lengths["coincident"][index[joint]] < 1e-9
    assert 0.0 < lengths["short"][1:].min() < 0.0015
    # the long spine's canonical joints are picked among 4 spine and 3 neck joints
    assert lengths["long_spine"][1:].min() > 0.05


@pytest.mark.parametrize(("joint", "what", "words"), [
    ("LowerArm_L", "upper arm", ("l_forearm (LowerArm_L)", "l_upperarm (UpperArm_L)")),
    ("Foot_R", "shin", ("r_foot (Foot_R)", "r_shin (LowerLeg_R)")),
])
def test_a_limb_without_length_is_refused_naming_its_joints(joint: str, what: str,
                                                            words: tuple[str, ...]) -> None:
    """An elbow on its shoulder or an ankle on its knee leaves a two-bone limb nothing to
    bend: the mapping is refused, naming the file, the joints and why."""
    joints = tuple((n, p, (0.0, 0.0, 0.0) if n == joint else o) for n, p, o in TPOSE)
    with pytest.raises(MappingError) as err:
        canonical_clip("broken.bvh", synthetic_bvh(FRAMES, 0, joints=joints))
    message = str(err.value)
    assert message.startswith("broken.bvh: ") and f"the {what} has no length" in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("name", list(DEGENERATE_SKELETONS))
def test_every_method_keeps_bone_lengths(shipped_models, kernel: str, name: str) -> None:
    clips = _clips(name)
    editor = PoseEditor(shipped_models)
    rng = np.random.default_rng(0)
    worst = {}
    for set_name, names in EFFECTOR_SETS.items():
        x, x2 = sample_pairs(clips, PAIRS, rng)
        mask = random_effector_masks(PAIRS, rng) if names is None else fixed_mask(names, PAIRS)
        for method, options in METHODS.items():
            figures, out = accuracy(editor, x, x2, mask, options)
            assert np.isfinite(out).all()
            worst[f"{set_name} / {method}"] = figures["bone_length_error_max_mm"]
    assert max(worst.values()) < MAX_LENGTH_ERROR_MM, worst


@pytest.mark.parametrize("name", list(DEGENERATE_SKELETONS))
def test_benchmark_bvh_keeps_bone_lengths(shipped_models, tmp_path, name: str) -> None:
    """The issue's command: ``benchmark --bvh <clip> --map auto`` (CMU's ASF-converted
    skeleton first)."""
    from training.cli import main

    path = tmp_path / f"{name}.bvh"
    path.write_text(synthetic_bvh(FRAMES, 0, joints=DEGENERATE_SKELETONS[name]))
    report = tmp_path / "engine.json"
    assert main(["benchmark", "--bvh", str(path), "--map", "auto", "--models",
                 str(shipped_models.folder), "--pairs", str(PAIRS), "--solves", "2",
                 "--json", str(report), "--out", str(tmp_path)]) == 0
    accuracy_table = json.loads(report.read_text())["accuracy"]
    assert len(accuracy_table) == len(EFFECTOR_SETS)
    for set_name, methods in accuracy_table.items():
        assert len(methods) == len(METHODS)
        for method, figures in methods.items():
            assert figures["bone_length_error_max_mm"] < MAX_LENGTH_ERROR_MM, (set_name, method)


@pytest.mark.usefixtures("with_kernels")
def test_the_kernel_takes_the_numpy_steps_on_zero_length_bones() -> None:
    """The exact reach's re-aims with the neck and clavicles on the chest and the head on
    the neck (a turn of a bone without direction turns nothing; a one-bone limb keeps its
    bone): kernels and numpy agree, lengths kept."""
    x = np.concatenate(_clips("cmu_asf") + _clips("coincident"))[::3]
    lengths = skeleton.bone_lengths(x)
    rng = np.random.default_rng(5)
    for share, spread in ((0.3, 0.05), (0.6, 0.3)):
        goals = rng.uniform(size=(len(x), len(skeleton.PARENTS))) < share
        goals[:, skeleton.JOINT_INDEX["head"]] = True
        targets = x[::-1] + rng.normal(scale=spread, size=x.shape)
        bent = goals & (rng.uniform(size=goals.shape) < 0.5)
        for options in ({}, {"straightest": 0.97},
                        {"straightest": 0.99, "bent": bent, "bend_trunk": False}):
            got = exact_reach.solve(x, goals, targets, lengths, 1e-5, **options)
            with native.switched_off():
                want = exact_reach.solve(x, goals, targets, lengths, 1e-5, **options)
            assert np.abs(want - x).max() > 0.1  # they moved
            np.testing.assert_allclose(got, want, rtol=0, atol=AGREES_M)
            np.testing.assert_allclose(skeleton.bone_lengths(got), lengths, rtol=0,
                                       atol=MAX_LENGTH_ERROR_MM / 1000)
