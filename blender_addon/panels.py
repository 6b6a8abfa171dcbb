"""The N-panel (View3D › Sidebar › Neural Pose): drawing only, nothing computed here
beyond cheap lookups; measured metric values come from operators and the live handler."""

import math
import textwrap

import bpy

from . import metric_sliders, spread_items

CATEGORY = "Neural Pose"
CLOSED = {"DEFAULT_CLOSED"}  # bl_options of sub-panels folded at first
# Wrapping a status message: the UI font's mean character width and an icon's, in pixels
# at UI scale 1; the sidebar's default width where no region is drawn in; the fewest
# characters a line keeps however narrow the sidebar.
CHAR_PX = 7.0
ICON_PX = 40.0
WRAP_FALLBACK_PX = 300
WRAP_MIN_CHARS = 20


def _armature(context: bpy.types.Context) -> bpy.types.Object | None:
    """The armature the panel shows: the active one, or the active effector's."""
    from .mapped_rig import active_armature

    return active_armature(context)


def _armature_or_hint(layout: bpy.types.UILayout, context: bpy.types.Context
                      ) -> bpy.types.Object | None:
    """:func:`_armature`, or a hint in the panel when there is none."""
    obj = _armature(context)
    if obj is None:
        layout.label(text="Select an armature", icon="INFO")
    return obj


def _status(layout: bpy.types.UILayout, key: str, context: bpy.types.Context) -> None:
    """The key's error or note, wrapped to the sidebar's width: a note says what to do
    last ("... move it nearer, or turn Keep Planted Feet off"), which one cut label hid."""
    from .errors import STATUS

    message = STATUS.get(key)
    if message:
        col = layout.column(align=True)
        col.alert = True
        for i, line in enumerate(wrap_lines(message, context)):
            col.label(text=line, icon="ERROR" if i == 0 else "BLANK1")


def wrap_lines(text: str, context: bpy.types.Context) -> list[str]:
    """``text`` in lines that fit the region drawn in (:data:`WRAP_FALLBACK_PX` wide where
    there is none, as in a script), at about :data:`CHAR_PX` pixels a character."""
    region = getattr(context, "region", None)
    width = region.width if region is not None else WRAP_FALLBACK_PX
    # No UI scale in background mode (it reads 0 there).
    scale = (context.preferences.system.ui_scale if context.preferences else 0.0) or 1.0
    chars = max(WRAP_MIN_CHARS, int((width - ICON_PX * scale) / (CHAR_PX * scale)))
    return textwrap.wrap(text, chars) or [text]


class _Panel:
    bl_space_type = "VIEW_3D"
    bl_region_type = "UI"
    bl_category = CATEGORY


class NPE_PT_main(_Panel, bpy.types.Panel):
    bl_label = "Neural Pose"

    def draw(self, context: bpy.types.Context) -> None:
        from . import model_sets

        layout = self.layout
        settings = context.scene.npe
        row = layout.row(align=True)
        row.prop(settings, "model_set", text="")
        row.operator("npe.load_models", text="", icon="FILE_REFRESH")
        col = layout.column(align=True)
        for line in model_sets.summary(context.scene):
            col.label(text=line, icon="ERROR" if line.startswith("Error") else "NONE")
        _status(layout, "models", context)


class NPE_PT_rig(_Panel, bpy.types.Panel):
    bl_label = "Rig Mapping"
    bl_parent_id = "NPE_PT_main"

    def draw(self, context: bpy.types.Context) -> None:
        from . import mapped_rig

        layout = self.layout
        obj = _armature_or_hint(layout, context)
        if obj is None:
            return
        mapping = obj.data.npe_mapping
        problems = mapped_rig.mapping_problems(obj.data)
        col = layout.column(align=True)
        if problems:
            col.alert = problems != ["not mapped"]
            for line in problems:
                col.label(text=f"{obj.name}: {line}", icon="ERROR")
        else:
            n = len(mapped_rig.mapping_dict(obj.data))
            col.label(text=f"{obj.name}: {n} joints mapped ({mapping.source})",
                      icon="CHECKMARK")
        if mapping.warning:
            warn = layout.column(align=True)
            warn.alert = True
            warn.label(text=mapping.warning, icon="ERROR")
        row = layout.row(align=True)
        row.operator("npe.map_rig", text="Map Rig", icon="ARMATURE_DATA").preset = "auto"
        row.operator_menu_enum("npe.map_rig", "preset", text="", icon="DOWNARROW_HLT")
        row = layout.row(align=True)
        row.operator("npe.save_mapping", text="Save", icon="EXPORT")
        row.operator("npe.load_mapping", text="Load", icon="IMPORT")


