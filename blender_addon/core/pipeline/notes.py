"""The notes a solve returns: effectors missed, and why (the reach bound, planted feet)."""

from __future__ import annotations

import math

import numpy as np

from .. import reach_bounds, skeleton
from .constants import _FREE_FEET, MISS_NOTE_M, SHORT_MARK


def _notes_due(p: np.ndarray, errors: np.ndarray) -> bool:
    """Whether :func:`_reach_notes` has anything to say: a single pose that misses an
    effector by more than :data:`MISS_NOTE_M` (on a list: a small array's reduce costs
    more)."""
    return len(p) == 1 and max(errors[0].tolist()) > MISS_NOTE_M


def _reach_notes(p: np.ndarray, held: np.ndarray, t: np.ndarray, errors: np.ndarray,
                 user_mask: np.ndarray | None = None, refined: bool = True,
                 reach: tuple[np.ndarray, np.ndarray] | None = None) -> list[str]:
    """For a single pose that misses an effector by more than :data:`MISS_NOTE_M`: which
    moved targets no pose of the rig can reach from the goals ``held`` firmly (B, 21: the
    full-weight effectors and the planted feet, the held joints off ``user_mask`` (B, 21),
    the user's effectors), so the user knows to move or free one; then every other
    full-weight effector still that far off, and what the solve held while it looked
    (:data:`SHORT_MARK`). Two goals further apart than the bones between them are the
    bound's; three or more that pull against each other (a hand pulled up past what
    straight legs on two planted feet allow) pass it, and a hand left centimetres short
    with nothing said looked like a broken solve (random pulls of one end on the synthetic
    clip: 46 of 400 solves missed by over 1 mm unsaid). Not ``refined``: the networks'
    answer stands, and the note says that instead. ``reach``: the bound's answer where the
    caller has it (the end kernel's)."""
    if not _notes_due(p, errors):
        return []
    # One pose's few notes in scalar math (a solve without refinement writes some each time).
    over, other = (a[0].tolist() for a in reach or reach_bounds.beyond_reach(p, held, t))
    notes = reach_bounds.describe(over, other, MISS_NOTE_M)
    holds, misses = held[0].tolist(), errors[0].tolist()
    short = [h and m > MISS_NOTE_M and o <= MISS_NOTE_M
             for h, m, o in zip(holds, misses, over, strict=True)]
    for o, k in zip(over, other, strict=True):
        if o > MISS_NOTE_M:  # named, and the goal it is held against: said already
            short[k] = False
    shorts = [j for j, flag in enumerate(short) if flag]
    heads = [f"{skeleton.JOINTS[j]}: {misses[j] * reach_bounds.CM:.1f} cm {SHORT_MARK}: "
             for j in shorts]
    if not refined:
        return notes + [head + "with Refinement at 0 the networks' answer stands (raise it to "
                        "reach the target)" for head in heads]
    feet = [h and u <= 0 for h, u in zip(holds, user_mask[0].tolist(), strict=True)] \
        if user_mask is not None else [False] * skeleton.NUM_JOINTS
    goals = [k for k, (h, f) in enumerate(zip(holds, feet, strict=True)) if h and not f]
    planted = any(feet)  # (the goals above: the held ones bar the planted feet)
    start, aims = p[0].tolist(), t[0].tolist()
    for j, head in zip(shorts, heads, strict=True):
        pins = [skeleton.JOINTS[k] for k in goals if k != j]
        holding = (["the planted feet"] if planted else []) + (
            [f"the {', '.join(pins)} goal{'s' if len(pins) > 1 else ''}"] if pins else [])
        free = ("free one of them" + (f" ({_FREE_FEET})" if planted else "")) if pins \
            else _FREE_FEET
        nearer = "move it nearer" if math.dist(aims[j], start[j]) > MISS_NOTE_M \
            else "move the moved targets nearer"  # a held goal the others pulled off
        why = (f"while holding {' and '.join(holding)}: {nearer}, or {free}"
               if holding else f"from where the body stands: {nearer}")
        notes.append(f"{head}no pose was found that reaches it {why}")
    return notes
