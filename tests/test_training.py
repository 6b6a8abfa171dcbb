"""Training: the tiny train-all output, safe checkpoints, resume, early stopping, seeding,
CLI errors and a two-process DDP run on CPU (gloo)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from blender_addon.core import skeleton
from blender_addon.core.metrics import DEFAULT_METRICS
from tests.conftest import REPO, TinySet
from training.cli import main
from training.learning.recipes import TRAIN_ALL_ARCHS
from training.learning.tasks import EFFECTOR_GROUPS
from training.learning.train import CHECKPOINT_VERSION, CheckpointError, load_checkpoint

# One cheap epoch of the seed autoencoder: the runs below only need the loop's bookkeeping.
QUICK = ("--batch-size", "16", "--steps-per-epoch", "1", "--no-progress")
DDP_TIMEOUT_S = 120
KINDS = {"ae": "ae", "solver_universal": "ik_universal", "metric": "metric", "solver": "ik_group"}


def _train_ae(data: Path, out: Path, *extra: str) -> int:
    return main(["train-ae", "--arch", "seed", "--data", str(data), "--out", str(out),
                 *QUICK, *extra])


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _epochs(path: Path) -> list[int]:
    return [int(r["epoch"]) for r in _rows(path)]


def _same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` with its content; None when the folder does not exist."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# --- the tiny train-all run (made once, in conftest) -------------------------------------

def test_train_all_writes_every_network(tiny_set: TinySet) -> None:
    runs = tiny_set.runs
    stems = {"ae", *(f"ae_{a}" for a in TRAIN_ALL_ARCHS), "solver_universal",
             *(f"solver_{g}" for g in EFFECTOR_GROUPS),
             *(f"metric_{s.name}" for s in DEFAULT_METRICS)}
    assert {p.stem for p in runs.glob("*.pt")} == stems
    assert {p.stem for p in runs.glob("*.csv")} == stems - {"ae"}
    for stem in stems - {"ae"}:
        kind = KINDS.get(stem, KINDS.get(stem.split("_")[0]))
        ckpt = load_checkpoint(runs / f"{stem}.pt", kind)
        assert ckpt["name"] == stem and ckpt["epoch"] == 1
        assert ckpt["joints"] == list(skeleton.JOINTS)
        assert ckpt["train_config"]["steps_per_epoch"] == 3
        assert _epochs(runs / f"{stem}.csv") == [1]
    summary = json.loads((runs / "train_summary.json").read_text())
    assert summary["command"] == " ".join(["python -m training", *tiny_set.train_argv])
    assert len(summary["autoencoders"]) == len(TRAIN_ALL_ARCHS)
    assert len(summary["results"]) == 1 + len(EFFECTOR_GROUPS) + len(DEFAULT_METRICS)
    chosen = summary["chosen_ae"]
    best = min(summary["autoencoders"], key=lambda r: r["best_val"])
    assert chosen == best["arch"]
    assert (runs / "ae.pt").read_bytes() == (runs / f"ae_{chosen}.pt").read_bytes()


# --- checkpoints -------------------------------------------------------------------------

def _touch(path: str) -> None:
    Path(path).touch()


class _Payload:
    """Pickles as a call to :func:`_touch`: what a malicious checkpoint could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return _touch, (str(self.marker),)


