"""``python -m training benchmark-blender``: the add-on timed inside real Blender, and
compared with Blender's own IK constraints, side by side in one run.

The dev venv has no bpy, so the measuring runs in the bpy venv
(:mod:`training.blender_side.bench`, through :mod:`training.blender.run`); this side picks
and extracts the test clips, starts it, adds the machine's load, and writes the reports:

- live update: an effector empty moved until the pose is written and evaluated (median,
  p95 over many moves) on the mapped Bandai BVH rig and a Rigify-size rig, refinement off
  and on, against the same loop with Live off; and where that time goes, stage by stage;
- accuracy: (x, x') pairs of test clips (x' within +-20 frames), the add-on's Solve against
  Blender's IK constraints on the same five effectors;
- propagation: ``npe.spread_edit`` over a 1,000-frame action, keys written.
"""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from training.blender.run import BANDAI_ARCHIVE, check_inputs, extract_clips, run_in_blender
from training.reports import figures

DEFAULT_OUT = "runs/benchmark_blender"
DEFAULT_DATA = "runs/poses.npz"
DEFAULT_CLIPS = 8
DEFAULT_TIMEOUT_S = 3600
TARGET_LIVE_MS = 3.0  # interactive update, median, BVH rig
TARGET_LIVE_GENERATED_MS = 5.0  # the same on a generated Rigify rig (706 bones, controls)
TARGET_PROPAGATION_MS = 500.0  # 1,000 frames keyed on the BVH rig (issue 49)
# Every Live setting shows the dragged hand on its empty (median of its moves; all are
# within reach): a setting that left it millimetres short went unseen in the table.
TARGET_REACH_MM = 0.1
# Test-split clips of dataset-1 in the seed-0 split of both Bandai archives (used when no
# prepared dataset is at hand to read the split from).
FALLBACK_TEST_CLIPS = (
    "dataset-1_bow_chimpira_001.bvh", "dataset-1_bow_happy_001.bvh",
    "dataset-1_bow_normal_001.bvh", "dataset-1_bye_tired_001.bvh",
    "dataset-1_dash_chimpira_001.bvh", "dataset-1_dash_normal_001.bvh",
    "dataset-1_dash_tired_001.bvh", "dataset-1_guide_chimpira_001.bvh",
)
MIN_FRAMES = 2 * 20 + 1  # a clip shorter than this cannot give +-20-frame pairs


def test_clips(data: str | None, archive: Path, count: int) -> tuple[list[str], str]:
    """Member names of test-split clips in ``archive`` (from the prepared dataset's split
    when there is one), and a line saying where they came from."""
    if data and Path(data).is_file():
        with np.load(data, allow_pickle=False) as z:
            sources, split = z["sources"], z["clip_split"]
            lengths = np.bincount(z["clip"], minlength=len(sources))
        names = [str(s).rsplit(":", 1)[-1] for s, sp, n in zip(sources, split, lengths,
                                                                strict=True)
                 if sp == 2 and n >= MIN_FRAMES and str(s).split(":")[0].endswith(archive.name)]
        if names:
            return names[:count], f"test split of {data}"
    return list(FALLBACK_TEST_CLIPS[:count]), "built-in list of test-split clips"


def machine() -> dict[str, Any]:
    """What the timings ran on: CPU, cores and load (the machine may be shared)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "load_avg_1_5_15": list(os.getloadavg())}


def run(models: str, venv: str, data: str | None = DEFAULT_DATA, archive: Path = BANDAI_ARCHIVE,
        clips: int = DEFAULT_CLIPS, moves: int = 200, profile_moves: int = 100,
        pairs: int = 200, propagation_runs: int = 5, seed: int = 0,
        skip: tuple[str, ...] = (), timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Run the Blender-side benchmark and return its result with the machine's load."""
    import json

    check_inputs(models, archive)
    names, source = test_clips(data, archive, clips)
    before = machine()
    with tempfile.TemporaryDirectory(prefix="npe-bench-blender-") as tmp:
        paths = extract_clips(archive, names, Path(tmp) / "clips")
        out = Path(tmp) / "result.json"
        args = ["--models", str(Path(models).resolve()), "--clips", *map(str, paths),
                "--out", str(out), "--moves", str(moves), "--profile-moves",
                str(profile_moves), "--pairs", str(pairs), "--propagation-runs",
                str(propagation_runs), "--seed", str(seed)]
        if skip:
            args += ["--skip", *skip]
        run_in_blender("bench", args, venv, timeout_s)
        result = json.loads(out.read_text())
    result["models"] = models
    result["clips_source"] = f"{len(names)} clips of {archive.name}, {source}"
    result["machine"] = {**machine(), "load_avg_before": before["load_avg_1_5_15"]}
    result["targets"] = {"live_median_ms": TARGET_LIVE_MS,
                         "live_generated_median_ms": TARGET_LIVE_GENERATED_MS,
                         "propagation_ms": TARGET_PROPAGATION_MS}
    return result


