"""Spread Edit through limbs left in IK (Rigify's, ``IK_FK`` < 1, as the animator set them).

The spread reads and writes the mapped FK controls, which such a limb does not show. So,
frame by frame: the engine reads the limb as Blender shows it (the FK controls matched to
it, Rigify's FK->IK snap: :func:`.rig_controls.match_fk_to_shown`), and the IK controls are
placed where the spread's FK pose puts the limb (Rigify's IK->FK snap, which writing the
mapped bones runs: :func:`.rig_controls.follow_fk`) and keyed instead of its FK controls,
as Insert Keyframe keys them (:func:`.rig_controls.keyed_bones`). The switch is never
touched. Each frame costs a few depsgraph updates, in generators that yield the run's
progress so a modal run can stop between frames (Esc).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace

import bpy
import numpy as np

from . import base_pose, rig_controls, rig_io
from .core.propagate import interpolate_changes
from .core.quaternions import quat_make_continuous, quat_normalize
from .ik_snap import Limb

FRAMES_PER_STEP = 5  # frames between two progress yields (each a few depsgraph updates)
STRETCH_NOTE_M = 1e-3  # world: an IK chain's end this far past its FK chain's is noted
# A longer range is read and placed on this many evenly spaced frames (its ends among
# them), the others interpolated between them: each frame takes a few evaluations of the
# rig (about 0.1 s on the generated Rigify rig), as the kernels' solve of a long range does
# (core/propagate.SOLVED_FRAMES) and the evaluated rig's correction (spread_correct).
SAMPLED_FRAMES = 100


@dataclass(frozen=True)
class IkLimbs:
    """The mapped limbs in IK of a rig and the bones a spread reads and keys for them."""

    limbs: tuple[Limb, ...]
    fk: tuple[int, ...]  # their FK controls (mapped): read as shown, never keyed
    ik: tuple[int, ...]  # their IK controls: placed and keyed, rotation and location

    def keyed(self, info: rig_io.RigInfo) -> tuple[list[int], list[int]]:
        """(bones keyed, bones keyed on their location too): the mapped bones but these
        limbs' FK controls, and their IK controls."""
        fk = set(self.fk)
        bones = [b for b in info.mapped if b not in fk] + list(self.ik)
        return bones, sorted(set(info.roots) - fk) + list(self.ik)


_LIMBS: dict[tuple[str, tuple], tuple[Limb, ...]] = {}  # (armature, rig key) -> its limbs


def ik_limbs(obj: bpy.types.Object, info: rig_io.RigInfo) -> IkLimbs | None:
    """The rig's mapped limbs in IK, or None (every limb in FK, or a rig without a
    switch). The limbs are found once per rig (reading the constraints of a Rigify rig
    takes milliseconds, and the panel asks on every redraw); their switches every time."""
    key = (obj.name, info.key)
    limbs = _LIMBS.get(key)
    if limbs is None:
        _LIMBS.clear()  # (one rig at a time is drawn and spread)
        limbs = _LIMBS[key] = tuple(rig_controls.limbs(obj, [info.names[b]
                                                                 for b in info.mapped]))
    found = [limb for limb in limbs if limb.switch(obj) < 1.0]
    if not found:
        return None
    index = {n: b for b, n in enumerate(info.names)}
    mapped = set(info.mapped)
    fk = [index[n] for limb in found for n in (*limb.fk, *(f for f, _ in limb.tails))
          if n in index and index[n] in mapped]
    ik = [index[n] for limb in found for n in limb.ik_controls(obj) if n in index]
    return IkLimbs(tuple(found), tuple(dict.fromkeys(fk)), tuple(dict.fromkeys(ik)))


class PoseKeeper:
    """Every pose bone's local channels and scale as they are now, put back by
    :meth:`restore` (the passes below write the controls frame by frame)."""

    def __init__(self, obj: bpy.types.Object, info: rig_io.RigInfo) -> None:
        self.obj_name = obj.name
        self.pose = rig_io.read_pose(obj, info)
        self.scale = np.empty(3 * len(obj.pose.bones), dtype=np.float32)
        obj.pose.bones.foreach_get("scale", self.scale)

    def restore(self) -> None:
        obj = bpy.data.objects[self.obj_name]
        rig_io.put_back(obj, self.pose)
        obj.pose.bones.foreach_set("scale", self.scale)
        obj.update_tag(refresh={"OBJECT"})


