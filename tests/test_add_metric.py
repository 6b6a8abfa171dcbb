"""``add-metric``: a metric network trained onto an exported set from its ONNX files alone
(a redefined slider or a new one), the rest of the set untouched; bad requests change
nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core.metrics import metric_by_name
from blender_addon.core.models import MANIFEST_NAME, ModelSet
from tests.conftest import TINY_TRAIN_ARGS

PARITY = 1e-5


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.fixture()
def folder(tiny_set, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_set.models, tmp_path / "models"))


def test_autoencoder_rebuilt_from_the_onnx_files(tiny_set, folder) -> None:
    from training.export.jacobian import autoencoder_from_onnx

    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    ae = autoencoder_from_onnx(folder, manifest, ("encoder", "decoder"))
    models = ModelSet(folder)
    poses = np.load(tiny_set.data)["poses"][:16].astype(np.float32)
    import torch

    with torch.no_grad():
        z = ae.encode(torch.from_numpy(poses)).numpy()
        x = ae.decode(torch.from_numpy(z)).numpy()
    np.testing.assert_allclose(z, models.encode(poses), atol=PARITY)
    np.testing.assert_allclose(x.reshape(poses.shape), models.decode(z), atol=PARITY)


def test_add_metric_replaces_one_module_and_keeps_the_rest(tiny_set, folder, tmp_path
                                                           ) -> None:
    from training.cli import main

    before = _digests(folder)
    argv = ["add-metric", "--models", str(folder), "--data", str(tiny_set.data),
            "--metric", "shoulders_openness", "--out", str(tmp_path / "runs"),
            *TINY_TRAIN_ARGS]
    assert main(argv) == 0
    after = _digests(folder)
    # Only the manifest changed: with train-all's settings and seed, the network trained on
    # the autoencoder rebuilt from the ONNX files is, bit for bit, the one train-all made.
    assert {name for name in before if before[name] != after[name]} == {MANIFEST_NAME}
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    entry = next(m for m in manifest["modules"] if m["name"] == "metric_shoulders_openness")
    assert entry["metric"] == metric_by_name("shoulders_openness").to_dict()
    listed = [m for m in manifest["metrics"] if m["name"] == "shoulders_openness"]
    assert listed == [entry["metric"] | {"range": entry["range"]}]
    assert manifest["training"]["added_metrics"]["shoulders_openness"]["command"] == \
        "python -m training " + " ".join(argv)
    assert [m["name"] for m in manifest["modules"]] == \
        [m["name"] for m in json.loads((tiny_set.models / MANIFEST_NAME).read_text())["modules"]]
    # The set loads, and the new graph follows a request as the trained network does.
    models = ModelSet(folder)
    module = models.metrics["shoulders_openness"]
    assert module.metric == metric_by_name("shoulders_openness")
    z = models.encode(np.load(tiny_set.data)["poses"][:8].astype(np.float32))
    out = module.run(z, np.full((8, 1), 40.0, dtype=np.float32))
    assert out.shape == z.shape and np.isfinite(out).all()


def test_a_new_metric_from_a_spec_file_is_appended(tiny_set, folder, tmp_path) -> None:
    from training.cli import main

    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps([{"name": "l_hand_height", "kind": "height",
                                  "joints": ["l_hand"]}]))
    assert main(["add-metric", "--models", str(folder), "--data", str(tiny_set.data),
                 "--metric", "l_hand_height", "--metric-specs", str(specs),
                 "--out", str(tmp_path / "runs"), *TINY_TRAIN_ARGS]) == 0
    models = ModelSet(folder)
    assert "l_hand_height" in models.metrics
    assert len(models.metrics) == len(ModelSet(tiny_set.models).metrics) + 1


def test_an_unknown_metric_changes_nothing(tiny_set, folder, tmp_path, capsys) -> None:
    from training.cli import main

    before = _digests(folder)
    assert main(["add-metric", "--models", str(folder), "--data", str(tiny_set.data),
                 "--metric", "shoulder_opennes", "--out", str(tmp_path / "runs"),
                 *TINY_TRAIN_ARGS]) == 2
    assert "shoulder_opennes" in capsys.readouterr().err
    assert _digests(folder) == before
