"""Export trained networks to ONNX (what the add-on loads) and TorchScript, plus the manifest.

Every file is written atomically; after writing, each ONNX module is run with onnxruntime
against torch on random and real inputs and the export fails if they differ by more than
:data:`PARITY_TOLERANCE`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from blender_addon.core import models as core_models
from blender_addon.core import skeleton
from blender_addon.core.fileio import atomic_open, write_json
from training.data.dataset import PoseData
from training.export.jacobian import (
    BASIS_POSES,
    DecoderJacobian,
    basis_poses,
    initializer_count,
    jacobian_basis,
)
from training.export.onnx_io import onnx_bytes
from training.learning.nets import (
    Decoder,
    Encoder,
    FusedUniversal,
    GroupSolver,
    MetricNet,
    UniversalSolver,
)
from training.learning.recipes import load_autoencoder
from training.learning.tasks import EFFECTOR_GROUPS
from training.learning.train import load_checkpoint

PARITY_TOLERANCE = 1e-5
PARITY_BATCH = 64


@dataclass
class Exported:
    name: str
    role: str
    net: nn.Module
    example: tuple[torch.Tensor, ...]
    extra: dict[str, Any]


def _examples(role: str, latent: int, group: int, poses: torch.Tensor, gen: torch.Generator
              ) -> tuple[torch.Tensor, ...]:
    """Realistic inputs for tracing and parity: real poses, their latents, real targets."""
    n = poses.shape[0]
    z = torch.randn(n, latent, generator=gen)
    if role == "encoder":
        return (poses,)
    if role in ("decoder", "decoder_jacobian"):
        return (z,)
    if role in ("ik_universal", "ik_universal_fused"):
        mask = (torch.rand(n, skeleton.NUM_JOINTS, generator=gen) < 0.3).float()
        weights = mask * torch.rand(n, skeleton.NUM_JOINTS, generator=gen)
        return z if role == "ik_universal" else poses, mask, poses, weights
    if role == "ik_group":
        return z, poses[:, :group]
    return z, torch.randn(n, 1, generator=gen) * 20


def collect(runs: Path, basis_from: torch.Tensor | None = None
            ) -> tuple[list[Exported], dict[str, Any]]:
    """Every trained network in ``runs`` with its export wrapper and manifest extras;
    ``basis_from`` (training poses) choose the Jacobian graph's latent directions (without
    them: poses around the mean pose)."""
    ae = load_autoencoder(runs / "ae.pt").eval()
    latent = ae.latent_size
    if basis_from is None:
        gen = torch.Generator().manual_seed(0)
        mean = ae.norm.mean.reshape(1, -1, 3)
        basis_from = mean + 0.05 * torch.randn((BASIS_POSES, *mean.shape[1:]), generator=gen)
    basis = jacobian_basis(ae, basis_from)
    nets = [Exported("encoder", "encoder", Encoder(ae), (), {"config": ae.config}),
            Exported("decoder", "decoder", Decoder(ae), (), {"config": ae.config}),
            Exported("decoder_jacobian", "decoder_jacobian", DecoderJacobian(ae, basis), (),
                     {"config": ae.config | {"rank": len(basis)}})]
    mean, std = ae.norm.mean, ae.norm.std
    paths = sorted(runs.glob("solver_*.pt")) + sorted(runs.glob("metric_*.pt"))
    for path in paths:
        ckpt = load_checkpoint(path)
        sd, cfg = ckpt["best_state"] or ckpt["state_dict"], ckpt["config"]
        if cfg.get("latent") != latent:
            raise ValueError(f"{path}: trained on a latent of {cfg.get('latent')}, but ae.pt "
                             f"has {latent}; retrain it after the autoencoder")
        if ckpt["kind"] == "ik_universal":
            net: nn.Module = UniversalSolver(mean, std, latent, cfg["hidden"], cfg["layernorm"])
            item = Exported("ik_universal", "ik_universal", net, (), {"config": cfg})
        elif ckpt["kind"] == "ik_group":
            net = GroupSolver(mean, std, latent, cfg["joints"], cfg["hidden"])
            names = [skeleton.JOINTS[j] for j in cfg["joints"]]
            item = Exported(f"ik_{cfg['group']}", "ik_group", net, (),
                            {"config": cfg, "joints": names})
        elif ckpt["kind"] == "metric":
            net = MetricNet(latent, 0.0, 1.0, cfg["hidden"])
            spec = cfg["spec"]
            item = Exported(f"metric_{spec['name']}", "metric", net, (),
                            {"config": cfg, "metric": spec, "range": cfg["range"]})
        else:
            continue
        net.load_state_dict(sd)
        nets.append(item)
        if item.role == "ik_universal":
            nets.append(Exported("ik_universal_fused", "ik_universal_fused",
                                 FusedUniversal(ae, net), (),
                                 {"config": {"autoencoder": ae.config, "solver": cfg}}))
    return nets, {"latent": latent, "mean": mean.numpy(), "std": std.numpy(), "ae": ae}


def export(runs: str | Path, out: str | Path, data: str | Path | None = None,
           torchscript: str | Path | None = None, seed: int = 0,
           about: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``out/*.onnx`` and ``out/manifest.json`` (and TorchScript files if asked).

    ``about`` (name, data, licence, commercial_use, credit) goes to the manifest as is."""
    runs, out = Path(runs), Path(out)
    pd = PoseData.load(data) if data is not None else None
    nets, info = collect(runs, basis_poses(pd, seed) if pd is not None else None)
    gen = torch.Generator().manual_seed(seed)
    if pd is not None:
        pick = torch.randint(len(pd.poses), (PARITY_BATCH,), generator=gen)
        real = torch.from_numpy(pd.poses[pick.numpy()].astype(np.float32))
    else:
        real = torch.from_numpy(info["mean"].reshape(1, -1, 3)).repeat(PARITY_BATCH, 1, 1)
        real = real + 0.05 * torch.randn(real.shape, generator=gen)
    latent = info["latent"]
    modules, parity = [], {}
    for item in nets:
        group = len(item.extra.get("joints", ()))
        group_poses = real[:, skeleton.joint_indices(item.extra["joints"])] if group else real
        example = _examples(item.role, latent, group, group_poses, gen)
        if item.role in ("ik_universal", "metric", "decoder", "decoder_jacobian"):
            z = info["ae"].encode(real).detach()
            example = (z, *example[1:])
        entry, parity[item.name] = write_module(item, example, out, latent, torchscript)
        modules.append(entry)
    manifest = build_manifest(runs, info, modules, parity)
    if about is not None:
        manifest = {"about": about, **manifest}
    write_json(out / core_models.MANIFEST_NAME, manifest)
    return core_models.read_manifest(out)