class NPE_PT_rig_joints(_Panel, bpy.types.Panel):
    bl_label = "Joints"
    bl_parent_id = "NPE_PT_rig"
    bl_options = CLOSED

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return _armature(context) is not None

    def draw(self, context: bpy.types.Context) -> None:
        from .core.skeleton import JOINT_LABELS
        from .rig_io import TOE_FOOT

        layout = self.layout
        obj = _armature(context)
        items = obj.data.npe_mapping.joints
        if not items:
            layout.label(text="Click Map Rig first", icon="INFO")
            return
        col = layout.column(align=True)
        for item in items:
            row = col.row(align=True)
            bad = item.bone not in obj.data.bones if item.bone else item.joint not in TOE_FOOT
            row.alert = bad
            row.prop_search(item, "bone", obj.data, "bones",
                            text=JOINT_LABELS.get(item.joint, item.joint), icon="BONE_DATA")


class NPE_UL_effectors(bpy.types.UIList):
    """One row per effector: joint, weight, pin and rotation toggles."""

    def draw_item(self, context: bpy.types.Context, layout: bpy.types.UILayout,
                  _data: bpy.types.AnyType, item: bpy.types.AnyType, _icon: int,
                  _active_data: bpy.types.AnyType, _active_prop: str, _index: int = 0,
                  _flt_flag: int = 0) -> None:
        from .core.skeleton import JOINT_LABELS

        lost = item.empty is None or context.scene.objects.get(item.empty.name) is None
        row = layout.row(align=True)
        row.alert = lost
        name = JOINT_LABELS.get(item.joint, item.joint)
        row.label(text=name + ("  (empty deleted)" if lost else ""),
                  icon="ERROR" if lost else "EMPTY_AXIS")
        row.prop(item, "weight", text="", slider=True)
        row.prop(item, "pin", text="", icon="PINNED" if item.pin else "UNPINNED")
        row.prop(item, "use_rotation", text="", icon="ORIENTATION_GIMBAL")


class NPE_PT_effectors(_Panel, bpy.types.Panel):
    bl_label = "Effectors"
    bl_parent_id = "NPE_PT_main"

    def draw(self, context: bpy.types.Context) -> None:
        layout = self.layout
        obj = _armature_or_hint(layout, context)
        if obj is None:
            return
        row = layout.row()
        row.template_list("NPE_UL_effectors", "", obj.npe, "effectors", obj.npe,
                          "active_effector", rows=3)
        col = row.column(align=True)
        col.operator_menu_enum("npe.add_effectors", "preset", text="", icon="ADD")
        col.operator("npe.remove_effectors", text="", icon="REMOVE").all = False
        col.separator()
        col.operator("npe.remove_effectors", text="", icon="X").all = True


class NPE_PT_solve(_Panel, bpy.types.Panel):
    bl_label = "Solve"
    bl_parent_id = "NPE_PT_main"

    def draw(self, context: bpy.types.Context) -> None:
        layout = self.layout
        scene = context.scene.npe
        row = layout.row(align=True)
        row.scale_y = 1.3
        row.prop(scene, "live", toggle=True, icon="PLAY" if not scene.live else "PAUSE",
                 text="Live" if not scene.live else "Live (on)")
        row.operator("npe.solve", icon="CON_KINEMATIC")
        obj = _armature_or_hint(layout, context)
        if obj is None:
            return
        settings = obj.npe
        col = layout.column()
        col.use_property_split = True
        col.use_property_decorate = False
        sub = col.column()
        sub.active = settings.solver != "classic"
        sub.prop(settings, "body_follow", slider=True)
        sub.prop(settings, "keep_planted_feet")
        row = layout.row(align=True)
        row.operator("npe.clean_pose", icon="BRUSH_DATA")
        row.operator("npe.reset_edits", icon="LOOP_BACK")
        row.operator("npe.mirror_edit", icon="MOD_MIRROR")
        layout.operator("npe.insert_keyframe", icon="KEY_HLT")
        _status(layout, obj.name, context)


class NPE_PT_solve_advanced(_Panel, bpy.types.Panel):
    """The solver's expert options: most animators never need them."""

    bl_label = "Advanced"
    bl_parent_id = "NPE_PT_solve"
    bl_options = CLOSED

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return _armature(context) is not None

    def draw(self, context: bpy.types.Context) -> None:
        settings = _armature(context).npe
        col = self.layout.column()
        col.use_property_split = True
        col.use_property_decorate = False
        col.prop(settings, "solver")
        sub = col.column()
        sub.active = settings.solver != "classic"
        sub.prop(settings, "combine")
        sub.prop(settings, "refine_steps")
        sub.prop(settings, "live_refine")
        sub.prop(settings, "keep_details")
        col.prop(settings, "fix_lengths")