def _refine_label(row: dict[str, Any]) -> str:
    """How a live setting refined: "refine 0", "refine 3" (at the pause), "refine 3 each"."""
    every = " each" if row.get("refine_every_update") else ""
    numpy_only = ", numpy" if row.get("kernels") is False else ""
    return f"refine {row['refine_steps']}{every}{numpy_only}"


def _target(row: dict[str, Any], targets: dict[str, float]) -> float:
    generated = row["rig"].startswith("generated")
    return targets.get("live_generated_median_ms", TARGET_LIVE_GENERATED_MS) if generated \
        else targets["live_median_ms"]


def _shares(row: dict[str, Any]) -> str:
    """Blender's own evaluation against the add-on's part of an update (profiled pass)."""
    profile = row.get("profile_cpu")
    if not profile:
        return ""
    blender = profile.get("depsgraph evaluation (Blender)", 0.0)
    addon = sum(v for k, v in profile.items() if k != "depsgraph evaluation (Blender)")
    return f"; of an update's CPU time (profiled means), Blender's evaluation of the rig " \
        f"takes {blender:.2f} ms and the add-on {addon:.2f} ms"


def _rig_name(row: dict[str, Any]) -> str:
    """The row's rig as a sentence names it: "BVH rig", "generated Rigify rig, limbs ..."."""
    name = row["rig"].split(" (")[0]
    return name if " rig" in name else f"{name} rig"


def _verdict(value: float, target: float) -> str:
    return f"**met** ({value:.2f} < {target:g})" if value < target else \
        f"**missed** ({value:.2f} ≥ {target:g})"


