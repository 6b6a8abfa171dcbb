"""The compiled networks: their weights read from the ONNX files without the onnx package,
the decoder's poses and Jacobians and the universal solver's fused edit against
onnxruntime's, and where onnxruntime stays in charge (another shape, a disagreement)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from blender_addon.core import compiled_networks, native, refine
from blender_addon.core.models import ModelSet
from blender_addon.core.normalize import to_model_space
from blender_addon.core.onnx_graph import OnnxReadError, read_graph
from blender_addon.core.pipeline import PoseEditor
from tests.test_refine import _drags

# Measured on the shipped set: poses 1.2e-7 model metres off onnxruntime's, Jacobians 1.2e-7
# (4.9e-7 of the largest entry): float32 sums in another order, and fused multiply-adds
# where the processor has them.
POSE_SAME = 1e-6
ROUNDING_ULPS = 4  # float32 units in the last place of the largest value: rounding, no more


def _float32_rounding(a: np.ndarray) -> float:
    """The tolerance of two code paths' float32 answers ``a`` (the same sums, ordered
    otherwise by a processor's vectors)."""
    return ROUNDING_ULPS * float(np.finfo(np.float32).eps * np.abs(a).max())

JACOBIAN_SAME = 2e-6  # of the largest entry
# The fused edit's latents: measured 1.3e-6 off onnxruntime's (its poses 3e-7).
LATENT_SAME = 5e-6
# A refined pose decoded in C against one decoded by onnxruntime (the steps carry the
# decoders' float32 rounding): measured 1.0e-6 m at most over 54 drags, median 1.5e-7.
DECODERS_SAME_M = 1e-5


def _latents(models: ModelSet, poses: np.ndarray) -> np.ndarray:
    return models.encode(to_model_space(poses)[0].astype(np.float32))


def test_the_reader_reads_every_shipped_file_as_onnx_does(shipped_models: ModelSet) -> None:
    for path in sorted(shipped_models.folder.glob("*.onnx")):
        got, want = read_graph(path), onnx.load(str(path)).graph
        weights = {t.name: numpy_helper.to_array(t) for t in want.initializer
                   if t.data_type == onnx.TensorProto.FLOAT}
        assert got.initializers.keys() == weights.keys(), path.name
        for name, value in weights.items():
            np.testing.assert_array_equal(got.initializers[name], value)
        assert [(n.op_type, n.inputs, n.outputs) for n in got.nodes] == [
            (n.op_type, list(n.input), list(n.output)) for n in want.node], path.name
        for got_node, want_node in zip(got.nodes, want.node, strict=True):
            numbers = {a.name: onnx.helper.get_attribute_value(a) for a in want_node.attribute
                       if a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.INT)}
            assert got_node.attributes == pytest.approx(numbers), path.name
        assert got.inputs == [i.name for i in want.input]
        assert got.outputs == [o.name for o in want.output]


def test_a_file_that_is_not_onnx_is_named(shipped_models: ModelSet, tmp_path) -> None:
    cut = tmp_path / "decoder.onnx"
    cut.write_bytes((shipped_models.folder / "decoder.onnx").read_bytes()[:5000])
    with pytest.raises(OnnxReadError, match=str(cut)):
        read_graph(cut)
    text = tmp_path / "notes.onnx"
    text.write_text("not a model\n" * 20)
    with pytest.raises(OnnxReadError, match=str(text)):
        read_graph(text)


@pytest.mark.usefixtures("with_kernels")
def test_the_compiled_decoder_decodes_as_onnxruntime(shipped_models: ModelSet,
                                                     manifold_clip: np.ndarray) -> None:
    """Poses and Jacobians of the latents of real poses, one at a time and in a batch."""
    compiled = compiled_networks.compiled_decoder(shipped_models)
    assert compiled is not None
    graph = shipped_models.by_role("decoder_jacobian")[0]
    z = _latents(shipped_models, manifold_clip[::9])
    pose, jac = compiled.decode(z, jacobian=True)
    want_pose, want_jac = graph.run_all(z)[:2]
    assert np.abs(pose - want_pose).max() < POSE_SAME
    assert np.abs(jac - want_jac).max() < JACOBIAN_SAME * np.abs(want_jac).max()
    assert np.abs(want_jac).max() > 0.01  # a Jacobian worth comparing
    for k in range(len(z)):  # a pose's answer does not depend on its batch (to rounding)
        one, one_jac = compiled.decode(z[k:k + 1], jacobian=True)
        np.testing.assert_allclose(one[0], pose[k], rtol=0, atol=_float32_rounding(pose))
        np.testing.assert_allclose(one_jac[0], jac[k], rtol=0, atol=_float32_rounding(jac))
        np.testing.assert_allclose(compiled.decode(z[k:k + 1])[0][0], pose[k], rtol=0,
                                   atol=_float32_rounding(pose))


