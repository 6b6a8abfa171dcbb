"""The universal solver alone, from its checkpoint, on real pairs, user-style drags, null
edits and a rest pose reaching too far: a quick check of what its training taught it.

Edits are applied as the engine applies them, ``x + D(S(E(x), targets)) - D(E(x))``, with
no refinement, pins or planted feet (the drag benchmark measures the whole engine).

``python -m training.solver_check --runs runs/train-cmu --data runs/cmu.npz``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from blender_addon.core import skeleton
from blender_addon.core.fileio import write_json
from training.data import PoseData
from training.nets import UniversalSolver
from training.recipes import load_autoencoder
from training.rest_poses import rest_poses
from training.tasks import END_JOINTS, PoseSampler, sample_drags, sample_effectors
from training.train import load_checkpoint

HAND_DRAG_M = (0.10, 0.25)
BEYOND_REACH_M = 0.19
MM, CM = 1000.0, 100.0


def _load(runs: Path) -> tuple[Any, UniversalSolver]:
    ae = load_autoencoder(runs / "ae.pt").eval()
    ckpt = load_checkpoint(runs / "solver_universal.pt", "ik_universal")
    cfg = ckpt["config"]
    net = UniversalSolver(ae.norm.mean, ae.norm.std, cfg["latent"], cfg["hidden"],
                          cfg["layernorm"])
    net.load_state_dict(ckpt["best_state"] or ckpt["state_dict"])
    return ae, net.eval()


def _mask(n: int, names: list[str]) -> torch.Tensor:
    m = torch.zeros(n, skeleton.NUM_JOINTS)
    m[:, skeleton.joint_indices(names)] = 1.0
    return m


@torch.no_grad()
def solver_check(runs: str | Path, data: str | Path, n: int = 2000, split: str = "val",
                 seed: int = 0) -> dict[str, Any]:
    """Figures (mm / cm, medians unless named) of the universal solver alone."""
    ae, net = _load(Path(runs))
    sampler = PoseSampler(PoseData.load(data), split)
    gen = torch.Generator().manual_seed(seed)

    def edit(x: torch.Tensor, t: torch.Tensor, m: torch.Tensor, w: torch.Tensor
             ) -> torch.Tensor:
        z = ae.encode(x)
        return x + (ae.decode(net(z, m, t, w)) - ae.decode(z)).reshape(x.shape)

    out: dict[str, Any] = {"runs": str(runs), "data": str(data), "split": split, "poses": n}
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.solver_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="folder with ae.pt and solver_universal.pt")
    p.add_argument("--data", required=True, help="dataset .npz")
    p.add_argument("--split", default="val", choices=("train", "val", "test"))
    p.add_argument("--poses", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    result = solver_check(args.runs, args.data, args.poses, args.split, args.seed)
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
