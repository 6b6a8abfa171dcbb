"""``python -m training results``: every published figure, remade by the commands that make it.

Each result is one ``python -m training`` command whose JSON and markdown land in
``docs/results/``; the datasets it reads are made first by their ``prepare`` command when
missing. The README's tables are the markdown of those files, pasted between
``<!-- results:NAME -->`` and ``<!-- /results -->`` markers by :func:`update_readme`
(run at the end of ``results``), and a test checks that the README still shows exactly
the committed files. Speed figures live in the same files but are never compared by tests.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from blender_addon.core.fileio import atomic_open

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path("docs/results")
README = Path("README.md")
SHARED = "../shared/data"


@dataclass(frozen=True)
class Result:
    """A command that writes ``docs/results/<name>.json`` and ``.md``."""
    name: str
    argv: tuple[str, ...]
    data: tuple[str, ...]  # dataset names (keys of DATASETS) it reads
    makes: tuple[str, ...] = ()  # dataset names it writes (``prepare``)

    @property
    def json(self) -> Path:
        return RESULTS_DIR / f"{self.name}.json"

    @property
    def command(self) -> str:
        return "python -m training " + shlex.join(self.argv)


# Each dataset: the ../shared/data folders it is prepared from, one --bvh entry each.
SOURCES: dict[str, tuple[str, ...]] = {
    "cmu": ("cmu",), "bandai": ("bandai-namco",), "cmu-bandai": ("cmu", "bandai-namco")}
DATA_FILES = {data: f"runs/{data}.npz" for data in SOURCES}
BENCHMARKED = ("cmu", "bandai")  # the datasets the engine, drags and evaluate run on
SETS = {"": "models", "-cmu-bandai": "models/cmu-bandai"}
SET_DATA = "cmu"  # the default set's training data
RANGED_SUITES = ("drags", "propagation")  # they judge joint angles against its ranges
BVH_CLIPS = "20"  # clips timed by benchmark-bvh
BVH_SUITE_CLIPS = "60"
PROPAGATION_CLIPS = "20"  # test clips of 120 frames or more, one propagated edit each
FAMILY_POSES = "100"  # start poses per pose family
BVH_SUITES = {"drags": "1000", "engine": "1000", "sliders": "300",
              "propagation": PROPAGATION_CLIPS}  # suite -> --pairs
SOLVER_CHECK_SETS = (("models", "cmu"), ("models/cmu-bandai", "cmu-bandai"),
                     ("models", "bandai"))  # the last: the CMU set on data it never saw
SLIDER_REACH_SETS = (("models", "cmu"), ("models/cmu-bandai", "cmu-bandai"))
QUIET_RUNS = tuple(str(RESULTS_DIR / "quiet-machine" / f"latency-{run}.json")
                   for run in ("cmu-1", "cmu-2", "bandai", "cmu-cmu-bandai"))


def _json(name: str) -> str:
    return str(RESULTS_DIR / f"{name}.json")


def _prepare(data: str) -> Result:
    name = f"prepare-{data}"
    return Result(name, ("prepare", "--bvh", *(f"{SHARED}/{d}" for d in SOURCES[data]),
                         "--out", DATA_FILES[data], "--json", _json(name)), (), (data,))


DATASETS: dict[str, tuple[str, ...]] = {data: _prepare(data).argv for data in SOURCES}


def _drags(suffix: str, models: str, data: str) -> Result:
    name = f"drags-{data}{suffix}"
    return Result(name, ("benchmark", "--suite", "drags", "--data", DATA_FILES[data],
                         "--models", models, "--pairs", "300", "--out", "runs/results",
                         "--json", _json(name)), (data,))


def _engine(suffix: str, models: str, data: str) -> Result:
    name = f"engine-{data}{suffix}"
    return Result(name, ("benchmark", "--data", DATA_FILES[data], "--models", models,
                         "--out", "runs/results", "--json", _json(name)), (data,))


def _propagation(data: str) -> Result:
    """A hand moved at one frame and propagated, judged as motion: the default set only."""
    name = f"propagation-{data}"
    return Result(name, ("benchmark", "--suite", "propagation", "--data", DATA_FILES[data],
                         "--models", SETS[""], "--pairs", PROPAGATION_CLIPS, "--max-clips",
                         "80", "--out", "runs/results", "--json", _json(name)), (data,))


def _evaluate(suffix: str, models: str, data: str) -> Result:
    name = f"evaluate-{data}{suffix}"
    return Result(name, ("evaluate", "--data", DATA_FILES[data], "--models", models,
                         "--out", str(RESULTS_DIR), "--name", name), (data,))


def _bvh_suite(suite: str, data: str) -> Result:
    """The default set on a source's BVH clips; joint angles judged against its training
    data's ranges, as on the test splits."""
    name = f"{suite}-bvh-{data}"
    ranges = ("--ranges", DATA_FILES[SET_DATA]) if suite in RANGED_SUITES else ()
    return Result(name, ("benchmark", "--suite", suite, "--bvh", f"{SHARED}/{SOURCES[data][0]}",
                         "--max-clips", BVH_SUITE_CLIPS, "--pairs", BVH_SUITES[suite],
                         *ranges, "--models", SETS[""], "--out", "runs/results", "--json",
                         _json(name)), (SET_DATA,) if ranges else ())


