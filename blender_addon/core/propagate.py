"""Spread an edit made at one frame over its neighbours, in one batched pass (2023 paper).

For a clip (T, 21, 3), an edit at frame n and a weight curve W:
``z_t' = (1 - W(t)) z_t + W(t) M(z_t)``, decoded and brought back to the rig's lengths.
Effector edits travel as offsets in body space (each frame's target is its own joint
position plus the offset made at frame n), so the motion underneath is kept rather than
frozen; metric requests travel as deltas from each frame's measured value, or as an
absolute value. Frames where W = 0 come back bit-identical to the input.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import skeleton
from .metrics import evaluate_metric
from .normalize import rotate_y, to_model_space
from .pipeline import Effector, PoseEditor, SolveOptions

CURVES = ("hat", "smooth", "constant", "custom")
METRIC_MODES = ("delta", "absolute")


def weight_curve(num_frames: int, center: int, radius: float, kind: str = "smooth",
                 samples: Sequence[float] | None = None, start: int | None = None,
                 end: int | None = None) -> np.ndarray:
    """W(t) for t = 0..T-1: 1 at ``center``, falling to 0 at ``radius`` frames away.

    hat: linear; smooth: cosine; constant: 1 inside the radius; custom: ``samples`` of W
    over the normalized distance 0..1 (first sample at the center), linearly interpolated.
    ``start``/``end`` (inclusive) clip the range explicitly: W = 0 outside.
    """
    if kind not in CURVES:
        raise ValueError(f"weight curve must be one of {CURVES}, got {kind!r}")
    if not 0 <= center < num_frames:
        raise ValueError(f"edited frame {center} is outside the clip (0..{num_frames - 1})")
    if radius <= 0:
        raise ValueError(f"radius must be positive, got {radius}")
    d = np.abs(np.arange(num_frames) - center) / radius
    if kind == "hat":
        w = np.clip(1.0 - d, 0.0, 1.0)
    elif kind == "smooth":
        w = np.where(d < 1.0, 0.5 * (1.0 + np.cos(np.pi * np.minimum(d, 1.0))), 0.0)
    elif kind == "constant":
        w = (d <= 1.0).astype(np.float64)
    else:
        s = np.asarray(samples if samples is not None else (), dtype=np.float64)
        if s.ndim != 1 or len(s) < 2 or not np.isfinite(s).all():
            raise ValueError("a custom curve needs at least 2 finite samples")
        w = np.where(d <= 1.0, np.interp(np.minimum(d, 1.0), np.linspace(0, 1, len(s)), s),
                     0.0)
        w = np.clip(w, 0.0, 1.0)
    frames = np.arange(num_frames)
    if start is not None:
        w[frames < start] = 0.0
    if end is not None:
        w[frames > end] = 0.0
    return w


def propagate(editor: PoseEditor, clip: np.ndarray, frame: int, weights: np.ndarray,
              effectors: Sequence[Effector] = (), metrics: dict[str, float] | None = None,
              metric_mode: str = "delta", options: SolveOptions | None = None) -> np.ndarray:
    """The edited clip (T, 21, 3); effector targets and metric values are those at ``frame``."""
    options = options or SolveOptions()
    options.check()
    if options.solver == "classic":
        raise ValueError("propagation blends latents: it needs the neural solver")
    if metric_mode not in METRIC_MODES:
        raise ValueError(f"metric_mode must be one of {METRIC_MODES}, got {metric_mode!r}")
    clip = np.asarray(clip, dtype=np.float64)
    if clip.ndim != 3 or clip.shape[1:] != (skeleton.NUM_JOINTS, 3):
        raise ValueError(f"clip must have shape (T, {skeleton.NUM_JOINTS}, 3), got {clip.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(clip),) or not np.isfinite(w).all() or (w < 0).any() or (w > 1).any():
        raise ValueError(f"weights must be {len(clip)} values in [0, 1]")
    if not 0 <= frame < len(clip):
        raise ValueError(f"edited frame {frame} is outside the clip (0..{len(clip) - 1})")
    out = clip.copy()
    live = np.flatnonzero(w > 0)
    if live.size == 0:
        return out
    mask1, targets1, weights1 = editor.effector_arrays(clip[frame:frame + 1], effectors)
    metrics = editor.check_metrics(metrics or {}, 1)
    fixed = editor.lengths
    model, body = to_model_space(clip[live], fixed)
    model_n, body_n = to_model_space(clip[frame:frame + 1], fixed)
    # The offset made at frame n, in body space, applied to every frame's own joints.
    offset = rotate_y(targets1 - clip[frame:frame + 1], body_n.yaw) * body_n.scale[..., None, None]
    mask = np.repeat(mask1, len(live), axis=0)
    t_model = model + offset * mask[..., None]
    values: dict[str, np.ndarray] = {}
    for name, value in metrics.items():
        spec = editor.models.metrics[name].metric
        if metric_mode == "absolute":
            values[name] = np.full(len(live), float(value[0]))
        else:
            delta = float(value[0]) - evaluate_metric(model_n, spec)[0]
            values[name] = evaluate_metric(model, spec) + delta
    z = editor.models.encode(model)
    z_mod, _ = editor.edit_latent(z, model, mask, t_model, np.repeat(weights1, len(live), 0),
                                  values, options)
    wl = w[live, None]
    z_new = ((1.0 - wl) * z + wl * z_mod).astype(np.float32)
    detail = editor.details(z, model, options)
    out[live] = editor.decode_to_rig(z_new, detail, body, options)
    return out

