"""Contacts and unusual poses: hands and knees on the floor held, and poses the mocap hardly
holds solved by the least change."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .. import rig_ik, skeleton
from ..normalize import (
    leg_scale,
)
from .constants import (
    _ANKLES,
    _CANONICAL_LEG,
    _CONTACT_FREED_BY,
    _CONTACTS,
    _LEAST_CHANGE_HOLD,
    _NECK,
    _ORDINARY_ROWS,
    _TOES,
    CONTACT_HEIGHT,
    LEAST_CHANGE_STAY_DECAY,
    LEAST_CHANGE_TILT_DEG,
    LOW_PELVIS_HEIGHT,
    MISS_NOTE_M,
    PLANTED_ANKLE_HEIGHT,
    PLANTED_TOE_HEIGHT,
    REACH_TOLERANCE,
    ROOT,
    START_CACHE_SIZE,
)
from .notes import _reach_notes
from .request import _hold_planted_feet, effector_errors
from .sliders import _moves_legs
from .start import _on_feet
from .types import EditResult, SolveOptions


class _Contacts:
    """PoseEditor's contacts and the least change for unusual poses."""

    def _hold_contacts(self, p: np.ndarray, mask: np.ndarray, t: np.ndarray, w: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pins on the hands and knees that touch the floor (:data:`CONTACT_HEIGHT`, the
        rig's heights scaled as model space scales them) and that no effector frees, as the
        planted feet are held: a body kneeling, crawling or lying keeps its contacts."""
        heights = p[:, _CONTACTS, 1]
        if self._rig_scale is not None:
            heights = heights * self._rig_scale[0]
        elif heights.min() < CONTACT_HEIGHT * 4:  # (a rig of any size: its own scale)
            heights = heights * leg_scale(skeleton.bone_lengths(p))[:, None]
        low = heights < CONTACT_HEIGHT
        if not low.any():
            return mask, t, w
        for k, joints in enumerate(_CONTACT_FREED_BY):
            low[:, k] &= ~(mask[:, joints] > 0).any(axis=1)
        if not low.any():
            return mask, t, w
        hold = np.zeros(mask.shape, dtype=bool)
        hold[:, _CONTACTS] = low
        return (np.where(hold, 1.0, mask), np.where(hold[..., None], p, t),
                np.where(hold, 1.0, w))

    def _ordinary(self, p: np.ndarray) -> bool:
        """A single pose on this editor's rig, upright, its pelvis high and no hand or knee
        near the floor: nothing for the contacts or the least change to do. Checked in plain
        floats (a Live drag update's pose; numpy's calls on these few numbers cost tens of
        microseconds)."""
        if len(p) != 1:
            return False
        key = p.tobytes()  # (a drag solves one start pose on every update: kept)
        if (known := self._ordinary_poses.get(key)) is not None:
            return known
        if len(self._ordinary_poses) >= START_CACHE_SIZE:
            self._ordinary_poses.pop(next(iter(self._ordinary_poses)))
        self._ordinary_poses[key] = known = self._ordinary_now(p)
        return known

    def _ordinary_now(self, p: np.ndarray) -> bool:
        """:meth:`_ordinary`, measured (the pose's own leg scale without the rig's)."""
        c1, c2, c3, c4, pelvis, neck, la, ra, lt, rt = p[0, _ORDINARY_ROWS].tolist()
        scale = self._rig_scale_value
        if scale is None:  # normalize.leg_scale of the pose's own bones
            leg = 0.5 * (math.dist(lt, c3) + math.dist(c3, la) + math.dist(rt, c4)
                         + math.dist(c4, ra))
            if not leg > 0.0:
                return False
            scale = _CANONICAL_LEG / leg
        if min(c1[1], c2[1], c3[1], c4[1]) * scale < CONTACT_HEIGHT \
                or pelvis[1] * scale < LOW_PELVIS_HEIGHT:
            return False
        x, y, z = (neck[0] - 0.5 * (la[0] + ra[0]), neck[1] - 0.5 * (la[1] + ra[1]),
                   neck[2] - 0.5 * (la[2] + ra[2]))
        return y >= math.cos(math.radians(LEAST_CHANGE_TILT_DEG)) * math.sqrt(
            x * x + y * y + z * z)

    def _scale(self, p: np.ndarray) -> np.ndarray:
        """(B,) the pelvis-height factor model space gives each pose (the rig's, else each
        pose's own)."""
        if self._rig_scale is not None:
            return np.broadcast_to(self._rig_scale, (len(p),))
        return leg_scale(skeleton.bone_lengths(p))

    def _unfamiliar(self, p: np.ndarray, contacts: np.ndarray) -> np.ndarray:
        """(B,) poses the mocap hardly holds (see :data:`LOW_PELVIS_HEIGHT`): a trunk past
        horizontal (:data:`LEAST_CHANGE_TILT_DEG`), a held contact (``contacts`` (B, 21):
        the hands and knees :meth:`_hold_contacts` holds), or a low pelvis."""
        axis = p[:, _NECK] - p[:, _ANKLES].mean(axis=1)
        tilted = axis[:, 1] < math.cos(math.radians(LEAST_CHANGE_TILT_DEG)) * np.sqrt(
            np.add.reduce(axis * axis, axis=-1))
        odd = tilted | contacts[:, _CONTACTS].any(axis=1)
        if not odd.all():
            odd |= p[:, ROOT, 1] * self._scale(p) < LOW_PELVIS_HEIGHT
        return odd

    def _least_change_of(self, odd: np.ndarray, p: np.ndarray, mask: np.ndarray,
                         t: np.ndarray, w: np.ndarray, user_mask: np.ndarray,
                         options: SolveOptions, each_pose: bool, drag: bool) -> EditResult:
        """The ``odd`` poses by the least change: rig IK from the start pose with the goals
        (effectors, held contacts, the planted feet) exact and the rest held as the least
        change holds it; the others, and those whose goals it leaves over
        :data:`MISS_NOTE_M` off (a far head: the networks' path settles the body and bends
        the trunk), by the networks as usual."""
        out = p.copy()
        rows = np.flatnonzero(odd)
        q, m, tq = p[rows], mask[rows], t[rows]
        scale = self._scale(q)
        feet = _on_feet((q[:, _TOES, 1] * scale[:, None] < PLANTED_TOE_HEIGHT)
                        | (q[:, _ANKLES, 1] * scale[:, None] < PLANTED_ANKLE_HEIGHT))
        m, tq, _ = _hold_planted_feet(feet[:, _ANKLES], q, m, tq, w[rows],
                                      REACH_TOLERANCE / scale)
        out[rows] = rig_ik.solve(q, m > 0, tq, REACH_TOLERANCE / scale, rig_ik.ITERATIONS,
                                 stay_decay=LEAST_CHANGE_STAY_DECAY, rest=q,
                                 stay_scale=_LEAST_CHANGE_HOLD)
        missed = effector_errors(out, t, mask).max(axis=1) > MISS_NOTE_M / self._scale(p)
        if (others := ~odd | missed).any():
            keep = np.flatnonzero(others)
            out[keep] = self._solve_once(p[keep], user_mask[keep], t[keep], w[keep] * (
                user_mask[keep] > 0), {}, options, each_pose, drag, unfamiliar=False
            ).positions
        errors = effector_errors(out, t, user_mask)
        notes = [] if drag else _reach_notes(p, (mask > 0) & (w >= 1.0), t, errors, user_mask)
        return EditResult(out, None, errors, notes)

    def _plants_feet(self, options: SolveOptions, metric_names: Iterable[str]) -> bool:
        """Whether an edit holds the planted feet: asked to, and no metric request on the
        legs (asking for one moves the feet)."""
        return options.keep_planted_feet and not any(
            _moves_legs(self._metrics[name].metric) for name in metric_names)

    # -- public API -------------------------------------------------------------------
