"""Whole solves with the compiled kernels (the hot loops: rig IK, exact reach, the rigid
branches, the refinement's steps, the reach bound) against numpy alone."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import native, pipeline, reach_bounds, refine, skeleton
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions

pytestmark = pytest.mark.usefixtures("with_kernels")
AGREE_M = 1e-9  # the kernels' steps are numpy's, in another order of float operations
J = skeleton.JOINT_INDEX


def _drags(poses: np.ndarray, rng: np.random.Generator) -> list[list[Effector]]:
    """User-style drags: one or both hands, a foot, the head, the pelvis with a hand, 2-60
    cm; some half-weight effectors and pins."""
    sets = (["l_hand"], ["l_hand", "r_hand"], ["r_foot"], ["head"], ["pelvis", "r_hand"],
            ["l_hand", "r_hand", "l_foot", "r_foot", "head"])
    out = []
    for i, p in enumerate(poses):
        effs = []
        for k, name in enumerate(sets[i % len(sets)]):
            off = rng.normal(size=3)
            off *= rng.uniform(0.02, 0.6) / np.linalg.norm(off)
            pin = k > 0 and rng.random() < 0.3
            effs.append(Effector(name, None if pin else p[J[name]] + off, pin=pin,
                                 weight=1.0 if rng.random() < 0.8 else 0.5))
        out.append(effs)
    return out


def test_solves_with_the_kernels_are_numpys(shipped_models, synthetic_clip,
                                                          monkeypatch) -> None:
    """Single solves, refined or not, and drag updates: the same pose, misses and notes
    with the kernels as with numpy alone (the networks the same: onnxruntime's; each
    kernel is held to its numpy code by its own tests). Drags that need rig IK after the
    re-aims are among them."""
    monkeypatch.setattr(pipeline.networks, "compiled_universal", lambda models: None)
    monkeypatch.setattr(refine.point, "compiled_decoder", lambda models: None)
    editor = PoseEditor(shipped_models)
    rng = np.random.default_rng(1)
    poses = synthetic_clip[::3]
    calls, handed_back, beyond = [], 0, 0
    run = pipeline.finish._reach_rest
    monkeypatch.setattr(pipeline.finish, "_reach_rest",
                        lambda *a, **k: calls.append(1) or run(*a, **k))
    for p, effs in zip(poses, _drags(poses, rng), strict=True):
        for options, drag in ((SolveOptions(refine_steps=0), False), (SolveOptions(), False),
                              (SolveOptions(), True)):
            before = len(calls)
            fast = editor.solve(p, effs, options=options, drag=drag)
            handed_back += len(calls) > before
            editor._starts.clear()
            with native.switched_off():
                slow = editor.solve(p, effs, options=options, drag=drag)
            editor._starts.clear()
            np.testing.assert_allclose(fast.positions, slow.positions, rtol=0, atol=AGREE_M)
            np.testing.assert_allclose(fast.effector_error, slow.effector_error, rtol=0,
                                       atol=AGREE_M)
            assert fast.notes == slow.notes
            beyond += any(reach_bounds.NOTE_MARK in note for note in fast.notes)
    assert handed_back  # some drags went on to rig IK after the re-aims
    assert beyond  # and some notes named targets beyond reach (the bound's kernel)
