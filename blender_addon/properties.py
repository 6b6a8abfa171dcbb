"""Property groups: the rig mapping (armature data), each character's edit session, solve
options and metric requests (armature object), effector tags (empties) and the scene's
model set, Live toggle and propagation settings.

Every property of an object or armature is library-overridable (:func:`_overridable`,
applied to every class at registration), so a character linked from another file with a
library override can be mapped, posed and keyed.

Everything the add-on remembers lives here, in Blender data, so it is saved with the file
and restored by undo; module-level state only caches what can be rebuilt from it.
Update callbacks stay thin: they call :mod:`.state`, :mod:`.edits`, :mod:`.model_sets`
and :mod:`.live`.
"""


import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    FloatVectorProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)
from bpy.types import PropertyGroup

from . import spread_items
from .core.pipeline import MAX_REFINE_STEPS, SolveOptions

_SOLVE = SolveOptions()  # the panel's defaults are the engine's
MIN_WEIGHT = 0.01  # the core needs weights in (0, 1]

# --------------------------------------------------------------------------- callbacks


def _mapping_edited(self: "NPE_JointBone", context: bpy.types.Context) -> None:
    from . import state

    state.mapping_changed(self.id_data)


def _effector_edited(self: "NPE_Effector", context: bpy.types.Context) -> None:
    from . import live

    live.effector_settings_changed(context, self.id_data)


def _request_toggled(self: "NPE_MetricRequest", context: bpy.types.Context) -> None:
    from . import edits

    edits.metric_request_changed(context, self, enabled_changed=True)


def _live_toggled(self: "NPE_SceneSettings", context: bpy.types.Context) -> None:
    from . import live

    live.sync()


def _model_set_items(self: "NPE_SceneSettings", context: bpy.types.Context | None) -> list:
    from . import model_sets

    return model_sets.items(context, self.model_path)


def _model_set_get(self: "NPE_SceneSettings") -> int:
    from . import model_sets

    return model_sets.index_of(self.model_path)


def _model_set_set(self: "NPE_SceneSettings", value: int) -> None:
    from . import model_sets

    self.model_path = model_sets.choice_of(value, self.model_path)


def _model_set_changed(self: "NPE_SceneSettings", context: bpy.types.Context) -> None:
    from . import edits

    edits.model_set_changed(context)


def _curve_kind_changed(self: "NPE_PropagationSettings", context: bpy.types.Context) -> None:
    if self.curve == "CUSTOM":
        from . import propagation

        propagation.ensure_weight_curve()


# --------------------------------------------------------------------------- rig mapping


class NPE_JointBone(PropertyGroup):
    """One canonical joint and the bone whose head is that joint."""

    joint: StringProperty(name="Joint", description="Canonical joint of the models' skeleton")
    bone: StringProperty(
        name="Bone",
        description="The bone whose head is this joint (empty: not mapped; a toe left empty "
        "sits at its foot bone's tail)",
        update=_mapping_edited,
    )


class NPE_RigMapping(PropertyGroup):
    """Which bone is each of the 21 joints (on the armature data, shared by its objects)."""

    joints: CollectionProperty(type=NPE_JointBone, description="One item per canonical joint")
    source: StringProperty(
        name="Source",
        description="How the mapping was made: a preset, auto-detection, a JSON file, or "
        "edited by hand",
    )
    warning: StringProperty(
        name="Warning",
        description="What Map Rig found the add-on cannot move: mapped bones that Blender "
        "poses by itself (constraints, IK chains, drivers), and what to map instead",
    )


# --------------------------------------------------------------------------- effectors


def _is_empty(_self: PropertyGroup, obj: bpy.types.Object) -> bool:
    return obj.type == "EMPTY"