def test_load_checkpoint_unpickles_no_objects(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    path = tmp_path / "evil.pt"
    torch.save({"version": CHECKPOINT_VERSION, "kind": "ae", "joints": list(skeleton.JOINTS),
                "payload": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"evil\.pt"):
        load_checkpoint(path)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the payload is live: an unsafe load runs it
    assert marker.exists()


def test_load_checkpoint_errors_name_the_file(tiny_set: TinySet, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"missing\.pt.*not found"):
        load_checkpoint(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a zip archive")
    with pytest.raises(CheckpointError, match=r"junk\.pt"):
        load_checkpoint(junk)
    with pytest.raises(CheckpointError, match=r"ae\.pt.*expected 'metric'"):
        load_checkpoint(tiny_set.runs / "ae.pt", "metric")
    old = tmp_path / "old.pt"
    torch.save({**torch.load(tiny_set.runs / "ae.pt", weights_only=True), "version": 0}, old)
    with pytest.raises(CheckpointError, match=r"old\.pt.*unknown checkpoint format"):
        load_checkpoint(old)


def test_checkpoint_of_another_skeleton(tiny_set: TinySet, tmp_path: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    runs = Path(shutil.copytree(tiny_set.runs, tmp_path / "runs"))
    ckpt = torch.load(runs / "ae.pt", weights_only=True)
    ckpt["joints"] = ckpt["joints"][::-1]
    torch.save(ckpt, runs / "ae.pt")
    with pytest.raises(CheckpointError, match=r"ae\.pt: skeleton mismatch"):
        load_checkpoint(runs / "ae.pt")
    models = tmp_path / "models"
    assert main(["export", "--runs", str(runs), "--out", str(models)]) != 0
    err = capsys.readouterr().err
    assert "skeleton mismatch" in err and str(runs / "ae.pt") in err
    assert not models.exists()


# --- the training loop -------------------------------------------------------------------

def test_resume_continues_from_the_saved_epoch(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    log, ckpt_path = out / "ae_seed.csv", out / "ae_seed.pt"
    assert _train_ae(tiny_data, out, "--epochs", "1") == 0
    first_rows = _rows(log)
    assert _epochs(log) == [1]
    first = load_checkpoint(ckpt_path, "ae")
    assert first["epoch"] == 1

    assert _train_ae(tiny_data, out, "--epochs", "2", "--resume") == 0
    assert _epochs(log) == [1, 2]
    assert _rows(log)[0] == first_rows[0]  # appended, not rewritten
    second = load_checkpoint(ckpt_path, "ae")
    assert second["epoch"] == 2
    assert not _same_tensors(first["state_dict"], second["state_dict"])  # it trained on

    assert _train_ae(tiny_data, out, "--epochs", "2", "--resume") == 0  # nothing left to do
    assert _epochs(log) == [1, 2]
    assert _same_tensors(second["state_dict"], load_checkpoint(ckpt_path)["state_dict"])

    assert _train_ae(tiny_data, out, "--epochs", "1") == 0  # no --resume: a fresh start
    assert _epochs(log) == [1]
    assert _same_tensors(first["state_dict"], load_checkpoint(ckpt_path)["state_dict"])


@pytest.mark.parametrize("patience", [0, 1, 2])
def test_early_stopping_when_validation_stalls(tiny_data: Path, tmp_path: Path,
                                               patience: int) -> None:
    # lr 0: the weights never change, so only the first epoch improves the validation loss.
    epochs = 6
    assert _train_ae(tiny_data, tmp_path, "--epochs", str(epochs), "--lr", "0",
                     "--patience", str(patience)) == 0
    stalled = max(patience, 1)  # patience 0 still needs one epoch to see no improvement
    rows = _rows(tmp_path / "ae_seed.csv")
    assert [int(r["epoch"]) for r in rows] == list(range(1, stalled + 2))
    assert len(rows) < epochs
    assert len({r["val_loss"] for r in rows}) == 1
    ckpt = load_checkpoint(tmp_path / "ae_seed.pt", "ae")
    assert ckpt["epoch"] == len(rows) and ckpt["bad_epochs"] == stalled


def test_same_seed_same_checkpoints_other_seed_differs(tiny_data: Path, tmp_path: Path) -> None:
    def train(folder: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        out = tmp_path / folder
        assert _train_ae(tiny_data, out, "--epochs", "1", "--seed", str(seed)) == 0
        assert main(["train-solver", "--group", "hands", "--data", str(tiny_data), "--out",
                     str(out), "--epochs", "1", "--seed", str(seed), *QUICK]) == 0
        return (load_checkpoint(out / "ae.pt"), load_checkpoint(out / "solver_hands.pt"))

    a, b, c = train("a", 3), train("b", 3), train("c", 4)
    for x, y, z in zip(a, b, c, strict=True):
        assert _same_tensors(x["state_dict"], y["state_dict"])
        assert _same_tensors(x["best_state"], y["best_state"])
        assert x["best_val"] == y["best_val"]
        assert not _same_tensors(x["state_dict"], z["state_dict"])
    losses = [[(r["train_loss"], r["val_loss"]) for r in _rows(tmp_path / f / "ae_seed.csv")]
              for f in ("a", "b", "c")]
    assert losses[0] == losses[1] != losses[2]


# --- CLI errors --------------------------------------------------------------------------

def _runs_with_ae(tiny_set: TinySet, folder: Path) -> Path:
    folder.mkdir()
    shutil.copyfile(tiny_set.runs / "ae.pt", folder / "ae.pt")
    return folder


CLI_ERRORS = ["missing-data", "unknown-metric", "unknown-group", "no-autoencoder", "cuda",
              "zero-epochs", "export-empty-runs", "evaluate-no-models"]


@pytest.mark.parametrize("case", CLI_ERRORS)
def test_cli_errors_name_the_culprit_and_write_nothing(case: str, tiny_set: TinySet,
                                                       tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    data, out = str(tiny_set.data), tmp_path / "out"
    if case == "missing-data":
        argv, culprit = ["train-ae", "--data", str(tmp_path / "missing.npz")], "missing.npz"
    elif case == "unknown-metric":
        out = _runs_with_ae(tiny_set, out)
        argv, culprit = ["train-metric", "--metric", "no_such_metric", "--data", data], \
            "no_such_metric"
    elif case == "unknown-group":
        out = _runs_with_ae(tiny_set, out)
        argv, culprit = ["train-solver", "--group", "elbows", "--data", data], "elbows"
    elif case == "no-autoencoder":
        out.mkdir()
        argv, culprit = ["train-solver", "--data", data], str(out / "ae.pt")
    elif case == "cuda":
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
        argv, culprit = ["train-ae", "--device", "cuda", "--data", data], "cuda"
    elif case == "zero-epochs":
        argv, culprit = ["train-ae", "--epochs", "0", "--data", data], "--epochs"
    elif case == "export-empty-runs":
        runs = tmp_path / "runs"
        runs.mkdir()
        argv, culprit = ["export", "--runs", str(runs)], str(runs / "ae.pt")
    else:
        argv, culprit = ["evaluate", "--models", str(tmp_path / "no_models"), "--data", data], \
            str(tmp_path / "no_models" / "manifest.json")
    before = {p: _snapshot(p) for p in (out, tmp_path)}
    assert main([*argv, "--out", str(out), *(["--no-progress"] if "train" in argv[0] else [])]
                ) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and culprit in err
    assert {p: _snapshot(p) for p in (out, tmp_path)} == before


# --- DDP ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_two_cpu_processes(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--nnodes", "1", "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           "-m", "training", "train-ae", "--arch", "seed", "--data", str(tiny_data),
           "--out", str(out), "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "32",
           "--no-progress"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=DDP_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert _epochs(out / "ae_seed.csv") == [1]
    ckpt = load_checkpoint(out / "ae_seed.pt", "ae")
    assert ckpt["epoch"] == 1 and ckpt["train_config"]["steps_per_epoch"] == 2
    assert (out / "ae.pt").read_bytes() == (out / "ae_seed.pt").read_bytes()
    assert not list(out.glob(".*"))
