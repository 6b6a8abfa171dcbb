"""Propagation operators: spread the current edit over neighbouring frames."""

import bpy

from . import common


class NPE_OT_propagate(common.OnMappedArmature, bpy.types.Operator):
    """Apply the edit at the current frame (effectors and metric requests) to the frames
    around it, fading by the falloff curve, and key them"""

    bl_idname = "npe.propagate"
    bl_label = "Propagate"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import propagation
        from ..errors import Outcome

        wm = context.window_manager

        def action(obj: bpy.types.Object) -> Outcome:
            wm.progress_begin(0, propagation.STEPS)
            try:
                return propagation.propagate_edit(
                    context.scene, obj, context.evaluated_depsgraph_get(), wm.progress_update)
            finally:
                wm.progress_end()

        return common.run_on_armature(self, context, action)


class NPE_OT_weight_curve(common.Always, bpy.types.Operator):
    """Create the custom falloff curve"""

    bl_idname = "npe.weight_curve"
    bl_label = "Create Falloff Curve"
    bl_options = common.UNDOABLE

    def execute(self, _context: bpy.types.Context) -> set[str]:
        from .. import propagation

        propagation.ensure_weight_curve()
        return {"FINISHED"}


CLASSES = (NPE_OT_propagate, NPE_OT_weight_curve)