def markdown(result: dict[str, Any]) -> str:
    """The report: live updates, their time breakdown, accuracy vs Blender IK, propagation."""
    m = result["machine"]
    lines = [f"Blender {result['blender']} (bpy module), models `{result['models']}`; "
             f"{m['cpu']}, {m['cores']} cores, load average "
             f"{m['load_avg_before'][0]:.2f} before / {m['load_avg_1_5_15'][0]:.2f} after "
             "(1 min).", ""]
    if "live" in result:
        live = result["live"]
        lines += ["**Live update**: the right-hand empty moved (`location` set, "
                  "`view_layer.update()`) until the pose is written and evaluated; effectors "
                  f"on hands, feet and head; {live[0]['n']} moves.", "",
                  "| rig | setting | median (ms) | p95 (ms) | p10 (ms) | x baseline | "
                  "CPU time, median (ms) | hand reach, median (mm) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in live:
            reach = f"{r['reach_median_mm']:.1f}" if r["live"] else "–"
            lines.append(f"| {r['rig']} | {r['setting']} | {r['median_ms']:.2f} | "
                         f"{r['p95_ms']:.2f} | {r['p10_ms']:.2f} | "
                         f"{r['ratio_to_baseline']:.0f} | {r['cpu_median_ms']:.2f} | {reach} |")
        judged = [r for r in live if r["live"] and r["rig"].startswith(("BVH", "generated"))]
        targets = result["targets"]
        lines += [""] + [f"Target < {_target(r, targets):g} ms median on the "
                         f"{_rig_name(r)}, "
                         f"{r['setting'].lower()}: "
                         f"{_verdict(r['median_ms'], _target(r, targets))}{_shares(r)}."
                         for r in judged]
        solved = [r for r in live if r["live"]]
        worst = max(solved, key=lambda r: r["reach_median_mm"])
        lines.append(f"Target: the dragged hand within {TARGET_REACH_MM:g} mm of its empty "
                     "(median) in every Live setting: "
                     f"{_verdict(worst['reach_median_mm'], TARGET_REACH_MM)} (worst: "
                     f"{worst['rig']}, {worst['setting'].lower()}; the largest single "
                     f"miss {max(r['reach_max_mm'] for r in solved):.2f} mm).")
        profiled = [r for r in live if "profile" in r]
        stages = list(profiled[0]["profile"])
        lines += ["", f"**Where a live update's time goes**: mean ms per update over "
                  f"{profiled[0]['profile_moves']} instrumented moves, exclusive times, CPU time "
                  "of the main thread (wall-clock totals below; the depsgraph's CPU time "
                  "leaves out its worker threads):", "",
                  "| stage | " + " | ".join(f"{r['rig'].split(' (')[0]}, {_refine_label(r)}"
                                           for r in profiled) + " |",
                  "|---|" + "---|" * len(profiled)]
        for s in stages:
            lines.append(f"| {s} | " + " | ".join(f"{r['profile_cpu'][s]:.3f}"
                                                  for r in profiled) + " |")
        lines.append("| **total, CPU** | " + " | ".join(
            f"**{sum(r['profile_cpu'].values()):.3f}**" for r in profiled) + " |")
        lines.append("| total, wall clock | " + " | ".join(
            f"{sum(r['profile'].values()):.3f}" for r in profiled) + " |")
    if "ik" in result:
        ik = result["ik"]
        chains = ", ".join(f"{j} on {owner} ({count} bones to {top})"
                           for j, owner, count, _tail, top in ik["ik_chains"])
        lines += ["", f"**Against Blender's IK constraints**: {ik['pairs']} (x, x') pairs of "
                  f"{result.get('clips_source', 'test clips')}, x' within ±20 frames and moved "
                  "onto x's ground point and facing (as in the engine benchmark's model "
                  "space: a change of pose, not a walk); the rig at x, targets at x' for "
                  "hands, feet and head; errors against x'. "
                  f"IK chains: {chains}. Time: the solve and the depsgraph evaluation.", "",
                  "| method | effector error mean (mm) | median (mm) | p95 (mm) | "
                  "non-effector MPJPE (cm) | time median (ms) | p95 (ms) | x Blender IK |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in ik["rows"]:
            timing = (f"{r['median_ms']:.2f} | {r['p95_ms']:.2f} | "
                      f"{r['ratio_to_blender_ik']:.1f}" if "median_ms" in r else "– | – | –")
            lines.append(f"| {r['method']} | {r['effector_mean_mm']:.1f} | "
                         f"{r['effector_median_mm']:.1f} | {r['effector_p95_mm']:.1f} | "
                         f"{r['non_effector_mpjpe_cm']:.2f} | {timing} |")
        lines += ["", "Effector error by joint, mean (mm):", "",
                  "| method | " + " | ".join(ik["effectors"]) + " |",
                  "|---|" + "---|" * len(ik["effectors"])]
        for r in ik["rows"]:
            lines.append(f"| {r['method']} | " + " | ".join(
                f"{r['effector_by_joint_mean_mm'][j]:.1f}" for j in ik["effectors"]) + " |")
    for key in ("propagation", "propagation_generated", "propagation_generated_ik"):
        if key not in result:
            continue
        p = result[key]
        target = p.get("target_ms", result["targets"]["propagation_ms"])
        rig = {"bvh": "BVH rig", "generated": "generated Rigify rig, limbs in FK",
               "generated-ik": "generated Rigify rig, limbs left in IK (as generated)"
               }[p.get("rig", "bvh")]
        lines += ["", f"**Spread Edit, {rig}**: `npe.spread_edit` (Every Frame) over a "
                  f"{p['frames']}-frame action (frames {p['window'][0]}-{p['window'][1]}, "
                  f"{p['edited_frames']} edited, {p['fcurves_written']} F-curves keyed), "
                  f"{p['runs']} runs: median **{p['median_ms']:.0f} ms** (p95 "
                  f"{p['p95_ms']:.0f} ms). Target < {target:g} ms: "
                  f"{_verdict(p['median_ms'], target)}.", "",
                  "| propagation stage | mean (ms) |", "|---|---|"]
        for s, ms in p["stages"].items():
            lines.append(f"| {s} | {ms:.1f} |")
        lines.append(f"| (for scale: one `frame_set` alone) | {p['frame_set_alone_ms']:.1f} |")
    if "spread" in result:
        lines += spread_lines(result["spread"])
    return "\n".join(lines) + "\n"


def spread_lines(s: dict[str, Any]) -> list[str]:
    """Spread Edit's modes as an animator uses them (issue 49's acceptance, its bounds)."""
    k, la, e = s["keys"], s["layer"], s["esc"]
    frames = ", ".join(str(f) for f in k["keyed_frames_in_range"])
    return [
        "", f"**Spread Edit as an animator uses it** ({s['clip']}, the right hand moved "
        f"{la['hand_move_mm'] / 10:.0f} cm at frame 41, read back from the rig Blender "
        "evaluates):", "",
        "| case | measured | bound |", "|---|---|---|",
        f"| Keys mode ({k['mode'].lower()}, the default), keys every 10 frames, a Breakdown, "
        f"a Linear and a Constant key, +-20 frames: F-curves whose key count changed | "
        f"{k['fcurves_with_keys_added_or_removed']} of {k['fcurves']} | 0 |",
        f"| ... keys whose type, interpolation, easing or handle types changed | "
        f"{k['keys_with_type_or_interpolation_changed']} of {k['keys']:,} | 0 |",
        f"| ... keys outside the range changed (bit for bit) | {k['keys_outside_changed']} | 0 |",
        f"| ... keyed frames inside ({frames}): the hand off the weighted edit | "
        f"{k['hand_off_weighted_edit_mm']:.4f} mm | < 1 mm |",
        f"| Layer mode: the action changed (bit for bit) | "
        f"{'no' if la['action_unchanged'] else 'yes'} | no |",
        f"| ... the layer muted, off the motion | {la['muted_off_motion_mm']:.4f} mm | "
        "< 0.1 mm |",
        f"| ... influence 0.5: every channel off half its change | "
        f"{la['half_channels_off_rad']:.1e} rad | - |",
        f"| ... influence 0.5: the hand's share of its move (its midpoint: "
        f"{la['half_hand_off_midpoint_mm']:.1f} mm away) | {la['half_hand_share']:.2f} | "
        "0.5, within 1 mm (missed: rotations about joints do not halve positions) |",
        f"| Esc during a {e['frames']:,}-frame Every Frame run, after its keys were "
        f"written: the action changed (bit for bit) | "
        f"{'no' if e['action_unchanged_after_esc'] else 'yes'} | no |"]


BAR_INCHES = 0.5  # figure height per bar: room for its two-line label


def plot_profile(result: dict[str, Any], path: Path) -> Path | None:
    """Stacked bars: each live setting's update split into stages (CPU ms)."""
    profiled = [r for r in result.get("live", ()) if "profile" in r]
    if not profiled:
        return None
    plt = figures.pyplot()
    stages = list(profiled[0]["profile_cpu"])
    labels = [f"{r['rig'].split(' (')[0]}\n{_refine_label(r)}" for r in profiled]
    fig, ax = plt.subplots(figsize=(8.5, 1.0 + BAR_INCHES * len(profiled)))
    left = np.zeros(len(profiled))
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, len(stages)))
    for s, c in zip(stages, colors, strict=True):
        v = np.array([r["profile_cpu"][s] for r in profiled])
        ax.barh(labels, v, left=left, color=c, label=s)
        left += v
    target = result["targets"]["live_median_ms"]
    ax.axvline(target, color="crimson", ls="--", lw=1)
    ax.text(target, len(profiled) - 0.5, f" target {target:g} ms", color="crimson",
            fontsize=8, va="bottom")
    ax.set_xlabel("CPU ms per live update (mean, instrumented, main thread)")
    ax.invert_yaxis()
    legend = ax.legend(fontsize=7, loc="upper center", ncol=3,  # 0.6 in under the axis
                       bbox_to_anchor=(0.5, -0.6 / (BAR_INCHES * len(profiled))),
                       frameon=False)
    figures.save(fig, path, bbox_inches="tight", bbox_extra_artists=[legend])
    return path
