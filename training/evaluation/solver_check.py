"""The universal solver alone, on real pairs, user-style drags, null edits and a rest pose
reaching too far: a quick check of what its training taught it.

Edits are applied as the engine applies them, ``x + D(S(E(x), targets)) - D(E(x))``, with
no refinement, pins or planted feet (the drag benchmark measures the whole engine). The
networks come from an exported model folder (run by onnxruntime, what the add-on ships) or
from a training run's checkpoints.

``python -m training solver-check --set models runs/cmu.npz --json OUT.json``
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from blender_addon.core import skeleton
from training.data.dataset import PoseData
from training.data.rest_poses import rest_poses
from training.learning.nets import UniversalSolver
from training.learning.recipes import load_autoencoder
from training.learning.tasks import END_JOINTS, PoseSampler, sample_drags, sample_effectors
from training.learning.train import load_checkpoint

HAND_DRAG_M = (0.10, 0.25)
BEYOND_REACH_M = 0.19
MM, CM = 1000.0, 100.0


Edit = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _checkpoint_edit(runs: Path) -> Edit:
    ae = load_autoencoder(runs / "ae.pt").eval()
    ckpt = load_checkpoint(runs / "solver_universal.pt", "ik_universal")
    cfg = ckpt["config"]
    net = UniversalSolver(ae.norm.mean, ae.norm.std, cfg["latent"], cfg["hidden"],
                          cfg["layernorm"])
    net.load_state_dict(ckpt["best_state"] or ckpt["state_dict"])
    net.eval()

    def edit(x: torch.Tensor, t: torch.Tensor, m: torch.Tensor, w: torch.Tensor
             ) -> torch.Tensor:
        z = ae.encode(x)
        return x + (ae.decode(net(z, m, t, w)) - ae.decode(z)).reshape(x.shape)
    return edit


def _onnx_edit(models: Path) -> Edit:
    from blender_addon.core.models import ModelSet

    ms = ModelSet(models, threads=1)
    universal = next(iter(ms.by_role("ik_universal")), None)
    if universal is None:
        raise ValueError(f"{models}: no ik_universal module in the set")

    def edit(x: torch.Tensor, t: torch.Tensor, m: torch.Tensor, w: torch.Tensor
             ) -> torch.Tensor:
        z = ms.encode(x.numpy())
        z_new = universal.run(z, m.numpy(), t.numpy(), w.numpy())
        return x + torch.from_numpy(ms.decode(z_new) - ms.decode(z)).reshape(x.shape)
    return edit


def _load(source: Path) -> Edit:
    """An exported model folder (has a manifest) or a training run's checkpoints."""
    from blender_addon.core.models import MANIFEST_NAME

    return _onnx_edit(source) if (source / MANIFEST_NAME).is_file() else \
        _checkpoint_edit(source)


def _mask(n: int, names: list[str]) -> torch.Tensor:
    m = torch.zeros(n, skeleton.NUM_JOINTS)
    m[:, skeleton.joint_indices(names)] = 1.0
    return m


