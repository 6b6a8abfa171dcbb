"""The decoder's exact Jacobian as its own ONNX graph (role ``decoder_jacobian``).

The engine refines a solve by Gauss-Newton steps on the latent; each step needs
``d pose / d latent``. A finite difference costs a decoder call on ``L + 1`` latents and
is only approximate; this graph propagates the tangents of every latent axis through the
decoder's layers in closed form (linear, LayerNorm, ReLU), so one call on ``B`` latents
returns the poses and their ``(B, 63, L)`` Jacobians.

It is built from a trained :class:`~training.nets.PoseAutoencoder`, or from a model
folder's ``decoder.onnx`` alone (``python -m training export-jacobian --models DIR``), so a
shipped set gains the graph without its checkpoints.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from blender_addon.core import models as core_models
from blender_addon.core import skeleton
from blender_addon.core.fileio import atomic_open, write_json
from training.nets import PoseAutoencoder

ROLE = "decoder_jacobian"
NAME = "decoder_jacobian"
OPSET = 17
PARITY_TOLERANCE = 1e-4  # relative to the largest Jacobian entry (float32 through 3 layers)
PARITY_LATENTS = 16


def _layers(ae: PoseAutoencoder) -> list[tuple[str, tuple[Any, ...]]]:
    """The decoder as (kind, parameters) steps: linear (W, b) as ``y = x @ W + b``,
    layernorm (gain, bias, eps), relu."""
    if ae.tied:
        enc = [m for m in ae.encoder if isinstance(m, nn.Linear)]
        steps: list[tuple[str, tuple[Any, ...]]] = []
        for i, (m, b) in enumerate(zip(reversed(enc), ae.dec_bias, strict=True)):
            steps.append(("linear", (m.weight, b)))  # the transpose of the encoder's layer
            if i < len(enc) - 1:
                steps.append(("relu", ()))
        return steps
    out = []
    for m in ae.decoder:
        if isinstance(m, nn.Linear):
            out.append(("linear", (m.weight.t(), m.bias)))
        elif isinstance(m, nn.LayerNorm):
            out.append(("layernorm", (m.weight, m.bias, m.eps)))
        elif isinstance(m, nn.ReLU):
            out.append(("relu", ()))
        else:
            raise TypeError(f"decoder layer {type(m).__name__} has no Jacobian rule")
    return out


class DecoderJacobian(nn.Module):
    """latent (B, L) -> pose (B, 21, 3) and d pose / d latent (B, 63, L)."""

    def __init__(self, ae: PoseAutoencoder) -> None:
        super().__init__()
        self.ae = ae

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = z
        tangent: torch.Tensor | None = None  # (B or 1, L, features): d h / d z
        for kind, params in _layers(self.ae):
            if kind == "linear":
                weight, bias = params
                h = h @ weight + bias
                # The first layer's tangent is its weight, the same for every latent.
                tangent = weight[None] if tangent is None else tangent @ weight
            elif kind == "layernorm":
                gain, beta, eps = params
                centred = h - h.mean(-1, keepdim=True)
                std = torch.sqrt((centred * centred).mean(-1, keepdim=True) + eps)
                xhat = centred / std
                t = tangent - tangent.mean(-1, keepdim=True)
                t = t - xhat[:, None, :] * (t * xhat[:, None, :]).mean(-1, keepdim=True)
                tangent = t / std[:, None, :] * gain
                h = xhat * gain + beta
            else:
                tangent = tangent * (h > 0).to(h.dtype)[:, None, :]
                h = torch.relu(h)
        norm = self.ae.norm
        pose = norm.inverse(h).reshape(z.shape[0], skeleton.NUM_JOINTS, 3)
        jac = (tangent * norm.std).expand(z.shape[0], -1, -1).transpose(1, 2)
        return pose, jac


def autoencoder_from_onnx(folder: Path, manifest: dict[str, Any]) -> PoseAutoencoder:
    """The autoencoder's decoder rebuilt from ``decoder.onnx``'s named weights."""
    import onnx
    from onnx import numpy_helper

    entry = next(m for m in manifest["modules"] if m["role"] == "decoder")
    path = folder / entry["file"]
    weights = {i.name.removeprefix("ae."): torch.from_numpy(numpy_helper.to_array(i).copy())
               for i in onnx.load(str(path)).graph.initializer if i.name.startswith("ae.")}
    if "norm.mean" not in weights:
        raise ValueError(f"{path}: no named autoencoder weights (ae.*) in the graph; "
                         "export the set again with `python -m training export`")
    cfg = entry["config"]
    ae = PoseAutoencoder(weights["norm.mean"], weights["norm.std"], hidden=cfg["hidden"],
                         latent=cfg["latent"], tied=cfg["tied"], layernorm=cfg["layernorm"])
    missing = [k for k in ae.state_dict() if k not in weights
               and (k.startswith("decoder.") or k.startswith("dec_bias."))]
    if missing:
        raise ValueError(f"{path}: decoder weights {missing} not found in the graph")
    ae.load_state_dict(weights, strict=False)
    return ae.eval()


def _onnx_bytes(net: nn.Module, z: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    inputs = [n for n, _ in core_models.ROLE_INPUTS[ROLE]]
    outputs = [n for n, _ in core_models.ROLE_OUTPUTS[ROLE]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript-based exporter's deprecation note
        torch.onnx.export(net, (z,), buf, input_names=inputs, output_names=outputs,
                          dynamic_axes={n: {0: "batch"} for n in [*inputs, *outputs]},
                          opset_version=OPSET, dynamo=False)
    return buf.getvalue()


def initializer_count(blob: bytes) -> int:
    """Values stored in an ONNX graph's initializers: the graph's own parameters."""
    import onnx

    return int(sum(np.prod(i.dims, dtype=np.int64)
                   for i in onnx.load_from_string(blob).graph.initializer))


def write_decoder_jacobian(ae: PoseAutoencoder, folder: Path, decoder_file: Path | None = None,
                           seed: int = 0) -> dict[str, Any]:
    """Write ``folder/decoder_jacobian.onnx`` and return its manifest entry.

    Checked before anything is written: the graph's Jacobian against torch's autograd, its
    pose against ``decoder_file`` run by onnxruntime (when given), within
    :data:`PARITY_TOLERANCE`.
    """
    import onnxruntime as ort

    net = DecoderJacobian(ae.eval()).eval()
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(PARITY_LATENTS, ae.latent_size, generator=gen)
    blob = _onnx_bytes(net, z)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    pose, jac = sess.run(None, {"latent": z.numpy()})
    want = torch.autograd.functional.jacobian(
        lambda v: ae.decode(v[None])[0], z[0]).numpy()  # (63, L)
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
            "bytes": len(blob), **core_models.module_io(ROLE, ae.latent_size),
            "config": dict(ae.config), "parity_relative_error": err}


def add_to_folder(folder: str | Path) -> dict[str, Any]:
    """``export-jacobian``: give an exported set (``manifest.json`` + ``decoder.onnx``) the
    Jacobian graph; the manifest is rewritten atomically with the new module listed."""
    folder = Path(folder)
    manifest = core_models.read_manifest(folder)
    ae = autoencoder_from_onnx(folder, manifest)
    decoder = next(m for m in manifest["modules"] if m["role"] == "decoder")
    entry = write_decoder_jacobian(ae, folder, folder / decoder["file"])
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != ROLE] + [entry]
    write_json(folder / core_models.MANIFEST_NAME, manifest)
    return entry
