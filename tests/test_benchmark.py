"""Benchmark figures pinned (as LAFAN1's evaluate_test does): a change that makes the
shipped models or the engine less accurate fails here. Accuracy only: speed is measured by
``python -m training benchmark``, never in a unit test."""

from __future__ import annotations

from itertools import islice

import numpy as np
import pytest

from blender_addon.core import skeleton
from blender_addon.core.bvh import iter_bvh_texts
from blender_addon.core.pipeline import PoseEditor, SolveOptions
from training.data.dataset import canonical_clip
from training.evaluation.benchmark import METHODS, REFINE_STEPS, accuracy, align_to, sample_pairs
from training.evaluation.evaluate import fixed_mask

CLIP_STRIDE = 14  # every 14th clip of dataset 1: 13 clips of different actions and styles
PAIRS = 300
ENDS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
REFINED = next(m for m in METHODS if m.startswith("universal + refinement"))
# The targets: refinement under 5 mm median, lengths under 0.1 mm, and the
# non-effector joints closer to the ground truth than classic FABRIK leaves them. With the
# hands alone, FABRIK (which leaves the rest of the body where it was) ties with us on
# these mostly still clips (6.33 vs 6.30 cm when pinned): allow it 5%.
MAX_REFINED_MEDIAN_MM = 5.0
MAX_LENGTH_ERROR_MM = 0.1
HANDS_ONLY_FABRIK_MARGIN = 1.05


@pytest.fixture(scope="module")
def real_clips(bandai_small_archive) -> list[np.ndarray]:
    texts = islice(iter_bvh_texts([bandai_small_archive]), 0, None, CLIP_STRIDE)
    return [canonical_clip(src, text)[0] for src, text in texts]


@pytest.mark.parametrize("names", [ENDS[:2], ENDS], ids=["hands", "hands-feet-head"])
def test_real_mocap_figures(shipped_models, real_clips: list[np.ndarray],
                            names: tuple[str, ...]) -> None:
    editor = PoseEditor(shipped_models)
    x, x2 = sample_pairs(real_clips, PAIRS, np.random.default_rng(0))
    mask = fixed_mask(names, PAIRS)
    figures = {m: accuracy(editor, x, x2, mask, o)[0] for m, o in METHODS.items()}
    assert figures[REFINED]["effector_median_mm"] < MAX_REFINED_MEDIAN_MM
    margin = HANDS_ONLY_FABRIK_MARGIN if len(names) == 2 else 1.0
    assert figures[REFINED]["non_effector_mpjpe_cm"] < \
        margin * figures["classic FABRIK"]["non_effector_mpjpe_cm"]
    for method in ("universal", REFINED, "chained specialized (2021 paper)"):
        assert figures[method]["bone_length_error_max_mm"] < MAX_LENGTH_ERROR_MM
    if len(names) == len(ENDS):  # issue 8: the universal solver beats the paper's chain
        for key in ("effector_cm", "non_effector_mpjpe_cm"):
            assert figures["universal"][key] < \
                figures["chained specialized (2021 paper)"][key]


def test_refinement_on_self_made_poses(shipped_models, manifold_clip: np.ndarray) -> None:
    editor = PoseEditor(shipped_models)
    x = manifold_clip[:-15]
    x2 = align_to(manifold_clip[15:], x)
    mask = fixed_mask(ENDS, len(x))
    out = editor.solve_arrays(x, mask, x2, options=SolveOptions(refine_steps=REFINE_STEPS))
    err = np.linalg.norm(out.positions - x2, axis=-1)[:, skeleton.joint_indices(ENDS)]
    assert np.median(err) * 1000 < MAX_REFINED_MEDIAN_MM
