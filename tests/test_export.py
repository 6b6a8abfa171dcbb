"""Export: the tiny trained set -> ONNX + manifest, loaded by the add-on's ModelSet, run with
onnxruntime and compared against the torch networks it came from; then ``evaluate``."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from blender_addon.core import skeleton
from blender_addon.core.metrics import DEFAULT_METRICS, MetricSpec, evaluate_metric
from blender_addon.core.models import MANIFEST_NAME, MANIFEST_VERSION, ROLES, ModelSet, module_io
from tests.conftest import TinySet
from training.cli import main
from training.data.dataset import PoseData
from training.evaluation.evaluate import EFFECTOR_SETS
from training.export.jacobian import basis_poses
from training.export.model_set import PARITY_TOLERANCE, collect
from training.learning.tasks import EFFECTOR_GROUPS

BATCH_SIZES = (1, 5)
PARITY_BATCH = 32
RANDOM_POSE_NOISE = 0.05  # metres around the mean pose
RANDOM_VALUE_SCALE = 20.0  # metric values (degrees or metres) fed to metric networks
FILE_MODE = 0o644
EVAL_PAIRS = 64
SOLVER_METHODS = ("universal", "chained specialized", "no edit")


@pytest.fixture(scope="module")
def models(tiny_set: TinySet) -> ModelSet:
    return ModelSet(tiny_set.models)


@pytest.fixture(scope="module")
def manifest(tiny_set: TinySet) -> dict[str, Any]:
    return json.loads((tiny_set.models / MANIFEST_NAME).read_text())


def _random_inputs(role: str, latent: int, group: int, n: int, mean_pose: np.ndarray,
                   rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Random inputs of every role: latents N(0, 1), poses around the mean pose."""
    poses = (mean_pose + RANDOM_POSE_NOISE * rng.standard_normal((n, skeleton.NUM_JOINTS, 3))
             ).astype(np.float32)
    poses[:, 0, [0, 2]] = 0.0  # model space: the pelvis is on the vertical axis
    z = rng.standard_normal((n, latent)).astype(np.float32)
    if role == "encoder":
        return (poses,)
    if role in ("decoder", "decoder_jacobian"):
        return (z,)
    if role in ("ik_universal", "ik_universal_fused"):
        mask = (rng.random((n, skeleton.NUM_JOINTS)) < 0.3).astype(np.float32)
        weights = (mask * rng.random(mask.shape)).astype(np.float32)
        targets = poses + RANDOM_POSE_NOISE * rng.standard_normal(poses.shape).astype(np.float32)
        return z if role == "ik_universal" else poses, mask, targets, weights
    if role == "ik_group":
        return z, np.ascontiguousarray(poses[:, :group])
    return z, (RANDOM_VALUE_SCALE * rng.standard_normal((n, 1))).astype(np.float32)