class NPE_Effector(PropertyGroup):
    """A target empty for one joint, with how strongly and how it pulls."""

    joint: StringProperty(name="Joint", description="Canonical joint this effector moves")
    empty: PointerProperty(
        type=bpy.types.Object,
        name="Empty",
        description="The empty the joint follows (its world location, and its rotation when "
        "Use Rotation is on)",
        poll=_is_empty,
    )
    weight: FloatProperty(
        name="Weight",
        description="How strongly the joint is pulled to its empty, against the others",
        default=1.0,
        min=MIN_WEIGHT,
        max=1.0,
        update=_effector_edited,
    )
    pin: BoolProperty(
        name="Pin",
        description="Hold the joint where it is in the base pose; the empty is ignored",
        default=False,
        update=_effector_edited,
    )
    use_rotation: BoolProperty(
        name="Use Rotation",
        description="The joint's bone also takes the empty's world orientation",
        default=False,
        update=_effector_edited,
    )
    solved_matrix: FloatVectorProperty(
        name="Solved Matrix",
        description="The empty's matrix at the last solve, in its armature object's "
        "frame: live mode skips updates that did not move it",
        size=16,
        options={"HIDDEN"},
    )


# --------------------------------------------------------------------------- base pose


class NPE_BoneValues(PropertyGroup):
    """One mapped bone's local pose values: what the base pose restores exactly."""

    bone: StringProperty(name="Bone", description="Pose bone name")
    rotation_quaternion: FloatVectorProperty(
        name="Quaternion", description="Base rotation (quaternion mode)", size=4,
        default=(1.0, 0.0, 0.0, 0.0))
    rotation_euler: FloatVectorProperty(
        name="Euler", description="Base rotation (Euler modes)", size=3)
    rotation_axis_angle: FloatVectorProperty(
        name="Axis Angle", description="Base rotation (axis-angle mode)", size=4,
        default=(0.0, 0.0, 1.0, 0.0))
    location: FloatVectorProperty(name="Location", description="Base location", size=3)
    rotation_mode: IntProperty(
        name="Rotation Mode", description="The bone's rotation mode when the base was taken "
        "(its enum value): the values above are read in it, and a bone switched to another "
        "mode since makes the base be taken again")
    written: FloatVectorProperty(
        name="Written", description="Rotation (quaternion) and location the add-on last "
        "wrote: a different pose means the user changed it, and the base is taken again",
        size=7)


# --------------------------------------------------------------------------- metrics


class NPE_MetricRequest(PropertyGroup):
    """One metric of the model set: its measured value and an optional requested value."""

    label: StringProperty(name="Label", description="Display name")
    description: StringProperty(name="Description", description="What the metric measures")
    unit: StringProperty(name="Unit", description="deg or m")
    measured: FloatProperty(
        name="Measured", description="The metric on the current pose (updated by edits and "
        "Measure)", precision=3)
    has_measured: BoolProperty(name="Has Measured", description="A measured value exists")
    range_min: FloatProperty(
        name="Range Min", description="Lowest value the models know on this rig (rig units)")
    range_max: FloatProperty(
        name="Range Max", description="Highest value the models know on this rig (rig units)")
    enabled: BoolProperty(
        name="Request",
        description="Edit the pose so this metric takes the requested value (combines with "
        "the effectors and the other requests)",
        update=_request_toggled,
    )
    # The requested value is the ID property ``metric_sliders.REQUEST_KEY`` (its own soft
    # range and tooltip per item); ``applied`` is the value the pose answers.
    applied: FloatProperty(
        name="Applied", description="The requested value the pose answers (radians or "
        "world units)", options={"HIDDEN"})

    @property
    def requested(self) -> float:
        """The requested value in the engine's units (degrees or rig metres)."""
        from . import metric_sliders

        return metric_sliders.from_raw(self.unit, metric_sliders.raw_value(self))

    def set_requested(self, value: float) -> None:
        """Set the request from a value in the engine's units and edit the pose as the
        slider does."""
        from . import edits, metric_sliders

        metric_sliders.put(self, value)
        edits.metric_request_changed(bpy.context, self, enabled_changed=False)


