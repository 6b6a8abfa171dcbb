"""Inside bpy: accuracy against Blender's own IK constraints (Legacy IK, iTaSC) on (x, x')
pairs of test clips, beside the add-on's Solve on the same targets."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import (
    mapped_rig,
)
from blender_addon.core.skeleton import JOINT_INDEX, JOINTS
from training.blender_side import host
from training.blender_side.bench_measure import CM, MM, summary
from training.blender_side.bench_rig import (
    DEFAULT_REFINE,
    EFFECTORS,
    effector_empty,
    run_op,
    setup_rig,
    world_heads,
)

PAIR_OFFSET = 20  # frames between x and x', as in the engine benchmark
# Blender IK chains: joint -> the joint whose bone is the chain's last (topmost) bone.
IK_CHAIN_TOP = {"l_hand": "l_clavicle", "r_hand": "r_clavicle", "l_foot": "l_thigh",
                "r_foot": "r_thigh", "head": "spine"}
TAIL_ATOL = 1e-4  # m: a parent bone's tail counts as at its child's head


def clip_heads(scene: bpy.types.Scene, obj: bpy.types.Object, frames: Sequence[int]
               ) -> dict[int, np.ndarray]:
    """Ground truth: the action's world joints at each frame."""
    out = {}
    for f in frames:
        scene.frame_set(int(f))
        out[int(f)] = world_heads(obj)
    return out


def sample_pairs(first: int, last: int, n: int, rng: np.random.Generator
                 ) -> list[tuple[int, int]]:
    i = rng.integers(first, last + 1, n)
    j = np.clip(i + rng.integers(-PAIR_OFFSET, PAIR_OFFSET + 1, n), first, last)
    return list(zip(i.tolist(), j.tolist(), strict=True))


def align(pose: np.ndarray, to: np.ndarray) -> np.ndarray:
    """``pose`` (21, 3, world, Z up) moved onto ``to``'s ground point (the pelvis on the
    floor) and turned to its facing (the hips' left-right line), heights kept: x' as the
    engine benchmark's model space sees it, a change of pose rather than a walk."""
    def frame(p: np.ndarray) -> tuple[np.ndarray, float]:
        left = p[JOINT_INDEX["l_thigh"]] - p[JOINT_INDEX["r_thigh"]]
        ground = p[JOINT_INDEX["pelvis"]] * np.array([1.0, 1.0, 0.0])
        return ground, math.atan2(left[1], left[0])

    (o_from, yaw_from), (o_to, yaw_to) = frame(pose), frame(to)
    c, s = math.cos(yaw_to - yaw_from), math.sin(yaw_to - yaw_from)
    turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return (pose - o_from) @ turn.T + o_to


