"""Our app handlers and timers, added and removed one way: a handler at most once, a
timer started only when not running, and both removable exactly (a timer left registered
hangs bpy 4.5 at exit)."""

from __future__ import annotations

from collections.abc import Callable

import bpy


def set_installed(handlers: list, func: Callable, installed: bool) -> None:
    """Put ``func`` in (or take it out of) a ``bpy.app.handlers`` list, once."""
    present = func in handlers
    if installed and not present:
        handlers.append(func)
    elif not installed and present:
        handlers.remove(func)


def start_timer(func: Callable, first_interval: float = 0.0) -> None:
    """Run ``func`` from a persistent timer, unless it is already waiting."""
    if not bpy.app.timers.is_registered(func):
        bpy.app.timers.register(func, first_interval=first_interval, persistent=True)


def stop_timer(func: Callable) -> None:
    if bpy.app.timers.is_registered(func):
        bpy.app.timers.unregister(func)