def _real_inputs(role: str, joints: tuple[str, ...], metric: MetricSpec | None,
                 models: ModelSet, x: np.ndarray, x2: np.ndarray,
                 rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Inputs from real poses: x's latent, targets and metric values from x'."""
    if role == "encoder":
        return (x,)
    if role == "ik_universal_fused":
        mask = (rng.random((len(x), skeleton.NUM_JOINTS)) < 0.3).astype(np.float32)
        return x, mask, x2, mask.copy()
    z = models.encode(x)
    if role in ("decoder", "decoder_jacobian"):
        return (z,)
    if role == "ik_universal":
        mask = (rng.random((len(x), skeleton.NUM_JOINTS)) < 0.3).astype(np.float32)
        return z, mask, x2, mask.copy()
    if role == "ik_group":
        return z, np.ascontiguousarray(x2[:, skeleton.joint_indices(joints)])
    assert metric is not None
    return z, evaluate_metric(x2, metric).astype(np.float32)[:, None]


def test_modelset_loads_every_module(tiny_set: TinySet, models: ModelSet,
                                     manifest: dict[str, Any]) -> None:
    names = {m["name"] for m in manifest["modules"]}
    assert set(models.modules) == names
    expected = {"encoder", "decoder", "ik_universal", "ik_universal_fused", "decoder_jacobian",
                *(f"ik_{g}" for g in EFFECTOR_GROUPS),
                *(f"metric_{s.name}" for s in DEFAULT_METRICS)}
    assert names == expected
    assert set(models.groups) == set(EFFECTOR_GROUPS)
    assert set(models.metrics) == {s.name for s in DEFAULT_METRICS}
    assert models.latent_size == manifest["latent_size"]


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_every_module_runs_with_a_dynamic_batch(models: ModelSet, batch: int) -> None:
    rng = np.random.default_rng(batch)
    latent = models.latent_size
    mean_pose = np.zeros((skeleton.NUM_JOINTS, 3), np.float32)
    for module in models.modules.values():
        inputs = _random_inputs(module.role, latent, len(module.joints), batch, mean_pose, rng)
        outs = module.run_all(*inputs)
        io = module_io(module.role, latent, len(module.joints), len(models.jacobian_basis))
        want = [[batch if d == "B" else d for d in o["shape"]] for o in io["outputs"]]
        assert [list(o.shape) for o in outs] == want, module.name
        for out, o in zip(outs, io["outputs"], strict=True):
            assert out.dtype == np.dtype(o["dtype"]), module.name
            assert np.isfinite(out).all(), module.name


def test_onnx_matches_torch_on_random_and_real_inputs(tiny_set: TinySet,
                                                      models: ModelSet) -> None:
    data = PoseData.load(tiny_set.data)
    nets, info = collect(tiny_set.runs, basis_poses(data))
    assert {n.name for n in nets} == set(models.modules)
    rng = np.random.default_rng(0)
    pick = rng.integers(len(data.poses), size=(2, PARITY_BATCH))
    x, x2 = data.poses[pick[0]].astype(np.float32), data.poses[pick[1]].astype(np.float32)
    mean_pose = info["mean"].reshape(skeleton.NUM_JOINTS, 3)
    for item in nets:
        item.net.eval()
        module = models.modules[item.name]
        assert module.role == item.role
        random = _random_inputs(item.role, models.latent_size, len(module.joints),
                                PARITY_BATCH, mean_pose, rng)
        real = _real_inputs(item.role, module.joints, module.metric, models, x, x2, rng)
        for kind, inputs in (("random", random), ("real", real)):
            with torch.no_grad():
                want = item.net(*(torch.from_numpy(a) for a in inputs))
            want = want if isinstance(want, tuple) else (want,)
            got = module.run_all(*inputs)
            assert len(got) == len(want), (item.name, kind)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape, (item.name, kind)
                err = float(np.abs(g - w.numpy()).max())
                assert err <= PARITY_TOLERANCE, \
                    f"{item.name} ({kind} inputs): max abs diff {err:.2e}"


def test_fused_module_matches_the_separate_modules(models: ModelSet) -> None:
    """encoder -> universal -> decoder in one graph: the same edit, reconstruction, latent."""
    rng = np.random.default_rng(1)
    fused = models.modules["ik_universal_fused"]
    mean_pose = np.zeros((skeleton.NUM_JOINTS, 3), np.float32)
    for batch in BATCH_SIZES:
        pose, mask, targets, weights = _random_inputs(
            "ik_universal_fused", models.latent_size, 0, batch, mean_pose, rng)
        edited, recon, z_new = fused.run_all(pose, mask, targets, weights)
        z = models.encode(pose)
        want_z = models.modules["ik_universal"].run(z, mask, targets, weights)
        for got, want in ((z_new, want_z), (edited, models.decode(want_z)),
                          (recon, models.decode(z))):
            np.testing.assert_allclose(got, want, atol=PARITY_TOLERANCE)


def test_manifest_keys_types_and_module_io(tiny_set: TinySet,
                                          manifest: dict[str, Any]) -> None:
    assert manifest["format_version"] == MANIFEST_VERSION
    skel = manifest["skeleton"]
    assert skel["joints"] == list(skeleton.JOINTS)
    assert skel["parents"] == skeleton.PARENTS.tolist()
    np.testing.assert_allclose(skel["bone_lengths"], skeleton.BONE_LENGTHS, atol=1e-6)
    data = PoseData.load(tiny_set.data)
    for key, want in (("mean", data.mean), ("std", data.std)):
        values = manifest["normalization"][key]
        assert len(values) == skeleton.NUM_JOINTS * 3
        assert all(isinstance(v, float | int) for v in values)
        np.testing.assert_allclose(values, want, atol=1e-6)
    latent = manifest["latent_size"]
    assert isinstance(latent, int) and latent > 0
    for m in manifest["modules"]:
        assert isinstance(m["name"], str) and m["role"] in ROLES
        assert isinstance(m["file"], str) and (tiny_set.models / m["file"]).is_file()
        assert m["bytes"] == (tiny_set.models / m["file"]).stat().st_size
        assert isinstance(m["parameters"], int) and m["parameters"] > 0
        group = len(m.get("joints", ()))
        assert (group > 0) == (m["role"] == "ik_group"), m["name"]
        if m["role"] == "ik_universal_fused":
            assert [o["name"] for o in m["outputs"]] == \
                ["edited_pose", "reconstruction", "edited_latent"]
            assert [i["name"] for i in m["inputs"]] == ["pose", "mask", "targets", "weights"]
        io = module_io(m["role"], latent, group, m["config"].get("rank"))
        if m["role"] == "decoder_jacobian":  # refined along fewer directions than the latent
            assert 0 < m["config"]["rank"] < latent
        assert m["inputs"] == io["inputs"] and m["outputs"] == io["outputs"], m["name"]
        if m["role"] == "ik_group":
            assert m["joints"] == list(EFFECTOR_GROUPS[m["name"].removeprefix("ik_")])
    assert manifest["effector_groups"] == {k: list(v) for k, v in EFFECTOR_GROUPS.items()}
    metric_modules = {m["metric"]["name"]: m for m in manifest["modules"]
                      if m["role"] == "metric"}
    assert {m["name"] for m in manifest["metrics"]} == {s.name for s in DEFAULT_METRICS}
    for spec in manifest["metrics"]:
        MetricSpec.from_dict({k: v for k, v in spec.items() if k != "range"})
        low, high = spec["range"]
        assert isinstance(low, float) and isinstance(high, float) and low <= high
        assert metric_modules[spec["name"]]["range"] == spec["range"]


def test_manifest_records_training(tiny_set: TinySet, manifest: dict[str, Any]) -> None:
    training = manifest["training"]
    assert training["command"] == " ".join(["python -m training", *tiny_set.train_argv])
    assert training["data"] == str(tiny_set.data)
    assert training["chosen_ae"] in ("seed", "untied")
    checkpoints = {p.stem for p in tiny_set.runs.glob("*.pt")}
    assert set(training["validation"]) == checkpoints
    for name, v in training["validation"].items():
        assert v["epochs"] == 1, name
        assert math.isfinite(v["best_val_loss"]) and v["best_val_loss"] > 0, name
    parity = manifest["parity_max_abs_error"]
    assert set(parity) == {m["name"] for m in manifest["modules"]}
    assert all(0 <= e <= PARITY_TOLERANCE for e in parity.values())


def test_export_files_are_atomic_and_world_readable(tiny_set: TinySet,
                                                    manifest: dict[str, Any]) -> None:
    for folder in (tiny_set.models, tiny_set.torchscript):
        assert not list(folder.glob(".*.tmp")), folder
        assert not list(folder.glob(".*")), folder
    files = sorted(tiny_set.models.iterdir())
    assert {f.name for f in files} == {MANIFEST_NAME, *(m["file"] for m in manifest["modules"])}
    for f in [*files, *tiny_set.torchscript.iterdir()]:
        assert stat.S_IMODE(f.stat().st_mode) == FILE_MODE, f
    scripted = {f.stem for f in tiny_set.torchscript.glob("*.pt")}
    assert scripted == {m["name"] for m in manifest["modules"]}  # the networks


def _numbers(obj: Any) -> list[float]:
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _numbers(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in _numbers(x)]
    return [float(obj)] if isinstance(obj, int | float) and not isinstance(obj, bool) else []


def test_evaluate_writes_every_section(tiny_set: TinySet, tmp_path: Path,
                                       manifest: dict[str, Any]) -> None:
    out = tmp_path / "eval"
    assert main(["evaluate", "--models", str(tiny_set.models), "--data", str(tiny_set.data),
                 "--out", str(out), "--pairs", str(EVAL_PAIRS)]) == 0
    result = json.loads((out / "evaluation.json").read_text())
    md = (out / "evaluation.md").read_text()
    assert result["split"] == "test" and result["pairs"] == EVAL_PAIRS
    data = PoseData.load(tiny_set.data)
    assert result["frames"] == int(data.split_mask("test").sum())
    assert result["ae_mpjpe_cm"] > 0
    assert "Autoencoder reconstruction MPJPE" in md
    assert set(result["solvers"]) == set(EFFECTOR_SETS)
    for set_name, methods in result["solvers"].items():
        assert set(methods) == set(SOLVER_METHODS), set_name
        for method, r in methods.items():
            assert set(r) == {"effector_cm", "effector_median_cm", "non_effector_mpjpe_cm"}
            assert f"| {set_name} | {method} |" in md
    assert set(result["metrics"]) == {s.name for s in DEFAULT_METRICS}
    for name, r in result["metrics"].items():
        spec = next(s for s in DEFAULT_METRICS if s.name == name)
        assert r["unit"] == ("cm" if spec.unit == "m" else "deg"), name
        assert f"| {name} | {r['unit']} |" in md
    module_names = {m["name"] for m in manifest["modules"]}
    assert set(result["modules"]) == module_names
    for name in module_names:
        assert f"| {name} |" in md
    assert result["total_bytes"] == sum(m["bytes"] for m in manifest["modules"])
    assert "Total model size" in md
    numbers = _numbers(result)
    assert numbers and all(math.isfinite(v) for v in numbers)
    assert not list(out.glob(".*"))
