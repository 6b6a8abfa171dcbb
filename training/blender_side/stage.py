"""Inside bpy: a renderable stage for an armature (bones do not render): capsule meshes
parented to the bones, spheres on the effector empties, a floor, a camera, Workbench.

Every mesh is built in its bone's *tail* frame (a ``parent_type='BONE'`` child lives
there) with an identity parent inverse, so it follows the pose with no bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import bmesh
import bpy
import numpy as np
from mathutils import Matrix, Vector

from blender_addon import mapped_rig

COLLECTION = "Walkthrough Stage"
# Capsule radius (m) of the bone whose head is each joint; end bones get a fixed length.
RADII = {"pelvis": 0.10, "spine": 0.10, "chest": 0.115, "neck": 0.045, "l_clavicle": 0.05,
         "r_clavicle": 0.05, "l_upperarm": 0.048, "r_upperarm": 0.048, "l_forearm": 0.04,
         "r_forearm": 0.04, "l_hand": 0.035, "r_hand": 0.035, "l_thigh": 0.07,
         "r_thigh": 0.07, "l_shin": 0.052, "r_shin": 0.052, "l_foot": 0.042, "r_foot": 0.042,
         "l_toe": 0.035, "r_toe": 0.035}
HEAD_RADIUS = 0.105
HEAD_CENTRE = 0.09  # m above the head joint, along the head bone
END_LENGTH = {"l_hand": 0.09, "r_hand": 0.09, "l_toe": 0.05, "r_toe": 0.05}  # m
HIP_RADIUS = 0.075  # the bar between the thighs
NOSE_RADIUS = 0.03  # shows which way the head faces
BODY_COLOR = (0.25, 0.50, 0.95, 1.0)
LEFT_COLOR = (0.12, 0.28, 0.62, 1.0)  # the character's left side, darker
FLOOR_COLOR = (1.0, 1.0, 1.0, 1.0)
EFFECTOR_COLOR = (1.0, 0.5, 0.0, 1.0)
ACTIVE_COLOR = (1.0, 0.04, 0.04, 1.0)  # the effector being dragged
GHOST_COLOR = (0.55, 0.55, 0.55, 1.0)  # where a dragged effector started
WORLD_COLOR = (0.30, 0.33, 0.38)
EFFECTOR_RADIUS = 0.045
ROD_RADIUS = 0.008
FLOOR_SIZE = 80.0  # m: its far edge stays out of the pictures
SEGMENTS, RINGS = 20, 10
LENS_MM = 50.0
SENSOR_MM = 24.0  # vertical (sensor_fit VERTICAL): every picture shape has the same view
FRAME_MARGIN = 1.1  # the character's height times this fills the picture's height


def collection() -> bpy.types.Collection:
    coll = bpy.data.collections.get(COLLECTION)
    if coll is None:
        coll = bpy.data.collections.new(COLLECTION)
        bpy.context.scene.collection.children.link(coll)
    return coll


def capsule_mesh(name: str, a: Vector, b: Vector, radius: float) -> bpy.types.Mesh:
    """A capsule from ``a`` to ``b`` (a sphere when they coincide), in mesh coordinates."""
    bm = bmesh.new()
    bmesh.ops.create_uvsphere(bm, u_segments=SEGMENTS, v_segments=RINGS, radius=radius)
    axis = b - a
    half = axis.length / 2.0
    for v in bm.verts:  # stretch the sphere's halves apart along Z
        v.co.z += half if v.co.z > 0 else -half if v.co.z < 0 else 0.0
    rot = Vector((0.0, 0.0, 1.0)).rotation_difference(axis.normalized()).to_matrix().to_4x4() \
        if axis.length > 1e-9 else Matrix.Identity(4)
    bmesh.ops.transform(bm, matrix=Matrix.Translation((a + b) / 2.0) @ rot, verts=bm.verts)
    for f in bm.faces:
        f.smooth = True
    mesh = bpy.data.meshes.new(name)
    bm.to_mesh(mesh)
    bm.free()
    return mesh


def _tail_frame(bone: bpy.types.Bone) -> Matrix:
    """Armature space -> the bone's tail frame (where a BONE-parented child lives)."""
    return (bone.matrix_local @ Matrix.Translation((0.0, bone.length, 0.0))).inverted()


def _add(name: str, mesh: bpy.types.Mesh, color: Sequence[float]) -> bpy.types.Object:
    obj = bpy.data.objects.new(name, mesh)
    obj.color = color
    collection().objects.link(obj)
    return obj


