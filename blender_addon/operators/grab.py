"""Pose Mode operators on the rig itself: Neural Grab (a modal drag, like G) and the pin
toggle. The work is in :mod:`..grab` and :mod:`..pins`; these only turn events into it."""

from __future__ import annotations

import bpy
import numpy as np
from bpy.props import FloatVectorProperty

from . import common

AXES = {"X": (1.0, 0.0, 0.0), "Y": (0.0, 1.0, 0.0), "Z": (0.0, 0.0, 1.0)}
NUMBER_KEYS = {
    **{k: str(i) for i, k in enumerate(("ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX",
                                       "SEVEN", "EIGHT", "NINE"))},
    **{f"NUMPAD_{i}": str(i) for i in range(10)},
    "PERIOD": ".", "NUMPAD_PERIOD": ".", "MINUS": "-", "NUMPAD_MINUS": "-",
}
CONFIRM = {"LEFTMOUSE", "RET", "NUMPAD_ENTER", "SPACE"}
CANCEL = {"RIGHTMOUSE", "ESC"}
# A modal drag: one undo step, other input blocked while it runs. (No GRAB_CURSOR: a
# wrapped cursor jumps, and the offset is read from where the mouse started.)
GRAB_OPTIONS = {*common.UNDOABLE, "BLOCKING"}


def _pose_armature_poll(cls: type, context: bpy.types.Context) -> bool:
    """A mapped armature in Pose Mode; says why not."""
    if not common.poll_armature(cls, context, mapped=True):
        return False
    if context.mode != "POSE":
        cls.poll_message_set("Works in Pose Mode: select the bones to move there")
        return False
    return True


def typed_offset(text: str, axis: str | None) -> np.ndarray | None:
    """A typed distance as an offset: along the constraint axis, else along X (as G
    does); None while the text is no number yet."""
    try:
        value = float(text)
    except ValueError:
        return None
    return np.array(AXES[axis or "X"]) * value


def constrained(offset: np.ndarray, axis: str | None) -> np.ndarray:
    """``offset`` kept along one global axis (None: as it is)."""
    if axis is None:
        return offset
    direction = np.array(AXES[axis])
    return direction * float(offset @ direction)


