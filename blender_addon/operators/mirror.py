"""Mirror Edit: carry one side's edit to the other side of the body."""

import bpy
from bpy.props import EnumProperty

from . import common


class NPE_OT_mirror_edit(common.OnMappedArmature, bpy.types.Operator):
    """Carry the edit of one side of the body (its change from the base pose) to the other
    side, solved like any edit"""

    bl_idname = "npe.mirror_edit"
    bl_label = "Mirror Edit"
    bl_options = common.UNDOABLE

    side: EnumProperty(
        name="Side",
        description="Which side's edit is carried to the other side",
        items=(
            ("AUTO", "Auto", "The side whose limbs changed most from the base pose"),
            ("LEFT_TO_RIGHT", "Left to Right", "The left side's edit onto the right side"),
            ("RIGHT_TO_LEFT", "Right to Left", "The right side's edit onto the left side"),
        ),
        default="AUTO",
        options={"SKIP_SAVE"},
    )

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import mirror_edit

        return common.run_on_armature(self, context, lambda obj: mirror_edit.mirror_edit(
            context.scene, obj, self.side))


CLASSES = (NPE_OT_mirror_edit,)
