"""The effector request between the start and the networks: planted feet held, what moved,
the floor shift."""

from __future__ import annotations

import numpy as np

from .constants import _ANKLES, _TOES, _XYZ_SUM, MOVED_M
from .start import _on_feet


def effector_errors(out: np.ndarray, t: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, 21) each effector's distance to its target (0 off ``mask``)."""
    diff = out - t
    return np.sqrt((diff * diff) @ _XYZ_SUM) * (mask > 0)


def _moved(mask: np.ndarray, targets: np.ndarray, pose: np.ndarray,
           tolerance: float | np.ndarray = MOVED_M) -> np.ndarray:
    """(B, 21) the effectors whose target is off their joint (by more than ``tolerance``,
    model metres unless given in the pose's units)."""
    return (mask > 0) & (np.abs(targets - pose).max(axis=-1) > tolerance)


def _shift3(shift: np.ndarray) -> np.ndarray:
    """(B, 2) floor shifts (x, z) -> (B, 3) vectors."""
    out = np.zeros((len(shift), 3))
    out[:, ::2] = shift
    return out


def _hold_planted_feet(feet_down: np.ndarray, p: np.ndarray, mask: np.ndarray,
                       t: np.ndarray, w: np.ndarray, unmoved: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pins on the ankle and toe of every foot that touches the floor (``feet_down`` (B, 2),
    :func:`_feet_down`) and carries no effector, and on the toe of one whose ankle effector
    stays within ``unmoved`` (B,) of the ankle (a pinned foot keeps its toe down too); each
    pose decides for itself."""
    down = feet_down & (mask[:, _TOES] <= 0)
    if not down.any():
        return mask, t, w
    ankle_free = mask[:, _ANKLES] <= 0
    toes = down & ankle_free
    plant = _on_feet(toes)
    if not ankle_free.all():  # (a single pose's drag mostly has none on the ankles)
        toes |= down & ~ankle_free & (
            np.linalg.norm(t[:, _ANKLES] - p[:, _ANKLES], axis=-1) <= unmoved[:, None])
        plant[:, _TOES] = toes
    if not plant.any():
        return mask, t, w
    mask, w = np.where(plant, 1.0, mask), np.where(plant, 1.0, w)
    return mask, np.where(plant[..., None], p, t), w
