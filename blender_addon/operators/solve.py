"""Pose operators: solve, clean, reset, key."""

import bpy

from . import common


class NPE_OT_solve(common.OnMappedArmature, bpy.types.Operator):
    """Pose the armature so its joints reach the effectors (and the metric requests)"""

    bl_idname = "npe.solve"
    bl_label = "Solve"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import edits

        return common.run_on_armature(self, context, lambda obj: edits.edit(
            context.scene, obj, context.evaluated_depsgraph_get()))


class NPE_OT_clean_pose(common.OnMappedArmature, bpy.types.Operator):
    """Make the current pose more natural (projected onto the models' poses, bone lengths
    kept); it becomes the new base pose"""

    bl_idname = "npe.clean_pose"
    bl_label = "Clean Pose"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import edits

        return common.run_on_armature(self, context,
                                      lambda obj: edits.clean_pose(context.scene, obj))


class NPE_OT_reset_edits(common.OnMappedArmature, bpy.types.Operator):
    """Go back to the pose the edit session started from; effectors return to their joints
    and metric requests are switched off"""

    bl_idname = "npe.reset_edits"
    bl_label = "Reset Edits"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import edits

        return common.run_on_armature(self, context,
                                      lambda obj: edits.reset_edits(context.scene, obj))


class NPE_OT_insert_keyframe(common.OnMappedArmature, bpy.types.Operator):
    """Key the mapped bones at the current frame; the pose becomes the new base pose"""

    bl_idname = "npe.insert_keyframe"
    bl_label = "Insert Keyframe"
    bl_options = common.UNDOABLE

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import edits

        return common.run_on_armature(self, context,
                                      lambda obj: edits.insert_keyframe(context.scene, obj))


CLASSES = (NPE_OT_solve, NPE_OT_clean_pose, NPE_OT_reset_edits, NPE_OT_insert_keyframe)
