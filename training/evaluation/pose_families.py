"""``python -m training benchmark --suite families``: drags on poses the mocap hardly holds.

Bodies lying on the back, side or front, upside down, kneeling, crouching, sitting on the
floor and with hands on the floor, taken from the CMU clips whose index names such motions
(:data:`FAMILY_CLIPS`; their frames sorted into families by :func:`classify`, the floor at
height 0). In each family, one hand (the one off the floor, else the higher) is dragged
10-25 cm in a random direction (kept above the floor), nothing else asked, as in the drag
suite's headline case; per method:

- reach: the dragged hand's distance to its target (median, mm);
- contacts: how far the joints touching the floor in the start pose slide (p90, mm): the
  planted feet (the engine's own test) and the hands and knees on the floor, the dragged
  hand excepted;
- pelvis (median, cm) and the mean displacement of every joint not dragged (cm), and
  that as a multiple of classic FABRIK's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.bvh import iter_bvh_texts
from blender_addon.core.models import ModelSet
from blender_addon.core.pipeline import PoseEditor, SolveOptions
from training.evaluation.drags import free_planted_feet

CM, MM = 100.0, 1000.0
# CMU subjects whose index (cmu-mocap-index-spreadsheet.xls in the archive) names such
# motions: 14 and 22/23 squats and kneeling, 49 and 144 cartwheels, 69 squatting to pick
# up, 77 searching the ground and lying down, 82 sitting on the ground, 85/88/89/90
# handstands and flips, 111 crawling, lying down, getting up and rolling over, 113 and 114
# lying down and getting up, 133 crawling, 136 crouched walks, 140 getting up from lying on
# the back, side and front.
FAMILY_SUBJECTS = ("14", "22", "23", "49", "69", "77", "82", "85", "88", "89", "90", "111",
                   "113", "114", "133", "136", "140", "144")
FAMILIES = ("lying on the back", "lying on the side", "lying on the front", "upside down",
            "kneeling", "crouching", "sitting on the floor", "hands on the floor")
# Frame classification (metres, Y up, the floor at 0; the trunk is pelvis -> neck):
UPSIDE_DOWN_COS = -0.5  # the trunk pointing down at least this much ...
HEAD_BELOW_M = 0.2  # ... and the head this far below the pelvis
LYING_COS = 0.5  # a trunk within 60 degrees of horizontal ...
LYING_PELVIS_M, LYING_CHEST_M = 0.30, 0.35  # ... low over the floor
FACING_COS = 0.6  # chest facing up (back) or down (front); else the hips across (side)
SITTING_PELVIS_M = 0.25  # a pelvis this low under an upright trunk
UPRIGHT_COS = 0.5
CONTACT_M = 0.12  # a hand or knee joint this low touches the floor
CROUCH_PELVIS_M, CROUCH_KNEE_M, CROUCH_ANKLE_M = 0.50, 0.25, 0.15
CROUCH_UPRIGHT_COS = 0.3
DRAG_SPAN = (0.10, 0.25)  # m, scaled with the rig, as the drag suite's headline
ABOVE_FLOOR_M = 0.05  # a drag target lower than this is mirrored up
METHODS: dict[str, SolveOptions] = {
    "network alone": SolveOptions(refine_steps=0),
    "default (refined)": SolveOptions(),
    "classic FABRIK": SolveOptions(solver="classic"),
}
FABRIK = "classic FABRIK"
DEFAULT = "default (refined)"
_J = skeleton.JOINT_INDEX
_HANDS = np.array([_J["l_hand"], _J["r_hand"]])
_KNEES = np.array([_J["l_shin"], _J["r_shin"]])
_TRIAL = re.compile(r"(\d+)_\d+\.bvh$")


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-9)


def classify(poses: np.ndarray) -> np.ndarray:
    """(T,) each pose's family name, or '' (poses (T, 21, 3), metres, Y up, floor at 0);
    the first family whose test a pose passes, in the order below."""
    y = poses[..., 1]
    up = _unit(poses[:, _J["neck"]] - poses[:, _J["pelvis"]])
    across = _unit(poses[:, _J["l_thigh"]] - poses[:, _J["r_thigh"]]
                   + poses[:, _J["l_upperarm"]] - poses[:, _J["r_upperarm"]])
    facing = _unit(np.cross(across, up))  # a body facing +Z with its left at +X: +Z
    pelvis = y[:, _J["pelvis"]]
    hands, knees = y[:, _HANDS].min(axis=1), y[:, _KNEES].min(axis=1)
    ankles = y[:, [_J["l_foot"], _J["r_foot"]]].min(axis=1)
    lying = (np.abs(up[:, 1]) < LYING_COS) & (pelvis < LYING_PELVIS_M) \
        & (y[:, _J["chest"]] < LYING_CHEST_M)
    upright = up[:, 1] > UPRIGHT_COS
    tests = (
        ("upside down", (up[:, 1] < UPSIDE_DOWN_COS) & (y[:, _J["head"]] < pelvis - HEAD_BELOW_M)),
        ("lying on the back", lying & (facing[:, 1] > FACING_COS)),
        ("lying on the front", lying & (facing[:, 1] < -FACING_COS)),
        ("lying on the side", lying & (np.abs(across[:, 1]) > FACING_COS)),
        ("sitting on the floor", (pelvis < SITTING_PELVIS_M) & upright),
        ("hands on the floor", (hands < CONTACT_M) & (up[:, 1] > UPSIDE_DOWN_COS)),
        ("kneeling", (knees < CONTACT_M) & upright),
        ("crouching", (pelvis < CROUCH_PELVIS_M) & (ankles < CROUCH_ANKLE_M)
         & (knees > CROUCH_KNEE_M) & (up[:, 1] > CROUCH_UPRIGHT_COS)),
    )
    out = np.full(len(poses), "", dtype=object)
    for name, passed in tests:
        out[(out == "") & passed] = name
    return out


def load_clips(paths: Iterable[str], map_spec: str = "auto", units: str = "auto"
               ) -> dict[str, np.ndarray]:
    """The clips of :data:`FAMILY_SUBJECTS` among the BVH files, folders or archives, by
    trial name (others are not parsed)."""
    from training.data.dataset import canonical_clip

    clips = {}
    for source, text in iter_bvh_texts(list(paths)):
        m = _TRIAL.search(source)
        if m and m.group(1).lstrip("0") in {s.lstrip("0") for s in FAMILY_SUBJECTS}:
            name = source.rsplit("/", 1)[-1][:-4]
            clips[name] = canonical_clip(source, text, map_spec, units)[0]
    if not clips:
        raise ValueError(f"no clip of CMU subjects {', '.join(FAMILY_SUBJECTS)} in {paths}")
    return clips


def family_poses(clips: dict[str, np.ndarray], n: int, rng: np.random.Generator
                 ) -> dict[str, tuple[np.ndarray, int]]:
    """Per family: up to ``n`` of its poses drawn without replacement over every clip's
    frames, and how many clips it has frames in."""
    frames = np.concatenate(list(clips.values()))
    owner = np.repeat(np.arange(len(clips)), [len(c) for c in clips.values()])
    labels = classify(frames)
    out = {}
    for family in FAMILIES:
        idx = np.flatnonzero(labels == family)
        if idx.size:
            pick = np.sort(rng.choice(idx, size=min(n, idx.size), replace=False))
            out[family] = (frames[pick], len(np.unique(owner[idx])))
    return out


def contacts(poses: np.ndarray, dragged: np.ndarray) -> np.ndarray:
    """(B, 21) the joints touching the floor in the start poses: the planted feet (the
    engine's test) and the hands and knees on the floor, less the ``dragged`` ones."""
    touch = free_planted_feet(poses, dragged)
    for joints in (_HANDS, _KNEES):
        touch[:, joints] |= poses[:, joints, 1] < CONTACT_M
    return touch & ~dragged


def hand_drags(poses: np.ndarray, rng: np.random.Generator
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask, targets and dragged-joint mask: the hand off the floor (else the higher one)
    moved :data:`DRAG_SPAN` (scaled with the rig) in a random direction, a target under
    :data:`ABOVE_FLOOR_M` mirrored up."""
    n = len(poses)
    hand = _HANDS[np.argmax(poses[:, _HANDS, 1], axis=1)]
    scale = skeleton.bone_lengths(poses).sum(axis=1) / skeleton.BONE_LENGTHS.sum()
    d = rng.normal(size=(n, 3))
    d *= (rng.uniform(*DRAG_SPAN, n) * scale / np.linalg.norm(d, axis=-1))[:, None]
    targets = poses.copy()
    rows = np.arange(n)
    goal = poses[rows, hand] + d
    low = goal[:, 1] < ABOVE_FLOOR_M
    goal[low, 1] = poses[rows[low], hand[low], 1] - d[low, 1]
    targets[rows, hand] = goal
    dragged = np.zeros(poses.shape[:2], dtype=bool)
    dragged[rows, hand] = True
    return dragged.astype(np.float64), targets, dragged


def measure(x: np.ndarray, out: np.ndarray, targets: np.ndarray, dragged: np.ndarray
            ) -> dict[str, float]:
    moved = np.linalg.norm(out - x, axis=-1)
    touch = contacts(x, dragged)
    slide = moved[touch] if touch.any() else np.zeros(1)
    return {
        "reach_median_mm": float(np.median(np.linalg.norm(out - targets, axis=-1)[dragged])
                                 * MM),
        "contacts_p90_mm": float(np.percentile(slide, 90) * MM),
        "contacts_per_pose": float(touch.sum() / len(x)),
        "pelvis_median_cm": float(np.median(moved[:, skeleton.ROOT]) * CM),
        "others_mean_cm": float(moved[~dragged].mean() * CM),
    }


def run(models_dir: str, paths: list[str], n: int = 100, seed: int = 0,
        map_spec: str = "auto", units: str = "auto", progress: bool = True
        ) -> dict[str, Any]:
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    clips = load_clips(paths, map_spec, units)
    editor = PoseEditor(ModelSet(models_dir))
    result: dict[str, Any] = {
        "data": f"{len(clips)} clips of CMU subjects {', '.join(FAMILY_SUBJECTS)} from "
                f"{', '.join(paths)}", "poses_per_family": n, "seed": seed,
        "models": models_dir, "families": {}}
    picked = family_poses(clips, n, rng)
    if not picked:
        raise ValueError(f"no pose of any family ({', '.join(FAMILIES)}) in {len(clips)} "
                         f"clips of {', '.join(paths)}")
    for family, (x, clip_count) in tqdm(picked.items(), desc="families", disable=not progress,
                                        leave=False):
        mask, targets, dragged = hand_drags(x, rng)
        rows = {method: measure(x, editor.solve_arrays(x, mask, targets,
                                                       options=options).positions,
                                targets, dragged)
                for method, options in METHODS.items()}
        base = rows[FABRIK]["others_mean_cm"]
        for r in rows.values():
            r["others_x_fabrik"] = r["others_mean_cm"] / base
        result["families"][family] = {"poses": len(x), "clips": clip_count, "methods": rows}
    ratios = [f["methods"][DEFAULT]["others_x_fabrik"] for f in result["families"].values()]
    result["default_others_x_fabrik_mean"] = float(np.mean(ratios))
    result["default_others_x_fabrik_max"] = float(np.max(ratios))
    result["default_contacts_p90_mm_max"] = float(max(
        f["methods"][DEFAULT]["contacts_p90_mm"] for f in result["families"].values()))
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = ["| family | poses (clips) | method | reach median (mm) | contacts p90 (mm) | "
             "pelvis median (cm) | other joints (cm) | x FABRIK |",
             "|---|---|---|---|---|---|---|---|"]
    for family, f in result["families"].items():
        for method, r in f["methods"].items():
            lines.append(f"| {family} | {f['poses']} ({f['clips']}) | {method} | "
                         f"{r['reach_median_mm']:.2f} | {r['contacts_p90_mm']:.2f} | "
                         f"{r['pelvis_median_cm']:.2f} | {r['others_mean_cm']:.2f} | "
                         f"{r['others_x_fabrik']:.2f} |")
    lines += ["", f"Default options: other joints {result['default_others_x_fabrik_mean']:.2f}x "
              f"classic FABRIK's on average over the families, "
              f"{result['default_others_x_fabrik_max']:.2f}x at most; contacts p90 at most "
              f"{result['default_contacts_p90_mm_max']:.2f} mm. Data: {result['data']}; one "
              f"hand dragged {DRAG_SPAN[0] * CM:.0f}-{DRAG_SPAN[1] * CM:.0f} cm from up to "
              f"{result['poses_per_family']} poses per family (seed {result['seed']})."]
    return "\n".join(lines) + "\n"
