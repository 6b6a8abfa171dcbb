"""Rig mapping operators: map by preset or auto-detection, save and load JSON maps."""

import bpy
from bpy.props import EnumProperty, StringProperty
from bpy_extras.io_utils import ExportHelper, ImportHelper

from ..core.mapping import PRESETS
from ..core.skeleton import NUM_JOINTS
from . import common

_PRESET_LABELS = {
    "bandai": "Bandai Namco BVH", "cmu": "CMU BVH", "mixamo": "Mixamo", "daz": "Daz Genesis",
    "optitrack": "OptiTrack Motive", "rigify_controls": "Rigify (controls)",
    "rigify": "Rigify (DEF bones)", "metarig": "Rigify Metarig",
}  # fmt: skip
PRESET_ITEMS = (
    ("auto", "Auto-Detect", "Find the joints by bone names and hierarchy"),
    *((k, _PRESET_LABELS.get(k, k.title()), f"Bone names of the {k} preset") for k in PRESETS),
)


class NPE_OT_map_rig(common.OnArmature, bpy.types.Operator):
    """Map the active armature's bones to the models' 21 joints"""

    bl_idname = "npe.map_rig"
    bl_label = "Map Rig"
    bl_options = common.UNDOABLE

    preset: EnumProperty(
        name="Preset",
        description="Bone naming scheme of the rig, or auto-detection",
        items=PRESET_ITEMS,
        default="auto",
        options={"SKIP_SAVE"},
    )

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import metric_requests, rig_mapping
        from ..errors import EditError, Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            joint_map, missing, notes = rig_mapping.map_rig(obj, self.preset,
                                                            context.view_layer)
            if missing:
                self.report({"WARNING"}, f"{obj.name}: no bone found for "
                            f"{', '.join(missing)}: pick them in Rig Mapping › Joints")
                return Outcome(f"Mapped {NUM_JOINTS - len(missing)} of {NUM_JOINTS} joints")
            try:
                metric_requests.measure(context.scene, obj)
            except EditError:
                pass  # measuring is a courtesy: models may be missing while mapping
            toes = f", {', '.join(joint_map.synthesized)} at the foot tails" \
                if joint_map.synthesized else ""
            return Outcome(f"Mapped {obj.name} ({joint_map.source}): "
                           f"{len(joint_map.joints)} joints{toes}", notes)

        return common.run_on_armature(self, context, action)


class NPE_OT_save_mapping(common.OnMappedArmature, bpy.types.Operator, ExportHelper):
    """Save the armature's rig mapping as JSON, to reuse on rigs with the same bone names"""

    bl_idname = "npe.save_mapping"
    bl_label = "Save Mapping"
    bl_options = common.NOT_UNDOABLE

    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={"HIDDEN"},
                                description="File name filter")

    def invoke(self, context: bpy.types.Context, event: bpy.types.Event) -> set[str]:
        obj = context.active_object
        if not self.filepath and obj is not None:  # name the file after the rig
            self.filepath = f"{bpy.path.clean_name(obj.data.name)}_mapping{self.filename_ext}"
        return ExportHelper.invoke(self, context, event)

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import rig_mapping
        from ..errors import Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            rig_mapping.save(obj.data, self.filepath)
            return Outcome(f"Saved the mapping of {obj.name} to {self.filepath}")

        return common.run_on_armature(self, context, action)


class NPE_OT_load_mapping(common.OnArmature, bpy.types.Operator, ImportHelper):
    """Load a JSON rig mapping; joints it leaves out are auto-detected"""

    bl_idname = "npe.load_mapping"
    bl_label = "Load Mapping"
    bl_options = common.UNDOABLE

    filename_ext = ".json"
    filter_glob: StringProperty(default="*.json", options={"HIDDEN"},
                                description="File name filter")

    def execute(self, context: bpy.types.Context) -> set[str]:
        from .. import rig_mapping
        from ..errors import Outcome

        def action(obj: bpy.types.Object) -> Outcome:
            notes = rig_mapping.load(obj, self.filepath, context.view_layer)
            return Outcome(f"Loaded the mapping of {obj.name} from {self.filepath}", notes)

        return common.run_on_armature(self, context, action)


CLASSES = (NPE_OT_map_rig, NPE_OT_save_mapping, NPE_OT_load_mapping)
