"""Inside bpy: how the Blender-side benchmark measures: per-run summaries, and a stage
timer that wraps the add-on's functions to split a run's time by stage."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

MS = 1e3
MM = 1e3
CM = 1e2


def summary(times: Sequence[float]) -> dict[str, float]:
    """Median, p95 and p10 in milliseconds of times in seconds (on a shared machine the
    p10 is the closest to the uncontended cost)."""
    t = np.asarray(times) * MS
    return {"median_ms": float(np.median(t)), "p95_ms": float(np.percentile(t, 95)),
            "p10_ms": float(np.percentile(t, 10)), "mean_ms": float(t.mean()), "n": len(t)}


def _clocks() -> np.ndarray:
    """(wall, this thread's CPU) seconds: the CPU clock shrugs off a busy machine's waits."""
    return np.array([time.perf_counter(), time.thread_time()])


class StageTimer:
    """Exclusive time per stage, wall clock and CPU, by wrapping functions in place (nested
    stages subtract from their caller; a stage marked ``absorb`` keeps its callees' time
    as its own)."""

    def __init__(self) -> None:
        self.totals: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(2))
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[np.ndarray] = []  # per open stage: time spent in its child stages
        self._absorbing = 0
        self._restore: list[tuple[Any, str, Any]] = []

    def _enter(self) -> np.ndarray:
        self._stack.append(np.zeros(2))
        return _clocks()

    def _exit(self, label: str, start: np.ndarray) -> None:
        elapsed = _clocks() - start
        children = self._stack.pop()
        self.totals[label] += elapsed - children
        self.calls[label] += 1
        if self._stack:
            self._stack[-1] += elapsed

    def wrap(self, owner: Any, attr: str, label: str, absorb: bool = False) -> None:
        original = getattr(owner, attr)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if timer._absorbing:
                return original(*args, **kwargs)
            start = timer._enter()
            timer._absorbing += absorb
            try:
                return original(*args, **kwargs)
            finally:
                timer._absorbing -= absorb
                timer._exit(label, start)

        self._restore.append((owner, attr, original))
        setattr(owner, attr, timed)

    @contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Time a block as a stage (the outermost one: one live update)."""
        start = self._enter()
        try:
            yield
        finally:
            self._exit(label, start)

    def per_call_ms(self, labels: Sequence[str], n: int, cpu: bool = False) -> dict[str, float]:
        """Mean milliseconds per one of ``n`` repetitions, per stage."""
        return {s: float(self.totals[s][int(cpu)] / n * MS) for s in labels}

    def restore(self) -> None:
        for owner, attr, original in reversed(self._restore):
            setattr(owner, attr, original)
        self._restore.clear()
