"""The rigid branches' rows: the distances between the pelvis's children and the chest's."""

from __future__ import annotations

import numpy as np

from ..quaternions import norm
from .layout import _POSE_DIM
from .weights import _RIGID_PAIRS, _RIGID_SIGNS, RIGID_WEIGHT


def _rigid_gaps(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vectors between each rigid branch's children in ``pose`` (B, 21, 3), (B, 6, 3),
    and their lengths (B, 6)."""
    gap = pose[:, _RIGID_PAIRS[0]] - pose[:, _RIGID_PAIRS[1]]
    return gap, norm(gap)


def rigid_spans(pose: np.ndarray) -> np.ndarray:
    """(B, 6) the distances between each rigid branch's children in ``pose`` (B, 21, 3):
    what :func:`refine` keeps (``spans``)."""
    return _rigid_gaps(pose)[1]


def _rigid_block(pose: np.ndarray, jac: np.ndarray | None, spans: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """Weighted rigid-branch residuals (B, 6), each child distance off its span, and,
    given the pose's Jacobian (B, 63, V), their Jacobian (B, 6, V)."""
    gap, dist = _rigid_gaps(pose)
    scale = np.sqrt(RIGID_WEIGHT)
    res = (dist - spans) * scale
    if jac is None:
        return res, None
    unit = gap * (scale / np.maximum(dist, 1e-12))[..., None]
    # d dist / d pose: +unit on the first joint of a pair, -unit on the second.
    rows = (_RIGID_SIGNS[..., None] * unit[:, :, None, :]).reshape(len(pose), -1, _POSE_DIM)
    return res, rows @ jac
