"""The decoder's exact Jacobian as its own ONNX graph (role ``decoder_jacobian``).

The engine refines a solve by Gauss-Newton steps on the latent; each step needs
``d pose / d latent``. A finite difference costs a decoder call on ``L + 1`` latents and
is only approximate; this graph propagates tangents through the decoder's layers in closed
form (linear, LayerNorm, ReLU), so one call on ``B`` latents returns the poses and their
Jacobians.

The tangents are not every latent axis but the :data:`JACOBIAN_RANK` directions that move
the decoded pose most on real poses (the top eigenvectors of the mean ``JᵀJ`` over encoded
training poses, :func:`jacobian_basis`): the refinement moves the latent along them only.
The graph costs about two thirds of the full Jacobian's time, and the drag and engine
benchmarks measure the same figures as with every latent axis. The graph returns that
basis too, ``(K, L)``, so the engine maps a step back to the latent with the weights it
was made for.

It is built from a trained :class:`~training.learning.nets.PoseAutoencoder`, or from a model
folder's ``decoder.onnx`` alone (``python -m training export-jacobian --models DIR``), so a
shipped set gains the graph without its checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from blender_addon.core import models as core_models
from blender_addon.core import skeleton
from blender_addon.core.fileio import atomic_open, write_json
from training.data.dataset import PoseData
from training.export.onnx_io import onnx_bytes
from training.learning.nets import PoseAutoencoder

ROLE = "decoder_jacobian"
NAME = "decoder_jacobian"
PARITY_TOLERANCE = 1e-4  # relative to the largest Jacobian entry (float32 through 3 layers)
PARITY_LATENTS = 16
# Latent directions refined along (of 64): 32 drag and pair figures as the whole latent;
# 16 moved the pelvis and pinned feet about twice as far in the drag benchmark.
JACOBIAN_RANK = 32
BASIS_POSES = 2048  # training poses whose latents choose the directions


def decoder_layers(ae: PoseAutoencoder) -> list[tuple[str, tuple[Any, ...]]]:
    """The decoder as (kind, parameters) steps, as ``PoseAutoencoder.decode`` runs them:
    linear (W, b) as ``y = linear(x, W, b) = x @ W.T + b``, layernorm (gain, bias, eps,
    normalized shape), relu."""
    if ae.tied:
        enc = [m for m in ae.encoder if isinstance(m, nn.Linear)]
        steps: list[tuple[str, tuple[Any, ...]]] = []
        for i, (m, b) in enumerate(zip(reversed(enc), ae.dec_bias, strict=True)):
            steps.append(("linear", (m.weight.t(), b)))  # the transpose of the encoder's layer
            if i < len(enc) - 1:
                steps.append(("relu", ()))
        return steps
    out = []
    for m in ae.decoder:
        if isinstance(m, nn.Linear):
            out.append(("linear", (m.weight, m.bias)))
        elif isinstance(m, nn.LayerNorm):
            out.append(("layernorm", (m.weight, m.bias, m.eps, m.normalized_shape)))
        elif isinstance(m, nn.ReLU):
            out.append(("relu", ()))
        else:
            raise TypeError(f"decoder layer {type(m).__name__} has no Jacobian rule")
    return out


class DecoderJacobian(nn.Module):
    """latent (B, L) -> pose (B, 21, 3), d pose / d (latent along each basis row) (B, 63, K)
    and the orthonormal basis (K, L) itself (every latent axis when none is given)."""

    def __init__(self, ae: PoseAutoencoder, basis: torch.Tensor | None = None) -> None:
        super().__init__()
        self.ae = ae
        self.register_buffer("basis", torch.eye(ae.latent_size) if basis is None
                             else basis.detach().float().clone())

    def forward(self, z: torch.Tensor, layers: list[tuple[str, tuple[Any, ...]]] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pose, tangent = self._walk(z, decoder_layers(self.ae) if layers is None else layers, True)
        jac = (tangent * self.ae.norm.std).expand(z.shape[0], -1, -1).transpose(1, 2)
        return pose, jac, self.basis

    def decode(self, z: torch.Tensor, layers: list[tuple[str, tuple[Any, ...]]]
               ) -> torch.Tensor:
        """The decoded pose (B, 21, 3) alone, through ``layers`` (:func:`decoder_layers`): a graph
        that decodes and differentiates through the same ``layers`` keeps each weight
        once (``PoseAutoencoder.decode`` would add its own copies)."""
        return self._walk(z, layers, False)[0]

    def _walk(self, z: torch.Tensor, layers: list[tuple[str, tuple[Any, ...]]],
              tangents: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        # The values as the decoder's own ops (Gemm, LayerNormalization in ONNX: the same
        # numbers as decoder.onnx); the tangents through the same weights (a Gemm on the
        # flattened directions), so a graph holds each weight once.
        h = z
        tangent: torch.Tensor | None = None  # (B or 1, K, features): d h / d z
        for kind, params in layers:
            if kind == "linear":
                weight, bias = params
                h = F.linear(h, weight, bias)
                if tangents:  # the first layer's is the basis through its weight, for all z
                    t = self.basis if tangent is None else tangent.reshape(-1, weight.shape[1])
                    t = F.linear(t, weight, torch.zeros_like(bias))
                    tangent = t[None] if tangent is None \
                        else t.reshape(*tangent.shape[:-1], weight.shape[0])
            elif kind == "layernorm":
                gain, beta, eps, shape = params
                if tangents:
                    centred = h - h.mean(-1, keepdim=True)
                    std = torch.sqrt((centred * centred).mean(-1, keepdim=True) + eps)
                    xhat = centred / std
                    t = tangent - tangent.mean(-1, keepdim=True)
                    t = t - xhat[:, None, :] * (t * xhat[:, None, :]).mean(-1, keepdim=True)
                    tangent = t / std[:, None, :] * gain
                h = F.layer_norm(h, shape, gain, beta, eps)
            else:
                if tangents:
                    tangent = tangent * (h > 0).to(h.dtype)[:, None, :]
                h = torch.relu(h)
        pose = self.ae.norm.inverse(h).reshape(z.shape[0], skeleton.NUM_JOINTS, 3)
        return pose, tangent


def jacobian_basis(ae: PoseAutoencoder, poses: torch.Tensor, rank: int = JACOBIAN_RANK
                   ) -> torch.Tensor:
    """(rank, L): the latent directions that move the decoded pose most, on average over the
    latents of ``poses`` (B, 21, 3) (model space): the top eigenvectors of the mean JᵀJ."""
    with torch.no_grad():
        _, jac, _ = DecoderJacobian(ae.eval())(ae.encode(poses))
    jac = jac.double()
    _, vecs = torch.linalg.eigh(torch.einsum("brk,brl->kl", jac, jac) / len(jac))
    return vecs[:, -rank:].flip(-1).T.float().contiguous()


def autoencoder_from_onnx(folder: Path, manifest: dict[str, Any],
                          parts: tuple[str, ...] = ("decoder",)) -> PoseAutoencoder:
    """The autoencoder rebuilt from the set's ONNX graphs' named weights: the decoder's
    (``decoder.onnx``), and the encoder's too with ``parts`` ``("encoder", "decoder")``."""
    import onnx
    from onnx import numpy_helper

    weights: dict[str, torch.Tensor] = {}
    cfg: dict[str, Any] = {}
    for role in parts:
        entry = next((m for m in manifest["modules"] if m["role"] == role), None)
        if entry is None:
            raise ValueError(f"{folder / core_models.MANIFEST_NAME}: no {role} module listed")
        path = folder / entry["file"]
        found = {i.name.removeprefix("ae."): torch.from_numpy(numpy_helper.to_array(i).copy())
                 for i in onnx.load(str(path)).graph.initializer if i.name.startswith("ae.")}
        if "norm.mean" not in found:
            raise ValueError(f"{path}: no named autoencoder weights (ae.*) in the graph; "
                             "export the set again with `python -m training export`")
        weights.update(found)
        cfg = entry["config"]
    ae = PoseAutoencoder(weights["norm.mean"], weights["norm.std"], hidden=cfg["hidden"],
                         latent=cfg["latent"], tied=cfg["tied"], layernorm=cfg["layernorm"])
    prefixes = tuple({"decoder": ("decoder.", "dec_bias."), "encoder": ("encoder.",)}[r]
                     for r in parts)
    missing = [k for k in ae.state_dict() if k not in weights
               and any(k.startswith(x) for pre in prefixes for x in pre)]
    if missing:
        raise ValueError(f"{folder}: autoencoder weights {missing} not found in its graphs")
    ae.load_state_dict(weights, strict=False)
    return ae.eval()


