"""The add-on's model loading: a broken or foreign model folder is a ModelError naming the file.

Each case copies the tiny exported set, breaks one thing and checks the error's message.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from blender_addon.core import skeleton
from blender_addon.core.models import MANIFEST_NAME, ModelError, ModelSet, read_manifest
from tests.conftest import TinySet

GARBAGE = b"\x00not an onnx model\xff" * 64


@pytest.fixture
def folder(tiny_set: TinySet, tmp_path: Path) -> Path:
    """A private copy of the tiny model set, free to break."""
    return Path(shutil.copytree(tiny_set.models, tmp_path / "models"))


def _edit_manifest(folder: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    path = folder / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return path


def _module(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in manifest["modules"] if m["name"] == name)


def _rename_onnx_input(path: Path, old: str, new: str) -> None:
    model = onnx.load(str(path))
    for value in model.graph.input:
        if value.name == old:
            value.name = new
    for node in model.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
    onnx.save(model, str(path))


def _assert_model_error(folder: Path, culprit: Path, *fragments: str) -> None:
    with pytest.raises(ModelError) as info:
        ModelSet(folder)
    message = str(info.value)
    assert str(culprit) in message
    for fragment in fragments:
        assert fragment in message


def test_the_untouched_copy_loads(folder: Path) -> None:
    models = ModelSet(folder)
    poses = np.zeros((2, skeleton.NUM_JOINTS, 3), np.float32)
    assert models.decode(models.encode(poses)).shape == poses.shape


def test_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    _assert_model_error(missing, missing / MANIFEST_NAME, "not found")


def test_missing_manifest(folder: Path) -> None:
    (folder / MANIFEST_NAME).unlink()
    _assert_model_error(folder, folder / MANIFEST_NAME, "not found")


@pytest.mark.parametrize("text", ["{not json", "", "\xff\xfe garbage"])
def test_manifest_not_json(folder: Path, text: str) -> None:
    (folder / MANIFEST_NAME).write_text(text, encoding="latin-1")
    _assert_model_error(folder, folder / MANIFEST_NAME, "not valid JSON")


def test_manifest_not_an_object(folder: Path) -> None:
    (folder / MANIFEST_NAME).write_text("[1, 2]")
    _assert_model_error(folder, folder / MANIFEST_NAME, "JSON object")


@pytest.mark.parametrize("version", [2, 0, "1", None])
def test_unknown_format_version(folder: Path, version: Any) -> None:
    path = _edit_manifest(folder, lambda m: m.update(format_version=version))
    _assert_model_error(folder, path, "format_version", repr(version))


def test_skeleton_mismatch(folder: Path) -> None:
    def swap_hands(m: dict[str, Any]) -> None:
        joints = m["skeleton"]["joints"]
        a, b = joints.index("l_hand"), joints.index("r_hand")
        joints[a], joints[b] = joints[b], joints[a]

    path = _edit_manifest(folder, swap_hands)
    _assert_model_error(folder, path, "skeleton mismatch")


def test_fewer_joints_is_a_skeleton_mismatch(folder: Path) -> None:
    path = _edit_manifest(folder, lambda m: m["skeleton"]["joints"].pop())
    _assert_model_error(folder, path, "skeleton mismatch")


@pytest.mark.parametrize("edit", [
    lambda m: m.update(skeleton=[]),
    lambda m: m.update(modules={}),
    lambda m: m.update(latent_size="64"),
    lambda m: m["modules"].append("extra.onnx"),
    lambda m: m.pop("latent_size"),
], ids=["skeleton-list", "modules-object", "latent-string", "module-string", "no-latent"])
def test_malformed_manifest_structure(folder: Path, edit: Callable[[dict], None]) -> None:
    path = _edit_manifest(folder, edit)
    _assert_model_error(folder, path)


def test_module_file_missing(folder: Path) -> None:
    (folder / "ik_universal.onnx").unlink()
    _assert_model_error(folder, folder / "ik_universal.onnx", "missing")


@pytest.mark.parametrize("name", ["encoder", "metric_head_tilt"])
def test_corrupt_onnx(folder: Path, name: str) -> None:
    (folder / f"{name}.onnx").write_bytes(GARBAGE)
    _assert_model_error(folder, folder / f"{name}.onnx", "not a loadable ONNX")


def test_empty_onnx(folder: Path) -> None:
    (folder / "decoder.onnx").write_bytes(b"")
    _assert_model_error(folder, folder / "decoder.onnx")


def test_unknown_role(folder: Path) -> None:
    path = _edit_manifest(folder, lambda m: _module(m, "ik_hands").update(role="teleporter"))
    _assert_model_error(folder, path, "teleporter", "ik_hands")


def test_missing_encoder(folder: Path) -> None:
    path = _edit_manifest(folder, lambda m: m["modules"].remove(_module(m, "encoder")))
    _assert_model_error(folder, path, "encoder")


def test_onnx_with_wrong_input_names(folder: Path) -> None:
    onnx_path = folder / "ik_hands.onnx"
    _rename_onnx_input(onnx_path, "latent", "z")
    _assert_model_error(folder, onnx_path, "'z'", "'latent'")


def test_onnx_of_another_role(folder: Path) -> None:
    shutil.copyfile(folder / "decoder.onnx", folder / "encoder.onnx")  # latent in, not pose
    _assert_model_error(folder, folder / "encoder.onnx", "inputs")


def test_group_with_another_joint_count(folder: Path) -> None:
    _edit_manifest(folder, lambda m: _module(m, "ik_hands")["joints"].append("head"))
    _assert_model_error(folder, folder / "ik_hands.onnx", "targets")


def test_group_with_unknown_joint(folder: Path) -> None:
    path = _edit_manifest(folder, lambda m: _module(m, "ik_hands").update(
        joints=["l_hand", "l_paw"]))
    _assert_model_error(folder, path, "l_paw", "ik_hands")


def test_metric_with_a_bad_spec(folder: Path) -> None:
    path = _edit_manifest(folder, lambda m: _module(m, "metric_head_tilt")["metric"].update(
        kind="wobble"))
    _assert_model_error(folder, path, "wobble", "metric_head_tilt")


def test_read_manifest_loads_no_onnx(folder: Path) -> None:
    (folder / "encoder.onnx").write_bytes(GARBAGE)
    assert read_manifest(folder)["latent_size"] > 0


def _rename_onnx_output(path: Path, old: str, new: str) -> None:
    model = onnx.load(str(path))
    for value in model.graph.output:
        if value.name == old:
            value.name = new
    for node in model.graph.node:
        node.output[:] = [new if o == old else o for o in node.output]
    onnx.save(model, str(path))


def test_a_set_without_the_fused_module_still_loads(folder: Path) -> None:
    """The fused module is optional: sets exported before it keep working."""
    _edit_manifest(folder, lambda m: m["modules"].remove(_module(m, "ik_universal_fused")))
    (folder / "ik_universal_fused.onnx").unlink()
    models = ModelSet(folder)
    assert models.by_role("ik_universal_fused") == []
    assert models.by_role("ik_universal")


def test_onnx_with_wrong_output_names(folder: Path) -> None:
    onnx_path = folder / "ik_universal_fused.onnx"
    _rename_onnx_output(onnx_path, "reconstruction", "recon")
    _assert_model_error(folder, onnx_path, "outputs", "'recon'", "'reconstruction'")


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_bound_runs_match_plain_runs_and_return_new_arrays(folder: Path, batch: int) -> None:
    """Small batches run through pre-bound buffers: same outputs as a plain session run,
    float64 inputs cast like the plain path casts them, and no output reused by the next
    call."""
    models = ModelSet(folder)
    module = models.modules["ik_universal_fused"]
    rng = np.random.default_rng(batch)
    kept = []
    for _ in range(3):
        inputs = (rng.normal(0, 0.3, (batch, skeleton.NUM_JOINTS, 3)),
                  (rng.random((batch, skeleton.NUM_JOINTS)) < 0.3).astype(np.float64),
                  rng.normal(0, 0.3, (batch, skeleton.NUM_JOINTS, 3)),
                  rng.random((batch, skeleton.NUM_JOINTS)))
        got = module.run_all(*inputs)
        feeds = {name: a.astype(np.float32) for name, a in zip(module.input_names, inputs,
                                                               strict=True)}
        want = module.session.run(None, feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
        kept.append((got, [g.copy() for g in got]))
    for got, copies in kept:
        for g, c in zip(got, copies, strict=True):
            np.testing.assert_array_equal(g, c)


# The graphs a refined solve runs: the networks and the decoder's (its Jacobian) with numpy;
# none with the compiled kernels, which run the networks themselves (compiled_networks).
ROUNDING_ULPS = 4  # float32 units in the last place of the largest value: rounding, no more
REFINED_ROLES = {"numpy": {"ik_universal_fused", "decoder_jacobian", "decoder"}, "native": set()}


def test_a_single_pose_runs_on_sessions_made_for_its_batch(shipped_models: ModelSet,
                                                            kernel: str) -> None:
    """The bound calls of a refined solve run on sessions whose batch axis is fixed at load
    (onnxruntime folds the graphs' shape arithmetic away), with the plain session's
    outputs to the bit."""
    from blender_addon.core.pipeline import Effector, PoseEditor

    models = ModelSet(shipped_models.folder)  # its own buffers: no other test's calls
    pose = np.asarray(models.manifest["normalization"]["mean"]).reshape(-1, 3)
    hand = skeleton.JOINT_INDEX["r_hand"]
    editor = PoseEditor(models)
    for move in (0.1, 0.12):  # the first call of a shape binds it, the second runs bound
        editor.solve(pose, [Effector("r_hand", pose[hand] + [move, move, 0.0]),
                            Effector("l_foot", pin=True)])
    # (The start pose's own calls ran once: bound then, run bound by its next solve.)
    bound = [(m, b) for m in models.modules.values() for b in m._bound.values()
             if m.role in REFINED_ROLES[kernel]]
    assert {m.role for m, _ in bound} == REFINED_ROLES[kernel]
    for module, b in bound:
        batch = len(b.inputs[0])
        assert b.session is not module.session
        assert b.session.get_inputs()[0].shape[0] == batch
        feeds = dict(zip(module.input_names, b.inputs, strict=True))
        for got, want in zip(b.outputs, module.session.run(None, feeds), strict=True):
            # (the same graph, its shapes fixed: equal but for float32 rounding, which a
            # processor's wider vectors may order otherwise)
            np.testing.assert_allclose(got, want, rtol=0, atol=ROUNDING_ULPS * float(
                np.finfo(np.float32).eps * np.abs(want).max()))