class NPE_ObjectSettings(PropertyGroup):
    """Per object: an armature's effectors and edit session, or an empty's effector tag."""

    effectors: CollectionProperty(type=NPE_Effector, description="Effectors of this armature")
    active_effector: IntProperty(name="Active Effector", description="Selected effector row")
    base_pose: CollectionProperty(
        type=NPE_BoneValues,
        description="The pose every edit starts from (mapped bones), taken when the edit "
        "session starts",
    )
    base_frame: IntProperty(name="Base Frame", description="Frame the base pose was taken at")
    effector_of: PointerProperty(
        type=bpy.types.Object,
        name="Effector Of",
        description="For an effector empty: the armature it drives",
    )
    # The character's own solve options and metric requests (two characters in one scene
    # never share them).
    solver: EnumProperty(
        name="Solver",
        description="What moves the joints to the effectors",
        items=(
            ("universal", "Neural", "One learned solver for any set of effectors"),
            ("chained", "Neural Chained", "The learned hands, feet and head solvers in turn"),
            ("classic", "Classic FABRIK", "Plain full-body FABRIK, no learned prior"),
        ),
        default=_SOLVE.solver,
    )
    combine: EnumProperty(
        name="Blend Requests",
        description="How the effectors' change and the metric requests' changes meet",
        items=(
            ("average", "Together", "Each asks for its change and the body takes their "
             "average"),
            ("sequence", "One After Another", "The effectors first, then each metric "
             "request from the pose they left"),
        ),
        default=_SOLVE.combine,
    )
    refine_steps: IntProperty(
        name="Refinement Steps",
        description="Extra steps bringing joints closer to their effectors (0 = off). "
                    "In Live mode, applied when a drag pauses (or on every update with "
                    "Refine While Dragging)",
        default=_SOLVE.refine_steps,
        min=0,
        max=MAX_REFINE_STEPS,
    )
    live_refine: BoolProperty(
        name="Refine While Dragging",
        description="Live mode refines every update while an empty is dragged, so the pose "
        "seen while dragging is the solved one; off (faster on heavy rigs), drag updates "
        "skip refinement and the pose is refined once the drag pauses",
        default=True,
    )
    fix_lengths: BoolProperty(
        name="Keep Bone Lengths",
        description="Keep the rig's exact bone lengths between the mapped joints",
        default=_SOLVE.fix_lengths,
    )
    keep_details: BoolProperty(
        name="Keep Pose Style",
        description="Keep what makes this pose its own (small offsets the models would "
        "smooth away)",
        default=_SOLVE.keep_details,
    )
    keep_planted_feet: BoolProperty(
        name="Keep Planted Feet",
        description="Feet, hands and knees on the floor that have no effector stay where "
        "they are (a hand or knee lets go where it keeps a target out of reach)",
        default=_SOLVE.keep_planted_feet,
    )
    body_follow: FloatProperty(
        name="Body Follow",
        description="How much of the body follows a drag: 0 moves only what the targets "
        "need, 1 lets the models move the whole body as they learned (a drag of the "
        "pelvis, spine, chest, neck or head, or of most of the hands, feet and head, "
        "always gets the models' whole answer)",
        default=_SOLVE.body_follow,
        min=0.0,
        max=1.0,
        subtype="FACTOR",
    )
    metrics: CollectionProperty(type=NPE_MetricRequest, description="The model set's metrics")
    metrics_folder: StringProperty(
        name="Metrics Folder", description="Model set the metric list was made from",
        options={"HIDDEN"})
    settle_due: BoolProperty(
        name="Settle Due", description="A Live drag left this pose without its final "
        "settle (stored with the pose, so an undo step taken mid-drag knows)",
        options={"HIDDEN"})
    carried_matrix: FloatVectorProperty(
        name="Carried Matrix", description="The armature object's world matrix where its "
        "effector empties were last carried along with it (all zeros: not yet)",
        size=16, options={"HIDDEN"})


# --------------------------------------------------------------------------- propagation


