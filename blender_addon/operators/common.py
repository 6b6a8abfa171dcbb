"""What every operator does with an edit: grey out where it cannot run (``poll``, saying
why), run it guarded, report, cancel on errors."""

from collections.abc import Callable

import bpy


def run(op: bpy.types.Operator, action: Callable[[], object]) -> set[str]:
    """Run ``action`` (returning an Outcome) with the live handler paused; an EditError
    becomes an error report and CANCELLED (the action wrote nothing).

    Every cache of the armatures is dropped before and after: an operator reads everything
    afresh, and may change what the caches were built from.
    """
    from ..errors import EditError
    from ..guard import busy
    from ..state import invalidate

    invalidate()
    try:
        with busy():
            outcome = action()
    except EditError as exc:
        op.report({"ERROR"}, str(exc))
        return {"CANCELLED"}
    finally:
        invalidate()
    op.report({"INFO"}, outcome.message)
    for note in getattr(outcome, "notes", ()):
        op.report({"WARNING"}, note)
    return {"FINISHED"}

def run_on_armature(op: bpy.types.Operator, context: bpy.types.Context,
                    action: Callable[[bpy.types.Object], object]) -> set[str]:
    """:func:`run` of ``action(armature)`` on the armature the context points at (the active
    armature, or the one the active empty belongs to); finding none is reported like any
    other error."""
    from ..mapped_rig import armature_from_context

    return run(op, lambda: action(armature_from_context(context)))


# bl_options of operators: those that change Blender data push one undo step.
UNDOABLE = {"REGISTER", "UNDO"}
NOT_UNDOABLE = {"REGISTER"}


def armature_in(context: bpy.types.Context) -> bpy.types.Object | None:
    from ..mapped_rig import active_armature

    return active_armature(context)


def poll_armature(cls: type, context: bpy.types.Context, mapped: bool) -> bool:
    """Whether there is an armature to work on (``mapped``: with a complete mapping);
    else False, Blender's tooltip saying what to do."""
    obj = armature_in(context)
    if obj is None:
        cls.poll_message_set("Select an armature (or one of its effector empties)")
        return False
    if obj.mode == "EDIT":
        cls.poll_message_set(f"{obj.name} is in Edit Mode: switch to Pose or Object Mode")
        return False
    if mapped:
        from ..mapped_rig import mapping_problems

        problems = mapping_problems(obj.data)
        if problems:
            cls.poll_message_set(f"{obj.name} is {problems[0]}: click Map Rig"
                                 if problems == ["not mapped"] else
                                 f"{obj.name}'s mapping is incomplete: {problems[0]}")
            return False
    return True


class OnArmature:
    """Mixin: available with an armature (or its effector) active."""

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return poll_armature(cls, context, mapped=False)


class OnMappedArmature:
    """Mixin: available with a mapped armature (or its effector) active."""

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        return poll_armature(cls, context, mapped=True)


class Always:
    """Mixin: needs nothing selected (a scene is enough)."""

    @classmethod
    def poll(cls, context: bpy.types.Context) -> bool:
        if context.scene is None:
            cls.poll_message_set("No scene")
            return False
        return True
