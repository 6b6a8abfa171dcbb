"""Re-entrancy guards: our own writes must not trigger our own handlers and callbacks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_DEPTH = {"busy": 0, "suspended": 0}


@contextmanager
def busy() -> Iterator[None]:
    """While set, the live handler ignores depsgraph updates (our own writes cause them)."""
    _DEPTH["busy"] += 1
    try:
        yield
    finally:
        _DEPTH["busy"] -= 1


def is_busy() -> bool:
    return _DEPTH["busy"] > 0


@contextmanager
def updates_suspended() -> Iterator[None]:
    """Set properties (metric requests, mapping items) without their update callbacks
    editing the pose or marking the mapping as edited by hand."""
    _DEPTH["suspended"] += 1
    try:
        yield
    finally:
        _DEPTH["suspended"] -= 1


def is_suspended() -> bool:
    return _DEPTH["suspended"] > 0
