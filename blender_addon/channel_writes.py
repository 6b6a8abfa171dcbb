"""Pose channels of a rig's controls set by name and written together.

A channel set through RNA (``pb.location = ...``, ``pb.matrix = ...``) tags the
armature's data for re-evaluation as well as its object, and Blender then redoes far
more: the next evaluation of the generated Rigify rig took 5.1-5.3 ms after one such set,
against 3.2 ms after a ``foreach_set`` of the same channel with the object's own
component tagged, which is all the pose needs (bpy 4.5, medians of 60; the finding
:func:`.rig_io.write_channels` already follows). The IK/FK snaps (:mod:`.ik_snap`) set a
few controls per pass and evaluate after each: they set them here and
:meth:`ChannelWrites.flush` once per pass.
"""

from __future__ import annotations

import bpy
import numpy as np

WIDTHS = {"location": 3, "rotation_quaternion": 4, "rotation_euler": 3,
          "rotation_axis_angle": 4, "scale": 3}
# armature -> its pose bones' indices by name (``find`` takes some 16 us a bone on the
# generated Rigify rig's 706); checked at each use, made again when a bone moved.
_INDICES: dict[str, dict[str, int]] = {}


class ChannelWrites:
    """Channel values set on pose bones of one armature, kept until :meth:`flush`. Read
    them back with :meth:`value` (what the bone will hold): RNA shows the old value until
    then."""

    def __init__(self, obj: bpy.types.Object) -> None:
        self.obj = obj
        self._pending: dict[str, dict[str, tuple[float, ...]]] = {}

    def value(self, pb: bpy.types.PoseBone, attr: str) -> tuple[float, ...]:
        """The channel ``attr`` of ``pb`` as set here, else as the bone holds it."""
        pending = self._pending.get(attr, {}).get(pb.name)
        return pending if pending is not None else tuple(getattr(pb, attr))

    def set(self, pb: bpy.types.PoseBone, attr: str, value: object) -> None:
        """Set the channel ``attr`` (one of :data:`WIDTHS`) of ``pb`` at the next flush."""
        row = tuple(float(v) for v in value)
        if len(row) != WIDTHS[attr]:
            raise ValueError(f"{pb.name}.{attr} takes {WIDTHS[attr]} values, not {len(row)}")
        self._pending.setdefault(attr, {})[pb.name] = row

    def flush(self) -> bool:
        """Write what was set (one ``foreach_get``/``foreach_set`` pair per channel) and
        tag the object's pose for its next evaluation; whether anything was written."""
        if not self._pending:
            return False
        for attr, rows in self._pending.items():
            write_rows(self.obj, attr, [_index(self.obj, name) for name in rows],
                       np.array(list(rows.values())))
        self._pending.clear()
        self.obj.update_tag(refresh={"OBJECT"})
        return True


def write_rows(obj: bpy.types.Object, attr: str, indices: np.ndarray | list[int],
               rows: np.ndarray) -> None:
    """Set the channel ``attr`` of the pose bones at ``indices`` (``obj.pose.bones``'
    order) to ``rows`` (len(indices), width), the other bones' as the rig holds them now:
    one ``foreach_get``/``foreach_set`` pair. The caller tags the object
    (``update_tag(refresh={"OBJECT"})``) once its writes are done."""
    pbones = obj.pose.bones
    width = WIDTHS[attr]
    values = np.empty(len(pbones) * width, dtype=np.float32)
    pbones.foreach_get(attr, values)
    values.reshape(-1, width)[indices] = rows
    pbones.foreach_set(attr, values)


def _index(obj: bpy.types.Object, name: str) -> int:
    """The index of the pose bone ``name`` among ``obj``'s."""
    pbones = obj.pose.bones
    indices = _INDICES.get(obj.name)
    i = -1 if indices is None else indices.get(name, -1)
    try:
        found = i >= 0 and pbones[i].name == name
    except IndexError:  # (fewer bones now)
        found = False
    if not found:
        indices = _INDICES[obj.name] = {pb.name: b for b, pb in enumerate(pbones)}
        i = indices[name]
    return i
