"""The effector refinement as one ONNX graph: :func:`blender_addon.core.refine.refine` for
edits without metric requests (every drag, every Solve of effectors), in one session call.

The numpy refinement makes about 250 small numpy calls per solve around its onnxruntime
calls (the Jacobian graph, a decode per step); on one pose each costs microseconds of
Python and numpy dispatch. The same steps as one graph run in onnxruntime's executor in
less time (``benchmark --suite latency`` measures how much, against the numpy steps in the
same run): its nodes cost about a microsecond each, the Jacobian's arithmetic the same. The numpy
refinement stays the specification (and serves metric requests, clavicle turns and sets
without this graph): this module mirrors it step for step, in float64 around the float32
decoder, and :func:`write_refine_graph` checks the two agree before anything is written.

Differences by construction, none seen by the parity check: a zero-length bone is scaled by
a guarded division instead of :func:`normalize.set_bone_lengths`'s joint-by-joint sweep
(a decoded pose has no such bone), and the steps are unrolled: one graph per step count
of :data:`GRAPH_STEPS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.onnx import register_custom_op_symbolic

from blender_addon.core import models as core_models
from blender_addon.core import refine, skeleton
from blender_addon.core.fileio import atomic_open, write_json
from training.export.jacobian import DecoderJacobian, decoder_layers, initializer_count
from training.export.onnx_io import OPSET, onnx_bytes
from training.learning.nets import PoseAutoencoder

ROLE = "refine_effectors"
GRAPH_STEPS = refine.GRAPH_STEPS
PARITY_POSES = 64
PARITY_SINGLE = 4  # of them also one at a time
PARITY_TOLERANCE = 1e-5  # model metres and latent units: float32 decodes, float64 elsewhere
_J, _POSE_DIM = skeleton.NUM_JOINTS, skeleton.NUM_JOINTS * 3
# (20, 21): bones 1..20's vectors (joint minus parent) as one product with the pose.
_BONE_VECTORS = np.eye(_J)[1:] - np.eye(_J)[skeleton.PARENTS[1:]]


def _inverse_symbolic(g: Any, a: Any) -> Any:
    """``torch.linalg.inv`` as onnxruntime's ``com.microsoft.Inverse`` (ONNX has none)."""
    return g.op("com.microsoft::Inverse", a).setType(a.type())


register_custom_op_symbolic("aten::linalg_inv", _inverse_symbolic, OPSET)


def _const(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.float64))