def errors(heads: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-effector distances and per-other-joint distances (m) of one solved pose."""
    eff = [JOINT_INDEX[j] for j in EFFECTORS]
    rest = [k for k in range(len(JOINTS)) if k not in eff]
    d = np.linalg.norm(heads - truth, axis=1)
    return d[eff], d[rest]


def addon_solves(scene: bpy.types.Scene, obj: bpy.types.Object, pairs: list[tuple[int, int]],
                 truth: dict[int, np.ndarray], refine: int) -> dict[str, list]:
    """The add-on's Solve on each pair: the rig at x, the empties at x' joints (aligned)."""
    obj.npe.refine_steps = refine
    view_layer = bpy.context.view_layer
    out: dict[str, list] = {"eff": [], "rest": [], "times": []}
    for i, j in pairs:
        scene.frame_set(i)
        goal = align(truth[j], truth[i])
        for joint in EFFECTORS:
            effector_empty(obj, joint).location = goal[JOINT_INDEX[joint]]
        view_layer.update()
        start = time.perf_counter()
        run_op(bpy.ops.npe.solve)
        view_layer.update()
        out["times"].append(time.perf_counter() - start)
        eff, rest = errors(world_heads(obj), goal)
        out["eff"].append(eff)
        out["rest"].append(rest)
    return out


def ik_chains(obj: bpy.types.Object) -> list[tuple[str, str, int, bool, str]]:
    """Per effector: (joint, bone carrying the IK constraint, chain_count, use_tail,
    top bone). The constraint sits on the bone whose tail is the joint when there is one
    (the parent, if connected at the joint), else on the joint's bone with use_tail off."""
    joints = mapped_rig.mapping_dict(obj.data)
    bones = obj.data.bones
    chains = []
    for joint in EFFECTORS:
        bone = bones[joints[joint]]
        top = joints[IK_CHAIN_TOP[joint]]
        parent = bone.parent
        tail_at_joint = parent is not None and (parent.tail_local - bone.head_local).length \
            < TAIL_ATOL / max(obj.matrix_world.to_scale()[0], 1e-9)
        owner = parent if tail_at_joint else bone
        count, b = 1, owner
        while b.name != top:
            b = b.parent
            if b is None:
                raise RuntimeError(f"{top} is not above {owner.name}")
            count += 1
        chains.append((joint, owner.name, count, tail_at_joint, top))
    return chains


def blender_ik(scene: bpy.types.Scene, obj: bpy.types.Object, pairs: list[tuple[int, int]],
               truth: dict[int, np.ndarray], solver: str) -> tuple[dict[str, list], list]:
    """Blender's IK constraints (default settings) to five target empties on each pair."""
    obj.pose.ik_solver = solver
    chains = ik_chains(obj)
    targets, constraints = {}, []
    for joint, owner, count, use_tail, _top in chains:
        target = bpy.data.objects.new(f"IK target {joint}", None)
        scene.collection.objects.link(target)
        con = obj.pose.bones[owner].constraints.new("IK")
        con.target = target
        con.chain_count = count
        con.use_tail = use_tail
        targets[joint] = target
        constraints.append((owner, con))
    view_layer = bpy.context.view_layer
    out: dict[str, list] = {"eff": [], "rest": [], "times": []}
    try:
        for i, j in pairs:
            scene.frame_set(i)
            goal = align(truth[j], truth[i])
            for joint, target in targets.items():
                target.location = goal[JOINT_INDEX[joint]]
            start = time.perf_counter()
            view_layer.update()
            out["times"].append(time.perf_counter() - start)
            eff, rest = errors(world_heads(obj), goal)
            out["eff"].append(eff)
            out["rest"].append(rest)
    finally:
        for owner, con in constraints:
            obj.pose.bones[owner].constraints.remove(con)
        for target in targets.values():
            bpy.data.objects.remove(target, do_unlink=True)
        obj.pose.ik_solver = "LEGACY"
    return out, [list(c) for c in chains]


def accuracy_row(method: str, res: dict[str, list]) -> dict[str, Any]:
    by_joint = np.array(res["eff"])  # (pairs, effectors)
    eff = by_joint.ravel()
    rest = np.concatenate(res["rest"]) if res["rest"] else np.zeros(0)
    row = {"method": method,
           "effector_by_joint_mean_mm": dict(zip(EFFECTORS, (by_joint.mean(axis=0) * MM
                                                             ).round(2).tolist(), strict=True)),
           "effector_mean_mm": float(eff.mean() * MM),
           "effector_median_mm": float(np.median(eff) * MM),
           "effector_p95_mm": float(np.percentile(eff, 95) * MM),
           "non_effector_mpjpe_cm": float(rest.mean() * CM)}
    if res.get("times"):
        row.update(summary(res["times"]))
    return row


def ik_comparison(models: Path, clips: Sequence[Path], pairs: int, seed: int
                  ) -> dict[str, Any]:
    """Accuracy and time of the add-on's Solve and Blender's IK on the same pairs."""
    rng = np.random.default_rng(seed)
    per_clip = max(1, pairs // len(clips))
    results: dict[str, dict[str, list]] = defaultdict(lambda: {"eff": [], "rest": [],
                                                                "times": []})
    chains: list = []
    methods = {"no edit: x itself (distance to the targets)": None,
               "add-on Solve, refinement off": ("addon", 0),
               f"add-on Solve, refinement {DEFAULT_REFINE} steps (default)":
                   ("addon", DEFAULT_REFINE),
               "Blender IK constraints, Legacy solver (default)": ("ik", "LEGACY"),
               "Blender IK constraints, iTaSC solver": ("ik", "ITASC")}
    for n, clip in enumerate(clips, 1):
        host.progress(f"IK comparison: clip {n}/{len(clips)} {clip.name} "
                      f"({per_clip} pairs x {len(methods) - 1} methods)")
        obj = setup_rig("bvh", models, clip)
        scene = bpy.context.scene
        first, last = (int(v) for v in obj.animation_data.action.frame_range)
        pp = sample_pairs(first, last, per_clip, rng)
        truth = clip_heads(scene, obj, sorted({f for p in pp for f in p}))
        for i, j in pp:
            eff, rest = errors(truth[i], align(truth[j], truth[i]))
            results["no edit: x itself (distance to the targets)"]["eff"].append(eff)
            results["no edit: x itself (distance to the targets)"]["rest"].append(rest)
        for method, spec in methods.items():
            if spec is None:
                continue
            kind, arg = spec
            if kind == "addon":
                res = addon_solves(scene, obj, pp, truth, arg)
            else:
                res, chains = blender_ik(scene, obj, pp, truth, arg)
            for key in ("eff", "rest", "times"):
                results[method][key] += res[key]
    rows = [accuracy_row(m, results[m]) for m in methods]
    timed = [r for r in rows if "median_ms" in r]
    base = next(r for r in timed if r["method"].startswith("Blender IK constraints, Legacy"))
    for r in timed:
        r["ratio_to_blender_ik"] = r["median_ms"] / base["median_ms"]
    return {"pairs": per_clip * len(clips), "clips": [c.name for c in clips],
            "effectors": list(EFFECTORS), "ik_chains": chains, "rows": rows}
