"""The set's decoder run by the compiled kernels, with its Jacobian along the refinement's
basis: the effector refinement in one kernel call instead of four onnxruntime calls and a
Python loop over its steps.

A refined solve decodes four times (the Jacobian graph once, then each step); in
onnxruntime each call costs tens of microseconds of dispatch around a few microseconds of
arithmetic, and the Jacobian graph's hundred-odd nodes about a microsecond each. The
kernels (``_native/npe_native.c``: ``npe_decode``, ``npe_refine_run``) run the same
layers in float32 from the weights of the set's ``decoder.onnx`` (read by
:mod:`.onnx_graph`), for the layer order the shipped decoders have (dense, LayerNorm, ReLU,
twice, then dense and the output's scale and mean). A decoder of any other shape, a set
without the Jacobian graph (whose basis the refinement moves along), the kernels switched
off, or a disagreement with onnxruntime on the check below: onnxruntime decodes, as before.
"""

from __future__ import annotations

import ctypes
import logging
import weakref

import numpy as np

from . import native, skeleton
from .models import ModelSet
from .onnx_graph import Graph, OnnxReadError, read_graph

log = logging.getLogger(__name__)

TANGENT_BLOCK = 32  # npe_native.c's: the tangent columns are padded to a multiple of this
MAX_WIDTH, MAX_TANGENTS = 1024, 64  # its buffers' sizes
# The check against onnxruntime before first use: random latents of the set's size.
CHECK_LATENTS, CHECK_SEED = 8, 0
POSE_TOLERANCE = 1e-5  # model metres (float32 sums in another order: measured 1.2e-7)
JACOBIAN_TOLERANCE = 1e-4  # of the largest entry, as training/jacobian.py checks its graph
_POSE_DIM = skeleton.NUM_JOINTS * 3


class _Decoder(ctypes.Structure):
    """npe_native.c's ``NpeDecoder``."""

    _fields_ = [(name, ctypes.c_int64) for name in
                ("latent", "hidden1", "hidden2", "out", "rank", "rank_padded")] + [
        ("eps1", ctypes.c_double), ("eps2", ctypes.c_double)] + [
        (name, ctypes.c_void_p) for name in
        ("w1t", "b1", "gain1", "bias1", "w2", "w2t", "b2", "gain2", "bias2", "w3", "w3t",
         "b3", "scale", "mean", "w1_basis")]


def decoder_layers(graph: Graph) -> dict[str, np.ndarray | float] | None:
    """The weights of a decoder graph of the shape the kernel runs, by the kernel's names,
    or None where the graph is anything else: latent -> Gemm (transB) -> LayerNorm (last
    axis) -> Relu -> Gemm -> LayerNorm -> Relu -> Gemm -> Mul (scale) -> Add (mean) ->
    Reshape, each node on the one before."""
    nodes = [n for n in graph.nodes if n.op_type != "Constant"]
    want = ["Gemm", "LayerNormalization", "Relu"] * 2 + ["Gemm", "Mul", "Add", "Reshape"]
    if [n.op_type for n in nodes] != want or len(graph.inputs) != 1:
        return None
    flow = [graph.inputs[0]] + [n.outputs[0] if n.outputs else "" for n in nodes[:-1]]
    if any(not n.inputs or n.inputs[0] != before for n, before in zip(nodes, flow, strict=True)):
        return None
    weights = graph.initializers

    def operand(node_index: int, position: int) -> np.ndarray | None:
        node = nodes[node_index]
        return weights.get(node.inputs[position]) if len(node.inputs) > position else None

    out: dict[str, np.ndarray | float] = {}
    for i, (w, b) in zip((0, 3, 6), (("w1", "b1"), ("w2", "b2"), ("w3", "b3")), strict=True):
        a = nodes[i].attributes
        if a.get("transB") != 1 or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 \
                or a.get("transA", 0) != 0:
            return None
        out[w], out[b] = operand(i, 1), operand(i, 2)
    for i, (g, b, eps) in zip((1, 4), (("gain1", "bias1", "eps1"), ("gain2", "bias2", "eps2")),
                              strict=True):
        if nodes[i].attributes.get("axis", -1) != -1:
            return None
        out[g], out[b] = operand(i, 1), operand(i, 2)
        out[eps] = float(nodes[i].attributes.get("epsilon", 1e-5))
    out["scale"], out["mean"] = operand(7, 1), operand(8, 1)
    if any(v is None for v in out.values()):
        return None
    w1, w2, w3 = out["w1"], out["w2"], out["w3"]
    shapes_fit = (
        w1.ndim == w2.ndim == w3.ndim == 2 and w2.shape[1] == w1.shape[0]
        and w3.shape[1] == w2.shape[0] and w3.shape[0] == _POSE_DIM
        and max(w1.shape[0], w2.shape[0]) <= MAX_WIDTH
        and all(out[k].shape == (w1.shape[0],) for k in ("b1", "gain1", "bias1"))
        and all(out[k].shape == (w2.shape[0],) for k in ("b2", "gain2", "bias2"))
        and all(out[k].shape == (_POSE_DIM,) for k in ("b3", "scale", "mean")))
    return out if shapes_fit else None


