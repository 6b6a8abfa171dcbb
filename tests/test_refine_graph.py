"""The refinement graphs (``refine_effectors``): the numpy refinement's steps in one session
call, written by ``export`` and ``export-refine``; the engine uses one only where it gives
the numpy refinement's answer (same constants, same latent directions, a step count it was
made for), and every solve that uses it equals the numpy one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import pipeline, refine, skeleton
from blender_addon.core.models import MANIFEST_NAME, ModelSet
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions
from training.refine_graph import copy_without_graphs

# The graphs are what the engine runs where the compiled kernels are off: these tests judge
# them so (the kernels' own refinement is held to the numpy steps in test_refine.py).
pytestmark = pytest.mark.usefixtures("numpy_only")
SAME_M = 1e-9  # float64 around the same float32 decoder: equal but for rounding
DRAG_M = 0.15  # a hand dragged this far


def _drags(pose: np.ndarray, n: int, seed: int = 0) -> list[list[Effector]]:
    """Hands, feet and head as effectors, the right hand dragged in a random direction."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = rng.normal(size=3)
        effs = [Effector(j, pose[skeleton.JOINT_INDEX[j]]) for j in skeleton.END_JOINTS]
        effs[skeleton.END_JOINTS.index("r_hand")] = Effector(
            "r_hand", pose[skeleton.JOINT_INDEX["r_hand"]] + DRAG_M * d / np.linalg.norm(d))
        out.append(effs)
    return out


def test_the_step_counts_with_graphs_are_the_engines() -> None:
    assert pipeline.DRAG_REFINE_STEPS in refine.GRAPH_STEPS
    assert SolveOptions().refine_steps in refine.GRAPH_STEPS


def test_shipped_graphs_give_the_numpy_refinements_answer(shipped_models, manifold_clip,
                                                          tmp_path, monkeypatch) -> None:
    graphs = refine._effector_graphs(shipped_models)
    if not graphs:
        pytest.skip("the shipped set has no refinement graphs (python -m training export-refine)")
    assert sorted(graphs) == sorted(refine.GRAPH_STEPS)
    plain = ModelSet(copy_without_graphs(shipped_models.folder, tmp_path / "plain"))
    assert not refine._effector_graphs(plain)
    fast, slow = PoseEditor(shipped_models), PoseEditor(plain)
    calls = {"graph": 0}
    for module in graphs.values():  # count the graph's calls without changing them
        monkeypatch.setattr(module, "run_all", _counted(module.run_all, calls))
    worst = 0.0
    for k, pose in enumerate(manifold_clip[::15]):
        for effs in _drags(pose, 2, seed=k):
            for drag in (False, True):
                a = fast.solve(pose, effs, drag=drag).positions
                b = slow.solve(pose, effs, drag=drag).positions
                worst = max(worst, float(np.abs(a - b).max()))
    assert calls["graph"] == len(manifold_clip[::15]) * 2 * 2
    assert worst < SAME_M


def _counted(run, calls):
    def wrapper(*inputs):
        calls["graph"] += 1
        return run(*inputs)
    return wrapper


def test_graphs_serve_only_what_they_were_made_for(shipped_models, manifold_clip,
                                                    monkeypatch) -> None:
    """Metric requests and other step counts refine by the numpy steps; a batch of several
    poses by the graph too, as each pose alone."""
    graphs = refine._effector_graphs(shipped_models)
    if not graphs:
        pytest.skip("the shipped set has no refinement graphs")
    calls = {"graph": 0}
    for module in graphs.values():
        monkeypatch.setattr(module, "run_all", _counted(module.run_all, calls))
    editor = PoseEditor(shipped_models)
    pose = manifold_clip[40]
    effs = _drags(pose, 1)[0]
    metric = next(iter(shipped_models.metrics))
    for options, metrics in ((SolveOptions(refine_steps=1), None),
                             (SolveOptions(refine_steps=5), None),
                             (SolveOptions(), {metric: 5.0})):
        assert np.isfinite(editor.solve(pose, effs, metrics, options=options).positions).all()
    assert calls["graph"] == 0
    batch = np.stack([manifold_clip[10], manifold_clip[50]])
    mask = np.zeros((2, skeleton.NUM_JOINTS))
    mask[:, skeleton.JOINT_INDEX["l_hand"]] = 1.0
    targets = batch.copy()
    targets[:, skeleton.JOINT_INDEX["l_hand"]] += [0.0, 0.1, 0.1]
    out = editor.solve_arrays(batch, mask, targets)
    single = [editor.solve_arrays(batch[i:i + 1], mask[i:i + 1], targets[i:i + 1]).positions
              for i in range(2)]
    assert calls["graph"] == 3
    np.testing.assert_allclose(out.positions, np.concatenate(single), atol=SAME_M)


def test_a_stale_graph_is_not_used(shipped_models, tmp_path) -> None:
    """Made with other constants, along other latent directions or for a step count the
    engine does not run: the numpy steps."""
    if not refine._effector_graphs(shipped_models):
        pytest.skip("the shipped set has no refinement graphs")
    for key, value in (("constants", {**refine.graph_constants(), "RIGID_WEIGHT": 1.0}),
                       ("basis", "0" * 16), ("steps", 7)):
        folder = Path(shutil.copytree(shipped_models.folder, tmp_path / key))
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        for m in manifest["modules"]:
            if m["role"] == "refine_effectors":
                m["config"][key] = value
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
        assert refine._effector_graphs(ModelSet(folder)) == {}


def test_export_and_export_refine_write_graphs_that_agree(tiny_set, tmp_path) -> None:
    from training.cli import main

    made = refine._effector_graphs(ModelSet(tiny_set.models))
    assert sorted(made) == sorted(refine.GRAPH_STEPS)  # export wrote them
    folder = copy_without_graphs(tiny_set.models, tmp_path / "old")
    assert main(["export-refine", "--models", str(folder)]) == 0
    models = ModelSet(folder)
    assert sorted(refine._effector_graphs(models)) == sorted(refine.GRAPH_STEPS)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    names = [m["name"] for m in manifest["modules"] if m["role"] == "refine_effectors"]
    assert all(manifest["parity_max_abs_error"][n] < SAME_M for n in names)

