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

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import bpy
import numpy as np
from mathutils import Matrix, Vector

from . import base_pose, edits, fk_match, grab, key_edit, rig_controls, rig_io, rig_keys
from .channel_writes import ChannelWrites
from .core.propagate import interpolate_changes, spaced_rows
from .core.quaternions import quat_make_continuous, quat_normalize
from .ik_snap import IK_FK, Limb

FRAMES_PER_STEP = 5  # frames between two progress yields (each a few depsgraph updates)
STRETCHED_M = 1e-4  # world: an IK chain's end this far past its FK chain's is stretched
# A longer range is read and placed on this many evenly spaced frames (its ends among
# them), the others interpolated between them: each frame takes about four evaluations of
# the rig (some 8 ms on the generated Rigify rig), as the kernels' solve of a long range
# does (core/propagate.SOLVED_FRAMES) and the evaluated rig's correction (spread_correct).
SAMPLED_FRAMES = 100
UNIT_SCALE_TOL = 1e-6  # an FK control's scale this near 1 is unscaled


@dataclass(frozen=True)
class IkLimbs:
    """The mapped limbs in IK of a rig and the bones a spread reads and keys for them."""

    limbs: tuple[Limb, ...]
    fk: tuple[int, ...]  # their FK controls (mapped): read as shown
    ik: tuple[int, ...]  # their IK controls: placed and keyed, rotation and location
    keyed: tuple[int, ...]  # the bones keyed (:func:`.rig_controls.keyed_bones`)
    located: tuple[int, ...]  # those keyed on their location too: mapped roots, IK controls
    in_ik: tuple[np.ndarray, ...]  # per limb, the frames (T,) it shows in IK


def ik_limbs(obj: bpy.types.Object, info: rig_io.RigInfo,
             frames: np.ndarray | None = None) -> IkLimbs | None:
    """The rig's mapped limbs in IK (on some of ``frames``, as the animation switches
    them; default: now), or None (every limb in FK, or a rig without a switch)."""
    names = [info.names[b] for b in info.mapped]
    limbs = rig_controls.limbs(obj, names)
    values = {limb.holder: _switches(obj, limb, frames) for limb in limbs}
    found = [limb for limb in limbs if values[limb.holder].min() < 1.0]
    if not found:
        return None
    index = {n: b for b, n in enumerate(info.names)}
    mapped = set(info.mapped)
    fk = [index[n] for limb in found for n in limb.fk_controls
          if n in index and index[n] in mapped]
    switches = {h: (float(v.min()), float(v.max())) for h, v in values.items()}
    keyed = [index[n] for n in rig_controls.keyed_bones(obj, names, limbs, switches)
             if n in index]
    ik = [b for b in keyed if b not in mapped]
    located = [b for b in info.roots if b in set(keyed)] + ik
    return IkLimbs(tuple(found), tuple(dict.fromkeys(fk)), tuple(ik), tuple(keyed),
                   tuple(located), tuple(values[limb.holder] < 1.0 for limb in found))


def _switches(obj: bpy.types.Object, limb: Limb, frames: np.ndarray | None) -> np.ndarray:
    """The limb's ``IK_FK`` at each of ``frames`` (T,): its F-curve's values where the
    animation switches it, else the value now (once, without ``frames``)."""
    path = f'pose.bones["{bpy.utils.escape_identifier(limb.holder)}"]["{IK_FK}"]'
    bag = rig_keys.channelbag(obj)
    fc = bag.fcurves.find(path, index=0) if bag is not None and frames is not None else None
    if fc is None:
        return np.full(1 if frames is None else len(frames), limb.switch(obj))
    return rig_keys.sample(fc, np.asarray(frames))


@contextmanager
def pose_kept(scene: bpy.types.Scene, obj: bpy.types.Object, frame: int) -> Iterator[None]:
    """Within the block the passes below write the controls frame by frame; after it (or
    Esc), the rig is back at ``frame`` with every pose channel as it was, an edit not yet
    keyed included (:func:`.grab.save`, :func:`.grab.restore`)."""
    saved = grab.save(obj)
    try:
        yield
    finally:
        scene.frame_set(frame)
        grab.restore(obj, saved)