class CompiledDecoder:
    """A decoder's weights laid out for the kernels, and its calls. Not for two threads at
    once (one work buffer), as the refinement's kernels."""

    def __init__(self, kernels: native.Kernels, layers: dict[str, np.ndarray | float],
                 basis: np.ndarray) -> None:
        self.kernels = kernels
        f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
        w1 = np.asarray(layers["w1"], dtype=np.float64)
        rank, latent = basis.shape
        padded = -(-rank // TANGENT_BLOCK) * TANGENT_BLOCK
        w1_basis = np.zeros((w1.shape[0], padded), dtype=np.float32)
        w1_basis[:, :rank] = w1 @ basis.T
        self._arrays = {
            "w1t": f32(layers["w1"].T), "w2": f32(layers["w2"]), "w2t": f32(layers["w2"].T),
            "w3": f32(layers["w3"]), "w3t": f32(layers["w3"].T), "w1_basis": w1_basis,
            **{k: f32(layers[k]) for k in ("b1", "gain1", "bias1", "b2", "gain2", "bias2",
                                           "b3", "scale", "mean")}}
        self.struct = _Decoder(latent, w1.shape[0], layers["w2"].shape[0], _POSE_DIM, rank,
                               padded, layers["eps1"], layers["eps2"],
                               *(native.address(self._arrays[name]) for name, _ in
                                 _Decoder._fields_[8:]))
        self.address = ctypes.addressof(self.struct)
        self.rank, self.latent_size = rank, latent
        self.basis = np.ascontiguousarray(basis, dtype=np.float64)  # (K, L)
        self.basis_address = native.address(self.basis)
        self.work = np.zeros((w1.shape[0] + layers["w2"].shape[0] + _POSE_DIM) * padded,
                             dtype=np.float32)
        self.work_address = native.address(self.work)

    def decode(self, latent: np.ndarray, jacobian: bool = False
               ) -> tuple[np.ndarray, np.ndarray | None]:
        """Poses (B, 21, 3) of float32 latents (B, L), and with ``jacobian`` their
        Jacobians along the basis (B, 63, K), float32 as onnxruntime's."""
        z = np.ascontiguousarray(latent, dtype=np.float32)
        pose = np.empty((len(z), skeleton.NUM_JOINTS, 3), dtype=np.float32)
        jac = np.empty((len(z), _POSE_DIM, self.rank), dtype=np.float32) if jacobian else None
        status = self.kernels.decode(self.address, len(z), native.address(z),
                                     native.address(pose),
                                     native.address(jac) if jac is not None else None,
                                     self.work_address)
        if status != 0:
            raise RuntimeError(f"npe_decode refused the decoder ({status})")
        return pose, jac


_COMPILED: weakref.WeakKeyDictionary[ModelSet, CompiledDecoder | None] = \
    weakref.WeakKeyDictionary()


def compiled_decoder(models: ModelSet) -> CompiledDecoder | None:
    """The set's compiled decoder, or None (onnxruntime decodes): made and checked against
    onnxruntime once per set; None while the kernels are off."""
    kernels = native.kernels()
    if kernels is None:
        return None
    if models not in _COMPILED:
        _COMPILED[models] = _make(models, kernels)
    return _COMPILED[models]


def _make(models: ModelSet, kernels: native.Kernels) -> CompiledDecoder | None:
    graph_module = next(iter(models.by_role("decoder_jacobian")), None)
    path = models.decoder.path
    if graph_module is None or path is None:
        return None
    try:
        layers = decoder_layers(read_graph(path))
    except (OSError, OnnxReadError) as exc:
        log.warning("%s: onnxruntime decodes (%s)", path, exc)
        return None
    if layers is None:
        return None  # another decoder shape: onnxruntime serves it
    compiled = CompiledDecoder(kernels, layers, models.jacobian_basis)
    problem = _disagreement(models, compiled, graph_module)
    if problem:
        log.warning("%s: the compiled decoder is %s: onnxruntime decodes", path, problem)
        return None
    return compiled


def _disagreement(models: ModelSet, compiled: CompiledDecoder, graph_module) -> str | None:
    """How far the compiled decoder's poses and Jacobians are from onnxruntime's on random
    latents, where beyond the tolerances; None where they agree."""
    z = np.random.default_rng(CHECK_SEED).normal(
        size=(CHECK_LATENTS, compiled.latent_size)).astype(np.float32)
    got_pose, got_jac = compiled.decode(z, jacobian=True)
    want_pose, want_jac = graph_module.run_all(z)[:2]
    pose_off = float(np.abs(got_pose - want_pose.reshape(got_pose.shape)).max())
    jac_off = float(np.abs(got_jac - want_jac).max()) / max(float(np.abs(want_jac).max()),
                                                            1e-12)
    if not pose_off <= POSE_TOLERANCE:
        return f"{pose_off:.1e} off onnxruntime's poses"
    if not jac_off <= JACOBIAN_TOLERANCE:
        return f"{jac_off:.1e} (relative) off onnxruntime's Jacobian"
    return None
