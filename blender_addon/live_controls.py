"""Rig controls as effectors in Live mode: moving a rig's own control poses the body.

The controls (:func:`controls`): Rigify's IK hand and foot controls and its torso
(:func:`.grab.control_joint`), and every mapped end bone (hands, feet, head) or pelvis
whose location is free (not locked, not connected to its parent). A control moved (its
location channel changed since the add-on last saw it, :func:`moved`) becomes a
full-weight target for its joint at the control's evaluated head: the live update solves
with it beside the empties (:func:`live_update`), and so does the drag's pause, after
which the pose shown becomes the base (:func:`settled`), so the next edit starts from it.

A mapped control's moved location is put back before the solve (it is the joint the
solve moves by turning the bones above it; the rig keeps its joints connected), so the
control ends where the user put it through the body, not by sliding off its parent. An
unmapped control (a Rigify IK control while the limb is in FK) stays where it was put.

"Seen" locations are kept per armature in memory, taken when Live is switched on, after
undo, redo, file loads and frame changes (:func:`on_frame_change`: the animation moved
them), at the first update of an armature, and at the first look after any pose write of
the add-on's (:mod:`.pose_writes`; from the channels, no evaluation needed): the add-on's
own writes never count as a move.
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np
from bpy.app.handlers import persistent

from . import edits, empties, mapped_rig, pose_writes, rig_io
from . import state as kept
from .core.skeleton import END_JOINTS
from .errors import EditError
from .grab import control_joint

MOVED_ATOL = 1e-6  # a control's location channel further than this from the seen one moved
FREE_JOINTS = (*END_JOINTS, "pelvis")  # mapped bones that act as controls when free to move


@dataclass(frozen=True)
class Control:
    """A bone the user moves to pose a joint."""

    bone: str
    joint: str
    mapped: bool  # its location is put back before the solve


_SEEN: dict[str, dict[str, np.ndarray]] = {}  # armature -> control -> location seen
_FRAME: dict[str, int] = {}  # armature -> the frame the locations were seen at
_HELD: dict[str, list[empties.Target]] = {}  # armature -> the moved controls' targets
_CONTROLS: dict[str, tuple[tuple, list[Control]]] = {}  # armature -> (key, its controls)


def controls(obj: bpy.types.Object) -> list[Control]:
    """The armature's controls (see the module's docstring), kept per armature while its
    bones and mapping stay (every update of a drag asks; a generated Rigify rig has 700
    bones to look through), found again after undo, redo, loads and Live switched on."""
    pbones = obj.pose.bones
    joints = mapped_rig.mapping_dict(obj.data)
    key = (len(pbones), tuple(sorted(joints.items())))
    kept_controls = _CONTROLS.get(obj.name)
    if kept_controls is not None and kept_controls[0] == key:
        return kept_controls[1]
    out = []
    mapped_names = set(joints.values())
    for joint in FREE_JOINTS:
        pb = pbones.get(joints.get(joint, ""))
        if pb is not None and not all(pb.lock_location) and not pb.bone.use_connect:
            out.append(Control(pb.name, joint, True))
    for pb in pbones:
        joint = control_joint(pb.name)
        if joint is not None and pb.name not in mapped_names:
            out.append(Control(pb.name, joint, False))
    _CONTROLS[obj.name] = (key, out)
    return out


def _locations(obj: bpy.types.Object, names: list[str]) -> dict[str, np.ndarray]:
    pbones = obj.pose.bones
    return {n: np.array(pbones[n].location, dtype=np.float64) for n in names}


def see(obj: bpy.types.Object) -> None:
    """Take the controls' locations now as seen (none moved)."""
    _SEEN[obj.name] = _locations(obj, [c.bone for c in controls(obj)])
    scene = bpy.context.scene
    _FRAME[obj.name] = scene.frame_current if scene is not None else 0


def see_all() -> None:
    """:func:`see` for every mapped armature (Live switched on, undo, redo, load)."""
    _HELD.clear()
    _SEEN.clear()
    pose_writes.clear()
    _FRAME.clear()
    _CONTROLS.clear()
    for obj in bpy.data.objects:
        if obj.type == "ARMATURE" and len(obj.data.npe_mapping.joints):
            see(obj)