def test_a_decoder_of_another_shape_is_left_to_onnxruntime(shipped_models: ModelSet) -> None:
    folder = shipped_models.folder
    decoder = read_graph(folder / "decoder.onnx")
    assert compiled_networks.decoder_layers(decoder) is not None
    assert compiled_networks.decoder_layers(read_graph(folder / "encoder.onnx")) is None

    def changed(index: int, **change) -> compiled_networks.Graph:
        nodes = [dataclasses.replace(n, attributes=dict(n.attributes)) for n in decoder.nodes]
        nodes[index] = dataclasses.replace(nodes[index], **change)
        return dataclasses.replace(decoder, nodes=nodes)

    assert compiled_networks.decoder_layers(changed(2, op_type="Sigmoid")) is None
    assert compiled_networks.decoder_layers(changed(0, attributes={"transB": 0})) is None
    assert compiled_networks.decoder_layers(changed(1, attributes={"axis": 0})) is None
    skipped = changed(3, inputs=["latent", *decoder.nodes[3].inputs[1:]])  # not a chain
    assert compiled_networks.decoder_layers(skipped) is None


@pytest.mark.usefixtures("with_kernels")
def test_a_disagreeing_compiled_decoder_is_refused(shipped_models: ModelSet, monkeypatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Weights read wrong (here: the output's mean moved 0.1 mm) leave onnxruntime
    decoding, and the refinement runs as without the compiled decoder."""
    models = ModelSet(shipped_models.folder)
    real = compiled_networks.decoder_layers

    def off(graph):
        layers = real(graph)
        layers["mean"] = layers["mean"] + np.float32(1e-4)
        return layers

    monkeypatch.setattr(compiled_networks, "decoder_layers", off)
    with caplog.at_level(logging.WARNING, logger=compiled_networks.__name__):
        assert compiled_networks.compiled_decoder(models) is None
    assert "decoder.onnx: the compiled decoder is" in caplog.text
    assert "off onnxruntime's poses" in caplog.text
    assert native.kernels() is not None  # the other kernels stay


@pytest.mark.usefixtures("with_kernels")
def test_the_one_call_refinement_is_the_numpy_steps_with_the_same_decoder(
        shipped_models: ModelSet, manifold_clip: np.ndarray, monkeypatch) -> None:
    """The kernels' refinement with the compiled decoder (one call) gives the numpy steps'
    answer when they decode as it does, and onnxruntime's within its float32 rounding."""
    editor = PoseEditor(shipped_models)
    assert compiled_networks.compiled_decoder(shipped_models) is not None
    calls = [(pose, effs) for k, pose in enumerate(manifold_clip[::15])
             for effs in _drags(pose, 2, seed=k)]
    fast = [editor.solve(pose, effs).positions for pose, effs in calls]
    with monkeypatch.context() as patch:  # the numpy steps, the compiled decoder in them
        patch.setattr(refine.native_run, "_refine_native", lambda *args: None)
        steps = [editor.solve(pose, effs).positions for pose, effs in calls]
    with native.switched_off():  # onnxruntime decodes
        plain = [editor.solve(pose, effs).positions for pose, effs in calls]
    same = max(float(np.abs(a - b).max()) for a, b in zip(fast, steps, strict=True))
    near = max(float(np.abs(a - b).max()) for a, b in zip(fast, plain, strict=True))
    assert same < 1e-9
    assert near < DECODERS_SAME_M


def _edits(models: ModelSet, poses: np.ndarray, seed: int = 0
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Model-space poses with random effectors (masks, targets up to 20 cm off, weights)."""
    rng = np.random.default_rng(seed)
    model = to_model_space(poses)[0]
    mask = (rng.random(model.shape[:2]) < 0.3).astype(np.float64)
    targets = model + rng.normal(scale=0.1, size=model.shape) * mask[..., None]
    return model, mask, targets, rng.random(mask.shape) * mask


@pytest.mark.usefixtures("with_kernels")
def test_the_compiled_universal_edit_is_onnxruntimes(shipped_models: ModelSet,
                                                     manifold_clip: np.ndarray) -> None:
    """The fused graph's edit (towards the targets, then unmoved) and its latents, on real
    poses with random effectors."""
    compiled = compiled_networks.compiled_universal(shipped_models)
    assert compiled is not None
    model, mask, targets, weights = _edits(shipped_models, manifold_clip[::6])
    edited, latent = compiled.edit(model, mask, targets, weights)
    both = lambda a, c: np.concatenate([a, c]).astype(np.float32)  # noqa: E731
    fused = shipped_models.by_role("ik_universal_fused")[0]
    want_edited, _, want_latent = fused.run_all(both(model, model), both(mask, mask),
                                                both(targets, model), both(weights, weights))
    assert np.abs(edited - want_edited).max() < POSE_SAME
    assert np.abs(latent - want_latent[:len(model)]).max() < LATENT_SAME
    moved = np.abs(edited[:len(model)] - edited[len(model):]).max()
    assert moved > 0.01  # the targets moved the edit: something worth comparing


@pytest.mark.usefixtures("with_kernels")
def test_a_drags_unmoved_edit_is_kept_as_computed(shipped_models: ModelSet,
                                                  manifold_clip: np.ndarray) -> None:
    """A single pose's unmoved edit is kept for the next call with the same pose, mask and
    weights (a drag's updates): the same bits as computed afresh; another mask computes
    its own."""
    compiled = compiled_networks.compiled_universal(shipped_models)
    model, mask, targets, weights = (a[:1] for a in _edits(shipped_models, manifold_clip[::6]))
    first = compiled.edit(model, mask, targets, weights)
    kept = compiled.edit(model, mask, targets + 0.05, weights)  # the next drag update
    compiled.unmoved_cache[:] = 0
    fresh = compiled.edit(model, mask, targets + 0.05, weights)
    for a, b in zip(kept, fresh, strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.abs(kept[0] - first[0]).max() > 1e-3  # the edit itself was computed again
    other = mask.copy()
    other[0, np.flatnonzero(mask[0] == 0)[0]] = 1.0
    compiled.unmoved_cache[:] = 0
    want = compiled.edit(model, other, targets, weights)[0][1]
    compiled.edit(model, mask, targets, weights)
    np.testing.assert_array_equal(compiled.edit(model, other, targets, weights)[0][1], want)


def test_a_fused_graph_of_another_shape_is_left_to_onnxruntime(shipped_models: ModelSet
                                                               ) -> None:
    folder = shipped_models.folder
    fused = read_graph(folder / "ik_universal_fused.onnx")
    assert compiled_networks.fused_layers(fused) is not None
    assert compiled_networks.fused_layers(read_graph(folder / "decoder.onnx")) is None
    renamed = dict(fused.initializers)
    renamed["solver.net.9.weight"] = renamed.pop("solver.net.6.weight")
    assert compiled_networks.fused_layers(
        dataclasses.replace(fused, initializers=renamed)) is None
    assert compiled_networks.fused_layers(
        dataclasses.replace(fused, inputs=["pose", "mask", "targets"])) is None
    extra = [*fused.nodes, dataclasses.replace(fused.nodes[-1], op_type="Relu")]
    assert compiled_networks.fused_layers(dataclasses.replace(fused, nodes=extra)) is None


@pytest.mark.usefixtures("with_kernels")
def test_solves_with_the_compiled_networks_are_onnxruntimes(shipped_models: ModelSet,
                                                            manifold_clip: np.ndarray) -> None:
    """The networks' answer (refinement off) and the refined one, with the kernels and
    with onnxruntime alone."""
    from blender_addon.core.pipeline import SolveOptions

    editor = PoseEditor(shipped_models)
    assert compiled_networks.compiled_universal(shipped_models) is not None
    for steps in (0, 3):
        options = SolveOptions(refine_steps=steps)
        for k, pose in enumerate(manifold_clip[::15]):
            for effs in _drags(pose, 2, seed=k):
                got = editor.solve(pose, effs, options=options).positions
                with native.switched_off():
                    want = editor.solve(pose, effs, options=options).positions
                np.testing.assert_allclose(got, want, rtol=0, atol=DECODERS_SAME_M)


@pytest.mark.usefixtures("with_kernels")
def test_the_plain_code_agrees_too(shipped_models: ModelSet, manifold_clip: np.ndarray) -> None:
    """Processors without AVX2 run the kernels' plain code: the same answers to rounding."""
    kernels = native.kernels()
    decoder = compiled_networks.compiled_decoder(shipped_models)
    universal = compiled_networks.compiled_universal(shipped_models)
    z = _latents(shipped_models, manifold_clip[::9])
    edit = _edits(shipped_models, manifold_clip[::6])
    fast = decoder.decode(z, jacobian=True), universal.edit(*edit)
    kernels.decoder_allow_avx2(0)
    try:
        assert kernels.decoder_avx2() == 0
        plain = decoder.decode(z, jacobian=True), universal.edit(*edit)
    finally:
        kernels.decoder_allow_avx2(1)
    (pose, jac), (edited, latent) = fast
    (p_pose, p_jac), (p_edited, p_latent) = plain
    assert np.abs(p_pose - pose).max() < POSE_SAME
    assert np.abs(p_jac - jac).max() < JACOBIAN_SAME * np.abs(jac).max()
    assert np.abs(p_edited - edited).max() < POSE_SAME
    assert np.abs(p_latent - latent).max() < LATENT_SAME
