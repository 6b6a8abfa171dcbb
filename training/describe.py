"""README tables made from files already committed: the prepared datasets (``prepare
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
SKIP_KINDS = ("too short", "static", "broken motion")  # prepare's reasons (training/data.py)
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
