"""Effector operators: add empties at joints, remove them."""

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty

from . import common


class NPE_OT_add_effectors(common.OnMappedArmature, bpy.types.Operator):
    """Add target empties at joints of the armature: move them to pose the character"""

    bl_idname = "npe.add_effectors"
    bl_label = "Add Effectors"
    bl_options = common.UNDOABLE

    preset: EnumProperty(
        name="Joints",
        description="Which joints get an effector",
        items=(
            ("HANDS", "Hands", "Both wrists"),
            ("FEET", "Feet", "Both ankles"),
            ("HEAD", "Head", "The head"),
            ("LIMBS", "Hands, Feet and Head", "Both wrists, both ankles and the head"),
            ("SELECTED", "Selected Bones", "The joints the selected pose bones move (a "
             "hand or forearm: the wrist; an upper arm: the elbow; a thigh: the knee)"),
        ),
        default="HANDS",
        options={"SKIP_SAVE"},
    )

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import base_pose, edits, empties, grab, mapped_rig
        from ..errors import EditError, Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            scene = context.scene
            notes = edits.prepare_controls(obj)  # empties where the limbs are shown
            info = mapped_rig.rig_for(obj)
            if self.preset == "SELECTED":
                joints, strangers = grab.selected_joints(obj, info)
                if strangers:
                    self.report({"WARNING"}, f"Not mapped to a joint: {', '.join(strangers)}")
                if not joints:
                    raise EditError("Select mapped pose bones first (Pose Mode)")
            else:
                joints = list(empties.PRESETS[self.preset])
            base_pose.ensure_base(scene, obj, info)
            added, existing = empties.add(scene, obj, info, joints)
            msg = f"Added effectors: {', '.join(added)}" if added else "No effector added"
            if existing:
                msg += f" (already there: {', '.join(existing)})"
            return Outcome(msg, notes)

        return common.run_on_armature(self, context, action)


class NPE_OT_remove_effectors(bpy.types.Operator):
    """Remove effectors and delete their empties"""

    bl_idname = "npe.remove_effectors"
    bl_label = "Remove Effectors"
    bl_options = common.UNDOABLE

    index: IntProperty(name="Index", default=-1, options={"SKIP_SAVE"},
                       description="Effector to remove (-1: the active one in the list)")
    all: BoolProperty(name="All", default=False, options={"SKIP_SAVE"},
                      description="Remove every effector")

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        if not common.poll_armature(cls, context, mapped=False):
            return False
        obj = common.armature_in(context)
        if not obj.npe.effectors:
            cls.poll_message_set(f"{obj.name} has no effectors")
            return False
        return True

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import empties, pins
        from ..errors import EditError, Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            items = obj.npe.effectors
            if not items:
                raise EditError(f"{obj.name} has no effectors")
            index = None if self.all else (obj.npe.active_effector if self.index < 0
                                           else self.index)
            if index is not None and not 0 <= index < len(items):
                raise EditError(f"No effector number {index}")
            n = empties.remove(obj, index)
            pins.sync_colours(obj)  # a removed pin's bone gets its colour back
            return Outcome(f"Removed {n} effector(s)")

        return common.run_on_armature(self, context, action)


CLASSES = (NPE_OT_add_effectors, NPE_OT_remove_effectors)