def write_module(item: Exported, example: tuple[torch.Tensor, ...], out: Path, latent: int,
                 torchscript: str | Path | None = None) -> tuple[dict[str, Any], float]:
    """Write ``out/<name>.onnx`` (and TorchScript if asked) once onnxruntime agrees with
    torch on ``example`` within :data:`PARITY_TOLERANCE`; its manifest entry and that error."""
    import onnxruntime as ort

    item.net.eval()
    blob = onnx_bytes(item.net, example, item.role)
    file = f"{item.name}.onnx"
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), example, strict=True)}
    with torch.no_grad():
        want = item.net(*example)
    want = want if isinstance(want, tuple) else (want,)
    err = max(float(np.abs(got - w.numpy()).max())
              for got, w in zip(sess.run(None, feeds), want, strict=True))
    if err > PARITY_TOLERANCE:
        raise RuntimeError(f"{out / file}: onnxruntime differs from torch by {err:.2e} "
                           f"(> {PARITY_TOLERANCE:.0e})")
    with atomic_open(out / file) as fh:
        fh.write(blob)
    if torchscript is not None:
        with atomic_open(Path(torchscript) / f"{item.name}.pt") as fh:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # TorchScript's deprecation notes
                torch.jit.save(torch.jit.trace(item.net, example), fh)
    group = len(item.extra.get("joints", ()))
    entry = {"name": item.name, "role": item.role, "file": file,
             "parameters": initializer_count(blob), "bytes": len(blob),
             **core_models.module_io(item.role, latent, group,
                                     item.extra["config"].get("rank"))}
    for key in ("joints", "metric", "range"):
        if key in item.extra:
            entry[key] = item.extra[key]
    entry["config"] = item.extra["config"]
    return entry, err


def build_manifest(runs: Path, info: dict[str, Any], modules: list[dict[str, Any]],
                   parity: dict[str, float]) -> dict[str, Any]:
    summary_path = runs / "train_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    validation = {}
    for path in sorted(runs.glob("*.pt")):
        ckpt = load_checkpoint(path)
        validation[path.stem] = {"best_val_loss": float(ckpt["best_val"]),
                                 "epochs": int(ckpt["epoch"])}
    return {
        "format_version": core_models.MANIFEST_VERSION,
        "skeleton": {"joints": list(skeleton.JOINTS), "parents": skeleton.PARENTS.tolist(),
                     "bone_lengths": skeleton.BONE_LENGTHS.round(6).tolist(), "units": "m",
                     "up": "+Y", "facing": "+Z"},
        "normalization": {"mean": info["mean"].round(7).tolist(),
                          "std": info["std"].round(7).tolist()},
        "latent_size": info["latent"],
        "modules": modules,
        "effector_groups": {k: list(v) for k, v in EFFECTOR_GROUPS.items()},
        "metrics": [m["metric"] | {"range": m["range"]} for m in modules if m["role"] == "metric"],
        "training": {"command": summary.get("command"), "data": summary.get("data"),
                     "seconds": summary.get("seconds"), "chosen_ae": summary.get("chosen_ae"),
                     "validation": validation},
        "parity_max_abs_error": parity,
    }