@persistent
def on_frame_change(scene: bpy.types.Scene, *_args: object) -> None:
    """A frame change (``frame_change_post``, installed while Live is on): the animation
    moved the controls, not the user; the armatures watched are seen again."""
    if not scene.npe.live:
        return
    for name in list(_SEEN):
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != "ARMATURE":
            _SEEN.pop(name, None)
        else:
            see(obj)


def moved(obj: bpy.types.Object) -> list[Control]:
    """The controls whose location changed since last seen (none at the first look)."""
    seen = _SEEN.get(obj.name)
    scene = bpy.context.scene
    written = pose_writes.take(obj.name)
    if seen is None or scene is None or _FRAME.get(obj.name) != scene.frame_current \
            or written:
        see(obj)  # first look, a frame change (the animation moved them), our own write
        return []
    now = _locations(obj, list(seen))
    return [c for c in controls(obj) if c.bone in seen
            and np.abs(now[c.bone] - seen[c.bone]).max() > MOVED_ATOL]


def _targets(obj: bpy.types.Object, chosen: list[Control]) -> list[empties.Target]:
    """Full-weight targets at the controls' evaluated heads (world), joint by joint."""
    mw = rig_io.world_matrix(obj)
    pbones = obj.pose.bones
    world = np.array([mw[:3, :3] @ np.array(pbones[c.bone].head) + mw[:3, 3]
                      for c in chosen])
    core = rig_io.world_to_core(mw, world)
    out = []
    for c, place, w in zip(chosen, core, world, strict=True):
        m = np.eye(4)
        m[:3, 3] = w
        out.append(empties.Target(c.joint, place, 1.0, False, None, m.ravel()))
    return out


def live_update(scene: bpy.types.Scene, obj: bpy.types.Object,
                depsgraph: bpy.types.Depsgraph | None) -> bool:
    """The live handler's work for an armature whose controls moved: the moved controls
    (with those moved earlier in this drag) as targets, one drag solve. Errors become
    the panel's status line. True when it solved a drag update whose pause is due."""
    from .errors import STATUS

    chosen = moved(obj)
    if not chosen:
        return False
    put: dict[str, tuple[float, ...]] = {}  # mapped controls' locations as the user left them
    try:
        fresh = _targets(obj, chosen)
        by_joint = {t.joint: t for t in _HELD.get(obj.name, [])}
        by_joint.update({t.joint: t for t in fresh})
        seen = _SEEN[obj.name]
        pbones = obj.pose.bones
        put.update({c.bone: tuple(pbones[c.bone].location) for c in chosen if c.mapped})
        for name in put:  # the joint moves by the bones above it
            pbones[name].location = seen[name]
        state = kept.get(scene, obj, fresh=False)
        outcome = edits.edit_with(scene, obj, state, empties.matrices(obj, depsgraph),
                                  allow_nothing=True, live=True,
                                  refine=obj.npe.live_refine, extra=list(by_joint.values()))
    except EditError as exc:
        for name, location in put.items():  # as the user left them
            obj.pose.bones[name].location = location
        STATUS[obj.name] = str(exc)
        see(obj)
        return False
    STATUS.pop(obj.name, None)
    _HELD[obj.name] = list(by_joint.values())
    pose_writes.take(obj.name)
    see(obj)
    return outcome.deferred


def held(obj_name: str) -> list[empties.Target]:
    """The targets of the controls moved since the last pause (for the pause's solve)."""
    return list(_HELD.get(obj_name, ()))


def settled(scene: bpy.types.Scene, obj: bpy.types.Object) -> None:
    """After the pause's solve with control targets: the pose shown becomes the base (the
    controls' edit kept by the next one) and the controls are seen where they are."""
    from . import base_pose

    if _HELD.pop(obj.name, None) is None:
        return
    base_pose.make_current_base(scene, obj, mapped_rig.rig_for(obj, fresh=False))
    kept.invalidate(obj.name)
    see(obj)
