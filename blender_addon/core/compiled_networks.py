"""The set's networks run by the compiled kernels: the decoder with its Jacobian along the
refinement's basis (the effector refinement in one kernel call instead of four onnxruntime
calls and a Python loop over its steps), and the universal solver's fused edit.

A single pose's onnxruntime call costs tens of microseconds of dispatch around a few
microseconds of arithmetic, and each of a graph's nodes about a microsecond more: a refined
solve made five such calls (the networks, the decoder's Jacobian graph, a decode per step).
The kernels (``_native/npe_native.c``: ``npe_decode``, ``npe_refine_run``,
``npe_universal``) run the same layers in float32 from the weights of the set's ONNX files
(read by :mod:`.onnx_graph`), for the layer shape the shipped networks have (dense,
LayerNorm, ReLU, twice, then dense). Networks of any other shape, a set without the
Jacobian graph (whose basis the refinement moves along) or without the fused graph, the
kernels switched off, or a disagreement with onnxruntime on the checks below: onnxruntime
runs them, as before.
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import native, skeleton
from .models import ModelSet
from .onnx_graph import Graph, Node, OnnxReadError, read_graph

log = logging.getLogger(__name__)

TANGENT_BLOCK = 32  # npe_native.c's: the tangent columns are padded to a multiple of this
DENSE_PAD = 64  # and a dense layer's outputs (its transposed weights' rows, its biases)
MAX_WIDTH, MAX_TANGENTS = 1024, 64  # its buffers' sizes
# The check against onnxruntime before first use: random latents of the set's size.
CHECK_LATENTS, CHECK_SEED = 8, 0
POSE_TOLERANCE = 1e-5  # model metres (float32 sums in another order: measured 1.2e-7)
JACOBIAN_TOLERANCE = 1e-4  # of the largest entry, as training/jacobian.py checks its graph
_POSE_DIM = skeleton.NUM_JOINTS * 3


_MLP_ARRAYS = ("w1t", "b1", "gain1", "bias1", "w2", "w2t", "b2", "gain2", "bias2", "w3",
               "w3t", "b3")


class _Mlp(ctypes.Structure):
    """npe_native.c's ``NpeMlp``."""

    _fields_ = [(name, ctypes.c_int64) for name in ("n_in", "hidden1", "hidden2", "n_out")] + [
        ("eps1", ctypes.c_double), ("eps2", ctypes.c_double)] + [
        (name, ctypes.c_void_p) for name in _MLP_ARRAYS]


class _Decoder(ctypes.Structure):
    """npe_native.c's ``NpeDecoder``."""

    _fields_ = [("mlp", _Mlp), ("rank", ctypes.c_int64), ("rank_padded", ctypes.c_int64)] + [
        (name, ctypes.c_void_p) for name in ("scale", "mean", "w1_basis", "w2_mean")]


