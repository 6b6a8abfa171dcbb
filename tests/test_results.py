"""Numbers anyone can check: the README shows exactly the committed results, the headline
drag figures come out again from the command that made them, and every benchmark command
runs end to end on a few poses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.cli import main
from training.results import (
    DATA_FILES,
    DATASETS,
    README,
    REPO,
    RESULTS,
    readme_blocks,
    render_readme,
)

# Committed figures vs a fresh run of the same command on the same data and models: the
# same code path, so only float noise (other BLAS kernels) may differ.
ABS_TOLERANCE = {"mm": 0.05, "cm": 0.02, "pct": 1.0}
PINNED = "drags-cmu"


def test_readme_shows_the_committed_results() -> None:
    text = (REPO / README).read_text(encoding="utf-8")
    blocks = readme_blocks(text)
    assert blocks, "the README has no results blocks"
    for name in blocks:
        base = name.split(".")[0]
        assert base in RESULTS, f"README block {name!r} names no result command"
        assert (REPO / RESULTS[base].json).is_file(), f"{RESULTS[base].json} is not committed"
    assert render_readme(text) == text, \
        "README tables differ from docs/results/: run `python -m training results`"


def test_results_record_their_command() -> None:
    for result in RESULTS.values():
        path = REPO / result.json
        if path.is_file():
            recorded = json.loads(path.read_text())["command"]
            assert recorded == result.command, f"{path} was made by another command"


@pytest.fixture(scope="module")
def cmu_dataset(tmp_path_factory) -> Path:
    source = REPO.parent / "shared" / "data" / "cmu"
    if not source.is_dir():
        pytest.skip(f"real mocap not found at {source} (needs ../shared beside the repo)")
    out = tmp_path_factory.mktemp("cmu") / "cmu.npz"
    argv = list(DATASETS["cmu"])
    argv[argv.index("--out") + 1] = str(out)
    argv[argv.index("--bvh") + 1] = str(source)
    assert main(argv) == 0
    return out


def _unit(key: str) -> str:
    return "mm" if key.endswith("_mm") else "pct" if key.endswith("_pct") else "cm"


def test_pinned_drag_figures_come_out_again(cmu_dataset: Path, tmp_path: Path) -> None:
    result = RESULTS[PINNED]
    committed = json.loads((REPO / result.json).read_text())
    argv = list(result.argv)
    argv[argv.index("--data") + 1] = str(cmu_dataset)
    argv[argv.index("--json") + 1] = str(tmp_path / "drags.json")
    argv[argv.index("--out") + 1] = str(tmp_path)
    argv[argv.index("--models") + 1] = str(REPO / argv[argv.index("--models") + 1])
    assert main(argv) == 0
    fresh = json.loads((tmp_path / "drags.json").read_text())
    for case, by_pins in committed["cases"].items():
        for pins, methods in by_pins.items():
            for method, figures in methods.items():
                for key, want in figures.items():
                    got = fresh["cases"][case][pins][method][key]
                    assert got == pytest.approx(want, abs=ABS_TOLERANCE[_unit(key)]), \
                        f"{case} / {pins} / {method} / {key}"


@pytest.mark.parametrize("argv", [
    ("benchmark", "--suite", "drags", "--pairs", "12"),
    ("benchmark", "--pairs", "12", "--solves", "3"),
    ("evaluate", "--pairs", "12"),
], ids=["drags", "engine", "evaluate"])
def test_benchmark_commands_run_end_to_end(tiny_set, tmp_path: Path, argv) -> None:
    """On the tiny synthetic set: each command writes its JSON and markdown."""
    extra = ["--data", str(tiny_set.data), "--models", str(tiny_set.models),
             "--out", str(tmp_path)]
    assert main([*argv, *extra]) == 0
    written = sorted(p.suffix for p in tmp_path.iterdir())
    assert ".json" in written and ".md" in written


def test_datasets_named_by_results_exist() -> None:
    for result in RESULTS.values():
        for data in result.data:
            assert data in DATASETS and data in DATA_FILES


def test_benchmark_bvh_runs_end_to_end(tmp_path: Path) -> None:
    """Our reader against bvhio on two small synthetic clips: the JSON names both."""
    from tests.synth import synthetic_bvh

    for i in range(2):
        (tmp_path / f"clip_{i}.bvh").write_text(synthetic_bvh(frames=20, seed=i))
    out = tmp_path / "bvh.json"
    assert main(["benchmark-bvh", "--bvh", str(tmp_path), "--clips", "2",
                 "--json", str(out)]) == 0
    assert out.is_file() and json.loads(out.read_text())
