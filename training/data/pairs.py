"""(x, x') pairs, as the seed papers draw them: a frame and another frame of the same clip at
most a few frames away. One sampler for the evaluation, the engine benchmark and the
Blender-side benchmark (training draws its own, with torch, from the same constants)."""

from __future__ import annotations

import numpy as np

SOLVER_PAIR_OFFSET = 20  # frames: x' within +-20 frames of x (2021 paper)
METRIC_PAIR_OFFSET = 10  # frames: the 2023 paper's n in [-10, 10]


def clip_bounds(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per frame of clips laid end to end: the first and last index of its clip."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    return np.repeat(starts, lengths), np.repeat(starts + lengths - 1, lengths)


def pair_indices(first: np.ndarray, last: np.ndarray, n: int, max_offset: int,
                 rng: np.random.Generator, candidates: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` frames i (uniform over ``candidates``, default every frame) and frames j of the
    same clip at most ``max_offset`` away."""
    pool = np.arange(len(first)) if candidates is None else np.asarray(candidates)
    i = rng.choice(pool, size=n)
    j = np.clip(i + rng.integers(-max_offset, max_offset + 1, n), first[i], last[i])
    return i, j