@torch.no_grad()
def solver_check(source: str | Path, data: str | Path, n: int = 2000, split: str = "val",
                 seed: int = 0) -> dict[str, Any]:
    """Figures (mm / cm, medians unless named) of the universal solver alone; ``source``
    is a model folder or a training run's folder."""
    edit = _load(Path(source))
    sampler = PoseSampler(PoseData.load(data), split)
    gen = torch.Generator().manual_seed(seed)

    out: dict[str, Any] = {"source": str(source), "data": str(data), "split": split, "poses": n}
    i, j = sampler.pairs(n, 20, gen)
    x, x2 = sampler.poses[i], sampler.poses[j]
    ends = _mask(n, [skeleton.JOINTS[k] for k in END_JOINTS])
    err = (edit(x, x2, ends, ends) - x2).norm(dim=-1)
    out["pair_hfh_effector_mm"] = float(err[ends.bool()].median()) * MM
    out["pair_hfh_other_mpjpe_cm"] = float(err[~ends.bool()].mean()) * CM
    mask, _ = sample_effectors(x, x2, gen)
    err = (edit(x, x2, mask, mask) - x2).norm(dim=-1)
    out["pair_random_effector_mm"] = float(err[mask.bool()].median()) * MM

    x = sampler.poses[sampler.frames(n, gen)]
    targets, mask, weights = sample_drags(x, gen)
    moved = (targets - x).norm(dim=-1) > 0
    pred = edit(x, targets, mask, weights)
    err = (pred - targets).norm(dim=-1)
    pins = mask.bool() & ~moved
    out["drag_effector_mm"] = float(err[moved].median()) * MM
    out["drag_pin_mm"] = [float(err[pins].median()) * MM, float(err[pins].quantile(0.9)) * MM]
    out["drag_others_moved_cm_mean"] = float((pred - x).norm(dim=-1)[~mask.bool()].mean()) * CM

    hand = skeleton.JOINT_INDEX["r_hand"]
    one = _mask(n, ["r_hand"])
    d = torch.randn(n, 3, generator=gen)
    size = HAND_DRAG_M[0] + (HAND_DRAG_M[1] - HAND_DRAG_M[0]) * torch.rand(n, 1, generator=gen)
    t = x.clone()
    t[:, hand] += d / d.norm(dim=-1, keepdim=True) * size
    pred = edit(x, t, one, one)
    moved_by = (pred - x).norm(dim=-1)
    feet = skeleton.joint_indices(["l_foot", "r_foot", "l_toe", "r_toe"])
    out["hand_drag_reach_mm"] = float((pred[:, hand] - t[:, hand]).norm(dim=-1).median()) * MM
    out["hand_drag_feet_moved_cm"] = [float(moved_by[:, feet].median()) * CM,
                                      float(moved_by[:, feet].quantile(0.9)) * CM]
    out["hand_drag_pelvis_moved_cm"] = float(moved_by[:, skeleton.ROOT].median()) * CM
    others = [k for k in range(skeleton.NUM_JOINTS) if k != hand]
    out["hand_drag_others_moved_cm_mean"] = float(moved_by[:, others].mean()) * CM

    hands = _mask(n, ["l_hand", "r_hand"])
    worst = (edit(x, x, hands, hands) - x).norm(dim=-1).max(dim=1).values
    out["null_hands_max_joint_mm"] = [float(worst.median()) * MM, float(worst.max()) * MM]

    rest = rest_poses(n, gen, sampler.floor)
    arm = rest[:, hand] - rest[:, skeleton.JOINT_INDEX["r_upperarm"]]
    t = rest.clone()
    t[:, hand] += BEYOND_REACH_M * arm / arm.norm(dim=-1, keepdim=True)
    pred = edit(rest, t, one, one)
    out["rest_beyond_reach_short_cm"] = float((pred[:, hand] - t[:, hand]).norm(dim=-1)
                                              .median()) * CM
    return out


# The table's rows: (label, key, index into a [median, p90/max] pair or None, format).
ROWS = (
    ("real pairs ±20 frames, hands+feet+head: effector error", "pair_hfh_effector_mm", None,
     "{:.1f} mm"),
    ("same, other joints' MPJPE to x'", "pair_hfh_other_mpjpe_cm", None, "{:.1f} cm"),
    ("one hand dragged 10–25 cm, nothing else held: hand error", "hand_drag_reach_mm", None,
     "{:.1f} mm"),
    ("same, feet moved (median / p90)", "hand_drag_feet_moved_cm", "pair", "{:.1f} / {:.1f} cm"),
    ("same, other joints moved (mean)", "hand_drag_others_moved_cm_mean", None, "{:.1f} cm"),
    ("null edit (hands at their joints): worst joint per pose, median / max",
     "null_hands_max_joint_mm", "pair", "{:.0f} / {:.0f} mm"),
    ("T/A-pose, hand target 19 cm beyond the stretched arm: still short by",
     "rest_beyond_reach_short_cm", None, "{:.1f} cm"),
)


def run_sets(sets: list[tuple[str, str]], n: int = 2000, split: str = "val", seed: int = 0
             ) -> dict[str, Any]:
    """One column per (model or run folder, dataset)."""
    torch.set_num_threads(1)
    return {"columns": [solver_check(source, data, n, split, seed) for source, data in sets]}


def markdown(result: dict[str, Any]) -> str:
    heads = [f"`{c['source']}` on `{c['data']}`" for c in result["columns"]]
    lines = ["| | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for label, key, kind, fmt in ROWS:
        cells = [fmt.format(*c[key]) if kind else fmt.format(c[key]) for c in result["columns"]]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
