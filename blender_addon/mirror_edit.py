"""Mirror Edit: the armature's edit (its pose's change from the base pose) carried to the
other side of the body, in one operation.

The arithmetic is :mod:`.core.mirror`'s, on the joints of the base pose and of the pose
shown (core space, so the body's own facing gives the mirror plane). The mirror is then an
edit like any other, so that the pose stays what its base and its effectors give: the
plan's goals become effectors (the other side's wrist or ankle moved onto its mirrored
target, its elbow or knee held there softly; the edited side's moved joints held where the
edit put them), existing empties moved or new ones added, and :func:`.edits.edit` solves
from the base pose. The next solve, a drag or Live, keeps the mirror instead of
undoing it. An error leaves the empties as they were and the pose unchanged.
"""

from __future__ import annotations

import bpy
import numpy as np
from mathutils import Matrix

from . import base_pose, edits, empties, rig_io
from . import state as kept
from .core import mirror
from .core.skeleton import JOINT_INDEX
from .errors import EditError, Outcome

# The operator's side choice -> the edited side the core mirrors from ("auto": found).
SIDES = {"AUTO": "auto", "LEFT_TO_RIGHT": "left", "RIGHT_TO_LEFT": "right"}


def mirror_edit(scene: bpy.types.Scene, obj: bpy.types.Object, side: str = "AUTO") -> Outcome:
    """Carry the edit of one side of ``obj``'s body (``side``: a key of :data:`SIDES`) to
    the other side; raises :class:`EditError` (nothing changed) when there is no edit."""
    if side not in SIDES:
        raise EditError(f"Mirror side must be one of {', '.join(SIDES)}, got {side!r}")
    info, plan, goals = _plan(scene, obj, side)
    notes = []
    if plan.blocked:
        notes.append(f"Not mirrored onto the pinned {', '.join(plan.blocked)} effector(s)")
    undo = _Placed(obj)
    try:
        added = undo.place(scene, info, goals, moved=plan.moved)
        view_layer = bpy.context.view_layer
        view_layer.update()  # the empties' evaluated matrices, for the solve to read
        outcome = edits.edit(scene, obj, bpy.context.evaluated_depsgraph_get())
    except BaseException:
        undo.restore()
        raise
    other = mirror.SIDES[1 - mirror.SIDES.index(plan.source)]
    if added:
        notes.append(f"Added effector(s) on {', '.join(added)} so that the next solve keeps "
                     "the mirrored edit")
    # What the user sees: the mirrored ends' places (the soft elbows and knees only shape).
    ends = [j for j, w in zip(plan.moved, plan.weights, strict=True) if w >= 1.0]
    seen = rig_io.armature_to_core(rig_io.world_matrix(obj), edits.evaluated_joints(obj, info))
    miss = max(float(np.linalg.norm(seen[JOINT_INDEX[j]] - plan.targets[JOINT_INDEX[j]]))
               for j in ends)
    return Outcome(f"Mirrored the {plan.source} side's edit of {obj.name} onto the {other} "
                   f"side ({', '.join(ends)}: largest miss {miss * edits.CM:.1f} cm)",
                   notes + outcome.notes)


def _plan(scene: bpy.types.Scene, obj: bpy.types.Object, side: str
          ) -> tuple[rig_io.RigInfo, mirror.MirrorPlan, dict[str, tuple[np.ndarray, float]]]:
    """The rig, the mirror's plan and its goals: joint -> (world place, effector weight)."""
    state = kept.get(scene, obj, fresh=True)
    info = state.info
    pose = edits._read_pose(obj, state)
    frame = scene.frame_current
    if state.base is None or not state.base_is_current(pose, frame):
        raise EditError(f"Nothing to mirror: {obj.name} shows its base pose at frame {frame} "
                        "(edit one side first)")
    mw = rig_io.world_matrix(obj)
    base_q, base_l = base_pose.base_arrays(info, state.base, pose)
    base_core = rig_io.armature_to_core(mw, rig_io.joint_positions(info, base_q, base_l)[0])
    now_core = rig_io.armature_to_core(
        mw, rig_io.joint_positions(info, pose.quats, pose.locations)[0])
    try:
        plan = mirror.plan(base_core, now_core, SIDES[side],
                           pinned=[s.joint for s in state.effectors if s.pin])
    except mirror.NothingToMirror as exc:
        raise EditError(f"{obj.name}: {exc}") from exc
    except ValueError as exc:
        raise EditError(f"Cannot mirror {obj.name}: {exc}") from exc
    if not plan.moved:
        raise EditError(f"Nothing to mirror onto: the {', '.join(plan.blocked)} effector(s) "
                        "are pinned (turn Pin off to mirror onto them)")
    arm = rig_io.core_to_armature(mw, plan.targets)
    world = arm @ mw[:3, :3].T + mw[:3, 3]
    joints = (*plan.moved, *plan.held)
    weights = (*plan.weights, *plan.held_weights)
    return info, plan, {j: (world[JOINT_INDEX[j]], w)
                        for j, w in zip(joints, weights, strict=True)}


class _Placed:
    """The effectors a mirror moves or adds, and how to put them back."""

    def __init__(self, obj: bpy.types.Object) -> None:
        self.obj = obj
        self.count = len(obj.npe.effectors)
        self.active = obj.npe.active_effector
        self.moved: list[tuple[bpy.types.Object, Matrix, np.ndarray]] = []

    def place(self, scene: bpy.types.Scene, info: rig_io.RigInfo,
              goals: dict[str, tuple[np.ndarray, float]], moved: tuple[str, ...]) -> list[str]:
        """The ``moved`` joints' empties onto their goals (added where missing, with the
        goal's weight); the held joints' empties stay where the user put them (added at
        their goal where missing). Returns the joints that got a new effector."""
        obj = self.obj
        have = {item.joint: item for item in obj.npe.effectors}
        missing = [j for j in goals if j not in have]
        if missing:
            empties.add(scene, obj, info, missing)
            obj.npe.active_effector = self.active
        for item in obj.npe.effectors:
            if item.joint not in goals or (item.joint in have and item.joint not in moved):
                continue
            place, weight = goals[item.joint]
            empty = item.empty
            if item.joint in have:
                self.moved.append((empty, empty.matrix_world.copy(),
                                   np.array(item.solved_matrix)))
            else:
                item.weight = weight  # (an operator runs busy: Live does not re-solve)
            matrix = empty.matrix_world.copy()
            matrix.translation = place
            empty.matrix_world = matrix
        return missing

    def restore(self) -> None:
        """Back to the effectors as they were (an error after :meth:`place`)."""
        solved = {empty.name: matrix for empty, _, matrix in self.moved}
        for empty, matrix, _ in self.moved:
            empty.matrix_world = matrix
        items = self.obj.npe.effectors
        for item in items:
            if item.empty is not None and item.empty.name in solved:
                item.solved_matrix = solved[item.empty.name].ravel()
        if len(items) > self.count:
            for i in reversed(range(self.count, len(items))):
                empties.remove(self.obj, i)
        self.obj.npe.active_effector = self.active