def read_shown(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
               frames: np.ndarray, center: int, limbs: IkLimbs,
               clip: tuple[np.ndarray, np.ndarray, np.ndarray], unkeyed: rig_io.Pose,
               progress: tuple[float, float]
               ) -> Generator[float, None, tuple[rig_io.Pose, list[str]]]:
    """Into ``clip`` (rotations (T, B, 4), locations (T, B, 3) and raw Euler angles
    (T, B, 3) of the ``frames``, :func:`.rig_keys.read_clip`'s; the edited one is row
    ``center``; a long range sampled, :data:`SAMPLED_FRAMES`): the FK
    controls of ``limbs`` matched to the limb each frame shows, and their IK controls as
    they are there (the action's values, drivers and constraints included). Returns
    ``unkeyed`` (:func:`.base_pose.unkeyed_pose`) with the IK controls' values at the
    base (an edit not yet keyed moved the unanimated ones on every frame), and a note for
    each limb its IK stretches past the FK bones' lengths on some frame: no FK pose
    carries it there, and held, its end moves by the stretch."""
    base = base_pose.read_base(obj, info)
    if base_pose.base_is_current(base, info, rig_io.read_pose(obj, info), scene.frame_current):
        base_pose.restore_base(obj, info, base, rig_io.read_pose(obj, info))  # places IK
        bpy.context.view_layer.update()
    at_base = rig_io.read_pose(obj, info)
    ik = list(limbs.ik)
    unkeyed = _with_bones(unkeyed, at_base, ik)
    view_layer = bpy.context.view_layer
    names = [info.names[b] for b in info.mapped]
    read = list(limbs.fk + limbs.ik)
    pbones = obj.pose.bones
    stretch = np.zeros((len(frames), len(limbs.limbs)))  # the ends' gaps, armature units
    sampled = _sampled(np.ones(len(frames), dtype=bool), center)
    todo = np.flatnonzero(sampled)
    lo, hi = progress
    for n, k in enumerate(todo):
        f = frames[k]
        scene.frame_set(int(f))
        rig_controls.match_fk_to_shown(obj, names, view_layer)
        stretch[k] = [(pbones[limb.fk[1]].tail - pbones[limb.orgs[2]].head).length
                      for limb in limbs.limbs]  # the FK chain's reach against the end shown
        pose = rig_io.read_pose(obj, info)
        for values, name in zip(clip, ("quats", "locations", "eulers"), strict=True):
            values[k, read] = getattr(pose, name)[read]
        if n % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
            yield lo + (hi - lo) * (n + 1) / len(todo)
    everything = np.ones(len(frames), dtype=bool)
    for values, unit in zip(clip, (True, False, False), strict=True):
        _interpolate(frames, everything, sampled, values, read, unit)
    scale = rig_io.world_scale(rig_io.world_matrix(obj))
    notes = [f"{limb.holder}: its IK stretches {stretch[:, i].max() * scale * 100:.1f} cm "
             f"past its FK bones on frames {int(frames[on[0]])}-{int(frames[on[-1]])}; "
             "held there, it moves by as much (the spread poses the FK bones' lengths)"
             for i, limb in enumerate(limbs.limbs)
             if (on := np.flatnonzero(stretch[:, i] * scale > STRETCH_NOTE_M)).size]
    return unkeyed, notes


def _with_bones(pose: rig_io.Pose, other: rig_io.Pose, bones: list[int]) -> rig_io.Pose:
    """``pose`` with the channels of ``bones`` taken from ``other``."""
    fields = {}
    for name in ("quats", "quaternion", "eulers", "axis_angles", "locations"):
        values = getattr(pose, name).copy()
        values[bones] = getattr(other, name)[bones]
        fields[name] = values
    return replace(pose, **fields)


