"""The decoder's Jacobian graph: exact against a finite difference of the decoder, written by
``export`` and added to an older set by ``export-jacobian``; refinement without it falls
back to a finite difference along every latent axis and still reaches the target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import skeleton
from blender_addon.core.models import MANIFEST_NAME, ModelSet
from blender_addon.core.pipeline import Effector, PoseEditor

FD_STEP = 1e-3
JACOBIAN_RTOL = 1e-2  # float32 decoder, forward difference: agreement to 1 % of the scale
SAME_POSE_M = 1e-3


def _without_jacobian(folder: Path, dest: Path) -> Path:
    out = Path(shutil.copytree(folder, dest))
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    manifest["modules"] = [m for m in manifest["modules"] if m["role"] != "decoder_jacobian"]
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    (out / "decoder_jacobian.onnx").unlink()
    return out


def test_jacobian_matches_the_decoder(tiny_set) -> None:
    models = ModelSet(tiny_set.models)
    module = models.by_role("decoder_jacobian")[0]
    z = np.random.default_rng(0).normal(size=(4, models.latent_size)).astype(np.float32)
    pose, jac, basis = module.run_all(z)
    np.testing.assert_allclose(basis, models.jacobian_basis, atol=1e-7)
    np.testing.assert_allclose(basis @ basis.T, np.eye(len(basis)), atol=1e-5)  # orthonormal
    np.testing.assert_allclose(pose, models.decode(z), atol=1e-5)
    probes = z[:, None, :] + basis[None] * FD_STEP  # along each direction of the basis
    fd = (models.decode(probes.reshape(-1, models.latent_size)).reshape(4, -1, 63)
          - pose.reshape(4, 1, 63)) / FD_STEP
    scale = np.abs(jac).max()
    np.testing.assert_allclose(jac, fd.transpose(0, 2, 1), atol=JACOBIAN_RTOL * scale)


def test_export_jacobian_adds_the_graph(tiny_set, tmp_path) -> None:
    from training.cli import main
    from training.export.jacobian import JACOBIAN_RANK

    folder = _without_jacobian(tiny_set.models, tmp_path / "old")
    assert not ModelSet(folder).by_role("decoder_jacobian")
    assert main(["export-jacobian", "--models", str(folder)]) == 0
    models = ModelSet(folder)
    assert len(models.by_role("decoder_jacobian")) == 1
    np.testing.assert_allclose(models.jacobian_basis, np.eye(models.latent_size), atol=1e-7)
    # With training poses: the few directions that move the pose most.
    assert main(["export-jacobian", "--models", str(folder), "--data", str(tiny_set.data)]) == 0
    models = ModelSet(folder)
    assert models.jacobian_basis.shape == (JACOBIAN_RANK, models.latent_size)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    entry = next(m for m in manifest["modules"] if m["role"] == "decoder_jacobian")
    assert entry["outputs"][1]["shape"] == ["B", 63, JACOBIAN_RANK]


def test_refinement_without_the_graph_still_reaches(shipped_models, manifold_clip,
                                                    tmp_path) -> None:
    if not shipped_models.by_role("decoder_jacobian"):
        pytest.skip("the shipped set has no decoder_jacobian graph")
    old = ModelSet(_without_jacobian(shipped_models.folder, tmp_path / "old"))
    pose = manifold_clip[30]
    hand = skeleton.JOINT_INDEX["l_hand"]
    effs = [Effector("l_hand", pose[hand] + [0.1, 0.15, 0.05])]
    b = PoseEditor(old).solve(pose, effs).positions
    np.testing.assert_allclose(skeleton.bone_lengths(b[0]), skeleton.bone_lengths(pose),
                               atol=1e-9)
    assert np.linalg.norm(b[0, hand] - effs[0].target) < SAME_POSE_M
