"""What every operator does with an edit: run it guarded, report, cancel on errors."""

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
