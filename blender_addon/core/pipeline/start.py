"""The start pose's preparation (:class:`_Start`): model space, frame, which feet touch
the floor, how upright it is, the rig's lengths in model units."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import refine, skeleton
from ..normalize import (
    BodyFrame,
    offset_scales,
    set_bone_lengths,
    to_model_space_unchecked,
)
from .constants import (
    _ANKLES,
    _TOES,
    FAMILIAR_TILT_DEG,
    PLANTED_ANKLE_HEIGHT,
    PLANTED_TOE_HEIGHT,
    UNFAMILIAR_TILT_DEG,
)


@dataclass(frozen=True)
class _Start:
    """What an edit needs of its start pose alone (B, 21, 3), read-only: its model space and
    frame, which feet touch the floor and, made when first asked, the rig's bone lengths in
    model units and the pose with them. A drag solves the same start pose on every update:
    a single pose's is made once (:meth:`PoseEditor._start`)."""
    model: np.ndarray
    frame: BodyFrame
    turn: np.ndarray
    feet_down: np.ndarray  # (B, 2) :func:`_feet_down`

    @classmethod
    def of(cls, p: np.ndarray, lengths: np.ndarray | None, scale: np.ndarray | None
           ) -> _Start:
        model, frame, turn = to_model_space_unchecked(p, lengths, scale)
        return cls(*_read_only(model, frame, turn, _feet_down(model)))

    @functools.cached_property
    def rig_lengths(self) -> np.ndarray:
        """(B, 21) the rig's bone lengths in model units."""
        return _read_only(self.frame.lengths * np.asarray(self.frame.scale)[:, None])[0]

    @functools.cached_property
    def rig_model(self) -> np.ndarray:
        """The model-space pose with the rig's bone lengths."""
        return _read_only(set_bone_lengths(self.model, self.rig_lengths))[0]

    @functools.cached_property
    def offset_scales(self) -> np.ndarray:
        """(B, 21) :func:`.normalize.offset_scales`: each joint's target offset into the
        networks' model space."""
        return _read_only(offset_scales(np.asarray(self.frame.lengths, dtype=np.float64),
                                        np.asarray(self.frame.scale, dtype=np.float64)))[0]

    @functools.cached_property
    def familiarity(self) -> np.ndarray:
        """(B,) :func:`familiarity` of the pose."""
        return _read_only(familiarity(self.model))[0]

    @functools.cached_property
    def spans(self) -> np.ndarray:
        """(B, 6) :func:`refine.rigid_spans` of :attr:`rig_model`."""
        return _read_only(refine.rigid_spans(self.rig_model))[0]



def familiarity(model: np.ndarray) -> np.ndarray:
    """(B,) 1 for poses (B, 21, 3) upright enough for the mocap to show them, falling to 0
    for a body lying down or upside down (:data:`FAMILIAR_TILT_DEG`): there the learned
    idea of how the body joins a drag is not to be trusted."""
    axis = model[:, skeleton.JOINT_INDEX["neck"]] - model[:, _ANKLES].mean(axis=1)
    cos = axis[:, 1] / np.maximum(np.sqrt(np.add.reduce(axis * axis, axis=-1)), 1e-12)
    tilt = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))
    return np.clip((UNFAMILIAR_TILT_DEG - tilt) / (UNFAMILIAR_TILT_DEG - FAMILIAR_TILT_DEG),
                   0.0, 1.0)


def _read_only(*values: object) -> tuple:
    """The values with their arrays (a frame's too) made read-only: kept between solves,
    they must not be changed by one."""
    for v in values:
        for a in vars(v).values() if isinstance(v, BodyFrame) else (v,):
            if isinstance(a, np.ndarray):
                a.flags.writeable = False
    return values


def _feet_down(model: np.ndarray) -> np.ndarray:
    """(B, 2) whether each foot (left, right) touches the floor: its toe or ankle low."""
    return ((model[:, _TOES, 1] < PLANTED_TOE_HEIGHT)
            | (model[:, _ANKLES, 1] < PLANTED_ANKLE_HEIGHT))


def _on_feet(feet: np.ndarray, parts: tuple[np.ndarray, ...] = (_ANKLES, _TOES)
             ) -> np.ndarray:
    """(B, 2) per-foot flags -> (B, 21) on those joints of each flagged foot (left, right
    columns of each of ``parts``: by default its ankle and toe)."""
    out = np.zeros((len(feet), skeleton.NUM_JOINTS), dtype=bool)
    for joints in parts:
        out[:, joints] = feet
    return out


def planted_feet(model: np.ndarray) -> np.ndarray:
    """(B, 21) True on the ankle and toe of each foot that touches the floor, from model-space
    poses (B, 21, 3)."""
    return _on_feet(_feet_down(model))
