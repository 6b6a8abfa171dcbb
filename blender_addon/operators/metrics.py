"""Metric operators: apply the requests, measure, (re)load the model set."""

import bpy

from . import common


class NPE_OT_apply_metrics(bpy.types.Operator):
    """Edit the pose so the enabled metrics take their requested values (with the
    effectors)"""

    bl_idname = "npe.apply_metrics"
    bl_label = "Apply Metrics"
    bl_options = common.UNDOABLE

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        if not common.poll_armature(cls, context, mapped=True):
            return False
        obj = common.armature_in(context)
        if not any(m.enabled for m in obj.npe.metrics):
            cls.poll_message_set("No metric request is enabled: tick one in Metrics")
            return False
        return True

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import edits
        from ..errors import EditError, Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            if not any(m.enabled for m in obj.npe.metrics):
                raise EditError("No metric request is enabled: tick one in Metrics")
            return edits.edit(context.scene, obj, context.evaluated_depsgraph_get())

        return common.run_on_armature(self, context, action)


class NPE_OT_measure(common.OnMappedArmature, bpy.types.Operator):
    """Measure the metrics on the current pose"""

    bl_idname = "npe.measure"
    bl_label = "Measure"
    bl_options = common.NOT_UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import metric_requests
        from ..errors import Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            values = metric_requests.measure(context.scene, obj)
            return Outcome(f"Measured {len(values)} metrics on {obj.name}")

        return common.run_on_armature(self, context, action)


class NPE_OT_load_models(common.Always, bpy.types.Operator):
    """Load the chosen model set again (after retraining) and list its metrics"""

    bl_idname = "npe.load_models"
    bl_label = "Reload Models"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import metric_requests, model_sets
        from ..errors import STATUS, EditError, Outcome

        def action() -> Outcome:
            model_sets.forget()
            models = model_sets.load(context.scene)
            STATUS.pop("models", None)
            if context.active_object is not None and context.active_object.type == "ARMATURE":
                metric_requests.sync_metrics(context.active_object, models)
                try:
                    metric_requests.measure(context.scene, context.active_object)
                except EditError:
                    pass  # an unmapped armature: nothing to measure yet
            return Outcome(f"Loaded {len(models.modules)} models from {models.folder}")

        return common.run(self, action)


CLASSES = (NPE_OT_apply_metrics, NPE_OT_measure, NPE_OT_load_models)