def place_controls(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                   frames: np.ndarray, center: int, rows: np.ndarray, limbs: IkLimbs,
                   start: tuple[np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray],
                   solved: np.ndarray, goals: dict[int, np.ndarray],
                   orientations: dict[int, np.ndarray], scale: float,
                   progress: tuple[float, float]) -> Generator[float, None, None]:
    """For the ``rows`` of ``frames`` (a long range sampled, :data:`SAMPLED_FRAMES`, the
    edited frame, row ``center``, among them), as Solve does at one frame: the spread's pose
    (``new``: rotations (T, B, 4) and locations (T, B, 3), from ``start``, the frames as
    read, towards the ``solved`` joints (T, 21, 3) and the effector ``goals`` and
    ``orientations`` per joint (T, ...)) written on the mapped bones, which places the IK
    controls of ``limbs`` where the FK controls put each limb, then corrected from the
    evaluated rig (:func:`.edits.correct_written`). The keyed bones' values as left on the
    rig go into ``new``, in place."""
    from .edits import correct_written

    keyed = sorted(set(limbs.keyed(info)[0]))
    sampled = _sampled(rows, center)
    todo = np.flatnonzero(sampled)
    planned = (new[0].copy(), new[1].copy())
    lo, hi = progress
    for n, k in enumerate(todo):
        scene.frame_set(int(frames[k]))
        pose = rig_io.write_pose(obj, info, new[0][k], new[1][k], rig_io.read_pose(obj, info))
        correct_written(obj, info, pose, (start[0][k], start[1][k], solved[k],
                                          {j: g[k] for j, g in goals.items()},
                                          {j: o[k] for j, o in orientations.items()}), scale)
        pose = rig_io.read_pose(obj, info)
        new[0][k, keyed] = pose.quats[keyed]
        new[1][k, keyed] = pose.locations[keyed]
        if n % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
            yield lo + (hi - lo) * (n + 1) / len(todo)
    if not sampled[rows].all():  # the others: as planned, plus the placing's change
        flip = np.sum(new[0] * planned[0], axis=-1, keepdims=True) < 0.0  # (q is -q)
        change = (np.where(flip, -new[0], new[0]) - planned[0], new[1] - planned[1])
        for values in change:
            _interpolate(frames, rows, sampled, values, keyed)
        idx = np.flatnonzero(rows & ~sampled)
        new[0][idx[:, None], keyed] = quat_normalize(planned[0][idx][:, keyed]
                                                     + change[0][idx][:, keyed])
        new[1][idx[:, None], keyed] = planned[1][idx][:, keyed] + change[1][idx][:, keyed]


def _sampled(rows: np.ndarray, center: int) -> np.ndarray:
    """Of the ``rows`` (T,), those a pass evaluates: all, or :data:`SAMPLED_FRAMES` evenly
    spaced ones with the first, the last and the edited one (row ``center``)."""
    idx = np.flatnonzero(rows)
    if len(idx) <= SAMPLED_FRAMES:
        return rows.copy()
    out = np.zeros_like(rows)
    out[idx[np.linspace(0, len(idx) - 1, SAMPLED_FRAMES).round().astype(int)]] = True
    out[center] = rows[center]
    return out


def _interpolate(frames: np.ndarray, rows: np.ndarray, sampled: np.ndarray,
                 values: np.ndarray, bones: list[int], unit: bool = False) -> None:
    """The ``rows`` not ``sampled``: the ``bones`` of ``values`` (T, B, ...) interpolated
    between the sampled frames (cubic over frame numbers,
    :func:`.core.propagate.interpolate_changes`), in place; ``unit`` quaternions kept in
    one hemisphere frame to frame and normalized."""
    idx = np.flatnonzero(rows)
    if sampled[idx].all():
        return
    part = values[idx][:, bones]
    if unit:
        part = quat_make_continuous(part, axis=0)
    part = interpolate_changes(frames[idx], sampled[idx], part)
    values[idx[:, None], bones] = quat_normalize(part) if unit else part
