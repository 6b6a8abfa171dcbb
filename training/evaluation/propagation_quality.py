"""``python -m training benchmark --suite propagation``: a propagated edit, seen as motion.

An animator moves the left hand 10-25 cm at the middle frame of a shot and propagates it
over a smooth curve of radius 40 frames, with the hand alone, both hands or every end
(hands, feet, head) as effectors; the others hold where the motion has them. What they
see is the motion, so per clip the result is judged on:

- pops: the largest joint acceleration (mm/frame², second difference of positions) over
  the clip, against the clip's own; and the same at the edited frame (the frame they look
  at most: its own solve, while its neighbours are propagated);
- the goals: frames x goals left more than 1 mm off the W(t) path;
- plausibility: propagated frames with a joint angle outside the training data's
  0.1-99.9 percentile range (:mod:`.plausibility`);
- foot skating: how far a planted foot (its toe low and still in the clip) slides per
  frame over the spread range, against the clip's own (issue 49: at most 1 mm more);
- pops against the clip: the largest acceleration over the clip's own (at most 1.1x);
- the hand's share at W = 0.5: its change at the frames where W(t) is nearest 0.5 (body
  space), projected on its change at the edited frame (issue 49: 0.45-0.55).

Each frame kept as solved (``propagate(smooth=False)``) against the default (the frames'
changes smoothed over time, then settled on their targets).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.models import ModelSet
from blender_addon.core.normalize import facing_yaw, rotate_y
from blender_addon.core.pipeline import Effector, PoseEditor
from blender_addon.core.propagate import left_short, propagate, weight_curve
from training.evaluation.drags import PIN_JOINTS
from training.evaluation.plausibility import AngleRanges
from training.reports import figures

MM = 1000.0
MOVED = "l_hand"
SPAN = (0.10, 0.25)  # m, the hand's move at the edited frame
RADIUS = 40  # frames, smooth curve
WINDOW = 120  # frames of each clip (the edited frame in its middle)
MISS_M = 1e-3
POP_FACTOR = 2.0  # a clip "pops" where its largest acceleration is over twice its own
# A foot is planted where its toe is within this height of the clip's lowest toe and moves
# less than PLANTED_SPEED_M a frame along the floor in the clip (metres).
PLANTED_HEIGHT_M = 0.05
PLANTED_SPEED_M = 0.01
TOES = skeleton.joint_indices(["l_toe", "r_toe"])
# Issue 49's bounds on the default method: skating at most the clip's own + 1 mm a frame,
# the largest acceleration at most 1.1x the clip's own, the hand's share at W = 0.5.
SKATE_MARGIN_MM = 1.0
POP_MARGIN = 1.10
HALF_SHARE = (0.45, 0.55)
CASES: dict[str, tuple[str, ...]] = {
    "left hand": (MOVED,),
    "both hands": ("l_hand", "r_hand"),
    "hands, feet, head": PIN_JOINTS,
}
METHODS = {"each frame as solved": False, "smoothed (default)": True}
DEFAULT = "smoothed (default)"


def accelerations(clip: np.ndarray) -> np.ndarray:
    """(T - 2,) the largest joint acceleration (m/frame²) centred on frames 1..T-2."""
    return np.linalg.norm(clip[2:] - 2.0 * clip[1:-1] + clip[:-2], axis=-1).max(axis=1)


def skating(clip: np.ndarray, planted: np.ndarray) -> float:
    """Mean slide along the floor (m/frame) of the toes between consecutive frames where
    both are ``planted`` (T, 2); NaN where a foot is never planted twice in a row."""
    step = np.linalg.norm((clip[1:, TOES] - clip[:-1, TOES])[..., [0, 2]], axis=-1)
    both = planted[1:] & planted[:-1]
    return float(step[both].mean()) if both.any() else float("nan")


def planted_feet(clip: np.ndarray) -> np.ndarray:
    """(T, 2) where each toe is planted in ``clip``: low and still along the floor."""
    toes = clip[:, TOES]
    low = toes[..., 1] < toes[..., 1].min() + PLANTED_HEIGHT_M
    slide = np.linalg.norm(np.diff(toes[..., [0, 2]], axis=0), axis=-1)
    still = np.r_[slide[:1], slide] < PLANTED_SPEED_M
    return low & still


def half_share(clip: np.ndarray, out: np.ndarray, frame: int, w: np.ndarray) -> float:
    """The moved hand's change at the frames where W is nearest 0.5 (one each side), in
    body space, projected on its change at ``frame``: the share of the edit it carries."""
    hand = skeleton.JOINT_INDEX[MOVED]
    change = rotate_y(out[:, hand] - clip[:, hand], -facing_yaw(clip))
    full = change[frame]
    t = np.arange(len(w))
    shares = []
    for side in (t < frame, t > frame):
        k = np.flatnonzero(side)[np.argmin(np.abs(w[side] - 0.5))]
        shares.append(float(change[k] @ full / (full @ full)))
    return float(np.mean(shares))


def goal_path(clip: np.ndarray, frame: int, w: np.ndarray, effectors: list[Effector],
              out: np.ndarray) -> np.ndarray:
    """(T, E, 3) each effector's goal per frame, as propagation makes it: the offset made at
    ``frame``, in body space, times W(t); for a goal beyond the rig's reach there, the move
    the edited frame made (``out``, the propagated clip; :func:`.propagate.left_short`)."""
    idx = skeleton.joint_indices([e.joint for e in effectors])
    targets = clip[frame].copy()
    targets[idx] = np.stack([e.target for e in effectors])
    reached = np.where(left_short(clip[frame], out[frame], targets)[:, None], out[frame],
                       targets)
    offset = rotate_y(reached[None, idx] - clip[frame:frame + 1, idx],
                      -facing_yaw(clip[frame:frame + 1]))
    return clip[:, idx] + rotate_y(offset * w[:, None, None], facing_yaw(clip))


def hand_moves(count: int, seed: int) -> np.ndarray:
    """(count, 3) the suite's moves of the left hand, one per clip: random directions,
    lengths in :data:`SPAN`."""
    rng = np.random.default_rng(seed)
    moves = rng.normal(size=(count, 3))
    return moves * (rng.uniform(*SPAN, size=(count, 1))
                    / np.linalg.norm(moves, axis=1, keepdims=True))


def drag(clip: np.ndarray, frame: int, joints: tuple[str, ...], move: np.ndarray
         ) -> list[Effector]:
    """The effectors on ``joints`` at ``frame``: the left hand moved by ``move``, the others
    holding."""
    return [Effector(j, clip[frame, skeleton.JOINT_INDEX[j]] + (move if j == MOVED else 0))
            for j in joints]


def edit_one(editor: PoseEditor, clip: np.ndarray, joints: tuple[str, ...], move: np.ndarray,
             ranges: AngleRanges, smooth: bool) -> dict[str, float]:
    """Propagate one drag of the left hand over ``clip``; its figures."""
    frame = len(clip) // 2
    w = weight_curve(len(clip), frame, RADIUS)
    effectors = drag(clip, frame, joints, move)
    start = time.perf_counter()
    out = propagate(editor, clip, frame, w, effectors, smooth=smooth)
    seconds = time.perf_counter() - start
    acc, own = accelerations(out), accelerations(clip)
    live = w > 0
    planted = planted_feet(clip) & live[:, None]
    idx = skeleton.joint_indices(list(joints))
    miss = np.linalg.norm(out[:, idx] - goal_path(clip, frame, w, effectors, out), axis=-1)[live]
    return {"acc_mm": float(acc.max() * MM), "own_acc_mm": float(own.max() * MM),
            # second differences centred on the edited frame and its two neighbours
            "edited_acc_mm": float(acc[frame - 2:frame + 1].max() * MM),
            "misses": int((miss > MISS_M).sum()), "goals": int(miss.size),
            "out_of_range": int(ranges.outside(out[live]).sum()),
            "own_out_of_range": int(ranges.outside(clip[live]).sum()),
            "frames": int(live.sum()), "seconds": seconds,
            "skate_mm": skating(out, planted) * MM, "own_skate_mm": skating(clip, planted) * MM,
            "pop_ratio": float(acc.max() / own.max()),
            "half_share": half_share(clip, out, frame, w)}


def usable(clips: list[np.ndarray], n: int) -> list[np.ndarray]:
    """The first ``n`` clips long enough for the curve, cut to :data:`WINDOW` frames."""
    long = [c[:WINDOW].astype(np.float64) for c in clips if len(c) >= WINDOW]
    if not long:
        raise ValueError(f"no clip has the {WINDOW} frames a propagated edit is judged on")
    return long[:n]


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    acc = np.array([r["acc_mm"] for r in rows])
    own = np.array([r["own_acc_mm"] for r in rows])
    edited = np.array([r["edited_acc_mm"] for r in rows])
    total = {k: int(sum(r[k] for r in rows))
             for k in ("misses", "goals", "out_of_range", "own_out_of_range", "frames")}
    skate = np.array([r["skate_mm"] for r in rows])
    own_skate = np.array([r["own_skate_mm"] for r in rows])
    extra = skate - own_skate
    ratios = np.array([r["pop_ratio"] for r in rows])
    shares = np.array([r["half_share"] for r in rows])
    quality = {"skate_median_mm": float(np.nanmedian(skate)),
               "own_skate_median_mm": float(np.nanmedian(own_skate)),
               "skate_extra_worst_mm": float(np.nanmax(extra)),
               "skating_clips_over": int((extra > SKATE_MARGIN_MM).sum()),
               "pop_ratio_median": float(np.median(ratios)),
               "pop_ratio_worst": float(ratios.max()),
               "popping_clips_over_margin": int((ratios > POP_MARGIN).sum()),
               "half_share_median": float(np.median(shares)),
               "half_share_min": float(shares.min()), "half_share_max": float(shares.max())}
    return {**quality,
            "acc_median_mm": float(np.median(acc)), "acc_worst_mm": float(acc.max()),
            "own_acc_median_mm": float(np.median(own)),
            "popping_clips": int((acc > POP_FACTOR * own).sum()),
            "edited_acc_median_mm": float(np.median(edited)),
            "edited_acc_worst_mm": float(edited.max()), **total,
            "seconds_per_clip": float(np.median([r["seconds"] for r in rows]))}


def run(models_dir: str, clips: list[np.ndarray], description: str, ranges: AngleRanges,
        n: int = 20, seed: int = 0, figure: str | None = None) -> dict[str, Any]:
    from tqdm import tqdm

    editor = PoseEditor(ModelSet(models_dir))
    chosen = usable(clips, n)
    moves = hand_moves(len(chosen), seed)
    cases: dict[str, dict[str, Any]] = {}
    with tqdm(total=len(CASES) * len(METHODS) * len(chosen), desc="propagation",
              unit="edit") as bar:
        for case, joints in CASES.items():
            cases[case] = {}
            for method, smooth in METHODS.items():
                rows = []
                for clip, move in zip(chosen, moves, strict=True):
                    rows.append(edit_one(editor, clip, joints, move, ranges, smooth))
                    bar.update()
                cases[case][method] = summarize(rows)
    result = {"suite": "propagation", "data": description, "models": models_dir,
              "clips": len(chosen), "window": WINDOW, "radius": RADIUS, "seed": seed,
              "span_cm": [s * 100 for s in SPAN], "cases": cases}
    if figure:
        plot(result, figure)
        result["figure"] = figure
    return result


def plot(result: dict[str, Any], path: str) -> None:
    """Per effector set: the largest acceleration (median and worst clip) and at the edited
    frame, per method, against the clips' own."""
    plt = figures.pyplot()

    cases = result["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 3.6), sharey=True)
    keys = [("largest, median", "acc_median_mm"), ("at the edited frame, median",
                                                   "edited_acc_median_mm")]
    colors = ["#999999", "#1b9e77"]
    for ax, (case, methods) in zip(np.atleast_1d(axes), cases.items(), strict=True):
        x = np.arange(len(keys))
        for k, (method, row) in enumerate(methods.items()):
            values = [row[key] for _, key in keys]
            ax.bar(x + (k - 0.5) * 0.38, values, 0.38, color=colors[k % 2], label=method)
            for xi, v in zip(x, values, strict=True):
                ax.text(xi + (k - 0.5) * 0.38, v, f"{v:.0f}", ha="center", va="bottom",
                        fontsize=7)
        own = next(iter(methods.values()))["own_acc_median_mm"]
        ax.axhline(own, color="#444444", lw=0.8, ls="--", label="the clips' own largest")
        ax.set_xticks(x)
        ax.set_xticklabels([k for k, _ in keys], fontsize=8)
        ax.set_title(case, fontsize=9)
    np.atleast_1d(axes)[0].set_ylabel("joint acceleration (mm/frame²)")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(f"Left hand moved 10-25 cm and propagated over ±{result['radius']} frames "
                 f"({result['clips']} clips: {result['data']})", fontsize=9)
    figures.save(fig, path)


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Data: {result['data']} ({result['clips']} clips of {result['window']} frames); "
             f"models `{result['models']}`. The left hand moved "
             f"{result['span_cm'][0]:.0f}-{result['span_cm'][1]:.0f} cm at the middle frame, "
             f"smooth curve of radius {result['radius']}; the other effectors hold.", "",
             "| effectors | method | largest acceleration, median (worst) mm/frame² | at the "
             "edited frame, median (worst) | clips over 2x their own | goals > 1 mm off | "
             "frames with an angle out of range |",
             "|---|---|---|---|---|---|---|"]
    for case, methods in result["cases"].items():
        for method, r in methods.items():
            lines.append(
                f"| {case} | {method} | {r['acc_median_mm']:.1f} ({r['acc_worst_mm']:.0f}) | "
                f"{r['edited_acc_median_mm']:.1f} ({r['edited_acc_worst_mm']:.0f}) | "
                f"{r['popping_clips']} | {r['misses']} of {r['goals']:,} | "
                f"{r['out_of_range']} of {r['frames']:,} |")
    lo, hi = HALF_SHARE
    lines += ["", "Issue 49's bounds (foot skating at most the clip's own + "
              f"{SKATE_MARGIN_MM:.0f} mm/frame, largest acceleration at most "
              f"{POP_MARGIN:.2f}x the clip's own, the hand's share at W = 0.5 in "
              f"{lo:.2f}-{hi:.2f}):", "",
              "| effectors | method | planted-foot skating, median mm/frame (clips' own) | "
              "worst extra skating mm/frame | clips over +1 mm | largest acceleration / "
              "own, median (worst) | clips over 1.1x | hand share at W = 0.5, median "
              "(range) |", "|---|---|---|---|---|---|---|---|"]
    for case, methods in result["cases"].items():
        for method, r in methods.items():
            if "skate_median_mm" not in r:
                continue
            lines.append(
                f"| {case} | {method} | {r['skate_median_mm']:.2f} "
                f"({r['own_skate_median_mm']:.2f}) | {r['skate_extra_worst_mm']:.2f} | "
                f"{r['skating_clips_over']} | {r['pop_ratio_median']:.2f} "
                f"({r['pop_ratio_worst']:.2f}) | {r['popping_clips_over_margin']} | "
                f"{r['half_share_median']:.2f} ({r['half_share_min']:.2f}-"
                f"{r['half_share_max']:.2f}) |")
    first = next(iter(next(iter(result["cases"].values())).values()))
    lines += ["", f"The clips themselves: largest acceleration {first['own_acc_median_mm']:.1f}"
              f" mm/frame² (median); {first['own_out_of_range']} of {first['frames']:,} frames "
              "with an angle out of range."]
    return "\n".join(lines) + "\n"
