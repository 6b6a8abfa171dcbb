"""``python -m training benchmark --suite drags``: edits as an animator makes them.

From test poses (or BVH clips in their own proportions), a joint is grabbed and moved
5-40 cm in a random direction, nothing else asked: one hand, both hands, a foot, the head,
the pelvis, and the headline case of the drags issue (one hand, 10-25 cm); each with and
without pins on the other end joints (hands, feet, head). Per method (the network alone,
the default options with refinement, the 2021 paper's chained solvers, classic FABRIK, and
FABRIK kept rig-shaped with the planted feet held):

- reach: distance of each dragged joint to its target (median, p90);
- planted feet: how far the feet that touch the floor in the start pose (and are not
  dragged) slide, ankle and toe (median, p90);
- pelvis drift (median) and the mean displacement of every joint not dragged;
- plausibility: the share of poses with a joint angle outside the training data's
  0.1-99.9 percentile range (:mod:`.plausibility`), and the distance to the learned
  manifold (the autoencoder's residual, median);
- reached where FABRIK reaches: the share of the drags classic FABRIK reaches whose every
  effector (dragged or pinned: a pin moved to reach a drag is not held) is within 1 mm;
- reached where a rig can reach: the same share over the drags classic FABRIK reaches
  that no pose a rig can take rules out (:func:`rig_reachable`: FABRIK meets the others
  by stretching the chest or pelvis, which a rig's one bone each cannot do);
- reached on a rig: the share of drags whose every effector is within 1 mm once a rig
  takes the answer (:func:`on_rig`: its pelvis and chest are rigid bones, fitted as the
  rotation stage does, then the effector limbs re-aimed), since a pose a rig cannot show
  is not what the user sees;
- null edits: the largest joint displacement when effectors sit on their joints.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from blender_addon.core import exact_reach, fabrik, pipeline, reach_bounds, rigid_branches, skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.normalize import to_model_space
from blender_addon.core.pipeline import FOOT_JOINTS, PoseEditor, SolveOptions
from training.evaluation.plausibility import AngleRanges, manifold_distance
from training.reports import figures

CM, MM = 100.0, 1000.0
CASES: dict[str, tuple[tuple[str, ...], tuple[float, float]]] = {
    "one hand, 10-25 cm": (("l_hand",), (0.10, 0.25)),
    "one hand": (("l_hand",), (0.05, 0.40)),
    "both hands": (("l_hand", "r_hand"), (0.05, 0.40)),
    "a foot": (("l_foot",), (0.05, 0.40)),
    "head": (("head",), (0.05, 0.40)),
    "pelvis": (("pelvis",), (0.05, 0.40)),
}
PIN_JOINTS = ("l_hand", "r_hand", "l_foot", "r_foot", "head")
NULL_SETS = {"hands": ("l_hand", "r_hand"), "hands, feet, head": PIN_JOINTS}
METHODS: dict[str, SolveOptions] = {
    "network alone": SolveOptions(refine_steps=0),
    "default (refined)": SolveOptions(),
    "chained specialized (2021 paper)": SolveOptions(solver="chained", refine_steps=0),
    "classic FABRIK": SolveOptions(solver="classic"),
}
FABRIK = "classic FABRIK"
# Classic FABRIK as a rig can take it: the pelvis and chest kept rigid, the planted feet
# held (a pelvis that turns would otherwise carry them along).
RIG_FABRIK = "FABRIK, rig-shaped"
RIG_FABRIK_TOLERANCE = 1e-4  # m


def sample_poses(clips: list[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` poses drawn uniformly over all frames of the clips."""
    frames = np.concatenate(clips)
    return frames[rng.choice(len(frames), size=n)]


