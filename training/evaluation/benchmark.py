"""``python -m training benchmark``: the engine against classic FABRIK, side by side, one run.

Accuracy on (x, x') pairs (x' within +-20 frames of x in the same clip, as in training):
effector error, non-effector MPJPE against x' and bone-length error, for the universal
solver, universal + refinement, the 2021 paper's chained specialized solvers and classic
FABRIK, on three effector sets. Latency: single-thread, one pose at a time, through
:meth:`PoseEditor.solve` (the call the add-on makes, backward pass included). Also: a
1,000-frame propagation, the models' memory, and a figure of a few cases.

Data: the test split of a prepared ``.npz`` (model space), or any BVH files/folders/
archives through the mapping presets, kept in their own proportions (rig space).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.bvh import iter_bvh_texts
from blender_addon.core.models import ModelSet
from blender_addon.core.normalize import facing_yaw, from_model_space, rotate_y, to_model_space
from blender_addon.core.pipeline import Effector, PoseEditor, SolveOptions
from blender_addon.core.propagate import SOLVED_FRAMES, propagate, weight_curve
from training.data.dataset import PoseData, canonical_clip, dataset_up
from training.data.pairs import SOLVER_PAIR_OFFSET, clip_bounds, pair_indices
from training.evaluation.evaluate import CM, EFFECTOR_SETS, fixed_mask, random_effector_masks
from training.reports import figures

REFINE_STEPS = 3
LATENCY_SETS = {"2 effectors (hands)": ("l_hand", "r_hand"),
                "5 effectors (hands, feet, head)": ("l_hand", "r_hand", "l_foot", "r_foot",
                                                    "head")}
PROPAGATION_FRAMES = 1000
PROPAGATION_RUNS = 5
PROPAGATION_TARGET_MS = 100.0  # issue 49
PROPAGATION_NULL_MM = 1.0
PROPAGATION_EDITED_MM = 1.0
FIGURE_CASES = 3
MM = 1000.0

METHODS: dict[str, SolveOptions] = {
    "universal": SolveOptions(refine_steps=0),
    f"universal + refinement ({REFINE_STEPS} steps, default options)": SolveOptions(
        refine_steps=REFINE_STEPS),
    "chained specialized (2021 paper)": SolveOptions(solver="chained", refine_steps=0),
    "classic FABRIK": SolveOptions(solver="classic"),
}


def load_clips(data: str | None, bvh: list[str] | None, map_spec: str, units: str,
               max_clips: int, up: str = "auto") -> tuple[list[np.ndarray], str]:
    """Clips (T, 21, 3): the test split of a dataset, or BVH clips in their own proportions
    (``up``: each ``bvh`` entry's up axis, ``auto``: :func:`.data.dataset_up`)."""
    if bvh:
        clips, skipped, turned, why = [], 0, [], ""
        for entry in bvh:
            if len(clips) >= max_clips:
                break
            axis = dataset_up(entry, map_spec, units) if up == "auto" else up
            if axis == "z":
                turned.append(str(entry))
            for source, text in iter_bvh_texts([entry]):
                if len(clips) >= max_clips:
                    break
                try:
                    clips.append(canonical_clip(source, text, map_spec, units, up=axis)[0])
                except ValueError as exc:
                    skipped += 1
                    why = why or f": {exc}"
        if not clips:
            raise ValueError(f"no usable BVH clip in {bvh} ({skipped} skipped{why})")
        return clips, (f"{len(clips)} BVH clips from {', '.join(bvh)} (map {map_spec}"
                       + (f"; Z-up, turned to Y-up: {', '.join(turned)}" if turned else "")
                       + ")")
    pd = PoseData.load(data)
    test = np.flatnonzero(pd.clip_split == 2)[:max_clips]
    clips = [pd.poses[pd.clip == c].astype(np.float64) for c in test]
    return clips, f"{len(clips)} test clips of {data}"


def sample_pairs(clips: list[np.ndarray], n: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(x, x') pairs over all frames of the clips, x' aligned to x."""
    frames = np.concatenate(clips)
    i, j = pair_indices(*clip_bounds([len(c) for c in clips]), n, SOLVER_PAIR_OFFSET, rng)
    return frames[i], align_to(frames[j], frames[i])


def align_to(x2: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x' moved onto x's floor point and facing, as training sees pairs (each pose in its
    own model space): an edit moves the body, not the character's place in the world."""
    model, _ = to_model_space(x2)
    _, frame = to_model_space(x)
    return from_model_space(model, frame, skeleton.bone_lengths(x2))


def accuracy(editor: PoseEditor, x: np.ndarray, x2: np.ndarray, mask: np.ndarray,
             options: SolveOptions) -> tuple[dict[str, float], np.ndarray]:
    out = editor.solve_arrays(x, mask, x2, mask, options=options).positions
    err = np.linalg.norm(out - x2, axis=-1)
    eff = mask > 0
    length_err = np.abs(skeleton.bone_lengths(out) - skeleton.bone_lengths(x))[:, 1:]
    return {"effector_cm": float(err[eff].mean() * CM),
            "effector_median_mm": float(np.median(err[eff]) * MM),
            "non_effector_mpjpe_cm": float(err[~eff].mean() * CM),
            "bone_length_error_max_mm": float(length_err.max() * MM),
            "bone_length_error_mean_mm": float(length_err.mean() * MM)}, out


def latency(editor: PoseEditor, poses: np.ndarray, targets: np.ndarray, joints: tuple[str, ...],
            options: SolveOptions) -> dict[str, float]:
    """Single solves through the add-on's call; each pose a fresh problem."""
    times = np.empty(len(poses))
    for k, (pose, tgt) in enumerate(zip(poses, targets, strict=True)):
        effs = effectors_at(tgt, joints)
        start = time.perf_counter()
        editor.solve(pose, effs, options=options)
        times[k] = time.perf_counter() - start
    return timing(times)


def effectors_at(targets: np.ndarray, joints: tuple[str, ...]) -> list[Effector]:
    """Effectors on ``joints`` with their targets taken from a pose ``targets`` (21, 3)."""
    return [Effector(j, targets[skeleton.JOINT_INDEX[j]]) for j in joints]


def timing(seconds: np.ndarray | list[float]) -> dict[str, float]:
    """Median and p95 of timed calls, in milliseconds."""
    return {"median_ms": float(np.median(seconds) * 1e3),
            "p95_ms": float(np.percentile(seconds, 95) * 1e3)}


def latency_table(editor: PoseEditor, x: np.ndarray, x2: np.ndarray
                  ) -> dict[str, dict[str, dict[str, float]]]:
    """:func:`latency` of every method on each of :data:`LATENCY_SETS`, with its ratio to
    classic FABRIK's median."""
    from tqdm import tqdm

    table = {}
    for set_name, joints in LATENCY_SETS.items():
        table[set_name] = {
            method: latency(editor, x, x2, joints, options)
            for method, options in tqdm(METHODS.items(), desc=f"latency {set_name}", leave=False)}
        base = table[set_name]["classic FABRIK"]["median_ms"]
        for r in table[set_name].values():
            r["ratio_to_fabrik"] = r["median_ms"] / base
    return table


def latency_lines(table: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """:func:`latency_table` as markdown rows, header first."""
    lines = ["| latency, one thread | method | median (ms) | p95 (ms) | x FABRIK |",
             "|---|---|---|---|---|"]
    for set_name, methods in table.items():
        for method, r in methods.items():
            lines.append(f"| {set_name} | {method} | {r['median_ms']:.3f} | {r['p95_ms']:.3f} | "
                         f"{r['ratio_to_fabrik']:.2f} |")
    return lines


def rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def model_memory(models_dir: str) -> dict[str, float]:
    from training.export.jacobian import initializer_count

    before = rss_bytes()
    models = ModelSet(models_dir)
    after = rss_bytes()
    weights = sum(initializer_count((Path(models.folder) / m["file"]).read_bytes()) * 4
                  for m in models.manifest["modules"])
    return {"rss_increase_mb": (after - before) / 2**20, "weights_mb": weights / 2**20,
            "files_mb": sum((Path(models.folder) / m["file"]).stat().st_size
                            for m in models.manifest["modules"]) / 2**20}


def propagation_time(editor: PoseEditor, clips: list[np.ndarray]) -> dict[str, float]:
    """A hand edit and a metric request spread over a 1,000-frame clip: the median time,
    and its quality: a null edit (the hand's effector where the hand is, no request) must
    change no joint by more than :data:`PROPAGATION_NULL_MM`, and the edited frame must be
    its single solve within :data:`PROPAGATION_EDITED_MM`."""
    clip = np.concatenate(clips)
    while len(clip) < PROPAGATION_FRAMES:
        clip = np.concatenate([clip, clip])
    clip = clip[:PROPAGATION_FRAMES]
    center = PROPAGATION_FRAMES // 2
    w = weight_curve(len(clip), center, PROPAGATION_FRAMES / 2, "smooth")
    hand = skeleton.JOINT_INDEX["l_hand"]
    effs = [Effector("l_hand", clip[center, hand] + np.array([0.0, 0.15, 0.1]))]
    metric = next(iter(editor.models.metrics), None)
    metrics = {metric: 5.0} if metric else {}
    times = []
    for _ in range(PROPAGATION_RUNS):
        start = time.perf_counter()
        out = propagate(editor, clip, center, w, effs, metrics)
        times.append(time.perf_counter() - start)
    single = editor.solve(clip[center], effs, metrics).positions[0]
    null = propagate(editor, clip, center, w, [Effector("l_hand", clip[center, hand])])
    return {"frames": PROPAGATION_FRAMES, "median_ms": float(np.median(times) * 1e3),
            "edited_frames": int((w > 0).sum()),
            "solved_frames": min(int((w > 0).sum()), SOLVED_FRAMES),
            "null_max_mm": float(np.linalg.norm(null - clip, axis=-1).max() * 1e3),
            "edited_vs_single_mm": float(np.linalg.norm(out[center] - single, axis=-1).max()
                                         * 1e3)}


def run(models_dir: str, data: str | None = None, bvh: list[str] | None = None,
        map_spec: str = "auto", units: str = "auto", pairs: int = 1000, solves: int = 1000,
        max_clips: int = 400, seed: int = 0, figure: str | None = None, up: str = "auto"
        ) -> dict[str, Any]:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    clips, description = load_clips(data, bvh, map_spec, units, max_clips, up)
    memory = model_memory(models_dir)
    editor = PoseEditor(ModelSet(models_dir))
    result: dict[str, Any] = {"data": description, "pairs": pairs, "models": models_dir,
                              "accuracy": {}, "latency": {}, "memory": memory}
    cases = None
    for set_name, names in tqdm(EFFECTOR_SETS.items(), desc="accuracy", leave=False):
        x, x2 = sample_pairs(clips, pairs, rng)
        mask = random_effector_masks(pairs, rng) if names is None else fixed_mask(names, pairs)
        result["accuracy"][set_name] = {}
        outs = {}
        for method, options in METHODS.items():
            result["accuracy"][set_name][method], outs[method] = accuracy(editor, x, x2, mask,
                                                                          options)
        if names is not None and len(names) == 5:
            cases = (x[:FIGURE_CASES], x2[:FIGURE_CASES], mask[:FIGURE_CASES],
                     {k: v[:FIGURE_CASES] for k, v in outs.items()})
    result["latency"] = latency_table(editor, *sample_pairs(clips, solves, rng))
    result["propagation"] = propagation_time(editor, clips)
    if figure and cases is not None:
        plot_cases(*cases, figure)
        result["figure"] = figure
    return result


def plot_cases(x: np.ndarray, x2: np.ndarray, mask: np.ndarray, outs: dict[str, np.ndarray],
               path: str) -> None:
    """Stick figures, front view: start, classic FABRIK, ours (refined), ground truth."""
    plt = figures.pyplot()

    ours = next(k for k in outs if k.startswith("universal +"))
    columns = [("start pose x", x), ("classic FABRIK", outs["classic FABRIK"]),
               ("ours: " + ours, outs[ours]), ("ground truth x'", x2)]
    facing = facing_yaw(x)
    fig, axes = plt.subplots(len(x), len(columns), figsize=(3.2 * len(columns), 3.4 * len(x)),
                             squeeze=False)
    for r in range(len(x)):
        for c, (title, poses) in enumerate(columns):
            ax = axes[r, c]
            origin = np.array([x[r, 0, 0], 0.0, x[r, 0, 2]])  # front view of the start pose
            p = rotate_y(poses[r] - origin, -facing[r])
            for j in range(1, skeleton.NUM_JOINTS):
                q = p[[skeleton.PARENTS[j], j]]
                ax.plot(q[:, 0], q[:, 1], color="0.25", lw=2)
            t = rotate_y(x2[r, mask[r] > 0] - origin, -facing[r])
            ax.scatter(t[:, 0], t[:, 1], s=40, facecolors="none", edgecolors="crimson", lw=1.5,
                       label="targets")
            ax.set_aspect("equal")
            ax.set_xlim(-1.0, 1.0)
            ax.set_ylim(-0.05, 1.9)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(title, fontsize=9)
    axes[0, 0].legend(loc="lower left", fontsize=7)
    figures.save(fig, path)


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Data: {result['data']}; {result['pairs']} (x, x') pairs per effector set.", "",
             "| effector set | method | effector error (cm) | median (mm) | "
             "non-effector MPJPE (cm) | bone-length error max (mm) |",
             "|---|---|---|---|---|---|"]
    for set_name, methods in result["accuracy"].items():
        for method, r in methods.items():
            lines.append(f"| {set_name} | {method} | {r['effector_cm']:.2f} | "
                         f"{r['effector_median_mm']:.1f} | {r['non_effector_mpjpe_cm']:.2f} | "
                         f"{r['bone_length_error_max_mm']:.1e} |")
    lines += ["", *latency_lines(result["latency"])]
    prop, mem = result["propagation"], result["memory"]
    lines += ["", f"Propagation of a {prop['frames']}-frame clip ({prop['edited_frames']} frames "
              f"edited, {prop.get('solved_frames', prop['edited_frames'])} of them solved): "
              f"**{prop['median_ms']:.1f} ms** median (target < {PROPAGATION_TARGET_MS:.0f}); "
              f"a null edit moves a joint at most {prop.get('null_max_mm', float('nan')):.2g} "
              f"mm (< {PROPAGATION_NULL_MM:.0f}), the edited frame is its single solve within "
              f"{prop.get('edited_vs_single_mm', float('nan')):.2g} mm "
              f"(< {PROPAGATION_EDITED_MM:.0f}).",
              f"Models: {mem['weights_mb']:.2f} MB of weights, {mem['files_mb']:.2f} MB of ONNX "
              f"files, {mem['rss_increase_mb']:.1f} MB resident after loading."]
    return "\n".join(lines) + "\n"
