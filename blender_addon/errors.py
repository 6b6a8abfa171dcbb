"""What an edit tells the user: :class:`EditError` (something to fix), :class:`Outcome`
(what was done) and the status lines of edits that have no operator to report through
(live updates, sliders, model set choices).

Every module of the bpy layer raises :class:`EditError` with a message saying what to do;
operators turn it into an error report, the live handler and property callbacks into a
status line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Status lines: key (an armature's name, "models" or "metrics") -> the last error there.
STATUS: dict[str, str] = {}


class EditError(Exception):
    """Something the user must fix; the message says what."""


@dataclass
class Outcome:
    """What an edit did, for the operator's report."""

    message: str
    notes: list[str] = field(default_factory=list)
    deferred: bool = False  # a live edit left refinement and measuring for the drag's pause


def check_finite(*arrays: np.ndarray) -> None:
    """A NaN or infinity anywhere makes the sum one (a single cheap reduction each)."""
    if not all(np.isfinite(np.sum(a)) for a in arrays):
        raise EditError("The solve produced invalid numbers (NaN): nothing was changed. "
                        "Move the effectors closer to the body or try the Classic solver")
