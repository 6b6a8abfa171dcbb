"""What an edit of an armature keeps between live updates, and the one way to drop it.

Live updates must cost little beside the solve itself, so what an edit needs and what does
not change while the user drags (the rig, the effectors' settings, the metric requests,
the base pose as arrays, the pose as last written, the start pose's joints) is kept per
armature between updates, as arrays and names only (never bpy references: an undo kills
them). Everything that can change it calls :func:`invalidate`: operators, undo and redo,
file loads, Edit Mode, and the update callbacks of the mapping, effector, metric and model
settings. It drops every cache of the armature (kept state, rig, editors); the rig's own
cache key also covers the rest matrices, so a rest pose changed in Edit Mode is read again.
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np

from . import base_pose, editors, empties, mapped_rig, metric_requests, rig_io
from .base_pose import BasePose
from .core.models import ModelSet
from .core.pipeline import PoseEditor
from .guard import is_suspended


@dataclass
class ArmatureState:
    """An armature's edit state, kept between live updates (see the module's docstring)."""

    info: rig_io.RigInfo
    effectors: tuple[empties.Spec, ...]
    requests: dict[str, float]
    base: BasePose | None
    solved: np.ndarray  # (E, 16) the empties' world matrices at the last solve
    pose: rig_io.Pose | None = None  # the pose as the add-on last wrote it
    _start: tuple = ()  # (pose origin, base, world matrix, quats, locations, start)
    _editor: tuple = ()  # (models, editor)
    _inverse: tuple = ()  # (world matrix, its inverse)

    def base_is_current(self, pose: rig_io.Pose, frame: int) -> bool:
        if pose is self.pose and self.base is not None:  # nothing moved since our write
            return self.base.frame == frame
        return base_pose.base_is_current(self.base, self.info, pose, frame)

    def start(self, pose: rig_io.Pose, keep_base: bool, matrix_world: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local rotations and locations the edit starts from, and their joints in core
        space: the same while the base and the unmapped bones stay (kept, read-only)."""
        mw = matrix_world.tobytes()
        kept = self._start
        if keep_base and kept and kept[0] is pose.origin and kept[1] is self.base \
                and kept[2] == mw:
            return kept[3:]
        if keep_base:
            quats, locs = base_pose.base_arrays(self.info, self.base, pose)
        else:
            quats, locs = pose.quats, pose.locations
        joints, _ = rig_io.joint_positions(self.info, quats, locs)
        start = rig_io.armature_to_core(matrix_world, joints)
        if keep_base:
            for a in (quats, locs, start):
                a.flags.writeable = False
            self._start = (pose.origin, self.base, mw, quats, locs, start)
        return quats, locs, start

    def to_armature(self, matrix_world: np.ndarray, points: np.ndarray) -> np.ndarray:
        """:func:`.rig_io.core_to_armature`, the inverse world matrix kept."""
        mw = matrix_world.tobytes()
        if not self._inverse or self._inverse[0] != mw:
            self._inverse = (mw, np.linalg.inv(matrix_world))
        return rig_io.core_to_armature(matrix_world, points, self._inverse[1])

    def editor(self, obj: bpy.types.Object, models: ModelSet | None) -> PoseEditor:
        kept = self._editor
        if kept and kept[0] is models:
            return kept[1]
        editor = editors.editor_for(obj, self.info, models)
        self._editor = (models, editor)
        return editor


_KEPT: dict[str, ArmatureState] = {}


def invalidate(obj_name: str | None = None) -> None:
    """Drop every cache of one armature (all when None): its kept edit state, its rig and
    its editors; they are built again from the Blender data at the next edit."""
    rig_io.forget(obj_name)
    editors.forget(obj_name)
    if obj_name is None:
        _KEPT.clear()
    else:
        _KEPT.pop(obj_name, None)


def is_kept(obj_name: str) -> bool:
    """Whether the armature has a kept state (an undo or an operator drops it)."""
    return obj_name in _KEPT


def get(scene: bpy.types.Scene, obj: bpy.types.Object, fresh: bool) -> ArmatureState:
    """The armature's edit state: kept (live updates) or built afresh (operators)."""
    state = None if fresh else _KEPT.get(obj.name)
    if state is not None and len(obj.npe.effectors) == len(state.effectors) \
            and len(obj.pose.bones) == len(state.info.names):
        return state
    info = mapped_rig.rig_for(obj, fresh=fresh)
    state = ArmatureState(info, empties.specs(scene, obj, info),
                          metric_requests.requested_metrics(obj),
                          base_pose.read_base(obj, info), empties.solved_matrices(obj))
    _KEPT[obj.name] = state
    return state


def mapping_changed(armature: bpy.types.Armature) -> None:
    """A joint's bone was picked by hand: every rig of this armature data is stale."""
    for obj in bpy.data.objects:
        if obj.data == armature:
            invalidate(obj.name)
    if not is_suspended():
        armature.npe_mapping.source = "edited"
        armature.npe_mapping.warning = ""  # Map Rig's finding may no longer hold
