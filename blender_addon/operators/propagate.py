"""Spread Edit: the edit at the current frame spread over its neighbours (the name keeps
clear of Blender's Pose > Propagate, Alt+P, which copies a pose)."""

import bpy
from bpy.props import EnumProperty, IntProperty

from .. import spread_items
from . import common

TIMER_S = 0.01  # between two steps of a modal run


class NPE_OT_spread_edit(common.OnMappedArmature, bpy.types.Operator):
    """Apply the edit at the current frame (effectors and metric requests) to the frames
    around it, fading by the falloff curve: on the action's keys, on every frame, or in a
    layer of its own. Esc stops it and leaves the action as it was"""

    bl_idname = "npe.spread_edit"
    bl_label = "Spread Edit"
    bl_options = common.UNDOABLE

    # The redo panel's (F9) settings; invoking copies the scene's defaults (the panel) into
    # those the call did not set. Saved between calls, as Blender's own operators' are.
    mode: EnumProperty(name="Mode", description="What the edit is written into",
                       items=spread_items.MODES, default="KEYS")
    range_mode: EnumProperty(name="Range", description="How the frames to edit are chosen",
                             items=spread_items.RANGES, default="RADIUS")
    radius: IntProperty(name="Radius", description="The edit fades to nothing this many "
                        "frames away", default=spread_items.DEFAULT_RADIUS, min=1, soft_max=200)
    frame_start: IntProperty(name="Start", description="First frame edited", default=1)
    frame_end: IntProperty(name="End", description="Last frame edited", default=60)
    curve: EnumProperty(name="Falloff", description="Weight of the edit by distance from "
                        "the current frame", items=spread_items.CURVES, default="SMOOTH")
    metric_mode: EnumProperty(name="Metrics", description="How metric requests travel to "
                              "the other frames", items=spread_items.METRIC_MODES,
                              default="DELTA")

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        if not common.poll_armature(cls, context, mapped=True):
            return False
        obj = common.armature_in(context)
        anim = obj.animation_data
        if anim is None or (anim.action is None and not len(anim.nla_tracks)):
            cls.poll_message_set(f"{obj.name} has no action: key its animation first")
            return False
        return True

    def _settings(self, context: bpy.types.Context):
        """The call's settings: those it set, the scene's defaults for the rest (Auto mode
        resolved on the action, so the redo panel shows the mode used)."""
        from .. import mapped_rig, propagation

        defaults = propagation.scene_settings(context.scene)
        for name in ("range_mode", "radius", "frame_start", "frame_end", "curve",
                     "metric_mode"):
            if not self.properties.is_property_set(name):
                setattr(self, name, getattr(defaults, name))
        settings = propagation.SpreadSettings.of(self)
        if not self.properties.is_property_set("mode"):
            settings.mode = defaults.mode
            if defaults.mode == "AUTO":
                obj = mapped_rig.armature_from_context(context)
                frames, w = propagation.weights(context.scene, settings, obj)
                settings.mode = propagation.resolve_mode(settings, obj, frames, w)
            self.mode = settings.mode
        return settings

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import propagation

        wm = context.window_manager

        def action(obj: bpy.types.Object):
            settings = self._settings(context)
            wm.progress_begin(0, propagation.STEPS)
            try:
                return propagation.propagate_edit(context.scene, obj,
                                                  context.evaluated_depsgraph_get(),
                                                  wm.progress_update, settings)
            finally:
                wm.progress_end()

        return common.run_on_armature(self, context, action)

    def invoke(self, context: bpy.types.Context, event: bpy.types.Event) -> set[str]:
        """Run modal with Blender's progress and Esc to stop; without a window (a script in
        the background), run to the end."""
        from .. import mapped_rig, propagation
        from ..errors import EditError
        from ..state import invalidate

        if context.window is None:
            return self.execute(context)
        invalidate()
        try:
            obj = mapped_rig.armature_from_context(context)
            self._job = propagation.SpreadJob(context.scene, obj,
                                              context.evaluated_depsgraph_get(),
                                              self._settings(context))
        except EditError as exc:
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        wm = context.window_manager
        wm.progress_begin(0, 100)
        self._timer = wm.event_timer_add(TIMER_S, window=context.window)
        wm.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context: bpy.types.Context, event: bpy.types.Event) -> set[str]:
        from ..errors import EditError
        from ..guard import busy

        if event.type == "ESC":
            with busy():
                self._job.cancel()
            self._finish(context)
            self.report({"WARNING"}, "Spread Edit cancelled: the action is as it was")
            return {"CANCELLED"}
        if event.type != "TIMER":
            return {"RUNNING_MODAL"}
        try:
            with busy():
                step = self._job.step()
        except EditError as exc:
            self._finish(context)
            self.report({"ERROR"}, str(exc))
            return {"CANCELLED"}
        if step is not None:
            context.window_manager.progress_update(int(step * 100))
            return {"RUNNING_MODAL"}
        self._finish(context)
        outcome = self._job.outcome
        self.report({"INFO"}, outcome.message)
        for note in outcome.notes:
            self.report({"WARNING"}, note)
        return {"FINISHED"}

    def _finish(self, context: bpy.types.Context) -> None:
        from ..state import invalidate

        wm = context.window_manager
        wm.event_timer_remove(self._timer)
        wm.progress_end()
        invalidate()


class NPE_OT_weight_curve(common.Always, bpy.types.Operator):
    """Create the custom falloff curve"""

    bl_idname = "npe.weight_curve"
    bl_label = "Create Falloff Curve"
    bl_options = common.UNDOABLE

    def execute(self, _context: bpy.types.Context) -> set[str]:
        from .. import propagation

        propagation.ensure_weight_curve()
        return {"FINISHED"}


CLASSES = (NPE_OT_spread_edit, NPE_OT_weight_curve)