class NPE_PropagationSettings(PropertyGroup):
    """Spread Edit's defaults, shown in the panel: invoking the operator copies them into
    its own properties (those of the redo panel, F9)."""

    mode: EnumProperty(
        name="Mode", description="What the edit is written into",
        items=(spread_items.AUTO_MODE, *spread_items.MODES), default="AUTO")
    range_mode: EnumProperty(
        name="Range", description="How the frames to edit are chosen",
        items=spread_items.RANGES, default="RADIUS")
    radius: IntProperty(
        name="Radius", description="The edit fades to nothing this many frames away",
        default=spread_items.DEFAULT_RADIUS, min=1, soft_max=200)
    frame_start: IntProperty(name="Start", description="First frame edited", default=1)
    frame_end: IntProperty(name="End", description="Last frame edited", default=60)
    curve: EnumProperty(
        name="Falloff", description="Weight of the edit by distance from the current frame",
        items=spread_items.CURVES, default="SMOOTH", update=_curve_kind_changed)
    metric_mode: EnumProperty(
        name="Metrics", description="How metric requests travel to the other frames",
        items=spread_items.METRIC_MODES, default="DELTA")
    show_overlay: BoolProperty(
        name="Show in Timeline", default=False,
        description="Bars in the Timeline and Dope Sheet at the frames Spread Edit would "
        "change, as tall as their weight")


# --------------------------------------------------------------------------- scene


class NPE_SceneSettings(PropertyGroup):
    """Model set, live mode, solver options, metric requests and propagation."""

    model_set: EnumProperty(
        name="Models",
        description="Model set used to edit poses (add your own in the add-on preferences)",
        items=_model_set_items,
        get=_model_set_get,
        set=_model_set_set,
        update=_model_set_changed,
    )
    model_path: StringProperty(
        name="Model Set Folder",
        description="The chosen model set's folder (empty: the shipped models); kept as a "
        "path so that sets appearing or vanishing in the preferences' folder never swap it "
        "for another",
        subtype="DIR_PATH",
        options={"HIDDEN"},
    )
    live: BoolProperty(
        name="Live",
        description="Solve again as soon as an effector empty moves",
        default=False,
        update=_live_toggled,
    )
    propagation: PointerProperty(type=NPE_PropagationSettings,
                                 description="Propagation settings")


CLASSES = (
    NPE_JointBone,
    NPE_RigMapping,
    NPE_Effector,
    NPE_BoneValues,
    NPE_MetricRequest,
    NPE_ObjectSettings,
    NPE_PropagationSettings,
    NPE_SceneSettings,
)

# (owner type, attribute, group): attached in register, removed in unregister
ATTACHMENTS = (
    (bpy.types.Armature, "npe_mapping", NPE_RigMapping),
    (bpy.types.Object, "npe", NPE_ObjectSettings),
    (bpy.types.Scene, "npe", NPE_SceneSettings),
)


OVERRIDE = {"LIBRARY_OVERRIDABLE"}
# Items may be added locally, matched by index (most have no name: matched by name, 19 of
# a character's 21 mapped joints were lost when its shot was saved).
OVERRIDE_COLLECTION = {"LIBRARY_OVERRIDABLE", "USE_INSERTION", "NO_PROPERTY_NAME"}


def _overridable(cls: type) -> None:
    """Mark every property the class declares library-overridable (one rule for all)."""
    for prop in getattr(cls, "__annotations__", {}).values():
        keywords = getattr(prop, "keywords", None)
        if keywords is None:
            continue
        overridable = OVERRIDE_COLLECTION if prop.function is CollectionProperty else OVERRIDE
        keywords.setdefault("override", overridable)


def register() -> None:
    for cls in CLASSES:
        _overridable(cls)
        bpy.utils.register_class(cls)
    for owner, attr, group in ATTACHMENTS:
        setattr(owner, attr, PointerProperty(type=group, description=group.__doc__,
                                             override=OVERRIDE))


def unregister() -> None:
    for owner, attr, _group in reversed(ATTACHMENTS):
        if hasattr(owner, attr):
            delattr(owner, attr)
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