def shown_value(context: bpy.types.Context, unit: str, value: float) -> str:
    """A metric's value (degrees or world units) as the scene's unit settings show it."""
    units = context.scene.unit_settings
    if unit == "deg":
        if units.system_rotation == "RADIANS":
            return f"{math.radians(value):.3f} rad"
        return f"{value:.1f}°"
    if units.system == "NONE":
        return f"{value:.3f}"
    return bpy.utils.units.to_string(units.system, "LENGTH", value * units.scale_length,
                                     precision=3)


class NPE_PT_metrics(_Panel, bpy.types.Panel):
    bl_label = "Metrics"
    bl_parent_id = "NPE_PT_main"

    def draw(self, context: bpy.types.Context) -> None:
        layout = self.layout
        obj = _armature_or_hint(layout, context)
        if obj is None:
            return
        settings = obj.npe
        if not settings.metrics:
            layout.operator("npe.load_models", text="Load Models", icon="FILE_REFRESH")
            return
        col = layout.column(align=True)
        for item in settings.metrics:
            row = col.row(align=True)
            row.prop(item, "enabled", text="")
            sub = row.row(align=True)
            sub.active = item.enabled
            sub.prop(item, f'["{metric_sliders.REQUEST_KEY}"]', text=item.label, slider=True)
            value = row.row(align=True)
            value.ui_units_x = 3.5
            value.label(text=shown_value(context, item.unit, item.measured)
                        if item.has_measured else "–")
        row = layout.row(align=True)
        row.operator("npe.apply_metrics", icon="CHECKMARK")
        row.operator("npe.measure", icon="DRIVER_DISTANCE")
        _status(layout, "metrics", context)


class NPE_PT_propagate(_Panel, bpy.types.Panel):
    bl_label = "Spread Edit"
    bl_parent_id = "NPE_PT_main"
    bl_options = CLOSED

    def draw(self, context: bpy.types.Context) -> None:
        from . import propagation
        from .core.propagate import curve_warning
        from .errors import EditError
        from .mapped_rig import armature_from_context

        layout = self.layout
        scene = context.scene
        p = scene.npe.propagation
        layout.prop(p, "mode")
        layout.row().prop(p, "range_mode", expand=True)
        col = layout.column(align=True)
        if p.range_mode == "RADIUS":
            col.prop(p, "radius")
        elif p.range_mode == "START_END":
            if scene.use_preview_range:
                col.label(text=f"Preview range {scene.frame_preview_start}-"
                               f"{scene.frame_preview_end}", icon="PREVIEW_RANGE")
            else:
                col.prop(p, "frame_start")
                col.prop(p, "frame_end")
        layout.prop(p, "curve")
        if p.curve == "CUSTOM":
            node = propagation.weight_curve_node()
            if node is None:
                layout.operator("npe.weight_curve", icon="FCURVE")
            else:
                layout.label(text="Weight (up) by distance from the edited frame (right):")
                layout.template_curve_mapping(node, "mapping")
                row = layout.row()
                row.alignment = "EXPAND"
                row.label(text="0: edited frame")
                right = row.row()
                right.alignment = "RIGHT"
                right.label(text="1: range end")
        warning = curve_warning(propagation.KINDS[p.curve])
        if warning:
            layout.label(text=warning, icon="ERROR")
        try:
            obj = armature_from_context(context)
        except EditError:
            obj = None
        mode, shown = propagation.preview(scene, None, obj)
        box = layout.box()
        if shown:
            mode_name = dict((k, n) for k, n, _d in spread_items.MODES).get(mode, mode)
            box.label(text=f"{mode_name}: {len(shown)} frames change" if mode == "KEYS"
                      else f"{mode_name}: frames {shown[0][0]}-{shown[-1][0]}")
            grid = box.grid_flow(columns=3, even_columns=True, align=True)
            for frame, w in shown:
                grid.progress(factor=w, type="BAR", text=f"{frame}: {w:.2f}")
        else:
            box.label(text="No frame would change here", icon="INFO")
        box.prop(p, "show_overlay")
        layout.prop(p, "metric_mode")
        layout.operator("npe.spread_edit", icon="IPO_EASE_IN_OUT")


CLASSES = (
    NPE_UL_effectors,
    NPE_PT_main,
    NPE_PT_rig,
    NPE_PT_rig_joints,
    NPE_PT_effectors,
    NPE_PT_solve,
    NPE_PT_solve_advanced,
    NPE_PT_metrics,
    NPE_PT_propagate,
)