def _bone_child(arm: bpy.types.Object, bone: bpy.types.Bone, name: str, a: Vector, b: Vector,
                radius: float, color: Sequence[float], local: bool = False) -> bpy.types.Object:
    """A capsule between armature-space (rest) points ``a`` and ``b`` that follows ``bone``
    (``local``: the points are in the bone's tail frame already)."""
    inv = Matrix.Identity(4) if local else _tail_frame(bone)
    obj = _add(name, capsule_mesh(name, inv @ a, inv @ b, radius), color)
    obj.parent = arm
    obj.parent_type = "BONE"
    obj.parent_bone = bone.name
    obj.matrix_parent_inverse = Matrix.Identity(4)
    return obj


def posed_forward(arm: bpy.types.Object) -> Vector:
    """The way the current pose faces (world): its left crossed with its spine. (A BVH
    rest pose need not stand upright, so the rest pose cannot tell.)"""
    joints = mapped_rig.mapping_dict(arm.data)
    bpy.context.view_layer.update()
    head = {j: arm.matrix_world @ arm.pose.bones[b].head for j, b in joints.items()}
    return (head["l_thigh"] - head["r_thigh"]).cross(head["neck"] - head["pelvis"]).normalized()


def facing(arm: bpy.types.Object) -> tuple[np.ndarray, np.ndarray]:
    """The current pose's forward and right directions, level (world, Z up): to place a
    camera (a bowing body's own forward points at the floor)."""
    fwd = np.array(posed_forward(arm))
    fwd[2] = 0.0
    fwd /= np.linalg.norm(fwd)
    return fwd, np.cross(fwd, [0.0, 0.0, 1.0])


def dress(arm: bpy.types.Object) -> list[bpy.types.Object]:
    """Capsules on the mapped bones of ``arm`` (rest pose geometry): the character's body."""
    joints = mapped_rig.mapping_dict(arm.data)
    bones = arm.data.bones
    made = []
    for joint, name in joints.items():
        bone = bones[name]
        color = LEFT_COLOR if joint.startswith("l_") else BODY_COLOR
        head = bone.head_local.copy()
        direction = (bone.tail_local - bone.head_local).normalized()
        if joint == "head":
            centre = head + direction * HEAD_CENTRE
            made.append(_bone_child(arm, bone, "Body head", centre, centre, HEAD_RADIUS, color))
            # The nose, in the head bone's frame: the current pose's forward, carried along.
            posed = (arm.matrix_world @ arm.pose.bones[name].matrix).to_3x3()
            look = (posed.inverted() @ posed_forward(arm)).normalized()
            nose = Vector((0.0, HEAD_CENTRE - bone.length, 0.0)) + look * HEAD_RADIUS
            made.append(_bone_child(arm, bone, "Body nose", nose, nose, NOSE_RADIUS, color,
                                    local=True))
            continue
        if joint in END_LENGTH:
            tail = head + direction * END_LENGTH[joint]
        else:  # up to the child joint's bone (a BVH bone's tail may be made up)
            child = next((bones[joints[j]] for j in joints if joints[j] in bones
                          and bones[joints[j]].parent == bone), None)
            tail = child.head_local.copy() if child is not None else bone.tail_local.copy()
        if joint == "pelvis":  # a bar across the hips, between the thigh joints
            left, right = bones[joints["l_thigh"]].head_local, bones[joints["r_thigh"]].head_local
            made.append(_bone_child(arm, bone, "Body hips", left, right, HIP_RADIUS, color))
            tail = bones[joints["spine"]].head_local.copy()
        made.append(_bone_child(arm, bone, f"Body {joint}", head, tail, RADII[joint], color))
    return made


def effector_spheres(arm: bpy.types.Object, active: str | None = None
                     ) -> dict[str, bpy.types.Object]:
    """A sphere on each effector empty of ``arm`` (empties do not render); ``active`` red."""
    out = {}
    for item in arm.npe.effectors:
        if item.empty is None:
            continue
        name = f"Effector sphere {item.joint}"
        old = bpy.data.objects.get(name)
        if old is not None:
            bpy.data.objects.remove(old, do_unlink=True)
        color = ACTIVE_COLOR if item.joint == active else EFFECTOR_COLOR
        obj = _add(name, capsule_mesh(name, Vector(), Vector(), EFFECTOR_RADIUS), color)
        obj.parent = item.empty
        obj.matrix_parent_inverse = Matrix.Identity(4)
        obj.show_in_front = True
        out[item.joint] = obj
    return out


def remove(objects: Iterable[bpy.types.Object]) -> None:
    for obj in objects:
        bpy.data.objects.remove(obj, do_unlink=True)


def drag_marker(start: Sequence[float], end: Sequence[float]) -> list[bpy.types.Object]:
    """A grey sphere where a dragged effector started and a rod to where it is now."""
    a, b = Vector(start), Vector(end)
    ghost = _add("Drag start", capsule_mesh("Drag start", a, a, EFFECTOR_RADIUS * 0.8),
                 GHOST_COLOR)
    rod = _add("Drag rod", capsule_mesh("Drag rod", a, b, ROD_RADIUS), GHOST_COLOR)
    return [ghost, rod]