def initializer_count(blob: bytes) -> int:
    """Values stored in an ONNX graph's initializers: the graph's own parameters."""
    import onnx

    return int(sum(np.prod(i.dims, dtype=np.int64)
                   for i in onnx.load_from_string(blob).graph.initializer))


def write_decoder_jacobian(ae: PoseAutoencoder, folder: Path, decoder_file: Path | None = None,
                           basis: torch.Tensor | None = None, seed: int = 0) -> dict[str, Any]:
    """Write ``folder/decoder_jacobian.onnx`` and return its manifest entry.

    Checked before anything is written: the graph's Jacobian against torch's autograd, its
    pose against ``decoder_file`` run by onnxruntime (when given), within
    :data:`PARITY_TOLERANCE`.
    """
    import onnxruntime as ort

    net = DecoderJacobian(ae.eval(), basis).eval()
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(PARITY_LATENTS, ae.latent_size, generator=gen)
    blob = onnx_bytes(net, (z,), ROLE)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    pose, jac, _ = sess.run(None, {"latent": z.numpy()})
    want = torch.autograd.functional.jacobian(
        lambda v: ae.decode(v[None])[0], z[0]).numpy() @ net.basis.numpy().T  # (63, K)
    scale = float(np.abs(want).max())
    err = float(np.abs(jac[0] - want).max()) / scale
    if decoder_file is not None:
        dec = ort.InferenceSession(str(decoder_file), providers=["CPUExecutionProvider"])
        got = dec.run(None, {"latent": z.numpy()})[0]
        err = max(err, float(np.abs(got - pose).max()) / max(float(np.abs(got).max()), 1e-9))
    if err > PARITY_TOLERANCE:
        raise RuntimeError(f"{folder / (NAME + '.onnx')}: Jacobian graph differs from the "
                           f"decoder by {err:.2e} (relative, > {PARITY_TOLERANCE:.0e})")
    file = f"{NAME}.onnx"
    with atomic_open(folder / file) as fh:
        fh.write(blob)
    return {"name": NAME, "role": ROLE, "file": file, "parameters": initializer_count(blob),
            "bytes": len(blob), **core_models.module_io(ROLE, ae.latent_size, rank=len(net.basis)),
            "config": dict(ae.config), "parity_relative_error": err}


