"""The refinement's variables -> poses (:class:`_Point`) and the cost of a point."""

from __future__ import annotations

import numpy as np

from .. import skeleton
from ..compiled_networks import CompiledDecoder, compiled_decoder
from ..metrics import evaluate_metric
from ..models import ModelSet
from .layout import _POSE_DIM
from .lengths import _fixed
from .metric_rows import MetricRows, _as_rig_shows, balance
from .rigid import _rigid_block
from .shrug import _SHRUG_VARIABLES, _shrugged
from .weights import _SHIFT_JAC, METRIC_UNIT_M, _shifted


class _Point:
    """The refinement's variables (a move along the latent basis, the clavicles' turns with
    ``shrug``, a floor shift) -> poses, around the networks' latent ``z_net``."""

    def __init__(self, models: ModelSet, z_net: np.ndarray, offset: np.ndarray,
                 lengths: np.ndarray, shrug: bool = False) -> None:
        self.models, self.z_net, self.offset, self.lengths = models, z_net, offset, lengths
        self.basis = models.jacobian_basis  # (K, L)
        self.graph = next(iter(models.by_role("decoder_jacobian")), None)
        # The kernels' decoder where it runs: the numpy steps then decode as the kernels'
        # refinement does (the first one is checked against them).
        self.compiled: CompiledDecoder | None = compiled_decoder(models)
        self.shrug = shrug
        self.rank = len(self.basis)

    def latent(self, v: np.ndarray) -> np.ndarray:
        return self.z_net + v[:, :self.rank] @ self.basis

    def _turns(self, v: np.ndarray) -> np.ndarray:
        return v[:, self.rank:self.rank + _SHRUG_VARIABLES]

    def pose(self, v: np.ndarray) -> np.ndarray:
        """The length-fixed, shifted pose of variables ``v``."""
        z = self.latent(v).astype(np.float32)
        decoded = (self.compiled.decode(z)[0] if self.compiled is not None
                   else self.models.decode(z)).astype(np.float64)
        pose = _fixed(self.offset + decoded, self.lengths)[0]
        if self.shrug:
            pose = _shrugged(pose, self._turns(v))[0]
        return _shifted(pose, v)

    def linearize(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pose of variables ``v`` and its Jacobian (B, 63, variables)."""
        z = self.latent(v).astype(np.float32)
        if self.compiled is not None:
            decoded, jac = self.compiled.decode(z, jacobian=True)
            jac = jac.astype(np.float64)
        elif self.graph is not None:
            decoded, jac = self.graph.run_all(z)[:2]
            jac = jac.astype(np.float64)
        else:  # a set exported before the Jacobian graph: a forward difference, one call
            decoded, jac = _fd_jacobian(self.models, z, self.basis)
        pose, jac = _fixed(self.offset + decoded.astype(np.float64), self.lengths, jac)
        if self.shrug:
            pose, jac = _shrugged(pose, self._turns(v), jac)
        out = np.empty((*jac.shape[:2], jac.shape[2] + 2))
        out[..., :-2] = jac
        out[..., -2:] = _SHIFT_JAC
        return _shifted(pose, v), out


def _cost(pose: np.ndarray, v: np.ndarray, v_net: np.ndarray, goal: np.ndarray,
          row_w: np.ndarray, metrics: MetricRows | None, prior: np.ndarray,
          spans: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each pose's cost (B,) and its rigid-branch residuals (B, 6) (None without spans)."""
    diff = pose.reshape(len(pose), -1) - goal
    dv = v - v_net
    cost = np.add.reduce(diff * diff * row_w, 1) + np.add.reduce(prior * (dv * dv), 1)
    res = None
    if spans is not None:
        res = _rigid_block(pose, None, spans)[0]
        cost += np.add.reduce(res * res, 1)
    if metrics is not None:
        shown = _as_rig_shows(pose, metrics.start)
        for spec, target, weight in zip(metrics.specs, metrics.targets, metrics.weights,
                                        strict=True):
            if not weight.any():
                continue
            err = (evaluate_metric(shown, spec) - target) * METRIC_UNIT_M[spec.unit]
            cost += weight * err * err
        if metrics.balance is not None:
            off = balance(pose) - metrics.balance
            cost += metrics.balance_weights * (off * off).sum(axis=1)
    return cost, res


FD_LATENT_STEP = 1e-2  # latent units: the fallback Jacobian's forward-difference step


def _fd_jacobian(models: ModelSet, z: np.ndarray, basis: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Decoded poses and a forward-difference Jacobian (B, 63, K) along the basis rows, one
    decoder call."""
    b, latent = z.shape
    rank = len(basis)
    probes = z[:, None, :] + np.vstack([np.zeros((1, latent)), basis * FD_LATENT_STEP])[None]
    out = models.decode(probes.reshape(-1, latent).astype(np.float32)).astype(np.float64)
    out = out.reshape(b, rank + 1, _POSE_DIM)
    jac = ((out[:, 1:] - out[:, :1]) / FD_LATENT_STEP).transpose(0, 2, 1)
    return out[:, 0].reshape(b, skeleton.NUM_JOINTS, 3), jac