def _f32(a: np.ndarray | float) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _padded(a: np.ndarray) -> np.ndarray:
    """float32, the last axis zero-padded to a multiple of :data:`DENSE_PAD`."""
    a = np.asarray(a)
    out = np.zeros((*a.shape[:-1], -(-a.shape[-1] // DENSE_PAD) * DENSE_PAD), dtype=np.float32)
    out[..., :a.shape[-1]] = a
    return out


def _mlp(layers: dict[str, np.ndarray | float], keep: list[np.ndarray]) -> _Mlp:
    """The ``NpeMlp`` of dense layers w1..w3 (out x in, as Gemm with transB holds them),
    biases, LayerNorm gains and biases and epsilons; its arrays go to ``keep``."""
    arrays = {"w1t": _padded(layers["w1"].T), "w2": _f32(layers["w2"]),
              "w2t": _padded(layers["w2"].T), "w3": _f32(layers["w3"]),
              "w3t": _padded(layers["w3"].T),
              **{k: _padded(layers[k]) for k in ("b1", "b2", "b3")},
              **{k: _f32(layers[k]) for k in ("gain1", "bias1", "gain2", "bias2")}}
    keep.extend(arrays.values())
    w1, w2, w3 = layers["w1"], layers["w2"], layers["w3"]
    return _Mlp(w1.shape[1], w1.shape[0], w2.shape[0], w3.shape[0], layers["eps1"],
                layers["eps2"], *(native.address(arrays[name]) for name in _MLP_ARRAYS))


def _mlp_fits(layers: dict[str, np.ndarray | float]) -> bool:
    w1, w2, w3 = (np.asarray(layers[k]) for k in ("w1", "w2", "w3"))
    return (w1.ndim == w2.ndim == w3.ndim == 2 and w2.shape[1] == w1.shape[0]
            and w3.shape[1] == w2.shape[0]
            and max(*w1.shape, *w2.shape, *w3.shape) <= MAX_WIDTH
            and all(np.shape(layers[k]) == (w1.shape[0],) for k in ("b1", "gain1", "bias1"))
            and all(np.shape(layers[k]) == (w2.shape[0],) for k in ("b2", "gain2", "bias2"))
            and np.shape(layers["b3"]) == (w3.shape[0],))


def _stack(graph: Graph, dense: list[Node | None], norms: list[Node | None]
           ) -> dict[str, np.ndarray | float] | None:
    """The weights of three dense (Gemm) and two LayerNorm nodes, by the kernel's names
    (w1, b1, gain1, bias1, eps1, ...), or None where a node is missing, is not a plain
    ``x @ W.T + b`` or a last-axis LayerNorm, or lacks a weight."""
    weights = graph.initializers
    out: dict[str, np.ndarray | float] = {}
    for k, n in enumerate(dense, 1):
        if n is None or len(n.inputs) < 3 or n.attributes.get("transB") != 1 or any(
                n.attributes.get(a, v) != v for a, v in (("transA", 0), ("alpha", 1.0),
                                                         ("beta", 1.0))):
            return None
        out[f"w{k}"], out[f"b{k}"] = weights.get(n.inputs[1]), weights.get(n.inputs[2])
    for k, n in enumerate(norms, 1):
        if n is None or len(n.inputs) < 3 or n.attributes.get("axis", -1) != -1:
            return None
        out[f"gain{k}"], out[f"bias{k}"] = weights.get(n.inputs[1]), weights.get(n.inputs[2])
        out[f"eps{k}"] = float(n.attributes.get("epsilon", 1e-5))
    return None if any(v is None for v in out.values()) else out


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
    out = _stack(graph, nodes[0:7:3], nodes[1:5:3])  # the Gemms, the LayerNorms
    if out is None:
        return None
    out["scale"], out["mean"] = (graph.initializers.get(n.inputs[1]) if len(n.inputs) > 1
                                 else None for n in nodes[7:9])  # the Mul, the Add
    if out["scale"] is None or out["mean"] is None:
        return None
    fits = _mlp_fits(out) and np.shape(out["w3"])[0] == _POSE_DIM \
        and all(np.shape(out[k]) == (_POSE_DIM,) for k in ("scale", "mean"))
    return out if fits else None


class CompiledDecoder:
    """A decoder's weights laid out for the kernels, and its calls. Not for two threads at
    once (one work buffer), as the refinement's kernels."""

    def __init__(self, kernels: native.Kernels, layers: dict[str, np.ndarray | float],
                 basis: np.ndarray | None) -> None:
        """``basis`` (K, L): the directions of the Jacobian, or None (poses only)."""
        self.kernels = kernels
        self._keep: list[np.ndarray] = []
        w1 = np.asarray(layers["w1"], dtype=np.float64)
        latent, hidden1, hidden2 = w1.shape[1], w1.shape[0], np.shape(layers["w2"])[0]
        basis = np.zeros((0, latent)) if basis is None else basis
        rank = len(basis)
        padded = -(-rank // TANGENT_BLOCK) * TANGENT_BLOCK
        w1_basis = np.zeros((hidden1, padded), dtype=np.float32)
        w1_basis[:, :rank] = w1 @ basis.T
        w2_mean = _f32(np.asarray(layers["w2"], dtype=np.float64).mean(axis=0))
        ends = [_f32(layers["scale"]), _f32(layers["mean"]), w1_basis, w2_mean]
        self._keep.extend(ends)
        self.struct = _Decoder(_mlp(layers, self._keep), rank, padded,
                               *(native.address(a) for a in ends))
        self.address = ctypes.addressof(self.struct)
        self.rank, self.latent_size = rank, latent
        self.basis = np.ascontiguousarray(basis, dtype=np.float64)  # (K, L)
        self.basis_address = native.address(self.basis)
        self.work = np.zeros(max((hidden1 + hidden2 + _POSE_DIM) * padded, 1), dtype=np.float32)
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
    return per_set(_COMPILED, models, _make)


def per_set(cache: weakref.WeakKeyDictionary, models: ModelSet,
             make: Callable[[ModelSet, native.Kernels], Any]) -> Any:
    """``make(models, kernels)``, once per set (None too), or None while the kernels are
    off."""
    kernels = native.kernels()
    if kernels is None:
        return None
    if models not in cache:
        cache[models] = make(models, kernels)
    return cache[models]


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


# The fused graph's networks by their weights' names (training/export.py's modules), and the
# node counts of its layers: encoder, solver and decoder, three dense layers each.
_FUSED_PREFIXES = {"encoder": "ae.encoder", "solver": "solver.net", "decoder": "ae.decoder"}
_FUSED_LAYERS = {"Gemm": 9, "LayerNormalization": 6, "Relu": 6}
_FUSED_IO = (["pose", "mask", "targets", "weights"],
             ["edited_pose", "reconstruction", "edited_latent"])
# Its check against onnxruntime: random edits of poses near the normalization's mean.
CHECK_POSES, CHECK_SPREAD_M, CHECK_TARGET_M = 8, 0.05, 0.2
LATENT_TOLERANCE = 1e-4  # latent units (measured 1.9e-6)


def _named_mlp(graph: Graph, prefix: str) -> dict[str, np.ndarray | float] | None:
    """The dense stack whose weights are named ``prefix.0`` .. ``prefix.6`` (PyTorch's
    Sequential of Linear, LayerNorm, ReLU, Linear, LayerNorm, ReLU, Linear), or None."""
    def node(op: str, k: int) -> Node | None:
        found = [n for n in graph.nodes if n.op_type == op and n.inputs[1:2] == [
            f"{prefix}.{k}.weight"]]
        return found[0] if len(found) == 1 else None

    out = _stack(graph, [node("Gemm", k) for k in (0, 3, 6)],
                 [node("LayerNormalization", k) for k in (1, 4)])
    return out if out is not None and _mlp_fits(out) else None


def fused_layers(graph: Graph) -> dict[str, dict[str, np.ndarray | float]] | None:
    """The encoder, solver and decoder of an ``ik_universal_fused`` graph as the exporter
    writes it (its inputs and outputs, nine dense layers named as the modules', the pose
    normalization's mean and std), or None for any other graph. What the nodes between do
    (the normalization, the solver's input, the latent's sum) is the kernel's; the check
    against onnxruntime in :func:`compiled_universal` holds it to the graph."""
    if (graph.inputs, graph.outputs) != _FUSED_IO:
        return None
    counts = {op: sum(n.op_type == op for n in graph.nodes) for op in _FUSED_LAYERS}
    if counts != _FUSED_LAYERS:
        return None
    out = {name: _named_mlp(graph, prefix) for name, prefix in _FUSED_PREFIXES.items()}
    mean, std = graph.initializers.get("ae.norm.mean"), graph.initializers.get("ae.norm.std")
    if any(v is None for v in out.values()) or mean is None or std is None \
            or np.shape(mean) != (_POSE_DIM,) or np.shape(std) != (_POSE_DIM,):
        return None
    out["decoder"].update(scale=std, mean=mean)
    return out


class CompiledUniversal:
    """The universal solver's fused edit for the kernels (``npe_universal``)."""

    def __init__(self, kernels: native.Kernels,
                 layers: dict[str, dict[str, np.ndarray | float]]) -> None:
        self.kernels = kernels
        self._keep: list[np.ndarray] = []
        self.encoder = _mlp(layers["encoder"], self._keep)
        self.solver = _mlp(layers["solver"], self._keep)
        self.decoder = CompiledDecoder(kernels, layers["decoder"], None)
        self.latent_size = int(np.shape(layers["encoder"]["w3"])[0])
        self.addresses = (ctypes.addressof(self.encoder), ctypes.addressof(self.solver),
                          self.decoder.address)
        # The last single pose's unmoved edit, kept by the kernel with its pose, mask and
        # weights: a drag asks for the same one on every update (2/5 of the edit's work).
        self.unmoved_cache = np.zeros(kernels.unmoved_cache_size(), dtype=np.uint8)
        self.cache_address = native.address(self.unmoved_cache)

    def edit(self, pose: np.ndarray, mask: np.ndarray, targets: np.ndarray,
             weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The edited poses of model-space ``pose`` (B, 21, 3) towards ``targets``, then
        unmoved (targets on the pose), as (2B, 21, 3); and the first's latents (B, L)."""
        # float64 in: the kernel casts as numpy would (one conversion fewer per array)
        p, m, t, w = (np.ascontiguousarray(a, dtype=np.float64)
                      for a in (pose, mask, targets, weights))
        n = len(p)
        edited = np.empty((2 * n, skeleton.NUM_JOINTS, 3), dtype=np.float32)
        latent = np.empty((n, self.latent_size), dtype=np.float32)
        status = self.kernels.universal(*self.addresses, n, self.cache_address if n == 1 else None,
                                        *(native.address(a) for a in (p, m, t, w, edited,
                                                                      latent)))
        if status != 0:
            raise RuntimeError(f"npe_universal refused the networks ({status})")
        return edited, latent


_UNIVERSAL: weakref.WeakKeyDictionary[ModelSet, CompiledUniversal | None] = \
    weakref.WeakKeyDictionary()


def compiled_universal(models: ModelSet) -> CompiledUniversal | None:
    """The set's compiled fused edit, or None (onnxruntime runs ``ik_universal_fused``):
    made and checked against onnxruntime once per set; None while the kernels are off."""
    return per_set(_UNIVERSAL, models, _make_universal)


def _make_universal(models: ModelSet, kernels: native.Kernels) -> CompiledUniversal | None:
    fused = next(iter(models.by_role("ik_universal_fused")), None)
    if fused is None or fused.path is None:
        return None
    try:
        layers = fused_layers(read_graph(fused.path))
    except (OSError, OnnxReadError) as exc:
        log.warning("%s: onnxruntime runs it (%s)", fused.path, exc)
        return None
    if layers is None:
        return None
    compiled = CompiledUniversal(kernels, layers)
    rng = np.random.default_rng(CHECK_SEED)
    mean = np.asarray(layers["decoder"]["mean"], dtype=np.float64).reshape(-1, 3)
    pose = mean + rng.normal(scale=CHECK_SPREAD_M, size=(CHECK_POSES, *mean.shape))
    mask = (rng.random((CHECK_POSES, len(mean))) < 0.3).astype(np.float64)
    targets = pose + rng.normal(scale=CHECK_TARGET_M, size=pose.shape)
    weights = rng.random(mask.shape)
    edited, latent = compiled.edit(pose, mask, targets, weights)
    both = lambda a, c: np.concatenate([a, c])  # noqa: E731 - as the engine calls it
    want_edited, _, want_latent = fused.run_all(
        *(a.astype(np.float32) for a in (both(pose, pose), both(mask, mask),
                                         both(targets, pose), both(weights, weights))))
    pose_off = float(np.abs(edited - want_edited).max())
    latent_off = float(np.abs(latent - want_latent[:CHECK_POSES]).max())
    if not (pose_off <= POSE_TOLERANCE and latent_off <= LATENT_TOLERANCE):
        log.warning("%s: the compiled networks are %.1e off onnxruntime's poses, %.1e off its "
                    "latents: onnxruntime runs them", fused.path, pose_off, latent_off)
        return None
    return compiled