class EffectorRefinement(nn.Module):
    """(z_net, offset, base, targets, weights, follow, shift, lengths, effector weight,
    least change, spans) -> (latent, pose, shift): :func:`refine.refine` with
    ``metrics=None``, ``shrug=False``, ``relinearize=False``, ``spans`` given and
    ``steps`` steps."""

    def __init__(self, ae: PoseAutoencoder, basis: torch.Tensor, steps: int) -> None:
        super().__init__()
        self.ae = ae.eval()
        self.jacobian = DecoderJacobian(self.ae, basis.float())
        self.steps = steps
        rank = len(basis)
        self.register_buffer("basis", basis.double().clone())
        self.register_buffer("prior", _const(refine._prior(rank, False)))
        self.register_buffer("eye", torch.eye(rank + 2, dtype=torch.float64))
        self.register_buffer("bone_sums", _const(refine._BONE_SUMS))
        # Bone vectors and the rigid branches' gaps as products with the pose (B, 21, 3):
        # one MatMul each instead of gathers.
        self.register_buffer("bones", _const(_BONE_VECTORS))
        self.register_buffer("gaps", _const(refine._RIGID_SIGNS))
        self.register_buffer("shift_jac", _const(refine._SHIFT_JAC))
        self.register_buffer("xz", _const(refine._XZ))
        self.rigid_scale = float(np.sqrt(refine.RIGID_WEIGHT))

    def _fixed(self, pose: torch.Tensor, lengths: torch.Tensor,
               jac: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:func:`refine._fixed`; ``lengths`` (B, 20, 1): bones 1..20's."""
        vec = self.bones @ pose
        length = torch.sqrt((vec * vec).sum(-1, keepdim=True))
        unit = vec / torch.clamp(length, min=1e-12)
        out = pose[:, :1] + self.bone_sums @ (unit * lengths)
        if jac is None:
            return out, None
        b, k = jac.shape[0], jac.shape[-1]
        dvec = (self.bones @ jac.reshape(b, _J, 3 * k)).reshape(b, _J - 1, 3, k)
        along = (unit[..., None] * dvec).sum(2, keepdim=True)
        dbone = (dvec - unit[..., None] * along) * (lengths / length)[..., None]
        djoint = (self.bone_sums @ dbone.reshape(b, _J - 1, -1)).reshape(b, _J, 3, k)
        return out, (djoint + jac.reshape(b, _J, 3, k)[:, :1]).reshape(b, _POSE_DIM, k)

    def _rigid(self, pose: torch.Tensor, spans: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`refine._rigid_block`'s residuals, the gaps' vectors and their lengths."""
        gap = self.gaps @ pose
        dist = torch.sqrt((gap * gap).sum(-1))
        return (dist - spans) * self.rigid_scale, gap, dist

    def _cost(self, pose: torch.Tensor, dv: torch.Tensor, goal: torch.Tensor,
              row_w: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        """:func:`refine._cost`, given the pose's rigid residuals ``res``."""
        diff = pose.reshape(pose.shape[0], -1) - goal
        cost = (diff * diff * row_w).sum(1) + (self.prior * (dv * dv)).sum(1)
        return cost + (res * res).sum(1)

    def _latent(self, z_net: torch.Tensor, dz: torch.Tensor) -> torch.Tensor:
        return z_net + dz @ self.basis

    def forward(self, z_net: torch.Tensor, offset: torch.Tensor, base: torch.Tensor,
                targets: torch.Tensor, weights: torch.Tensor, follow: torch.Tensor,
                shift: torch.Tensor, lengths: torch.Tensor, effector_weight: torch.Tensor,
                least_change: torch.Tensor, spans: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, rank = z_net.shape[0], len(self.basis)
        bone_lengths = lengths[:, 1:, None]
        # The variables' move from the networks' answer (v - v_net): the latent's along the
        # basis, then the body's shift; the shift itself is shift + dv[:, -2:].
        dv = torch.zeros_like(shift[:, :1]).expand(b, rank + 2)
        # One set of decoder weights for the Jacobian and every step's decode.
        layers = decoder_layers(self.ae)
        decoded, jac, _ = self.jacobian(z_net.float(), layers)
        pose, jac = self._fixed(offset + decoded.double(), bone_lengths, jac.double())
        pose = pose + (shift @ self.xz)[:, None]
        jac = torch.cat([jac, self.shift_jac.expand(b, -1, -1)], dim=2)
        w3 = weights[:, :, None].expand(-1, -1, 3).reshape(b, -1)
        asked = w3 > 0
        row_w = torch.where(asked, w3 * effector_weight[:, None], least_change[:, None])
        follow = follow[:, None]
        keep = (1.0 - follow) * base.reshape(b, -1) + follow * pose.reshape(b, -1)
        goal = torch.where(asked, targets.reshape(b, -1), keep)
        res, gap, dist = self._rigid(pose, spans)
        cost = self._cost(pose, dv, goal, row_w, res)
        unit = gap * (self.rigid_scale / torch.clamp(dist, min=1e-12))[..., None]
        # d dist / d pose = gaps (6, 21) x unit: the rigid rows' Jacobian in one product.
        rjac = ((self.gaps[None, :, :, None] * unit[:, :, None, :]).reshape(b, -1, _POSE_DIM)
                @ jac)
        jac_w = jac * row_w[:, :, None]
        # Einsum, not a transposed MatMul: onnxruntime fuses those into a float32-only kernel.
        hess = torch.einsum("brk,brl->bkl", jac, jac_w) + torch.einsum("brk,brl->bkl", rjac, rjac)
        scale = (hess * self.eye).sum((1, 2), keepdim=True) / (rank + 2)
        hess = hess + self.prior * self.eye
        damping = torch.full_like(scale, refine.LM_START)
        going = torch.ones_like(cost, dtype=torch.bool)  # False once a step fails every pose
        for _ in range(self.steps):
            inverse = torch.linalg.inv(hess + damping * scale * self.eye)
            grad = (pose.reshape(b, 1, -1) - goal[:, None]) @ jac_w \
                + (self.prior * dv)[:, None] + res[:, None] @ rjac
            dv_try = dv - (grad @ inverse)[:, 0]  # the inverse is symmetric
            z = self._latent(z_net, dv_try[:, :rank])
            decoded = self.jacobian.decode(z.float(), layers).double()
            pose_try = self._fixed(offset + decoded, bone_lengths)[0] \
                + ((shift + dv_try[:, rank:]) @ self.xz)[:, None]
            res_try = self._rigid(pose_try, spans)[0]
            cost_try = self._cost(pose_try, dv_try, goal, row_w, res_try)
            better = (cost_try < cost) & going
            damping = torch.where(better[:, None, None] | ~going[:, None, None], damping,
                                  damping * refine.LM_UP)
            dv = torch.where(better[:, None], dv_try, dv)
            cost = torch.where(better, cost_try, cost)
            res = torch.where(better[:, None], res_try, res)
            pose = torch.where(better[:, None, None], pose_try, pose)
            going = going & better.any()
        return self._latent(z_net, dv[:, :rank]).float(), pose, shift + dv[:, rank:]


def _examples(ae: PoseAutoencoder, poses: np.ndarray, seed: int) -> tuple[torch.Tensor, ...]:
    """Inputs like the engine's for ``poses`` (B, 21, 3) (model space): one end joint per
    pose (a hand, a foot or the head) moved by up to 20 cm on each axis, the other ends
    held, as a drag is."""
    rng = np.random.default_rng(seed)
    b = len(poses)
    with torch.no_grad():
        z = ae.encode(torch.from_numpy(poses).float()).double()
        offset = torch.from_numpy(poses) - ae.decode(z.float()).double().reshape(b, _J, 3)
    ends = skeleton.joint_indices(list(skeleton.END_JOINTS))
    weights = np.zeros((b, _J))
    weights[:, ends] = 1.0
    targets = poses.copy()
    moved = ends[rng.integers(0, len(ends), b)]
    targets[np.arange(b), moved] += rng.uniform(-0.2, 0.2, (b, 3))
    lengths = skeleton.bone_lengths(poses)
    share = refine.full_body_share(weights, targets, poses)
    values = (z, offset, torch.from_numpy(poses), torch.from_numpy(targets),
              torch.from_numpy(weights), torch.from_numpy(rng.uniform(0.0, 1.0, b)),
              torch.from_numpy(rng.uniform(-0.05, 0.05, (b, 2))), torch.from_numpy(lengths),
              torch.from_numpy(refine.effector_weights(share)),
              torch.from_numpy(refine.least_change_weights(share)),
              torch.from_numpy(refine.rigid_spans(poses)))
    return tuple(t.double().contiguous() for t in values)


def write_refine_graph(ae: PoseAutoencoder, models: core_models.ModelSet, poses: np.ndarray,
                       steps: int, seed: int = 0) -> tuple[dict[str, Any], float]:
    """Write ``refine_effectors_<steps>.onnx`` into the set ``models`` (whose autoencoder
    ``ae`` is), along its refinement directions; its manifest entry and its largest
    difference from the numpy refinement. Checked first against the numpy refinement
    (:func:`refine.refine` with the set's own graphs) on ``poses`` (model space), as one
    batch and one pose at a time (the add-on's batch): every output within
    :data:`PARITY_TOLERANCE`."""
    import onnxruntime as ort

    folder = Path(models.folder)
    basis = torch.from_numpy(models.jacobian_basis)
    name = f"{ROLE}_{steps}"
    net = EffectorRefinement(ae, basis, steps).eval()
    example = _examples(ae, poses[:PARITY_POSES].astype(np.float64), seed)
    blob = onnx_bytes(net, example, ROLE)
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    err = 0.0
    for rows in (slice(None), *(slice(k, k + 1) for k in range(PARITY_SINGLE))):
        values = [t.numpy()[rows] for t in example]
        got = sess.run(None, dict(zip(names, values, strict=True)))
        want = refine.refine(models, values[0], *values[1:5], None, values[5], steps,
                             values[6], values[7], False, *values[8:11], graph=False)
        err = max(err, *(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True)))
    if not err <= PARITY_TOLERANCE:
        raise RuntimeError(f"{folder / (name + '.onnx')}: the refinement graph differs from "
                           f"the numpy refinement by {err:.3g} (> {PARITY_TOLERANCE:g}; "
                           "model metres, latent units)")
    file = f"{name}.onnx"
    with atomic_open(folder / file) as fh:
        fh.write(blob)
    return {"name": name, "role": ROLE, "file": file, "parameters": initializer_count(blob),
            "bytes": len(blob),
            **core_models.module_io(ROLE, ae.latent_size, rank=len(basis)),
            "config": {"steps": steps, "constants": refine.graph_constants(),
                       "basis": refine.basis_digest(basis.numpy()),
                       "autoencoder": dict(ae.config)}}, err


def add_to_folder(folder: str | Path) -> list[dict[str, Any]]:
    """``export-refine``: give an exported set (with its ``decoder_jacobian`` graph) the
    refinement graphs, along the same latent directions; the manifest is rewritten
    atomically with the new modules listed (any earlier ones replaced)."""
    from training.export.jacobian import autoencoder_from_onnx

    folder = Path(folder)
    manifest = core_models.read_manifest(folder)
    if not any(m["role"] == "decoder_jacobian" for m in manifest["modules"]):
        raise ValueError(f"{folder / core_models.MANIFEST_NAME}: no decoder_jacobian module; "
                         "run `python -m training export-jacobian` first")
    ae = autoencoder_from_onnx(folder, manifest, ("encoder", "decoder"))
    models = core_models.ModelSet(folder)
    poses = _parity_poses(ae)
    written = [write_refine_graph(ae, models, poses, steps) for steps in GRAPH_STEPS]
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != ROLE] + [
        entry for entry, _ in written]
    manifest["parity_max_abs_error"] = {
        **{k: v for k, v in manifest.get("parity_max_abs_error", {}).items()
           if not k.startswith(ROLE)},
        **{entry["name"]: err for entry, err in written}}
    write_json(folder / core_models.MANIFEST_NAME, manifest)
    return [entry for entry, _ in written]


def copy_without_graphs(folder: str | Path, dest: Path) -> Path:
    """A copy of a model set without its refinement graphs (the numpy steps only), to
    measure or test against."""
    import shutil

    out = Path(shutil.copytree(folder, dest))
    manifest = core_models.read_manifest(out)
    for m in manifest["modules"]:
        if m["role"] == ROLE:
            (out / m["file"]).unlink()
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != ROLE]
    write_json(out / core_models.MANIFEST_NAME, manifest)
    return out


def _parity_poses(ae: PoseAutoencoder, seed: int = 0) -> np.ndarray:
    """Model-space poses for the parity check: decoded latents near the data's (the
    autoencoder's own poses; no data set needed)."""
    gen = torch.Generator().manual_seed(seed)
    mean = ae.norm.mean.reshape(1, -1, 3)
    noisy = mean + 0.05 * torch.randn((PARITY_POSES, *mean.shape[1:]), generator=gen)
    with torch.no_grad():
        return ae.decode(ae.encode(noisy)).reshape(-1, _J, 3).double().numpy()