def floor(height: float) -> bpy.types.Object:
    bm = bmesh.new()
    bmesh.ops.create_grid(bm, x_segments=1, y_segments=1, size=FLOOR_SIZE / 2.0)
    mesh = bpy.data.meshes.new("Floor")
    bm.to_mesh(mesh)
    bm.free()
    obj = _add("Floor", mesh, FLOOR_COLOR)
    obj.location.z = height
    return obj


def setup_render(width: int, height: int) -> None:
    """Workbench (fast on the CPU through Mesa), studio light, object colours, shadows."""
    scene = bpy.context.scene
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.render.resolution_x, scene.render.resolution_y = width, height
    scene.render.resolution_percentage = 100
    scene.render.film_transparent = False
    shading = scene.display.shading
    shading.light = "STUDIO"
    shading.color_type = "OBJECT"
    shading.show_shadows = True
    shading.shadow_intensity = 0.35
    shading.show_object_outline = True
    shading.show_cavity = False
    scene.display.render_aa = "8"
    if scene.world is None:
        scene.world = bpy.data.worlds.new("World")
    scene.world.color = WORLD_COLOR
    settings = scene.render.image_settings
    settings.file_format = "PNG"
    settings.color_mode = "RGB"
    settings.compression = 100
    scene.view_settings.view_transform = "Standard"


def camera_looking_at(target: Sequence[float], direction: Sequence[float],
                      extent: float) -> bpy.types.Object:
    """The scene camera on ``direction`` from ``target`` (Z up), far enough that a
    vertical ``extent`` (m) fills the picture's height with a margin."""
    cam = bpy.context.scene.camera
    if cam is None:
        data = bpy.data.cameras.new("Camera")
        cam = bpy.data.objects.new("Camera", data)
        bpy.context.scene.collection.objects.link(cam)
        bpy.context.scene.camera = cam
    cam.data.lens = LENS_MM
    cam.data.sensor_fit = "VERTICAL"
    cam.data.sensor_height = SENSOR_MM
    half_fov = np.arctan(SENSOR_MM / 2.0 / LENS_MM)
    distance = extent * FRAME_MARGIN / 2.0 / np.tan(half_fov)
    d = Vector(direction).normalized()
    cam.location = Vector(target) + d * distance
    cam.rotation_euler = (-d).to_track_quat("-Z", "Y").to_euler()
    return cam


@contextmanager
def frozen_body() -> Iterator[None]:
    """The bone-parented meshes unparented at their current world place while inside.

    A render evaluates the armature's action afresh: a pose the add-on wrote but nobody
    keyed (a live solve, a slider edit) would render as the action's pose. Frozen, the body
    renders as it stands in the viewport.
    """
    bpy.context.view_layer.update()
    frozen = [(obj, obj.parent, obj.parent_bone, obj.matrix_world.copy())
              for obj in collection().objects if obj.parent_type == "BONE" and obj.parent]
    for obj, _parent, _bone, world in frozen:
        obj.parent = None
        obj.matrix_world = world
    try:
        yield
    finally:
        for obj, parent, bone, _world in frozen:
            obj.parent = parent
            obj.parent_type = "BONE"
            obj.parent_bone = bone
            obj.matrix_parent_inverse = Matrix.Identity(4)
            obj.matrix_basis = Matrix.Identity(4)
        bpy.context.view_layer.update()


POSE_CHANNELS = (("rotation_quaternion", 4), ("rotation_euler", 3), ("rotation_axis_angle", 4),
                 ("location", 3), ("scale", 3))


@contextmanager
def kept_poses() -> Iterator[None]:
    """Every armature's pose bone values put back after the block.

    Headless, a still render re-evaluates the frame on the main depsgraph too, which puts
    the action's pose back over an unkeyed edit (as a frame change does).
    """
    saved = []
    for obj in bpy.context.scene.objects:
        if obj.type != "ARMATURE":
            continue
        bones = obj.pose.bones
        values = {}
        for attr, width in POSE_CHANNELS:
            buf = np.empty(len(bones) * width, dtype=np.float32)
            bones.foreach_get(attr, buf)
            values[attr] = buf
        saved.append((obj, values))
    try:
        yield
    finally:
        for obj, values in saved:
            for attr, buf in values.items():
                obj.pose.bones.foreach_set(attr, buf)
            obj.update_tag()
        bpy.context.view_layer.update()


def render(path: Path) -> Path:
    """Render the scene camera's view to ``path``, the body as the viewport shows it, and
    leave the poses as they were."""
    scene = bpy.context.scene
    scene.render.filepath = str(path)
    with kept_poses(), frozen_body():
        bpy.ops.render.render(write_still=True)
    return path
