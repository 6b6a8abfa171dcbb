"""``python -m training results``: every published figure, remade by the commands that make it.

Each result is one ``python -m training`` command whose JSON and markdown land in
``docs/results/``; the datasets it reads are made first by their ``prepare`` command when
missing. The documents' tables (every one in ``docs/RESULTS.md``, the README's one
summary) are the markdown of those files, pasted between ``<!-- results:NAME -->`` and
``<!-- /results -->`` markers by :func:`update_docs` (run at the end of ``results``), and
a test checks that every document still shows exactly the committed files. Speed figures
live in the same files but are never compared by tests.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from blender_addon.core.fileio import atomic_open

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path("docs/results")
README = Path("README.md")
DOCS_DIR = Path("docs")  # its *.md with results blocks are filled too (docs/RESULTS.md)
SUMMARY = "summary"  # the README's one table: headline figures of committed results
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


def _default_live_ms(rows: list[dict], rig: str, setting: str = "(default)") -> float:
    """Median ms of the first Blender benchmark row on ``rig`` whose setting ends so."""
    return next(r["median_ms"] for r in rows
                if r["rig"].startswith(rig) and r["setting"].endswith(setting))


def summary_markdown(root: Path = REPO) -> str:
    """The README's table: a few headline figures, read from the committed results that
    ``docs/RESULTS.md`` shows in full (so they change only when those are made again)."""
    def load(name: str) -> dict:
        return json.loads((root / RESULTS[name].json).read_text(encoding="utf-8"))

    drag = load("drags-cmu")["cases"]["one hand, 10-25 cm"]["no pins"]
    ours, fabrik = drag["default (refined)"], drag["classic FABRIK"]
    engine = load("engine-cmu")
    pairs = engine["accuracy"]["hands, feet, head"]
    refined = next(m for m in pairs if m.startswith("universal + refinement"))
    speed = engine["latency"]["2 effectors (hands)"]
    blender = load("benchmark_blender")
    live = blender["live"]
    rows = [
        ("one hand dragged 10-25 cm from CMU test poses: distance left to its target (median)",
         f"{ours['reach_median_mm']:.2f} mm", f"{fabrik['reach_median_mm']:.2f} mm"),
        ("the same drags: the rest of the body moved (mean over joints)",
         f"{ours['others_mean_cm']:.2f} cm", f"{fabrik['others_mean_cm']:.2f} cm"),
        ("the same drags: answers a rig shows on target (pelvis and chest rigid)",
         f"{ours['reached_on_rig_pct']:.0f} %", f"{fabrik['reached_on_rig_pct']:.0f} %"),
        ("the same drags: poses with a joint angle outside the mocap's range",
         f"{ours['out_of_range_pct']:.0f} %", f"{fabrik['out_of_range_pct']:.0f} %"),
        ("hands, feet and head moved as in real CMU motion: the other joints' distance from it",
         f"{pairs[refined]['non_effector_mpjpe_cm']:.2f} cm",
         f"{pairs['classic FABRIK']['non_effector_mpjpe_cm']:.2f} cm"),
        ("one solve of both hands, refined (median, one thread)",
         f"{speed[refined]['median_ms']:.2f} ms", f"{speed['classic FABRIK']['median_ms']:.2f} ms"),
        (f"a Live update in Blender {blender['blender'].split()[0]}, BVH rig (median)",
         f"{_default_live_ms(live, 'BVH'):.2f} ms", "–"),
        ("the same on a generated Rigify rig, limbs in FK (Blender's own evaluation of it "
         f"alone: {_default_live_ms(live, 'generated Rigify', 'evaluation alone)'):.1f} ms)",
         f"{_default_live_ms(live, 'generated Rigify'):.1f} ms", "–"),
        ("the same with its limbs left in IK, as generated (each update also steps the "
         "IK controls)", f"{_default_live_ms(live, 'generated Rigify rig, limbs left'):.1f} ms",
         "–"),
    ]
    lines = ["| the default set (`models/`) | Neural Pose Editor (default options) "
             "| classic FABRIK |", "|---|---|---|"]
    lines += [f"| {what} | {a} | {b} |" for what, a, b in rows]
    lines += ["", f"From `{RESULTS['drags-cmu'].json}`, `{RESULTS['engine-cmu'].json}` and "
              f"`{RESULTS['benchmark_blender'].json}` ({blender['machine']['cpu']}, "
              f"{blender['machine']['cores']} cores); every table in docs/RESULTS.md."]
    return "\n".join(lines) + "\n"


def markdown_of(name: str, root: Path = REPO) -> str:
    """``NAME`` (the full markdown), ``NAME.summary`` (a shorter table) or ``summary``
    (the README's headline table)."""
    if name == SUMMARY:
        return summary_markdown(root)
    path = root / RESULTS_DIR / f"{name}.md"
    if not path.is_file():
        base = name.split(".")[0]
        raise FileNotFoundError(f"{path}: no such result; make it with `python -m training "
                                f"results {base}`")
    return path.read_text(encoding="utf-8")


def render_blocks(text: str, root: Path = REPO) -> str:
    """A document with every results block replaced by its markdown."""
    def fill(m: re.Match) -> str:
        return f"{m.group(1)}{markdown_of(m.group('name'), root)}{m.group(4)}"
    return _BLOCK.sub(fill, text)


def blocks_in(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def documents(root: Path = REPO) -> list[Path]:
    """The README and every docs/*.md holding a results block (repository-relative)."""
    found = [README, *(p.relative_to(root) for p in sorted((root / DOCS_DIR).glob("*.md")))]
    return [p for p in found if _BLOCK.search((root / p).read_text(encoding="utf-8"))]


def update_docs(root: Path = REPO) -> None:
    """Paste the committed results into every document that shows them."""
    for rel in documents(root):
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new = render_blocks(text, root)
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
    update_docs()
