"""The networks' stage: the modules on the requests and on the same requests unmoved, the
universal, chained or fused edit, decoded."""

from __future__ import annotations

import numpy as np

from .. import skeleton
from ..compiled_networks import compiled_universal
from ..normalize import (
    BodyFrame,
    from_model_space,
)
from .constants import CHAIN_ORDER
from .types import SolveOptions


class _Networks:
    """PoseEditor's networks: the latent edit and its decoded poses."""

    def _networks(self, model: np.ndarray, mask: np.ndarray, t_model: np.ndarray,
                  w: np.ndarray, requests: dict[str, tuple[np.ndarray, np.ndarray]],
                  options: SolveOptions, notes: list[str]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The modules on the requests and on the same requests left unmoved, in one batch:
        the edited latent and the decoded poses of both."""
        b = len(model)
        both = lambda a, c: np.concatenate([a, c])  # noqa: E731 - local shorthand
        fused = not requests and options.solver == "universal"
        compiled = compiled_universal(self.models) if fused else None
        if compiled is not None:  # the same edit in the kernels (see compiled_networks)
            edited, latents = compiled.edit(model, mask, t_model, w)
        elif fused and self._fused is not None:
            # The common edit in one session call (same result as the separate modules).
            edited, _, latents = self._fused.run_all(both(model, model), both(mask, mask),
                                                     both(t_model, model), both(w, w))
        else:
            z = self.models.encode(model)
            values = {k: both(v, v0) for k, (v, v0) in requests.items()}
            latents, more = self.edit_latent(both(z, z), both(model, model), both(mask, mask),
                                             both(t_model, model), both(w, w), values, options)
            notes.extend(dict.fromkeys(more))
            edited = self.models.decode(latents)
        edited = edited.astype(np.float64)
        return latents[:b], edited[:b], edited[b:]

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

    def decode_to_rig(self, z_new: np.ndarray, detail: np.ndarray | None, frame: BodyFrame,
                      options: SolveOptions) -> np.ndarray:
        """Decode, add the input's details back, return to the rig's space and lengths."""
        pose = self.models.decode(z_new).astype(np.float64)
        if detail is not None:
            pose += detail
        return from_model_space(pose, frame, fix_lengths=options.fix_lengths)

    # -- helpers ----------------------------------------------------------------------