def _described() -> tuple[Result, ...]:
    """Tables of committed files and quick checks: datasets, BVH readers, model sets, the
    universal solver and the metric networks alone."""
    summaries = tuple(_json(f"prepare-{data}") for data in SOURCES)
    def sets(pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        return tuple(a for models, data in pairs for a in ("--set", models, DATA_FILES[data]))

    def reads(pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        return tuple(sorted({data for _, data in pairs}))
    return (
        Result("datasets", ("describe-data", *summaries, "--json", _json("datasets")), ()),
        Result("benchmark-bvh", ("benchmark-bvh", "--bvh", f"{SHARED}/bandai-namco",
                                 "--clips", BVH_CLIPS, "--json", _json("benchmark-bvh")), ()),
        Result("model-sets", ("describe-models", *SETS.values(), "--datasets", *summaries,
                              "--json", _json("model-sets")), ()),
        Result("solver-check", ("solver-check", *sets(SOLVER_CHECK_SETS), "--json",
                                _json("solver-check")), reads(SOLVER_CHECK_SETS)),
        Result("slider-reach", ("slider-reach", *sets(SLIDER_REACH_SETS), "--json",
                                _json("slider-reach")), reads(SLIDER_REACH_SETS)),
        # The engine's speed alone on the first 40 CMU test clips (the quiet machine's runs,
        # docs/results/quiet-machine/, use the same command), with the compiled kernels'
        # speed-up measured in the same run.
        Result("latency-cmu", ("benchmark", "--suite", "latency", "--data", DATA_FILES["cmu"],
                               "--max-clips", "40", "--models", SETS[""], "--out",
                               "runs/results", "--json", _json("latency-cmu")), ("cmu",)),
        # The same command's runs on a quiet machine (docs/results/quiet-machine/: the
        # first 40 CMU / Bandai Namco test clips), each figure's range over them.
        Result("latency-quiet", ("describe-latency", *QUIET_RUNS, "--json",
                                 _json("latency-quiet")), ()),
        # The drag, engine and slider benchmarks on BVH clips as they come (their own
        # skeleton's proportions and units), as the maintainers check motion from other
        # studios: the default set on each source's first BVH_SUITE_CLIPS clips.
        *(_bvh_suite(suite, data) for suite in BVH_SUITES for data in BENCHMARKED),
        # One hand dragged on CMU poses the mocap hardly holds, family by family.
        Result("pose-families", ("benchmark", "--suite", "families", "--bvh",
                                 f"{SHARED}/cmu", "--pairs", FAMILY_POSES, "--models",
                                 SETS[""], "--out", "runs/results", "--json",
                                 _json("pose-families")), ()),
        # Inside Blender (the bpy venv); its clips come from the CMU test split's picks.
        Result("benchmark_blender", ("benchmark-blender", "--models", SETS[""], "--out",
                                     str(RESULTS_DIR)), ("cmu",)),
    )


RESULTS: dict[str, Result] = {r.name: r for r in (
    *(_prepare(data) for data in SOURCES),
    *_described(),
    *(r for suffix, models in SETS.items() for data in BENCHMARKED
      for r in (_drags(suffix, models, data), _engine(suffix, models, data),
                _evaluate(suffix, models, data))),
    *(_propagation(data) for data in BENCHMARKED),
)}

_BLOCK = re.compile(r"(<!-- results:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)",
                    re.DOTALL)


def markdown_of(name: str, root: Path = REPO) -> str:
    """``NAME`` (the full markdown) or ``NAME.summary`` (the README's shorter table)."""
    path = root / RESULTS_DIR / f"{name}.md"
    if not path.is_file():
        base = name.split(".")[0]
        raise FileNotFoundError(f"{path}: no such result; make it with `python -m training "
                                f"results {base}`")
    return path.read_text(encoding="utf-8")


def render_readme(text: str, root: Path = REPO) -> str:
    """The README with every results block replaced by its markdown file."""
    def fill(m: re.Match) -> str:
        return f"{m.group(1)}{markdown_of(m.group('name'), root)}{m.group(4)}"
    return _BLOCK.sub(fill, text)


def readme_blocks(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def update_readme(root: Path = REPO) -> None:
    path = root / README
    text = path.read_text(encoding="utf-8")
    new = render_readme(text, root)
    if new != text:
        with atomic_open(path, "w") as fh:
            fh.write(new)


def _run_command(argv: tuple[str, ...]) -> int:
    """One ``python -m training`` command in its own process: memory and speed figures
    are not disturbed by what ran before."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "training", *argv], cwd=REPO).returncode


def run(names: list[str] | None) -> None:
    """Make the named results (default: all) in the order above (datasets first); a dataset
    that no chosen ``prepare-*`` result makes is prepared first when missing."""
    unknown = [n for n in names or () if n not in RESULTS]
    if unknown:
        raise ValueError(f"unknown result(s) {unknown}; known: {', '.join(RESULTS)}")
    chosen = [r for r in RESULTS.values() if not names or r.name in names]
    made = {d for r in chosen for d in r.makes}
    for data in sorted({d for r in chosen for d in r.data} - made):
        if not (REPO / DATA_FILES[data]).is_file():
            if _run_command(DATASETS[data]) != 0:
                raise RuntimeError(f"could not prepare {DATA_FILES[data]}")
    for result in chosen:
        print(f"== {result.command}")
        if _run_command(result.argv) != 0:
            raise RuntimeError(f"{result.command} failed")
    update_readme()
