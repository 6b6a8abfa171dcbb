"""Tables made from files already committed: the prepared datasets (``prepare
--json`` summaries under ``docs/results/``) and the shipped model sets (their
``manifest.json``), so every figure in those tables traces to a file and a command.

``python -m training describe-data SUMMARY.json... --json OUT.json``
``python -m training describe-models FOLDER... --datasets SUMMARY.json... --json OUT.json``
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Dataset names for the table, by the --bvh folder's name; other folders show their name.
DATASET_LABELS = {"cmu": "CMU", "bandai-namco": "Bandai Namco"}
SKIP_KINDS = ("too short", "static", "broken motion")  # prepare's reasons (data/dataset.py)
MIRRORED = 2  # train-all trains on the train split and its mirror image


def _read(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return json.loads(path.read_text(encoding="utf-8"))


def _label(summary: dict[str, Any]) -> str:
    names = [DATASET_LABELS.get(Path(d["path"]).name, Path(d["path"]).name)
             for d in summary["datasets"]]
    return " + ".join(names)


def _skipped(summary: dict[str, Any]) -> str:
    """``(0)`` or ``(7 too short, 1 static)``: prepare's reasons, counted."""
    counts: dict[str, int] = {}
    for entry in summary["skipped"]:
        kind = next((k for k in SKIP_KINDS if f": {k}" in entry), "unreadable")
        counts[kind] = counts.get(kind, 0) + 1
    return "(" + (", ".join(f"{n} {k}" for k, n in counts.items()) or "0") + ")"


def _split_by(summary: dict[str, Any]) -> str:
    return " / ".join(f"subject ({d['groups']})" if d["split_by"] == "subject" else "clip"
                      for d in summary["datasets"])


