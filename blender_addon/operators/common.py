"""What every operator does with an edit: run it guarded, report, cancel on errors."""

from collections.abc import Callable

import bpy


def run(op: bpy.types.Operator, action: Callable[[], object]) -> set[str]:
    """Run ``action`` (returning an Outcome) with the live handler paused; an EditError
    becomes an error report and CANCELLED (the action wrote nothing)."""
    from ..session import EditError, busy

    try:
        with busy():
            outcome = action()
    except EditError as exc:
        op.report({"ERROR"}, str(exc))
        return {"CANCELLED"}
    op.report({"INFO"}, outcome.message)
    for note in getattr(outcome, "notes", ()):
        op.report({"WARNING"}, note)
    return {"FINISHED"}

# bl_options of operators: those that change Blender data push one undo step.
UNDOABLE = {"REGISTER", "UNDO"}
NOT_UNDOABLE = {"REGISTER"}