def read_shown(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
               frames: np.ndarray, center: int, limbs: IkLimbs,
               clip: tuple[np.ndarray, np.ndarray, np.ndarray], unkeyed: rig_io.Pose,
               progress: tuple[float, float], from_action: bool = True
               ) -> Generator[float, None, tuple[rig_io.Pose, np.ndarray]]:
    """Into ``clip`` (rotations (T, B, 4), locations (T, B, 3) and raw Euler angles
    (T, B, 3) of the ``frames``, :func:`.rig_keys.read_clip`'s; the edited one is row
    ``center``; a long range sampled, :data:`SAMPLED_FRAMES`): the FK controls of
    ``limbs`` matched to the limb each frame shows (interpolated between the sampled
    frames where the limb is in IK, as keyed where the animation switches it to FK), and
    their IK controls as they are there (the action's values, drivers and constraints
    included; the action's alone where not sampled, or ``clip``'s where not
    ``from_action``: the motion layers under the action show). Returns ``unkeyed``
    (:func:`.base_pose.edit_start`, else the pose on the rig) with the IK controls' values at the
    base (an edit not yet keyed moved the unanimated ones on every frame), and where
    (T, limbs: on the sampled frames) the IK stretches a limb past its FK bones' lengths
    (Rigify's IK stretch), which no FK pose carries: :func:`place_controls` keeps the
    stretch there."""
    base, now = base_pose.read_base(obj, info), rig_io.read_pose(obj, info)
    if base_pose.base_is_current(base, info, now, scene.frame_current):
        base_pose.restore_base(obj, info, base, now)  # places the IK controls
        bpy.context.view_layer.update()
    at_base = rig_io.read_pose(obj, info)
    ik = list(limbs.ik)
    unkeyed = _with_bones(unkeyed, at_base, ik)
    # The IK controls from the action on every frame (a frame not sampled keeps its own
    # motion; interpolated between sampled frames, a null spread moved the hands 20 mm).
    if from_action:
        for values, read in zip(clip, rig_keys.read_clip(obj, info, frames, unkeyed, ik),
                                strict=True):
            values[:, ik] = read[:, ik]
    view_layer = bpy.context.view_layer
    read = list(limbs.fk + limbs.ik)
    pbones = obj.pose.bones
    stretch = np.zeros((len(frames), len(limbs.limbs)))  # the ends' gaps, armature units
    everything = np.ones(len(frames), dtype=bool)
    sampled = _sampled(limbs, everything, center)
    todo = np.flatnonzero(sampled)
    lo, hi = progress
    checked = False
    for n, k in enumerate(todo):
        f = frames[k]
        scene.frame_set(int(f))
        scaled = _scaled(obj, limbs)
        poses = fk_match.set_fk_shown(obj, list(limbs.limbs))
        if scaled or not checked:  # (rigid chains follow their parents: seen once)
            view_layer.update()
            missed = fk_match.fk_missed(obj, list(limbs.limbs), poses)
            fk_match.set_fk_levels(obj, missed, poses, view_layer)
            checked = not missed
        stretch[k] = [(_tail(pbones[limb.fk[1]], poses[limb.holder][1])
                       - pbones[limb.orgs[2]].head).length
                      for limb in limbs.limbs]  # the FK chain's reach against the end shown
        pose = rig_io.read_pose(obj, info)
        for values, name in zip(clip, ("quats", "locations", "eulers"), strict=True):
            values[k, read] = getattr(pose, name)[read]
        if n % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
            yield lo + (hi - lo) * (n + 1) / len(todo)
    # Each limb's FK controls as matched on its frames in IK, as keyed on those in FK.
    for limb, in_ik in zip(limbs.limbs, limbs.in_ik, strict=True):
        fk = [b for b in limbs.fk if info.names[b] in limb.fk_controls]
        for values, unit in zip(clip, (True, False, False), strict=True):
            _interpolate(frames, in_ik, sampled, values, fk, unit)
    scale = rig_io.world_scale(rig_io.world_matrix(obj))
    return unkeyed, stretch * scale > STRETCHED_M


def _scaled(obj: bpy.types.Object, limbs: IkLimbs) -> bool:
    """Whether an FK control of ``limbs`` is scaled (its children then do not follow it
    rigidly: :func:`.fk_match.fk_missed`)."""
    pbones = obj.pose.bones
    return any(max(abs(v - 1.0) for v in pbones[n].scale) > UNIT_SCALE_TOL
               for limb in limbs.limbs for n in limb.fk)


def _tail(pb: bpy.types.PoseBone, matrix: Matrix) -> Vector:
    """The tail of ``pb`` at the armature-space ``matrix`` (unit scale)."""
    return matrix @ Vector((0.0, pb.bone.length, 0.0))


