"""The refinement run: the backend chosen in one place (:func:`refine`), and the numpy
steps (the specification)."""

from __future__ import annotations

import numpy as np

from .. import native
from ..models import ModelSet
from . import native_run
from .metric_rows import MetricRows, _metric_block
from .point import _cost, _Point
from .rigid import _rigid_block
from .shrug import _SHRUG_VARIABLES, _UNCARRIED
from .weights import (
    EFFECTOR_WEIGHT,
    LEAST_CHANGE,
    LEAST_CHANGE_METRIC_EDIT,
    LM_DOWN,
    LM_START,
    LM_UP,
    METRIC_WEIGHT,
    _per_pose,
    _prior,
)


def refine(models: ModelSet, z_net: np.ndarray, offset: np.ndarray, base: np.ndarray,
           targets: np.ndarray, weights: np.ndarray, metrics: MetricRows | None,
           body_follow: np.ndarray, steps: int, shift: np.ndarray, lengths: np.ndarray,
           relinearize: bool = False, effector_weight: np.ndarray | float = EFFECTOR_WEIGHT,
           least_change: np.ndarray | float = LEAST_CHANGE, spans: np.ndarray | None = None,
           shrug: bool = False, shrug_only: bool = False
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Refined latents (B, L), model-space poses (B, 21, 3) and body shifts (B, 2).

    ``offset``: what is added to the decoded pose (``x - D(z_base)``, or 0); ``base``: the
    input pose the least-change term keeps; ``targets``/``weights``: per-joint requests
    (weight 0 where none); ``lengths`` (B, 21): the bone lengths the decoded pose takes
    (the rig's, in model units), so residuals are measured on what the rig will show.
    Besides the latent, the refinement moves the whole body along the floor (``shift``,
    x and z, starting from the given one): model space keeps the pelvis over its origin,
    so a hip shift towards a far target, or a dragged pelvis, is this translation with the
    legs re-posed by the latent. Rows with nothing requested come back unchanged.
    ``relinearize``: a new Jacobian every accepted step (metric requests on single poses).
    ``effector_weight``: per unit of request weight, and ``least_change``: per other joint
    coordinate, each one for all or (B,) (:func:`effector_weights`,
    :func:`least_change_weights`). ``spans`` (B, 6): the rigid branches' child distances
    to keep (:func:`rigid_spans` of the start pose), or None. ``shrug``: the clavicles'
    turns are variables too (see :data:`SHRUG_PRIOR`); ``shrug_only``: and they are all the
    metric requests ask for, so the joints they do not carry are held as a drag holds the
    body (:data:`LEAST_CHANGE`).

    The one place the backend is chosen: an effector edit (no metric rows, no shrug, no
    re-linearizing, rigid spans given) runs in one kernel call where the kernels and the
    set's compiled decoder load (:func:`_refine_native`; its first call is checked against
    the numpy steps), everything else in the numpy steps (:func:`_refine_numpy`).
    """
    effectors_only = metrics is None and not shrug and not relinearize and spans is not None
    if effectors_only and (kernels := native.kernels()) is not None:
        refined = native_run._refine_native(kernels, models, z_net, offset, base, targets, weights,
                                 body_follow, steps, shift, lengths, effector_weight,
                                 least_change, spans)
        if refined is not None and not native_run._native_checked:
            # Checked once, on its first real call, against the numpy steps (it needs a
            # model set, which native's own self-check has not), which decode as it does.
            want = _refine_numpy(models, z_net, offset, base, targets, weights, None,
                                 body_follow, steps, shift, lengths, False, effector_weight,
                                 least_change, spans)
            native_run._checked_native(refined, want)
        if refined is not None and native.kernels() is not None:
            return refined
    return _refine_numpy(models, z_net, offset, base, targets, weights, metrics, body_follow,
                         steps, shift, lengths, relinearize, effector_weight, least_change,
                         spans, shrug, shrug_only)


def _refine_numpy(models: ModelSet, z_net: np.ndarray, offset: np.ndarray, base: np.ndarray,
                  targets: np.ndarray, weights: np.ndarray, metrics: MetricRows | None,
                  body_follow: np.ndarray, steps: int, shift: np.ndarray, lengths: np.ndarray,
                  relinearize: bool = False,
                  effector_weight: np.ndarray | float = EFFECTOR_WEIGHT,
                  least_change: np.ndarray | float = LEAST_CHANGE,
                  spans: np.ndarray | None = None, shrug: bool = False,
                  shrug_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`refine` in numpy (the specification): batched Gauss-Newton steps."""
    b = len(z_net)
    point = _Point(models, z_net.astype(np.float64), offset, lengths, shrug)
    rank = point.rank
    n_vars = rank + _SHRUG_VARIABLES * shrug + 2
    # The variables: the latent's move along the basis, the clavicles' turns (with
    # ``shrug``), then the body's shift.
    v_net = np.concatenate([np.zeros((b, n_vars - 2)), shift], axis=1)
    v = v_net.copy()
    pose, jac = point.linearize(v)
    # Per-coordinate weights of the pose rows: requests where asked, least change elsewhere,
    # towards the input pose (body_follow 0) or the networks' own pose (1), or between.
    asked = weights.repeat(3, axis=1) > 0
    per_pose = _per_pose(effector_weight, b)
    hold = _per_pose(least_change, b)
    if metrics is not None:  # held as firmly as a requested metric (see METRIC_WEIGHT)
        per_pose = np.maximum(per_pose, METRIC_WEIGHT)
        hold = np.where(_UNCARRIED, LEAST_CHANGE, LEAST_CHANGE_METRIC_EDIT)[None] if shrug_only \
            else np.full((b, 1), LEAST_CHANGE_METRIC_EDIT)
    row_w = np.where(asked, weights.repeat(3, axis=1) * per_pose, hold)
    follow = _per_pose(body_follow, b)
    keep = (1.0 - follow) * base.reshape(b, -1) + follow * pose.reshape(b, -1)
    goal = np.where(asked, targets.reshape(b, -1), keep)
    prior = _prior(rank, shrug)
    cost, rres = _cost(pose, v, v_net, goal, row_w, metrics, prior, spans)
    rjac = None
    # Levenberg-Marquardt damping per pose, relative to the Gauss-Newton diagonal: raised
    # where a step fails (and lowered again where a re-linearized one succeeds).
    damping = np.full(b, LM_START)
    hess = inverse = None
    eye = np.eye(n_vars)
    measured_at = None  # the pose the metric rows (mres) were last measured on
    mgrad = None
    for _ in range(steps):
        if metrics is not None and measured_at is not pose:
            # Residuals on every new pose; their gradient (a forward difference) where the
            # Jacobian is taken: every step when re-linearizing, else once (a chord method,
            # as for the pose rows).
            fresh = relinearize or mgrad is None
            mres, gradient = _metric_block(pose, metrics, fresh)
            if fresh:
                mgrad = gradient
            measured_at = pose
        # Metric rows are strongly curved: a single pose's metric request re-linearizes
        # every step. Otherwise the first Jacobian, and its factorization while no step
        # fails, serve every step (a chord method; the exact-reach pass removes what is
        # left).
        if hess is None or relinearize:
            hess = jac.transpose(0, 2, 1) @ (jac * row_w[:, :, None])
            if metrics is not None:
                mjac = mgrad @ jac  # (B, M, K + 2)
                hess += mjac.transpose(0, 2, 1) @ mjac
            if spans is not None:
                _, rjac = _rigid_block(pose, jac, spans)
                hess += rjac.transpose(0, 2, 1) @ rjac
            scale = np.einsum("bii->b", hess) / n_vars
            hess += prior * eye
            inverse = None
        if inverse is None:
            inverse = np.linalg.inv(hess + (damping * scale)[:, None, None] * eye)
        grad = (((pose.reshape(b, -1) - goal) * row_w)[:, None, :] @ jac)[:, 0]
        grad += prior * (v - v_net)
        if metrics is not None:
            grad += (mres[:, None, :] @ mjac)[:, 0]
        if spans is not None:
            grad += (rres[:, None, :] @ rjac)[:, 0]
        v_try = v - (inverse @ grad[..., None])[..., 0]
        pose_try = point.pose(v_try)
        cost_try, rres_try = _cost(pose_try, v_try, v_net, goal, row_w, metrics, prior, spans)
        better = cost_try < cost
        if not better.all():
            damping = np.where(better, damping, damping * LM_UP)
            inverse = None
        elif relinearize:
            damping = damping * LM_DOWN
        if not relinearize and not better.any():
            break
        v = np.where(better[:, None], v_try, v)
        cost = np.where(better, cost_try, cost)
        if spans is not None:
            rres = np.where(better[:, None], rres_try, rres)
        if relinearize and better.any():
            pose, jac = point.linearize(v)
        else:
            pose = np.where(better[:, None, None], pose_try, pose)
    return point.latent(v).astype(np.float32), pose, v[:, -2:]