def basis_poses(pd: PoseData, seed: int = 0) -> torch.Tensor:
    """:data:`BASIS_POSES` random training-split poses of a prepared set, for
    :func:`jacobian_basis`."""
    train = np.flatnonzero(pd.split_mask("train"))
    pick = np.random.default_rng(seed).choice(train, min(BASIS_POSES, len(train)), replace=False)
    return torch.from_numpy(pd.poses[np.sort(pick)].astype(np.float32))


def add_to_folder(folder: str | Path, data: str | Path | None = None) -> dict[str, Any]:
    """``export-jacobian``: give an exported set (``manifest.json`` + ``decoder.onnx``) the
    Jacobian graph, along the directions chosen on ``data``'s training poses (every latent
    axis without data); the manifest is rewritten atomically with the new module listed."""
    folder = Path(folder)
    manifest = core_models.read_manifest(folder)
    ae = autoencoder_from_onnx(folder, manifest)
    decoder = next(m for m in manifest["modules"] if m["role"] == "decoder")
    basis = None if data is None else jacobian_basis(ae, basis_poses(PoseData.load(data)))
    entry = write_decoder_jacobian(ae, folder, folder / decoder["file"], basis)
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != ROLE] + [entry]
    write_json(folder / core_models.MANIFEST_NAME, manifest)
    return entry
