"""The edit: rig positions -> model space -> latent -> modules -> decode -> rig positions.

One engine API serves the add-on, the benchmarks and clip propagation: :class:`PoseEditor`
with :meth:`PoseEditor.solve_arrays` (batched arrays) and :meth:`PoseEditor.solve`
(effector objects for one pose). Everything is batched over poses.

Modules (seed papers): the universal IK solver (any effector subset, pins as effectors
that hold their joint), the 2021 paper's chained specialized solvers, metric networks;
several combine by averaging their latents (2023 paper, default) or in sequence (2021).
Then optional latent refinement (Gauss-Newton on the effector error through the decoder,
a finite-difference Jacobian from one batched decoder call per step), decoding, and the
FABRIK backward pass that restores the rig's exact bone lengths. ``solver="classic"``
runs plain full-body FABRIK instead (:mod:`.fabrik`).

The add-on's call, :meth:`PoseEditor.solve` with effectors only, is latency-bound: inputs
are checked once, the rest runs on checked arrays (``*_unchecked`` normalization), and a set
with the optional fused module (encoder, universal solver and decoder in one graph) runs
the networks in one session call; anything else takes the separate modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import fabrik, skeleton
from .metrics import evaluate_metric
from .models import ModelSet
from .normalize import (
    BodyFrame,
    from_model_space,
    from_model_space_unchecked,
    leg_scale,
    to_model_space,
    to_model_space_unchecked,
    yaw_matrix,
)

COMBINE_MODES = ("average", "sequence")
SOLVERS = ("universal", "chained", "classic")
CHAIN_ORDER = ("hands", "feet", "head")  # the 2021 paper's order for chained solvers
REFINE_FD_STEP = 1e-2  # latent units: finite-difference step of the refinement Jacobian
REFINE_DAMPING = 1e-4  # Levenberg-Marquardt damping, relative to the Gauss-Newton diagonal
REFINE_PRIOR = 1e-5  # m^2 per latent unit^2: pull towards the network's latent (manifold)
MAX_REFINE_STEPS = 10
_XYZ_SUM = np.ones(3)  # (..., 3) @ _XYZ_SUM sums the coordinates


@dataclass
class SolveOptions:
    """How one edit runs; every field is a panel option in the add-on."""
    solver: str = "universal"  # universal | chained | classic
    combine: str = "average"  # average | sequence
    refine_steps: int = 0  # latent refinement steps (0 = off)
    fix_lengths: bool = True  # FABRIK backward pass to the rig's bone lengths
    keep_details: bool = True  # add back what the autoencoder cannot reproduce (x - D(E(x)))

    def check(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.combine not in COMBINE_MODES:
            raise ValueError(f"combine must be one of {COMBINE_MODES}, got {self.combine!r}")
        if not 0 <= self.refine_steps <= MAX_REFINE_STEPS:
            raise ValueError(f"refine_steps must be in 0..{MAX_REFINE_STEPS}, "
                             f"got {self.refine_steps}")


@dataclass
class Effector:
    """A target for one joint, in the same space as the pose (rig or world)."""
    joint: str
    target: np.ndarray | Sequence[float] | None = None  # ignored for a pin
    weight: float = 1.0
    pin: bool = False  # hold the joint where it is
    orientation: np.ndarray | None = None  # (3, 3): the end bone takes it (rotations stage)


@dataclass
class EditResult:
    positions: np.ndarray  # (B, 21, 3) rig space
    latent: np.ndarray | None  # (B, L) final latent (None for classic FABRIK)
    effector_error: np.ndarray  # (B, 21) distance to target where masked, else 0
    notes: list[str] = field(default_factory=list)


def _check_positions(positions: np.ndarray, name: str = "positions") -> np.ndarray:
    p = np.asarray(positions, dtype=np.float64)
    if p.ndim != 3 or p.shape[1:] != (skeleton.NUM_JOINTS, 3):
        raise ValueError(f"{name} must have shape (B, {skeleton.NUM_JOINTS}, 3), got {p.shape}")
    if not np.isfinite(p).all():
        bad = ~np.isfinite(p).all(axis=(0, 2))
        raise ValueError(f"{name}: non-finite values at joint(s) "
                         f"{[skeleton.JOINTS[j] for j in np.flatnonzero(bad)]}")
    return p


class PoseEditor:
    """Edits poses of one rig (its bone lengths) with one model set."""

    def __init__(self, models: ModelSet | None, lengths: np.ndarray | None = None) -> None:
        self.models = models
        self.lengths = lengths
        self._universal = self._fused = None
        if models is not None:
            self._universal = next(iter(models.by_role("ik_universal")), None)
            self._fused = next(iter(models.by_role("ik_universal_fused")), None)
            self._groups = models.groups
            self._metrics = models.metrics

    @property
    def lengths(self) -> np.ndarray | None:
        """The rig's bone lengths (21,) (read-only), or None: each pose's own, measured."""
        return self._lengths

    @lengths.setter
    def lengths(self, lengths: np.ndarray | None) -> None:
        value = None if lengths is None else np.array(lengths, dtype=np.float64)
        if value is not None and value.shape != (skeleton.NUM_JOINTS,):
            raise ValueError(f"lengths must have shape ({skeleton.NUM_JOINTS},), "
                             f"got {value.shape}")
        if value is not None:
            value.flags.writeable = False  # the cached batch below must not go stale
        self._lengths = value
        # As a batch of one with its pelvis-height scale, made once: every solve shares them.
        self._rig_lengths = None if value is None else value[None]
        self._rig_scale = None if value is None else leg_scale(self._rig_lengths)

    # -- public API -------------------------------------------------------------------

    def solve(self, positions: np.ndarray, effectors: Sequence[Effector] = (),
              metrics: dict[str, float] | None = None,
              options: SolveOptions | None = None) -> EditResult:
        """One pose (21, 3) edited with effector objects and metric requests.

        The add-on's call on every drag: everything is checked once here, then the edit
        runs on the checked arrays.
        """
        options = options or SolveOptions()
        options.check()
        pose = _check_positions(np.asarray(positions, dtype=np.float64)[None])
        mask, targets, weights = self.effector_arrays(pose, effectors)
        values = self.check_metrics(
            {k: np.array([v], dtype=np.float64) for k, v in metrics.items()}, 1
        ) if metrics else {}
        return self._solve(pose, mask, targets, weights, values, options)

    @staticmethod
    def effector_arrays(positions: np.ndarray, effectors: Sequence[Effector]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Effector objects -> (mask, targets, weights) arrays for a batch of one pose.

        Targets are checked where they are set; weights are 0 off the effectors.
        """
        mask = np.zeros((1, skeleton.NUM_JOINTS))
        targets = np.array(positions, dtype=np.float64, copy=True)
        weights = np.zeros((1, skeleton.NUM_JOINTS))
        for e in effectors:
            j = skeleton.JOINT_INDEX.get(e.joint)
            if j is None:
                raise ValueError(f"effector on unknown joint {e.joint!r}; joints are: "
                                 f"{', '.join(skeleton.JOINTS)}")
            if not e.pin:
                t = np.asarray(e.target, dtype=np.float64) if e.target is not None else None
                if t is None or t.shape != (3,) or not all(map(math.isfinite, t.tolist())):
                    raise ValueError(f"effector {e.joint!r}: target must be 3 finite numbers, "
                                     f"got {e.target!r}")
                targets[0, j] = t
            if not (math.isfinite(e.weight) and 0.0 < e.weight <= 1.0):
                raise ValueError(f"effector {e.joint!r}: weight must be in (0, 1], "
                                 f"got {e.weight}")
            mask[0, j] = 1.0
            weights[0, j] = e.weight
        return mask, targets, weights

    def solve_arrays(self, positions: np.ndarray, mask: np.ndarray, targets: np.ndarray,
                     weights: np.ndarray | None = None,
                     metrics: dict[str, np.ndarray] | None = None,
                     options: SolveOptions | None = None) -> EditResult:
        """Batched edit. positions/targets (B, 21, 3), mask/weights (B, 21), metric values (B,)."""
        options = options or SolveOptions()
        options.check()
        p = _check_positions(positions)
        mask = np.broadcast_to(np.asarray(mask, dtype=np.float64), p.shape[:2])
        t = _check_positions(np.where(mask[..., None] > 0, targets, p), "targets")
        w = mask if weights is None else np.asarray(weights, dtype=np.float64) * mask
        metrics = self.check_metrics(metrics or {}, len(p))
        return self._solve(p, mask, t, w, metrics, options)

    def _solve(self, p: np.ndarray, mask: np.ndarray, t: np.ndarray, w: np.ndarray,
               metrics: dict[str, np.ndarray], options: SolveOptions) -> EditResult:
        """The edit on checked float64 arrays: targets equal the pose off the effectors and
        weights are 0 there."""
        if options.solver == "classic":
            if metrics:
                raise ValueError("metric requests need the neural solver, not classic FABRIK")
            lengths = self.lengths if self.lengths is not None else skeleton.bone_lengths(p)
            out = fabrik.solve(p, mask > 0, t, lengths)
            return EditResult(out, None, self._errors(out, t, mask))
        if self.models is None:
            raise ValueError("no model set loaded: only solver='classic' is available")
        lengths, scale = self._rig_lengths, self._rig_scale
        if lengths is not None and len(p) != 1:
            lengths, scale = np.repeat(lengths, len(p), axis=0), np.repeat(scale, len(p))
        model, frame, turn = to_model_space_unchecked(p, lengths, scale)
        t_model = self.targets_to_model(p, t, model, frame, turn)
        moving = np.count_nonzero(mask) > 0
        notes: list[str] = []
        if moving and not metrics and options.solver == "universal" and self._fused is not None:
            # The common edit in one session call (same result as the separate modules).
            edited, recon, z_new = self._fused.run_all(model, mask, t_model, w)
        else:
            z = self.models.encode(model)
            z_new, notes = self.edit_latent(z, model, mask, t_model, w, metrics, options)
            if options.keep_details:  # one decoder call for the edit and the reconstruction
                both = self.models.decode(np.concatenate([z_new, z]))
                edited, recon = both[:len(z)], both[len(z):]
            else:
                edited, recon = self.models.decode(z_new), None
        # float64 first: numpy operations that mix float32 and float64 cost twice as much.
        pose = edited.astype(np.float64)
        detail = None
        if options.keep_details:
            detail = model - recon.astype(np.float64)
            pose += detail
        out = from_model_space_unchecked(pose, frame, options.fix_lengths, turn)
        if options.refine_steps and moving:
            z_new, out = self._refine(z_new, out, detail, frame, t, w, options)
        return EditResult(out, z_new, self._errors(out, t, mask), notes)

    def clean_pose(self, positions: np.ndarray) -> np.ndarray:
        """Project rough poses (B, 21, 3) onto the learned manifold, then fix bone lengths
        (the sparse-coding paper's free-dragging denoise)."""
        p = _check_positions(positions)
        lengths = self.lengths if self.lengths is not None else skeleton.bone_lengths(p)
        model, frame = to_model_space(p, lengths)
        return self.decode_to_rig(self.models.encode(model), None, frame, SolveOptions())

    # -- stages (also used by clip propagation) ---------------------------------------

    @staticmethod
    def targets_to_model(p: np.ndarray, t: np.ndarray, model: np.ndarray, frame: BodyFrame,
                         turn: np.ndarray | None = None) -> np.ndarray:
        """Rig-space targets to model space, as offsets from each joint's current place.

        Offsets turn with the body and scale with it, so a target reached on a rig with
        other proportions asks the canonical body for the same motion of the joint.
        ``turn`` is ``yaw_matrix(frame.yaw)`` when the caller has it.
        """
        if turn is None:
            turn = yaw_matrix(np.asarray(frame.yaw, dtype=np.float64))
        return model + (t - p) @ turn * np.asarray(frame.scale)[..., None, None]

    def edit_latent(self, z: np.ndarray, model: np.ndarray, mask: np.ndarray,
                    t_model: np.ndarray, weights: np.ndarray,
                    metrics: dict[str, np.ndarray], options: SolveOptions
                    ) -> tuple[np.ndarray, list[str]]:
        """Run the modules on latents ``z`` and combine them."""
        notes: list[str] = []
        steps: list = []  # callables latent -> latent, one per module
        if mask.any():
            if options.solver == "universal":
                if self._universal is None:
                    raise ValueError(f"{self.models.folder}: no ik_universal module in the set")
                m32, t32, w32 = (np.ascontiguousarray(a, dtype=np.float32)
                                 for a in (mask, t_model, weights))
                steps.append(lambda zz: self._universal.run(zz, m32, t32, w32))
            else:
                steps.append(lambda zz: self._chained(zz, model, mask, t_model, notes))
        for name, value in metrics.items():
            v = np.ascontiguousarray(value, dtype=np.float32)[:, None]
            steps.append(lambda zz, m=self._metrics[name], v=v: m.run(zz, v))
        z32 = np.ascontiguousarray(z, dtype=np.float32)
        if not steps:
            return z32, notes
        if options.combine == "sequence" or len(steps) == 1:  # the mean of one is itself
            for step in steps:
                z32 = step(z32)
            return z32, notes
        return np.mean([step(z32) for step in steps], axis=0, dtype=np.float64
                       ).astype(np.float32), notes

    def _chained(self, z: np.ndarray, model: np.ndarray, mask: np.ndarray,
                 t_model: np.ndarray, notes: list[str]) -> np.ndarray:
        covered = np.zeros(skeleton.NUM_JOINTS, dtype=bool)
        for name in CHAIN_ORDER:
            module = self._groups.get(name)
            if module is None:
                continue
            idx = skeleton.joint_indices(module.joints)
            covered[idx] = True
            rows = mask[:, idx].any(axis=1)
            if not rows.any():
                continue
            group_t = np.where(mask[:, idx, None] > 0, t_model[:, idx], model[:, idx])
            edited = module.run(z, np.ascontiguousarray(group_t, dtype=np.float32))
            z = np.where(rows[:, None], edited, z)
        missed = np.flatnonzero((mask > 0).any(axis=0) & ~covered)
        if missed.size:
            notes.append("chained solvers cannot move: "
                         + ", ".join(skeleton.JOINTS[j] for j in missed))
        return z

    def details(self, z: np.ndarray, model: np.ndarray, options: SolveOptions
                ) -> np.ndarray | None:
        """What the autoencoder cannot reproduce of the input, ``x - D(E(x))``, to add back."""
        return model - self.models.decode(z) if options.keep_details else None

    def decode_to_rig(self, z_new: np.ndarray, detail: np.ndarray | None, frame: BodyFrame,
                      options: SolveOptions) -> np.ndarray:
        """Decode, add the input's details back, return to the rig's space and lengths."""
        pose = self.models.decode(z_new).astype(np.float64)
        if detail is not None:
            pose += detail
        return from_model_space(pose, frame, fix_lengths=options.fix_lengths)

    # -- helpers ----------------------------------------------------------------------

    def check_metrics(self, metrics: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        out = {}
        for name, value in metrics.items():
            if self.models is None or name not in self._metrics:
                known = sorted(self._metrics) if self.models is not None else []
                raise ValueError(f"unknown metric {name!r}; this model set has: "
                                 f"{', '.join(known) or 'none'}")
            v = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,))
            if not np.isfinite(v).all():
                raise ValueError(f"metric {name!r}: requested value must be finite")
            out[name] = v
        return out

    @staticmethod
    def _errors(out: np.ndarray, t: np.ndarray, mask: np.ndarray) -> np.ndarray:
        diff = out - t
        return np.sqrt((diff * diff) @ _XYZ_SUM) * (mask > 0)

    def _refine(self, z_new: np.ndarray, out: np.ndarray, detail: np.ndarray | None,
                frame: BodyFrame, t: np.ndarray, w: np.ndarray, options: SolveOptions
                ) -> tuple[np.ndarray, np.ndarray]:
        """Gauss-Newton steps on the rig-space effector error, w.r.t. the latent.

        The Jacobian is a forward difference over all latent axes at once: one decoder call
        on B * (L + 1) latents per step. A prior towards the network's own latent keeps the
        result on the decoder's manifold; a step that does not lower the error is refused.
        """
        b, latent = z_new.shape
        eye = np.eye(latent, dtype=np.float32) * REFINE_FD_STEP
        # Residuals in canonical metres (times the rig's scale factor), so the prior weighs
        # the same on a rig at 0.01 or 100 as on the training actor.
        sw = np.sqrt(w)[..., None] * np.asarray(frame.scale, dtype=np.float64)[:, None, None]
        z_net = z_new.astype(np.float64)
        zc = z_net.copy()
        cost = (sw * (out - t) ** 2 * sw).sum(axis=(1, 2))
        rep = lambda a: np.repeat(a, latent + 1, axis=0)  # noqa: E731 - local shorthand
        frame_rep = BodyFrame(rep(frame.root), rep(frame.yaw), rep(frame.lengths),
                              rep(frame.scale))
        for _ in range(options.refine_steps):
            probe = (zc[:, None, :] + np.concatenate([np.zeros((1, latent)), eye])[None]
                     ).reshape(-1, latent).astype(np.float32)
            rig = self.decode_to_rig(probe, None if detail is None else rep(detail), frame_rep,
                                     options).reshape(b, latent + 1, skeleton.NUM_JOINTS, 3)
            base = rig[:, 0]
            jac = ((rig[:, 1:] - base[:, None]) / REFINE_FD_STEP * sw[:, None]
                   ).reshape(b, latent, -1)  # (B, L, 63)
            res = ((base - t) * sw).reshape(b, -1)  # (B, 63)
            jtj = jac @ jac.transpose(0, 2, 1)
            diag = np.einsum("bii->bi", jtj).mean(axis=1)[:, None, None]
            lhs = jtj + (REFINE_DAMPING * diag + REFINE_PRIOR) * np.eye(latent)
            rhs = -(jac @ res[..., None])[..., 0] - REFINE_PRIOR * (zc - z_net)
            z_try = zc + np.linalg.solve(lhs, rhs[..., None])[..., 0]
            out_try = self.decode_to_rig(z_try.astype(np.float32), detail, frame, options)
            cost_try = (sw * (out_try - t) ** 2 * sw).sum(axis=(1, 2))
            better = cost_try < cost
            zc = np.where(better[:, None], z_try, zc)
            out = np.where(better[:, None, None], out_try, out)
            cost = np.where(better, cost_try, cost)
        return zc.astype(np.float32), out


def metric_values(positions: np.ndarray, models: ModelSet) -> dict[str, np.ndarray]:
    """Every metric of the model set measured on rig poses (B, 21, 3), in model space."""
    model, _ = to_model_space(_check_positions(positions))
    return {name: evaluate_metric(model, m.metric) for name, m in models.metrics.items()}
