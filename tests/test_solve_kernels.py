"""A solve's start and end in the kernels (solve_kernels) against the numpy code they
replace: the start pose's preparation field by field, and whole solves."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import native, pipeline, reach_bounds, refine, rig_ik, skeleton
from blender_addon.core.normalize import leg_scale, set_bone_lengths_unchecked
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions, _Start

pytestmark = pytest.mark.usefixtures("with_kernels")
AGREE_M = 1e-9  # the kernels' steps are numpy's, in another order of float operations
# ... except after the least change (rig IK holding the stance towards the start pose),
# whose damped steps take or refuse a step on differences that small: the pelvis-and-hand
# drag of these poses (a rig's lengths) moved by 1e-13 m came out up to 5e-5 m apart, by
# 1e-11 m up to 1.6e-4 (ad hoc .dev/agree.py); the kernel and the stages 1.6e-4 apart there.
LEAST_CHANGE_AGREE_M = 5e-4  # 3.1e-4 seen once unusual poses also take the least change
# Latents from two code paths: the same sums in another order (AVX-512 fuses them
# differently: 2.3e-10 seen); far below float32's rounding of an O(1) latent (6e-8).
LATENT_AGREE = 1e-8
J = skeleton.JOINT_INDEX
# The start's properties numpy makes when first read (the start kernel, all at once).
MADE = ("offset_scales", "rig_lengths", "rig_model", "familiarity", "spans")


def _numpy_start(p: np.ndarray, lengths: np.ndarray | None,
                 scale: np.ndarray | None) -> _Start:
    with native.switched_off():
        start = _Start.of(p, lengths, scale)
        for name in MADE:  # made now, with numpy
            getattr(start, name)
    return start


def test_the_start_kernel_prepares_a_pose_as_numpy(synthetic_clip: np.ndarray) -> None:
    """Every field of a start pose's preparation: measured lengths and a rig's own, single
    poses and a batch, a body lying down (familiarity 0), a bone of length zero."""
    rng = np.random.default_rng(0)
    poses = synthetic_clip[:24] + rng.normal(scale=0.01, size=synthetic_clip[:24].shape)
    poses[5] = poses[5][:, [1, 0, 2]]  # lying down: the up axis swapped
    poses[7, J["l_hand"]] = poses[7, J["l_forearm"]]  # a bone without direction
    rig = np.repeat(skeleton.bone_lengths(poses[:1]) * 1.3, len(poses), axis=0)
    for batch in (poses, poses[7:8], poses[5:6]):
        for lengths in (None, rig[:len(batch)]):
            scale = None if lengths is None else leg_scale(lengths)
            fast, slow = _Start.of(batch, lengths, scale), _numpy_start(batch, lengths, scale)
            for name in ("model", "turn", *MADE):
                np.testing.assert_allclose(getattr(fast, name), getattr(slow, name),
                                           rtol=0, atol=AGREE_M, err_msg=name)
            np.testing.assert_array_equal(fast.feet_down, slow.feet_down)
            for name in ("root", "yaw", "lengths", "scale"):
                np.testing.assert_allclose(getattr(fast.frame, name),
                                           getattr(slow.frame, name), rtol=0, atol=AGREE_M)
    assert _numpy_start(poses[5:6], None, None).familiarity[0] == 0.0
    assert not fast.model.flags.writeable and not fast.frame.root.flags.writeable


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


def test_solves_with_the_kernels_start_and_end_are_numpys(shipped_models, synthetic_clip,
                                                          monkeypatch) -> None:
    """Single solves, refined or not, and drag updates: the same pose, misses and notes
    with the start, request and end in the kernels as in numpy (the networks the same:
    onnxruntime's; the kernels' other steps are held to numpy's by their own tests). Drags
    that need rig IK after the re-aims (the kernel hands them back) are among them."""
    monkeypatch.setattr(pipeline, "compiled_universal", lambda models: None)
    monkeypatch.setattr(refine, "compiled_decoder", lambda models: None)
    editor = PoseEditor(shipped_models)
    rng = np.random.default_rng(1)
    poses = synthetic_clip[::3]
    calls, handed_back, beyond = [], 0, 0
    run = pipeline._reach_rest
    monkeypatch.setattr(pipeline, "_reach_rest", lambda *a, **k: calls.append(1) or run(*a, **k))
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
    assert handed_back  # some drags went on to rig IK after the kernel's re-aims
    assert beyond  # and some notes named targets beyond reach (the end kernel's bound)


@pytest.mark.parametrize("rig", [False, True], ids=["measured lengths", "a rig's lengths"])
def test_the_request_with_the_compiled_networks_is_the_stages_answer(
        shipped_models, synthetic_clip, monkeypatch, rig: bool) -> None:
    """With the compiled networks, a single solve runs in one kernel call (npe_solve_one: the
    start where it is not kept, the request, the edit with a drag's unmoved edit kept, the
    decoded change, the refinement and the end; npe_begin, the first three, for the
    session's first refinement, which is checked against the numpy steps; where the re-aims
    leave a goal short, _reach_rest's rig IK stage too): the same poses,
    latents and notes as the numpy stages around the same networks, over a drag's updates
    and fresh solves, on each pose's measured lengths and on a rig's own (its poses fitted
    to them, as the add-on's are)."""
    from blender_addon.core.compiled_networks import compiled_universal

    assert compiled_universal(shipped_models) is not None
    lengths = skeleton.bone_lengths(synthetic_clip[:1])[0] * 1.2 if rig else None
    editor = PoseEditor(shipped_models, lengths)
    rng = np.random.default_rng(2)
    poses = synthetic_clip[1::4]
    if rig:
        poses = set_bone_lengths_unchecked(poses, lengths)
    begun, whole, rested = [], [], []
    least_change = rig_ik.solve  # the numpy stages' rig IK stage: the kernel's least change
    monkeypatch.setattr(rig_ik, "solve", lambda *a, **k: rested.append(1) or least_change(*a, **k))
    run = pipeline._SOLVE_REQUEST.begin
    monkeypatch.setattr(pipeline._SOLVE_REQUEST, "begin",
                        lambda *a, **k: begun.append(1) or run(*a, **k))
    fused = pipeline._SOLVE_REQUEST.solve
    monkeypatch.setattr(pipeline._SOLVE_REQUEST, "solve",
                        lambda *a, **k: whole.append(a[2] is not None) or fused(*a, **k))
    for p, effs in zip(poses, _drags(poses, rng), strict=True):
        for step in range(3):  # a drag: the same start and effectors, the targets moving
            moved = [Effector(e.joint, None if e.pin else e.target + 0.03 * step, pin=e.pin,
                              weight=e.weight) for e in effs]
            for options, drag in ((SolveOptions(refine_steps=0), False),
                                  (SolveOptions(), False), (SolveOptions(), True)):
                fast = editor.solve(p, moved, options=options, drag=drag)
                monkeypatch.setattr(pipeline, "SOLVE_KERNELS", False)
                before = len(rested)
                slow = PoseEditor(shipped_models, lengths).solve(p, moved, options=options,
                                                                 drag=drag)
                monkeypatch.setattr(pipeline, "SOLVE_KERNELS", True)
                np.testing.assert_allclose(fast.positions, slow.positions, rtol=0, atol=(
                    LEAST_CHANGE_AGREE_M if len(rested) > before else AGREE_M))
                np.testing.assert_allclose(fast.latent, slow.latent, rtol=0,
                                           atol=LATENT_AGREE)
                assert fast.notes == slow.notes
    assert rested  # some solves went on to the least change (in the kernel on the fast side)
    assert len(begun) + len(whole) == 9 * len(poses)
    assert len(begun) <= 1  # (a session's first refinement is checked)
    assert sum(whole) >= 6 * len(poses) - 1  # refined in the same call
