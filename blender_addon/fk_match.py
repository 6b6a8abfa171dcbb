"""Rigify's FK→IK snap for limbs left in IK: the FK controls put where the limb is shown,
so a solve starts from what the animator sees (the method of Rigify's
``RigifyLimbIk2FkBase``'s FK side, reimplemented for the reasons :mod:`.ik_snap` gives):
the end and the toes exactly, the elbow in the shown elbow's plane at the FK bones' own
lengths (the shown chain may be stretched by its IK)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import bpy
from mathutils import Matrix, Vector

from .channel_writes import ChannelWrites
from .ik_snap import STRAIGHT, Limb, elbow_angle, matrix_gap, matrix_miss, set_rotation

# What the FK controls must match of the limb shown before a solve (else they are put
# there): the end's head and axes (armature units) and the elbow's plane (rad). The IK
# placement ends well inside both, so a limb the add-on placed is not matched again.
MATCH_TOL = 1e-4
MATCH_PLANE = 1e-3
# Armature units: FK controls set in one go (each under its parent as that will be) this
# close to the matrices asked, scale included, are matched (seen: 5e-7, float32); else they
# are set again a chain level at a time. Ten times inside MATCH_TOL.
FOLLOW_TOL = 1e-5


def _set_whole(obj: bpy.types.Object, pb: bpy.types.PoseBone, matrix: Matrix,
               writes: ChannelWrites) -> None:
    """As ``pb.matrix = matrix`` sets it (location, rotation and scale, locks aside),
    through ``writes``."""
    local = obj.convert_space(pose_bone=pb, matrix=matrix, from_space="POSE", to_space="LOCAL")
    location, rotation, scale = local.decompose()
    writes.set(pb, "location", location)
    set_rotation(pb, rotation, writes, locks=False)
    writes.set(pb, "scale", scale)


def _aimed(matrix: Matrix, head: Vector, direction: Vector) -> Matrix:
    """``matrix``'s rotation (its scale dropped) turned the least way to point its Y axis
    along ``direction``, at ``head``."""
    rotation = matrix.to_3x3().normalized().to_quaternion()
    turn = (rotation @ Vector((0.0, 1.0, 0.0))).rotation_difference(direction)
    out = (turn @ rotation).to_matrix().to_4x4()
    out.translation = head
    return out


def _fk_pose(obj: bpy.types.Object, limb: Limb) -> list[Matrix]:
    """Matrices for the FK controls that show the limb as it is shown (its ORG bones):
    the end and the toes exactly, the elbow in the same plane, at the FK bones' own
    lengths (the shown chain may be stretched by its IK; the FK controls keep their scale
    at 1, as the solve models them)."""
    pbones = obj.pose.bones
    org = [pbones[n] for n in limb.orgs]
    s, w, shown_elbow = org[0].head, org[2].head, org[1].head
    upper, lower = (pbones[n].bone.length for n in limb.fk[:2])
    axis = w - s
    d = max(axis.length, 1e-9)
    axis /= d
    along = min(max((upper * upper - lower * lower + d * d) / (2.0 * d), -upper), upper)
    side = (shown_elbow - s) - axis * (shown_elbow - s).dot(axis)
    if side.length < STRAIGHT * (upper + lower):
        side = axis.orthogonal()
    elbow = s + axis * along + side.normalized() * math.sqrt(max(upper * upper - along * along,
                                                                 0.0))
    out = [_aimed(org[0].matrix, s, elbow - s), _aimed(org[1].matrix, elbow, w - elbow)]
    for bone in org[2:]:
        matrix = bone.matrix.to_3x3().normalized().to_4x4()
        matrix.translation = bone.head
        out.append(matrix)
    return out


def _shown_differs(obj: bpy.types.Object, limb: Limb) -> bool:
    """Whether the FK controls are off the limb shown: its end, toes or elbow plane."""
    pbones = obj.pose.bones
    fk = [pbones[n] for n in limb.fk]
    org = [pbones[n] for n in limb.orgs]
    if max(matrix_miss(f.matrix, o.matrix) for f, o in zip(fk[2:], org[2:], strict=True)) \
            > MATCH_TOL or (fk[0].head - org[0].head).length > MATCH_TOL:
        return True
    angle = elbow_angle(org[0].head, org[2].head, fk[1].head, org[1].head)
    return angle is not None and abs(angle) > MATCH_PLANE


def set_fk_shown(obj: bpy.types.Object, limbs: list[Limb]) -> dict[str, list[Matrix]]:
    """Set the FK controls of ``limbs`` where each limb is shown (Rigify's FK→IK snap),
    each under its parent as the control above will move it, without evaluating the rig
    (their channels hold the pose at once). Returns the matrices asked (armature space,
    by limb holder, the chain's order)."""
    pbones = obj.pose.bones
    poses = {limb.holder: _fk_pose(obj, limb) for limb in limbs}
    writes = ChannelWrites(obj)
    for limb in limbs:
        follow = Matrix.Identity(4)
        for name, matrix in zip(limb.fk, poses[limb.holder], strict=True):
            pb = pbones[name]
            was = pb.matrix.copy()  # (as last evaluated until the writes are)
            _set_whole(obj, pb, follow.inverted() @ matrix, writes)
            follow = matrix @ was.inverted()
    writes.flush()
    return poses


def fk_missed(obj: bpy.types.Object, limbs: list[Limb], poses: Mapping[str, list[Matrix]]
              ) -> list[Limb]:
    """Of ``limbs``, those whose FK controls, as last evaluated, are off the matrices
    :func:`set_fk_shown` asked (:data:`FOLLOW_TOL`, scale included: a parent that does not
    follow rigidly passes its move on)."""
    pbones = obj.pose.bones
    return [limb for limb in limbs
            if max(matrix_gap(pbones[n].matrix, m) for n, m
                   in zip(limb.fk, poses[limb.holder], strict=True)) > FOLLOW_TOL]


def match_fk(obj: bpy.types.Object, limbs: list[Limb],
             view_layer: bpy.types.ViewLayer) -> list[Limb]:
    """Rigify's FK→IK snap: put the FK controls of ``limbs`` where the limb is shown when
    they are elsewhere (:func:`_shown_differs`), all in one depsgraph update
    (:func:`set_fk_shown`), or where that misses (:func:`fk_missed`) one update per level
    of the chains; returns the limbs moved. The rig is left evaluated."""
    view_layer.update()
    off = [limb for limb in limbs if _shown_differs(obj, limb)]
    if not off:
        return []
    poses = set_fk_shown(obj, off)
    view_layer.update()
    set_fk_levels(obj, fk_missed(obj, off, poses), poses, view_layer)
    return off


def set_fk_levels(obj: bpy.types.Object, limbs: list[Limb], poses: Mapping[str, list[Matrix]],
                  view_layer: bpy.types.ViewLayer) -> None:
    """Set the FK controls of ``limbs`` at the matrices ``poses`` (by limb holder) a chain
    level at a time, one depsgraph update each: each control under its parent's new place
    (where :func:`set_fk_shown` in one go missed, :func:`fk_missed`). The rig is left
    evaluated."""
    pbones = obj.pose.bones
    writes = ChannelWrites(obj)
    for level in range(max((len(limb.fk) for limb in limbs), default=0)):
        for limb in limbs:
            if level < len(limb.fk):
                _set_whole(obj, pbones[limb.fk[level]], poses[limb.holder][level], writes)
        writes.flush()
        view_layer.update()
