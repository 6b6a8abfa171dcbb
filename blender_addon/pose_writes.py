"""Which armatures the add-on wrote a pose to since Live mode last looked at their
controls (a leaf module: the writers mark, :mod:`.live_controls` takes the mark, and
neither imports the other).

A write of the add-on's moves the controls it maps (the pelvis's location, FK controls
put where an IK limb is): that is no move of the user's, and the next look at the
armature's controls takes their places as they are instead of solving.
"""

from __future__ import annotations

_WRITTEN: set[str] = set()


def mark(obj_name: str) -> None:
    """The add-on wrote the pose of this armature."""
    _WRITTEN.add(obj_name)


def take(obj_name: str) -> bool:
    """Whether the add-on wrote this armature's pose since the last call (the mark goes)."""
    if obj_name in _WRITTEN:
        _WRITTEN.discard(obj_name)
        return True
    return False


def clear() -> None:
    _WRITTEN.clear()