def dataset_rows(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per prepared dataset file, with the figures the README shows."""
    return [{
        "dataset": _label(s), "out": s["out"], "seconds": s["elapsed_s"],
        "workers": s.get("workers"), "clips": s["clips"], "skipped": len(s["skipped"]),
        "skipped_text": _skipped(s), "frames": s["frames"], "split_by": _split_by(s),
        "split_clips": s["split_clips"], "split_frames": s["split_frames"],
        "summary_command": s["command"],
    } for s in summaries]


def datasets_markdown(result: dict[str, Any]) -> str:
    lines = ["| dataset | time | clips (skipped) | frames at 30 fps | split by | "
             "train / val / test clips | frames |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        clips = " / ".join(f"{v:,}" for v in r["split_clips"].values())
        frames = " / ".join(f"{v:,}" for v in r["split_frames"].values())
        lines.append(f"| {r['dataset']} (`{r['out']}`) | {r['seconds']:.0f} s | {r['clips']:,} "
                     f"{r['skipped_text']} | {r['frames']:,} | {r['split_by']} | {clips} | "
                     f"{frames} |")
    return "\n".join(lines) + "\n"


def describe_data(summaries: list[str]) -> dict[str, Any]:
    return {"summaries": list(summaries),
            "rows": dataset_rows([_read(p) for p in summaries])}


def _train_frames(data: str, summaries: list[dict[str, Any]]) -> int | None:
    match = next((s for s in summaries if s["out"] == data), None)
    return None if match is None else int(match["split_frames"]["train"])


def describe_models(folders: list[str], datasets: list[str] = ()) -> dict[str, Any]:
    """Training time, parameters and validation losses of each model set, from its manifest;
    train frames from the ``prepare`` summary of the dataset it names."""
    summaries = [_read(p) for p in datasets]
    rows = []
    for folder in folders:
        manifest = _read(Path(folder) / "manifest.json")
        training = manifest.get("training") or {}
        if "seconds" not in training or "validation" not in training:
            raise ValueError(f"{folder}/manifest.json: no training.seconds / training."
                             "validation (export it with `python -m training export --runs`)")
        params = {m["name"]: int(m["parameters"]) for m in manifest["modules"]}
        val = training["validation"]
        chosen = training.get("chosen_ae", "untied")
        frames = _train_frames(training.get("data", ""), summaries)
        rows.append({
            "models": str(folder), "name": manifest["about"]["name"],
            "command": training.get("command"), "data": training.get("data"),
            "mirrored_train_frames": None if frames is None else frames * MIRRORED,
            "seconds": training["seconds"],
            "autoencoder_parameters": params["encoder"] + params["decoder"],
            "universal_parameters": params.get("ik_universal"),
            "autoencoder_val_loss": val[f"ae_{chosen}"]["best_val_loss"],
            "universal_val_loss": val["solver_universal"]["best_val_loss"],
            "universal_epochs": val["solver_universal"]["epochs"],
        })
    return {"folders": list(folders), "datasets": list(datasets), "rows": rows}


def models_markdown(result: dict[str, Any]) -> str:
    lines = ["| set | data (mirrored train frames) | parameters (autoencoder / universal) | "
             "`train-all` wall time | autoencoder val loss | universal val loss |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        frames = "?" if r["mirrored_train_frames"] is None else \
            f"{r['mirrored_train_frames'] / 1e6:.2f} M"
        lines.append(f"| {r['name']} (`{r['models']}/`) | {frames} | "
                     f"{r['autoencoder_parameters']:,} / {r['universal_parameters']:,} | "
                     f"**{r['seconds'] / 60:.1f} min** | {r['autoencoder_val_loss']:.2e} | "
                     f"{r['universal_val_loss']:.2e} |")
    return "\n".join(lines) + "\n"


# ``benchmark --suite latency`` runs (one JSON report each, e.g. on a quiet machine lent for
# the measurement): each figure's range over the runs, against the issues' targets.
LATENCY_METHODS = {"universal": "universal (networks, rig-shaped answer)",
                   "universal + refinement (3 steps, default options)":
                       "universal + refinement (3 steps, default)",
                   "classic FABRIK": "classic FABRIK"}
LATENCY_DRAG_LABELS = {"refined (default)": "Live drag update, refined (default)",
                       "refinement off": "Live drag update, refinement off"}
LATENCY_TARGETS_MS = {"universal": 0.3, "universal + refinement (3 steps, default options)": 0.6}


def _span(values: list[float]) -> dict[str, float]:
    return {"min_ms": min(values), "max_ms": max(values)}


def describe_latency(reports: list[str]) -> dict[str, Any]:
    """Each latency figure's lowest and highest median over the runs' reports."""
    from training.evaluation.benchmark import LATENCY_SETS

    runs = [_read(p) for p in reports]
    rows = []
    for method, label in LATENCY_METHODS.items():
        rows.append({"method": method, "label": label, "target_ms": LATENCY_TARGETS_MS.get(method),
                     "sets": {s: _span([r["latency"][s][method]["median_ms"] for r in runs])
                              for s in LATENCY_SETS}})
    # What the default's features cost, from the runs that measured it (newer reports).
    costed = [r for r in runs if "features" in r]
    for setting in (costed[0]["features"][next(iter(LATENCY_SETS))] if costed else ()):
        rows.append({"method": setting, "label": setting, "target_ms": None,
                     "runs": len(costed),
                     "sets": {s: _span([r["features"][s][setting]["median_ms"] for r in costed])
                              for s in LATENCY_SETS}})
    for setting, label in LATENCY_DRAG_LABELS.items():
        rows.append({"method": setting, "label": label, "target_ms": None, "sets": {
            list(LATENCY_SETS)[-1]: _span([r["drag_updates"][setting]["median_ms"]
                                           for r in runs])}})
    return {"reports": list(reports), "rows": rows, "runs": [
        {"data": r["data"], "models": r["models"], "machine": r["machine"]} for r in runs]}


def _range(span: dict[str, float]) -> str:
    low, high = f"{span['min_ms']:.2f}", f"{span['max_ms']:.2f}"
    return low if low == high else f"{low}-{high}"


def latency_markdown(result: dict[str, Any]) -> str:
    from training.evaluation.benchmark import LATENCY_SETS

    runs = result["runs"]
    machines = sorted({f"{r['machine']['cpu']}, {r['machine']['cores']} cores" for r in runs})
    loads = [x for r in runs for x in (r["machine"]["load_avg_1_5_15"][0],
                                       r["machine"]["load_avg_after"][0])]
    versions = sorted({f"Python {m['python']}, numpy {m['numpy']}, onnxruntime "
                       f"{m['onnxruntime']}" for m in (r["machine"] for r in runs)})
    each = "; ".join(f"{r['data']}, models `{r['models']}`" for r in runs)
    lines = [f"{len(runs)} runs ({each}) on {' / '.join(machines)}, one thread, load average "
             f"{min(loads):.2f}-{max(loads):.2f} (1 min, before and after each run); "
             f"{' / '.join(versions)}.", "",
             f"| median (ms), one thread | {' | '.join(LATENCY_SETS)} | target |",
             "|---|" + "---|" * (len(LATENCY_SETS) + 1)]
    for row in result["rows"]:
        cells = [_range(row["sets"][s]) if s in row["sets"] else "" for s in LATENCY_SETS]
        target = row["target_ms"]
        if target is None:
            verdict = "–"
        else:
            spans = row["sets"].values()
            low = min(s["min_ms"] for s in spans) / target
            high = max(s["max_ms"] for s in spans) / target
            verdict = (f"≤ {target}: **met**" if high <= 1.0 else
                       f"≤ {target}: **missed** by {low:.1f}-{high:.1f}x")
        label = row["label"]
        if row.get("runs", len(runs)) < len(runs):
            label += f" ({row['runs']} of the {len(runs)} runs)"
        lines.append(f"| {label} | {' | '.join(cells)} | {verdict} |")
    return "\n".join(lines) + "\n"
