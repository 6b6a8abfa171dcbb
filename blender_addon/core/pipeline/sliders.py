"""Metric requests (the sliders): their values in the rig's units and model units, and the
refinement's metric rows."""

from __future__ import annotations

import numpy as np

from .. import refine, skeleton
from ..metrics import MetricSpec, evaluate_metric
from ..models import Module
from ..normalize import (
    BodyFrame,
    to_model_space,
    yaw_matrix,
)
from .types import SolveOptions, _check_positions


def facing_pose(p: np.ndarray, frame: BodyFrame) -> np.ndarray:
    """Rig poses turned to face +Z over their floor point, lengths and scale kept: where the
    sliders measure a rig in its own units."""
    return (p - frame.root[..., None, :]) @ yaw_matrix(np.asarray(frame.yaw))


def _model_per_rig_unit(spec: MetricSpec, frame: BodyFrame) -> np.ndarray:
    """Model units per rig unit of a metric, per pose: 1 for angles, the body's scale for
    lengths."""
    scale = np.asarray(frame.scale, dtype=np.float64)
    return np.ones_like(scale) if spec.unit == "deg" else scale


_LEG_JOINTS = frozenset(j for j in skeleton.JOINTS if j.endswith(("thigh", "shin", "foot", "toe")))


def _moves_legs(spec: MetricSpec) -> bool:
    """A metric measured on the legs: asking for it moves the feet (no planting then)."""
    return bool(_LEG_JOINTS.intersection(spec.joints))


def _metric_rows(requests: dict[str, tuple[np.ndarray, np.ndarray]],
                 modules: dict[str, Module], moving: np.ndarray, rig_model: np.ndarray,
                 rigid: bool) -> refine.MetricRows | None:
    """Requested metrics changed as asked; where no effector moves (a slider edit), the
    other metrics held where they are. Targets are on the rig's proportions (model units):
    its own value plus the requested change. ``rigid``: measured as a rig shows the pose
    (the answer's pelvis and chest are made rigid afterwards)."""
    if not requests:
        return None
    rows = refine.MetricRows([], [], [], rig_model if rigid else None)
    for name, module in modules.items():
        target = evaluate_metric(rig_model, module.metric)
        if name in requests:
            want, now = requests[name]
            target, weight = target + want - now, np.full(len(target), refine.METRIC_WEIGHT)
        else:
            weight = np.where(moving, 0.0, refine.HOLD_WEIGHT)
        rows.specs.append(module.metric)
        rows.targets.append(target)
        rows.weights.append(weight)
    # The body kept over its feet as the held metrics are (a slider edit).
    rows.balance = refine.balance(rig_model)
    rows.balance_weights = np.where(moving, 0.0, refine.BALANCE_WEIGHT)
    return rows


class _Sliders:
    """PoseEditor's metric requests and measurements."""

    def _metric_requests(self, p: np.ndarray, model: np.ndarray, frame: BodyFrame,
                         metrics: dict[str, np.ndarray], notes: list[str]
                         ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Rig-unit requests -> (requested, current) values in model units, each clamped to
        the range the metric's network saw in training, widened to hold the pose's own value
        (a rig whose rest shape lies outside it, such as clavicles in line where the data's
        always rise, never jumps there; see :meth:`metric_ranges`)."""
        out = {}
        for name, value in metrics.items():
            module = self._metrics[name]
            spec = module.metric
            per_unit = _model_per_rig_unit(spec, frame)
            rig_now = evaluate_metric(facing_pose(p, frame), spec)
            model_now = evaluate_metric(model, spec)
            want = model_now + (value - rig_now) * per_unit
            if module.value_range is not None:
                lo, hi = module.value_range
                clamped = np.clip(want, np.minimum(lo, model_now), np.maximum(hi, model_now))
                if (np.abs(clamped - want) > 1e-9).any():
                    unit = spec.unit
                    notes.append(f"{name}: request clamped to the range the models know "
                                 f"({lo / per_unit.max():.3g} to {hi / per_unit.min():.3g} "
                                 f"{unit} on this rig)")
                want = clamped
            out[name] = (want, model_now)
        return out

    def metric_values(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric of the set measured on rig poses (B, 21, 3) in the rig's units:
        degrees, or the rig's own lengths (its proportions and scale)."""
        p = _check_positions(positions)
        _, frame = to_model_space(p, self.lengths)
        facing = facing_pose(p, frame)
        return {name: evaluate_metric(facing, m.metric) for name, m in self._metrics.items()}

    def metric_ranges(self, positions: np.ndarray, widen: bool = True
                      ) -> dict[str, tuple[float, float]]:
        """Each metric's training-data range in the rig's units for the first pose, widened
        (``widen``) to hold that pose's own value: what a request may ask unclamped."""
        p = _check_positions(positions)[:1]
        _, frame = to_model_space(p, self.lengths)
        facing = facing_pose(p, frame)
        out = {}
        for name, m in self._metrics.items():
            if m.value_range is not None:
                per_unit = float(_model_per_rig_unit(m.metric, frame)[0])
                lo, hi = m.value_range[0] / per_unit, m.value_range[1] / per_unit
                if widen:
                    now = float(evaluate_metric(facing, m.metric)[0])
                    lo, hi = min(lo, now), max(hi, now)
                out[name] = (lo, hi)
        return out

    def clean_pose(self, positions: np.ndarray) -> np.ndarray:
        """Project rough poses (B, 21, 3) onto the learned manifold, then fix bone lengths
        (the sparse-coding paper's free-dragging denoise)."""
        p = _check_positions(positions)
        lengths = self.lengths if self.lengths is not None else skeleton.bone_lengths(p)
        model, frame = to_model_space(p, lengths)
        return self.decode_to_rig(self.models.encode(model), None, frame, SolveOptions())

    # -- stages (also used by clip propagation) ---------------------------------------

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