class NPE_OT_neural_grab(bpy.types.Operator):
    """Drag the selected bones' joints in the view plane; the whole body follows (planted
    feet, pins and body follow as set). X/Y/Z constrain, numbers type a distance; click or
    Enter confirms, Esc or right click cancels"""

    bl_idname = "npe.neural_grab"
    bl_label = "Neural Grab"
    bl_options = GRAB_OPTIONS

    offset: FloatVectorProperty(
        name="Offset", description="How far the grabbed joints move (world)", size=3,
        subtype="TRANSLATION", unit="LENGTH", default=(0.0, 0.0, 0.0))

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return _pose_armature_poll(cls, context)

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import grab

        return common.run_on_armature(
            self, context, lambda obj: grab.grab_offset(context.scene, obj, self.offset))

    def invoke(self, context: bpy.types.Context, event: bpy.types.Event) -> set[str]:
        from .. import grab
        from ..errors import EditError
        from ..guard import busy
        from ..mapped_rig import armature_from_context
        from ..state import invalidate

        if context.region_data is None:
            return self.execute(context)
        invalidate()
        try:
            with busy():
                obj = armature_from_context(context)
                self._grab = grab.begin(context.scene, obj)
        except EditError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        self._obj = obj
        self._mouse = (event.mouse_region_x, event.mouse_region_y)
        self._depth = self._grab.start_world.mean(axis=0)
        self._axis: str | None = None
        self._typed = ""
        self._moved = np.zeros(3)
        self._last = np.zeros(3)
        context.window_manager.modal_handler_add(self)
        self._header(context)
        return {"RUNNING_MODAL"}

    def _view_offset(self, context: bpy.types.Context, event: bpy.types.Event) -> np.ndarray:
        """The mouse's move since the grab began, in the view plane through the grabbed
        joints (world)."""
        from bpy_extras import view3d_utils
        from mathutils import Vector

        region, rv3d = context.region, context.region_data
        depth = Vector(self._depth.tolist())
        a = view3d_utils.region_2d_to_location_3d(region, rv3d, self._mouse, depth)
        b = view3d_utils.region_2d_to_location_3d(
            region, rv3d, (event.mouse_region_x, event.mouse_region_y), depth)
        return np.array(b - a)

    def _offset(self) -> np.ndarray:
        typed = typed_offset(self._typed, self._axis) if self._typed else None
        return typed if typed is not None else constrained(self._moved, self._axis)

    def _header(self, context: bpy.types.Context) -> None:
        if context.area is None:
            return
        d = self._offset()
        axis = f" along {self._axis}" if self._axis else ""
        typed = f" [{self._typed}]" if self._typed else ""
        context.area.header_text_set(
            f"Neural Grab{axis}{typed}: D {d[0]:.4f} {d[1]:.4f} {d[2]:.4f}  "
            "(X/Y/Z axis, type a distance, click/Enter confirm, Esc/right click cancel)")

    def _step(self, context: bpy.types.Context, final: bool = False) -> str | None:
        """One solve at the current offset; the error, if any."""
        from .. import grab
        from ..errors import EditError
        from ..guard import busy

        offset = self._offset()
        if not final and np.array_equal(offset, self._last):
            return None
        try:
            with busy():
                outcome = grab.update(context.scene, self._obj, self._grab, offset, final=final)
        except EditError as exc:
            return str(exc)
        self._last = offset
        if final:
            self.offset = offset.tolist()
            self.report({"INFO"}, outcome.message)
            for note in outcome.notes:
                self.report({"WARNING"}, note)
        return None

    def _end(self, context: bpy.types.Context) -> None:
        from ..state import invalidate

        if context.area is not None:
            context.area.header_text_set(None)
            context.area.tag_redraw()
        invalidate()

    def modal(self, context: bpy.types.Context, event: bpy.types.Event) -> set[str]:
        from .. import grab
        from ..guard import busy

        kind, value = event.type, event.value
        if kind in CANCEL and value == "PRESS":
            with busy():
                grab.cancel(self._obj, self._grab)
            self._end(context)
            return {"CANCELLED"}
        if kind in CONFIRM and value == "PRESS":
            error = self._step(context, final=True)
            if error is not None:
                with busy():
                    grab.cancel(self._obj, self._grab)
                self.report({"ERROR"}, error)
                self._end(context)
                return {"CANCELLED"}
            self._end(context)
            return {"FINISHED"}
        if kind == "MOUSEMOVE":
            self._moved = self._view_offset(context, event)
        elif value == "PRESS" and kind in AXES:
            self._axis = None if self._axis == kind else kind
        elif value == "PRESS" and kind in NUMBER_KEYS:
            self._typed += NUMBER_KEYS[kind]
        elif value == "PRESS" and kind == "BACK_SPACE":
            self._typed = self._typed[:-1]
        else:
            return {"RUNNING_MODAL"}
        error = self._step(context)
        if error is not None:
            self.report({"WARNING"}, error)
        self._header(context)
        return {"RUNNING_MODAL"}


class NPE_OT_toggle_pin(bpy.types.Operator):
    """Pin the joints the selected bones move, or unpin them when all are pinned (a pin
    holds its joint while the rest of the body is solved)"""

    bl_idname = "npe.toggle_pin"
    bl_label = "Toggle Pin"
    bl_options = common.UNDOABLE

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return _pose_armature_poll(cls, context)

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import base_pose, grab, mapped_rig, pins
        from ..errors import Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            info = mapped_rig.rig_for(obj)
            joints, strangers = grab.selected_joints(obj, info)
            if strangers and joints:
                self.report({"WARNING"}, f"Not moving a joint: {', '.join(strangers)}")
            base_pose.ensure_base(context.scene, obj, info)
            return pins.toggle(context.scene, obj, joints)

        return common.run_on_armature(self, context, action)


CLASSES = (NPE_OT_neural_grab, NPE_OT_toggle_pin)
