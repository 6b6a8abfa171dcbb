"""The settling shift of :mod:`blender_addon.core.exact_reach`, on geometry made here."""

from __future__ import annotations

import numpy as np

from blender_addon.core import exact_reach
from blender_addon.core.quaternions import norm

LEG_M, TRUNK_M = 0.8, 0.3
# Hips over their ankles with straight legs, the spine joint above them, and a head goal
# up and 20 cm to the side: the body must shift about 3.5 cm towards it and drop a little
# so the legs still reach (four projection passes left the feet 4.9 mm out).
HIPS = np.array([[0.1, LEG_M, 0.0], [-0.1, LEG_M, 0.0]])
ANKLES = HIPS * np.array([1.0, 0.0, 1.0])
SPINE = np.array([0.0, 0.85, 0.0])
HEAD_GOAL = np.array([0.2, 1.1, 0.0])
LEAST_SHIFT_M = 0.0354  # measured: the points end on their spheres, no deeper
UP_20_CM = np.array([0.0, 0.2, 0.0])
STALLED_PASSES = 12  # measured 11 (_SETTLE_STALL + 1); without the stop, 100


def test_the_settling_shift_reaches_every_held_point_with_the_least_move() -> None:
    start = np.r_[HIPS, SPINE[None]][None]
    goal = np.r_[ANKLES, HEAD_GOAL[None]][None]
    reach = np.array([[LEG_M, LEG_M, TRUNK_M]])
    shift = exact_reach._least_shift(start, goal, reach, np.ones((1, 3), dtype=bool))
    over = norm(start + shift[:, None] - goal) - reach
    assert (over <= exact_reach._SETTLE_SLACK * reach).all(), over
    assert norm(shift)[0] < LEAST_SHIFT_M


def test_goals_no_shift_reaches_end_the_passes_early(monkeypatch) -> None:
    """A head goal above what straight legs allow: no shift holds all three; the passes
    stop once the overshoot stops shrinking (the caller then settles the feet alone)."""
    start = np.r_[HIPS, SPINE[None]][None]
    goal = np.r_[ANKLES, (HEAD_GOAL + UP_20_CM)[None]][None]
    reach = np.array([[LEG_M, LEG_M, TRUNK_M]])
    norms = []  # one per held point and pass

    def counted(v: np.ndarray) -> np.ndarray:
        norms.append(1)
        return norm(v)

    monkeypatch.setattr(exact_reach, "norm", counted)
    exact_reach._least_shift(start, goal, reach, np.ones((1, 3), dtype=bool))
    assert len(norms) // 3 <= STALLED_PASSES, len(norms) // 3