def drag_requests(poses: np.ndarray, joints: tuple[str, ...], span: tuple[float, float],
                  pins: bool, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask, targets and the dragged-joint mask of one case: each dragged joint moved by a
    random direction times a uniform length in ``span`` (metres, scaled with the rig)."""
    n = len(poses)
    scale = skeleton.bone_lengths(poses).sum(axis=1) / skeleton.BONE_LENGTHS.sum()
    idx = skeleton.joint_indices(list(joints))
    d = rng.normal(size=(n, len(idx), 3))
    d *= (rng.uniform(*span, (n, len(idx))) * scale[:, None]
          / np.linalg.norm(d, axis=-1))[..., None]
    targets = poses.copy()
    targets[:, idx] += d
    dragged = np.zeros(poses.shape[:2], dtype=bool)
    dragged[:, idx] = True
    mask = dragged.astype(np.float64)
    if pins:
        mask[:, [j for j in skeleton.joint_indices(list(PIN_JOINTS)) if j not in idx]] = 1.0
    return mask, targets, dragged


def planted_feet(poses: np.ndarray) -> np.ndarray:
    """(B, 21) True on the ankle and toe of each foot that touches the floor (the engine's
    own test, in model space)."""
    return pipeline.planted_feet(to_model_space(poses)[0])


REACHED_M = 1e-3  # a target within 1 mm is reached


def free_planted_feet(poses: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """(B, 21) :func:`planted_feet` less every foot with an ankle or toe in ``taken``
    (B, 21): a foot the user moves or pins is the user's."""
    feet = planted_feet(poses)
    for joints in FOOT_JOINTS.values():
        feet[:, joints] &= ~taken[:, joints].any(axis=1, keepdims=True)
    return feet


def rig_shaped_fabrik(x: np.ndarray, mask: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """:data:`RIG_FABRIK`'s answer to a batch of requests."""
    planted = free_planted_feet(x, mask > 0)
    goals = (mask > 0) | planted
    return fabrik.solve(x, goals, np.where(planted[..., None], x, targets),
                        skeleton.bone_lengths(x), fabrik.RIG_SHAPED_ITERATIONS,
                        RIG_FABRIK_TOLERANCE, rig_shaped=True)


def on_rig(out: np.ndarray, x: np.ndarray, mask: np.ndarray, targets: np.ndarray
           ) -> np.ndarray:
    """What a rig shows for an answer: its pelvis and chest, rigid bones, fitted to it as
    the rotation stage does (the start pose's shapes turned as a whole), then the limbs
    above the effectors re-aimed (no FABRIK: the add-on's rotation stage has none)."""
    goals = mask > 0
    shaped = rigid_branches.keep_rigid(out, x, goals[:, skeleton.ROOT])
    return exact_reach.solve(shaped, goals, targets, skeleton.bone_lengths(x),
                             RIG_FABRIK_TOLERANCE, bend_trunk=False)


def rig_reachable(x: np.ndarray, mask: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(B,) the drags whose every dragged target lies within the rig's reach
    (:func:`.reach_bounds.beyond_reach`, to :data:`REACHED_M`) from the other goals: the
    pins and the planted feet the default options hold (their targets are their joints, so
    only the dragged ones can be beyond)."""
    planted = free_planted_feet(x, mask > 0)
    over, _ = reach_bounds.beyond_reach(x, (mask > 0) | planted,
                                        np.where(planted[..., None], x, targets))
    return over.max(axis=1) <= REACHED_M


def reached(out: np.ndarray, targets: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """(B,) every goal joint (B, 21) within :data:`REACHED_M` of its target: the dragged
    joints and the pinned ones (a pin moved to reach a drag is not held)."""
    err = np.where(goals, np.linalg.norm(out - targets, axis=-1), 0.0)
    return err.max(axis=1) < REACHED_M


def measure(models: ModelSet, ranges: AngleRanges, x: np.ndarray, out: np.ndarray,
            mask: np.ndarray, targets: np.ndarray, dragged: np.ndarray,
            fabrik_reached: np.ndarray, possible: np.ndarray) -> dict[str, float]:
    """The figures of one (case, pins, method) cell; ``fabrik_reached`` (B,) marks the poses
    where classic FABRIK reaches every target, ``possible`` (B,) those a rig can reach
    (:func:`rig_reachable`)."""
    moved = np.linalg.norm(out - x, axis=-1)
    reach = np.linalg.norm(out - targets, axis=-1)[dragged]
    ours = reached(out, targets, mask > 0)
    shown = reached(on_rig(out, x, mask, targets), targets, mask > 0)
    feet = free_planted_feet(x, dragged)  # a foot counts when none of it is dragged
    drift = moved[feet] if feet.any() else np.zeros(1)
    pelvis = moved[:, skeleton.ROOT][~dragged[:, skeleton.ROOT]]
    return {
        "reach_median_mm": float(np.median(reach) * MM),
        "reach_p90_mm": float(np.percentile(reach, 90) * MM),
        "reached_pct": float(ours.mean() * 100.0),
        "reached_where_fabrik_reaches_pct": float(ours[fabrik_reached].mean() * 100.0)
        if fabrik_reached.any() else 100.0,
        "reached_where_rig_can_pct": float(ours[fabrik_reached & possible].mean() * 100.0)
        if (fabrik_reached & possible).any() else 100.0,
        "reached_on_rig_pct": float(shown.mean() * 100.0),
        "planted_feet_median_cm": float(np.median(drift) * CM),
        "planted_feet_p90_cm": float(np.percentile(drift, 90) * CM),
        "pelvis_median_cm": float(np.median(pelvis) * CM) if pelvis.size else 0.0,
        "others_mean_cm": float(moved[~dragged].mean() * CM),
        "out_of_range_pct": float(ranges.outside(out).mean() * 100.0),
        "manifold_median_cm": float(np.median(manifold_distance(models, out)) * CM),
    }


def run(models_dir: str, clips: list[np.ndarray], description: str, ranges: AngleRanges,
        n: int = 500, seed: int = 0, figure: str | None = None,
        progress: bool = True) -> dict[str, Any]:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    models = ModelSet(models_dir)
    editor = PoseEditor(models)
    x = sample_poses(clips, n, rng)
    result: dict[str, Any] = {
        "data": description, "poses": n, "seed": seed, "models": models_dir, "cases": {},
        "angles_left_out": ranges.left_out,
        "start_poses": {"out_of_range_pct": float(ranges.outside(x).mean() * 100.0),
                        "manifold_median_cm": float(np.median(manifold_distance(models, x))
                                                    * CM)},
    }
    cells = [(c, p) for c in CASES for p in (False, True)]
    for case, pins in tqdm(cells, desc="drags", disable=not progress, leave=False):
        joints, span = CASES[case]
        mask, targets, dragged = drag_requests(x, joints, span, pins, rng)
        outs = {method: editor.solve_arrays(x, mask, targets, options=options).positions
                for method, options in METHODS.items()}
        outs[RIG_FABRIK] = rig_shaped_fabrik(x, mask, targets)
        fabrik_reached = reached(outs[FABRIK], targets, mask > 0)
        possible = rig_reachable(x, mask, targets)
        row = {method: measure(models, ranges, x, out, mask, targets, dragged,
                               fabrik_reached, possible)
               for method, out in outs.items()}
        result["cases"].setdefault(case, {})["with pins" if pins else "no pins"] = row
        result.setdefault("beyond_rig_pct", {}).setdefault(case, {})[
            "with pins" if pins else "no pins"] = float(
                (fabrik_reached & ~possible).sum() / max(fabrik_reached.sum(), 1) * 100.0)
    result["null_edit_max_mm"] = {}
    for name, joints in NULL_SETS.items():
        mask = np.zeros(x.shape[:2])
        mask[:, skeleton.joint_indices(list(joints))] = 1.0
        result["null_edit_max_mm"][name] = {
            method: float(np.abs(editor.solve_arrays(x, mask, x, options=options).positions
                                 - x).max() * MM)
            for method, options in METHODS.items()}
    result["null_edit_every_pose"] = null_edit_every_pose(editor, clips)
    if figure:
        plot(result, figure)
        result["figure"] = figure
    return result


NULL_CHUNK = 2048  # poses per batch in the every-pose null-edit pass


def null_edit_every_pose(editor: PoseEditor, clips: list[np.ndarray]) -> dict[str, float]:
    """The largest joint displacement (mm), default options, over every frame of the clips,
    for each null-edit effector set."""
    frames = np.concatenate(clips)
    out = {"frames": len(frames)}
    for name, joints in NULL_SETS.items():
        worst = 0.0
        for start in range(0, len(frames), NULL_CHUNK):
            x = frames[start:start + NULL_CHUNK]
            mask = np.zeros(x.shape[:2])
            mask[:, skeleton.joint_indices(list(joints))] = 1.0
            moved = editor.solve_arrays(x, mask, x).positions - x
            worst = max(worst, float(np.abs(moved).max()))
        out[name] = worst * MM
    return out


HEADLINE = "one hand, 10-25 cm"
LABEL_WIDTH = 12  # characters per line of a bar label


def plot(result: dict[str, Any], path: str) -> None:
    """Bars per method for the headline drag: reach, planted-feet slide, other joints."""
    plt = figures.pyplot()

    row = result["cases"][HEADLINE]["no pins"]
    methods = list(row)
    panels = [("hand reach, median (mm)", "reach_median_mm"),
              ("planted feet slide, p90 (cm)", "planted_feet_p90_cm"),
              ("other joints moved, mean (cm)", "others_mean_cm"),
              ("poses with an angle out of range (%)", "out_of_range_pct")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.6))
    colors = ["#8da0cb", "#1b9e77", "#e7298a", "#999999", "#666666"]
    for ax, (title, key) in zip(axes, panels, strict=True):
        values = [row[m][key] for m in methods]
        ax.bar(range(len(methods)), values, color=colors[:len(methods)])
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels([textwrap.fill(m, LABEL_WIDTH) for m in methods], fontsize=7)
        ax.set_title(title, fontsize=9)
        for k, v in enumerate(values):
            ax.text(k, v, f"{v:.2g}", ha="center", va="bottom", fontsize=7)
    fig.suptitle(f"One hand dragged 10-25 cm, nothing else asked ({result['poses']} poses: "
                 f"{result['data']})", fontsize=9)
    figures.save(fig, path)


def markdown(result: dict[str, Any]) -> str:
    start = result["start_poses"]
    lines = [f"Data: {result['data']}; {result['poses']} start poses (seed {result['seed']}); "
             f"start poses out of range: {start['out_of_range_pct']:.1f} %, manifold distance "
             f"{start['manifold_median_cm']:.2f} cm.", "",
             "| drag | pins | method | reach median / p90 (mm) | reached where FABRIK reaches "
             "(%) | reached where a rig can reach (%) | reached on a rig (%) | planted feet "
             "median / p90 (cm) | pelvis (cm) | other joints (cm) | out of range (%) | "
             "manifold (cm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for case, by_pins in result["cases"].items():
        for pins, methods in by_pins.items():
            for method, r in methods.items():
                lines.append(
                    f"| {case} | {pins} | {method} | {r['reach_median_mm']:.2f} / "
                    f"{r['reach_p90_mm']:.1f} | {r['reached_where_fabrik_reaches_pct']:.1f} | "
                    f"{r['reached_where_rig_can_pct']:.1f} | {r['reached_on_rig_pct']:.1f} | "
                    f"{r['planted_feet_median_cm']:.2f} / "
                    f"{r['planted_feet_p90_cm']:.2f} | {r['pelvis_median_cm']:.2f} | "
                    f"{r['others_mean_cm']:.2f} | {r['out_of_range_pct']:.1f} | "
                    f"{r['manifold_median_cm']:.2f} |")
    lines += ["", "| null edit (effectors on their joints) | "
              + " | ".join(next(iter(result["null_edit_max_mm"].values()))) + " |",
              "|---|" + "---|" * len(METHODS)]
    for name, methods in result["null_edit_max_mm"].items():
        lines.append(f"| {name}: largest joint displacement (mm) | "
                     + " | ".join(f"{v:.3g}" for v in methods.values()) + " |")
    return "\n".join(lines) + "\n"


SUMMARY_METHODS = ("network alone", "default (refined)", FABRIK, RIG_FABRIK)


def summary(result: dict[str, Any]) -> str:
    """The summary table: every drag without pins, the network, the default and FABRIK."""
    lines = ["| drag (no pins) | method | reach median (mm) | reached where FABRIK reaches "
             "(%) | reached where a rig can reach (%) | reached on a rig (%) | planted feet p90 "
             "(mm) | pelvis (cm) | other joints (cm) | angles out of range (%) | manifold "
             "(cm) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for case, by_pins in result["cases"].items():
        for method in SUMMARY_METHODS:
            r = by_pins["no pins"][method]
            lines.append(f"| {case} | {method} | {r['reach_median_mm']:.2f} | "
                         f"{r['reached_where_fabrik_reaches_pct']:.0f} | "
                         f"{r['reached_where_rig_can_pct']:.0f} | "
                         f"{r['reached_on_rig_pct']:.0f} | "
                         f"{r['planted_feet_p90_cm'] * 10:.2f} | {r['pelvis_median_cm']:.2f} | "
                         f"{r['others_mean_cm']:.2f} | {r['out_of_range_pct']:.0f} | "
                         f"{r['manifold_median_cm']:.2f} |")
    lines += ["", "| drag, the other hands, feet and head held | FABRIK reaches (%) | of those, "
              "beyond a rig's reach (%) | default: reached where FABRIK reaches (%) | "
              "default: reached where a rig can reach (%) | FABRIK, rig-shaped: reached where "
              "a rig can reach (%) |", "|---|---|---|---|---|---|"]
    for case, by_pins in result["cases"].items():
        r, rig = by_pins["with pins"]["default (refined)"], by_pins["with pins"][RIG_FABRIK]
        lines.append(f"| {case} | {by_pins['with pins'][FABRIK]['reached_pct']:.0f} | "
                     f"{result['beyond_rig_pct'][case]['with pins']:.0f} | "
                     f"{r['reached_where_fabrik_reaches_pct']:.0f} | "
                     f"{r['reached_where_rig_can_pct']:.0f} | "
                     f"{rig['reached_where_rig_can_pct']:.0f} |")
    every = result["null_edit_every_pose"]
    lines += ["", f"{result['poses']} start poses ({result['data']}); start poses with an "
              f"angle out of range: {result['start_poses']['out_of_range_pct']:.1f} % (angles "
              f"that barely vary in the training data left out: "
              f"{', '.join(result['angles_left_out']) or 'none'}). "
              f"Null edit (effectors on their joints, default options) over all "
              f"{every['frames']:,} frames: largest joint displacement "
              + ", ".join(f"{k} {every[k]:.2g} mm" for k in NULL_SETS) + "."]
    return "\n".join(lines) + "\n"
