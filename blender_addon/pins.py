"""Pins from the viewport: the selected bones' joints pinned or unpinned, pins drawn.

A pinned joint is an effector with ``pin`` on (it holds the joint where the base pose has
it): :func:`toggle` flips the pins of the joints the selected bones move (the rule of
:func:`.grab.bone_joint`), adding an effector where a joint has none. Like Blender's own
toggles, a selection that is all pinned gets unpinned, anything else gets pinned.

While some armature has pins, a ``POST_VIEW`` draw handler (installed in interactive
Blender only: background Blender draws nothing) marks each pinned joint with a dot
(:func:`pinned_points` says where, testable without a GPU). The bone at each pinned joint
also takes the theme's red bone colour (:func:`sync_colours`, what background Blender can
check), its own colour set kept in a custom property and put back when it is unpinned.
"""

from __future__ import annotations

from collections.abc import Sequence

import bpy
import numpy as np

from . import empties, mapped_rig, rig_io
from .core.skeleton import JOINT_INDEX
from .errors import EditError, Outcome

PIN_COLOR = (1.0, 0.25, 0.1, 1.0)  # the dot drawn on a pinned joint (RGBA)
PIN_POINT_SIZE = 12.0  # pixels
POINT_SHADER = "POINT_UNIFORM_COLOR"  # Blender's built-in shader for round dots
PIN_PALETTE = "THEME01"  # the bone colour set of a pinned joint's bone (the theme's red)
SAVED_PALETTE = "npe_palette"  # custom property: the bone's own colour set while pinned
_HANDLE: dict[str, object] = {}


def toggle(scene: bpy.types.Scene, obj: bpy.types.Object, joints: Sequence[str]) -> Outcome:
    """Pin ``joints`` of ``obj`` (all of them unpinned when they all are pinned already);
    a joint with no effector gets one (its empty at the joint)."""
    if not joints:
        raise EditError("Select bones mapped to joints to pin or unpin them")
    info = mapped_rig.rig_for(obj)
    items = {item.joint: item for item in obj.npe.effectors}
    pin = not all(j in items and items[j].pin for j in joints)
    added = []
    if pin:
        added, _existing = empties.add(scene, obj, info,
                                       [j for j in joints if j not in items])
    for item in obj.npe.effectors:
        if item.joint in joints:
            item.pin = pin
    sync_colours(obj)
    what = "Pinned" if pin else "Unpinned"
    notes = [f"added effector(s) for {', '.join(added)}"] if added else []
    return Outcome(f"{what} {', '.join(joints)} on {obj.name}", notes)


def pinned_joints(obj: bpy.types.Object) -> list[str]:
    """The armature's pinned joints, in effector order."""
    return [item.joint for item in obj.npe.effectors if item.pin and item.joint in JOINT_INDEX]


def sync_colours(obj: bpy.types.Object) -> None:
    """The bones at pinned joints in :data:`PIN_PALETTE`; the others back to their own
    colour set (only those the add-on coloured)."""
    pinned = set(pinned_joints(obj))
    pbones = obj.pose.bones
    for joint, name in mapped_rig.mapping_dict(obj.data).items():
        pb = pbones.get(name)
        if pb is None:
            continue
        if joint in pinned:
            if SAVED_PALETTE not in pb:
                pb[SAVED_PALETTE] = pb.color.palette
            pb.color.palette = PIN_PALETTE
        elif SAVED_PALETTE in pb:
            pb.color.palette = str(pb[SAVED_PALETTE])
            del pb[SAVED_PALETTE]


def pinned_points(obj: bpy.types.Object) -> np.ndarray:
    """World places (P, 3) of the armature's pinned joints as Blender shows them (the
    evaluated bone at each joint); (0, 3) when it has none or is not mapped."""
    joints = pinned_joints(obj)
    if not joints or mapped_rig.mapping_problems(obj.data):
        return np.zeros((0, 3))
    try:
        info = mapped_rig.rig_for(obj, fresh=False)
    except EditError:
        return np.zeros((0, 3))
    mw = rig_io.world_matrix(obj)
    joints_arm = rig_io.evaluated_joints(obj, info)[[JOINT_INDEX[j] for j in joints]]
    return joints_arm @ mw[:3, :3].T + mw[:3, 3]


def draw() -> None:
    """The draw handler: a dot on every pinned joint of the visible armatures."""
    import gpu
    from gpu_extras.batch import batch_for_shader

    view_layer = bpy.context.view_layer
    points = []
    for obj in view_layer.objects if view_layer is not None else ():
        if obj.type == "ARMATURE" and len(obj.npe.effectors) and obj.visible_get():
            try:
                points.extend(pinned_points(obj).tolist())
            except (EditError, rig_io.RigError, ValueError):
                continue
    if not points:
        return
    shader = gpu.shader.from_builtin(POINT_SHADER)
    batch = batch_for_shader(shader, "POINTS", {"pos": points})
    gpu.state.point_size_set(PIN_POINT_SIZE)
    gpu.state.depth_test_set("NONE")
    shader.uniform_float("color", PIN_COLOR)
    batch.draw(shader)
    gpu.state.point_size_set(1.0)


def register() -> None:
    if bpy.app.background or "view3d" in _HANDLE:
        return
    _HANDLE["view3d"] = bpy.types.SpaceView3D.draw_handler_add(draw, (), "WINDOW",
                                                                "POST_VIEW")


def unregister() -> None:
    handle = _HANDLE.pop("view3d", None)
    if handle is not None:
        bpy.types.SpaceView3D.draw_handler_remove(handle, "WINDOW")