def _with_bones(pose: rig_io.Pose, other: rig_io.Pose, bones: list[int]) -> rig_io.Pose:
    """``pose`` with the channels of ``bones`` taken from ``other``."""
    fields = {}
    for name in ("quats", "quaternion", "eulers", "axis_angles", "locations"):
        values = getattr(pose, name).copy()
        values[bones] = getattr(other, name)[bones]
        fields[name] = values
    return replace(pose, **fields)


def place_controls(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                   frames: np.ndarray, center: int, rows: np.ndarray, weights: np.ndarray,
                   stretched: np.ndarray, limbs: IkLimbs,
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
    rig go into ``new``, in place. Where Rigify's IK stretches a limb past its FK bones
    (``stretched`` (T, limbs), :func:`read_shown`), its IK end control keeps its values
    as read, moved as its end's goal moves (not at all where the edit holds it), its toe
    as read, and only its chain's plane is placed (:func:`.rig_controls.ends_placed`): the
    stretch stays, and a null edit changes nothing (placed on the FK end, a held hand
    moved by the stretch, and a dragged one fell short of its goal where the FK chain
    could not reach it). Elsewhere, and on the edited frame itself (``weights`` (T,) at 1),
    the limb is placed on the FK pose: its end on its goal, as Solve puts it."""
    keyed = list(limbs.keyed)
    sampled = _sampled(limbs, rows, center)
    todo = np.flatnonzero(sampled)
    planned = (new[0].copy(), new[1].copy())
    lo, hi = progress
    held = _held(info, limbs, start[0][center], start[1][center], goals, center,
                 edits.EVALUATED_TOL / scale)
    ik = list(limbs.ik)
    fk = [name for limb in limbs.limbs for name in limb.fk_controls]
    # The FK controls' locations too: matched to a limb its IK stretches, the FK end
    # carries the stretch there, as the solve modelled it (left out, Blender showed the
    # hand up to 25 mm short of where the spread put it, and each such frame took two or
    # three correction passes re-bending the arm).
    located = [*info.roots, *limbs.fk]
    written = {path for path, _i in key_edit.channel_paths(
        obj, info, list(dict.fromkeys([*info.mapped, *ik])), [*located, *ik])}
    written |= {rig_keys.bone_path(name, "scale") for name in fk}
    with rig_keys.held(obj, written):  # each frame evaluated once with its pose written
        _unscaled(obj, fk)
        for n, k in enumerate(todo):
            # (placed once the correction is done; no step: the IK controls come next)
            with rig_controls.deferred(step=False):
                pose = rig_io.write_pose(obj, info, new[0][k], new[1][k],
                                         rig_io.read_pose(obj, info), located=located)
            # the limbs whose IK end control keeps the stretch (a moved one moved as its
            # goal moves from the frame's FK end, which the FK->IK match put on the end
            # shown; the edited frame's placed as Solve placed it)
            over = [(limb, limb.holder not in held) for i, limb in enumerate(limbs.limbs)
                    if limbs.in_ik[i][k] and stretched[k, i]
                    and (limb.holder in held or weights[k] < 1.0)]
            # the IK controls as read (an unkeyed one too): the frame's own, which its
            # placement starts from (a null edit leaves them as they are)
            rig_io.write_pose(obj, info, start[0][k], start[1][k],
                              rig_io.read_pose(obj, info), bones=ik, located=ik)
            scene.frame_set(int(frames[k]))
            ends = _stretched_ends(obj, info, over, start[0][k], start[1][k], goals, k)
            # (those ends go where their IK controls take them: not corrected for)
            skip = {_end_joint(info, limb) for limb, _moved in over}
            with rig_controls.ends_placed(ends):
                edits.correct_written(obj, info, pose,
                                      (start[0][k], start[1][k], solved[k],
                                       {j: goals[j][k] for j in goals if j not in skip},
                                       {j: o[k] for j, o in orientations.items()}), scale,
                                      shown=False)
            pose = rig_io.read_pose(obj, info)
            new[0][k, keyed] = pose.quats[keyed]
            new[1][k, keyed] = pose.locations[keyed]
            if n % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
                yield lo + (hi - lo) * (n + 1) / len(todo)
    if not sampled[rows].all():  # the others: as planned, plus the placing's change
        flip = np.sum(new[0] * planned[0], axis=-1, keepdims=True) < 0.0  # (q is -q)
        change = (np.where(flip, -new[0], new[0]) - planned[0], new[1] - planned[1])
        for shown, bones in _shown_groups(obj, info, limbs):
            for values in change:  # (each from the frames that show it)
                _interpolate(frames, rows & shown, sampled, values, bones)
        idx = np.flatnonzero(rows & ~sampled)
        new[0][idx[:, None], keyed] = quat_normalize(planned[0][idx][:, keyed]
                                                     + change[0][idx][:, keyed])
        new[1][idx[:, None], keyed] = planned[1][idx][:, keyed] + change[1][idx][:, keyed]


def _unscaled(obj: bpy.types.Object, names: list[str]) -> None:
    """Give the FK controls ``names`` of limbs in IK their rest scale, as the solve models
    them and the read pass matched them to the limb shown (a scale the animator keyed
    there, which a limb in IK does not show, carried the IK controls placed on them off:
    a 1.3 FK forearm moved the hand 39 mm in a null spread). Their keys stay."""
    writes = ChannelWrites(obj)
    for name in names:
        writes.set(obj.pose.bones[name], "scale", (1.0, 1.0, 1.0))
    writes.flush()


def _shown_groups(obj: bpy.types.Object, info: rig_io.RigInfo, limbs: IkLimbs
                  ) -> list[tuple[np.ndarray, list[int]]]:
    """The keyed bones of ``limbs`` by the frames (T,) that show them: a limb's IK
    controls where it is in IK, its FK controls where the animation switches it to FK,
    every other keyed bone everywhere."""
    index = {n: b for b, n in enumerate(info.names)}
    keyed = set(limbs.keyed)
    out, grouped = [], set()
    for limb, in_ik in zip(limbs.limbs, limbs.in_ik, strict=True):
        ik = [index[n] for n in limb.ik_controls(obj) if index.get(n) in keyed]
        fk = [index[n] for n in limb.fk_controls if index.get(n) in keyed]
        out += [(in_ik, ik), (~in_ik, fk)]
        grouped |= {*ik, *fk}
    out.append((np.ones_like(limbs.in_ik[0]), [b for b in limbs.keyed if b not in grouped]))
    return [(shown, bones) for shown, bones in out if bones]


def _end_joint(info: rig_io.RigInfo, limb: Limb) -> int:
    """The joint (of the 21) at the limb's end: its FK end control's."""
    return info.joint_bones.index(info.names.index(limb.fk[2]))


def _held(info: rig_io.RigInfo, limbs: IkLimbs, quats: np.ndarray, locations: np.ndarray,
          goals: dict[int, np.ndarray], center: int, tolerance: float) -> set[str]:
    """The ``limbs`` (by holder) whose end joint the edit does not move at the edited frame
    (row ``center`` of ``goals``, from the frame as read, ``quats`` (B, 4) and
    ``locations`` (B, 3)), by more than ``tolerance`` (armature units)."""
    joints, _ = rig_io.joint_positions(info, quats, locations)
    held = set()
    for limb in limbs.limbs:
        end = _end_joint(info, limb)
        goal = goals.get(end)
        if goal is None or np.linalg.norm(goal[center] - joints[end]) <= tolerance:
            held.add(limb.holder)
    return held


def _stretched_ends(obj: bpy.types.Object, info: rig_io.RigInfo,
                    over: list[tuple[Limb, bool]], quats: np.ndarray, locations: np.ndarray,
                    goals: dict[int, np.ndarray], k: int) -> dict[str, Matrix]:
    """Where the end controls of the limbs ``over`` go at row ``k``: as the frame shows
    them (evaluated), moved (where ``over`` says so) as their end joint's goal moves from
    the frame's FK end (``quats`` (B, 4), ``locations`` (B, 3), as read)."""
    if not over:
        return {}
    joints, _ = rig_io.joint_positions(info, quats, locations)
    out = {}
    for limb, moved in over:
        end = _end_joint(info, limb)
        move = goals[end][k] - joints[end] if moved and end in goals else np.zeros(3)
        out[limb.holder] = Matrix.Translation(move) @ obj.pose.bones[limb.control].matrix
    return out


def _sampled(limbs: IkLimbs, rows: np.ndarray, center: int) -> np.ndarray:
    """Of the ``rows`` (T,), those a pass evaluates (:func:`.core.propagate.spaced_rows`,
    :data:`SAMPLED_FRAMES`), the edited one, row ``center``, and the two either side of
    each IK/FK switch the animation makes among them (a limb's changes are interpolated
    on its own side of the switch)."""
    keep = np.zeros(len(rows), dtype=bool)
    keep[center] = True
    for in_ik in limbs.in_ik:
        turns = np.flatnonzero(in_ik[1:] != in_ik[:-1])
        keep[turns] = keep[turns + 1] = True
    return spaced_rows(rows, SAMPLED_FRAMES, keep)


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
