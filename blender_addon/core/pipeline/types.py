"""The engine API's types: how an edit runs (:class:`SolveOptions`), a target
(:class:`Effector`), its answer (:class:`EditResult`), and the one check of input poses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import skeleton
from .constants import (
    COMBINE_MODES,
    DEFAULT_BODY_FOLLOW,
    DEFAULT_REFINE_STEPS,
    MAX_REFINE_STEPS,
    SOLVERS,
)


@dataclass
class SolveOptions:
    """How one edit runs; every field is a panel option in the add-on, and the defaults are
    the panel's (what a user gets is what the engine API measures)."""
    solver: str = "universal"  # universal | chained | classic
    combine: str = "average"  # average | sequence
    refine_steps: int = DEFAULT_REFINE_STEPS  # latent refinement steps (0 = off)
    fix_lengths: bool = True  # back to the rig's bone lengths (and exact reach when refining)
    keep_details: bool = True  # decode the change and add it to the input pose
    keep_planted_feet: bool = True  # feet, hands, knees on the floor, not effectors, stay
    body_follow: float = DEFAULT_BODY_FOLLOW  # 0: only what is needed moves; 1: learned

    def check(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.combine not in COMBINE_MODES:
            raise ValueError(f"combine must be one of {COMBINE_MODES}, got {self.combine!r}")
        if not 0 <= self.refine_steps <= MAX_REFINE_STEPS:
            raise ValueError(f"refine_steps must be in 0..{MAX_REFINE_STEPS}, "
                             f"got {self.refine_steps}")
        if not (math.isfinite(self.body_follow) and 0.0 <= self.body_follow <= 1.0):
            raise ValueError(f"body_follow must be in [0, 1], got {self.body_follow}")


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
