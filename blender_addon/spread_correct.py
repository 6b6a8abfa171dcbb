"""Spread Edit's correction from the evaluated rig: on a rig whose controls do not move
the joints exactly as its bone hierarchy says, the keys written are corrected from what
Blender evaluates, frame by frame, as Solve corrects its pose. Generators: each yields the
run's progress every few frames, so a modal run can stop (Esc) between them."""

from __future__ import annotations

from collections.abc import Callable, Generator

import bpy
import numpy as np

from . import rig_io
from .core.propagate import interpolate_changes, spaced_rows
from .core.skeleton import JOINTS
from .edits import EVALUATED_PASSES, EVALUATED_STALL, EVALUATED_TOL

FRAMES_PER_STEP = 25  # frames evaluated between two steps of a modal run (Esc is read there)
CORRECTING = 0.6  # the progress where the correction from the evaluated rig starts
# A longer range is corrected from the evaluated rig on this many of its frames.
CORRECTED_FRAMES = 100


def correct_from_evaluated(scene: bpy.types.Scene, obj: bpy.types.Object,
                            info: rig_io.RigInfo, frames: np.ndarray, w: np.ndarray,
                            goals: dict[int, np.ndarray], quats: np.ndarray, locs: np.ndarray,
                            edited_arm: np.ndarray, keyed: tuple[np.ndarray, np.ndarray],
                            write: Callable[[np.ndarray, np.ndarray], int], scale: float
                            ) -> Generator[float, None, None]:
    """On a rig whose controls do not move the joints exactly as its bone hierarchy says
    (Rigify's neck bends over two bones), correct the keys from what Blender evaluates, as
    a single edit does: each frame's effector goals are moved by what the evaluation
    missed, solved and keyed again while that brings the frame closer (at most
    :data:`.edits.EVALUATED_PASSES` passes, none after one that stalls:
    :data:`.edits.EVALUATED_STALL`), each frame keeping its best keys. A rig that
    follows its hierarchy is seen at the current frame alone and left as keyed."""
    if not goals:
        return
    joints = list(goals)
    wanted = np.stack([goals[j] for j in joints], axis=1)  # (T, G, 3) armature space
    current = scene.frame_current
    scene.frame_set(current)  # the keys just written, evaluated
    seen_now = rig_io.evaluated_joints(obj, info)[joints]
    if np.linalg.norm(seen_now - wanted[current - int(frames[0])], axis=-1).max() * scale \
            < EVALUATED_TOL:
        return
    live = w > 0.0
    correct = _correct_frames if live.sum() <= CORRECTED_FRAMES else _correct_sampled
    try:
        yield from correct(scene, obj, info, frames, live, joints, wanted, quats, locs,
                           edited_arm, keyed, write, scale)
    finally:
        scene.frame_set(current)


def _correct_frames(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                    frames: np.ndarray, live: np.ndarray, joints: list[int],
                    wanted: np.ndarray, quats: np.ndarray, locs: np.ndarray,
                    edited_arm: np.ndarray, keyed: tuple[np.ndarray, np.ndarray],
                    write: Callable[[np.ndarray, np.ndarray], int], scale: float
                    ) -> Generator[float, None, None]:
    """The passes of :func:`correct_from_evaluated` over the ``live`` frames."""
    best_q, best_l = (a.copy() for a in keyed)
    seen = (yield from _evaluated_clip(scene, obj, info, frames, live))[:, joints]
    best = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)  # (T,) worst goal per frame
    aim = wanted.copy()
    active = live & (best * scale >= EVALUATED_TOL)
    written = False
    for _ in range(EVALUATED_PASSES):
        if not active.any():
            break
        aim[active] += wanted[active] - seen[active]
        shifted = edited_arm.copy()
        shifted[:, joints] = aim
        try:
            q, loc = rig_io.solve_rotations(info, quats, locs, shifted,
                                            {j: aim[:, k] for k, j in enumerate(joints)})
        except ValueError:  # the keys written stand: each frame is a whole pose already
            break
        q[~active], loc[~active] = best_q[~active], best_l[~active]
        write(q, loc)
        written = True
        clip = yield from _evaluated_clip(scene, obj, info, frames, active)
        seen[active] = clip[active][:, joints]
        miss = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)
        better = active & (miss < best)  # a frame that got no closer stops, at its best
        going = better & (miss <= best * EVALUATED_STALL)  # as does one that stalls
        best_q[better], best_l[better], best[better] = q[better], loc[better], miss[better]
        active = going & (best * scale >= EVALUATED_TOL)
    if written:  # the frames whose last pass got no closer go back to their best keys
        write(best_q, best_l)


def _correct_sampled(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                     frames: np.ndarray, live: np.ndarray, joints: list[int],
                     wanted: np.ndarray, quats: np.ndarray, locs: np.ndarray,
                     edited_arm: np.ndarray, keyed: tuple[np.ndarray, np.ndarray],
                     write: Callable[[np.ndarray, np.ndarray], int], scale: float
                     ) -> Generator[float, None, None]:
    """:func:`_correct_frames` over a long range: Blender evaluates :data:`CORRECTED_FRAMES`
    evenly spaced frames of it (one frame change each, a few ms on a control rig: every
    frame of 1,000 took 3 s a pass), the misses seen there are interpolated over the
    others (they follow the motion, smoothly), and a pass stands only where it brought the
    sampled frames' worst miss closer."""
    idx = np.flatnonzero(live)
    sampled = spaced_rows(live, CORRECTED_FRAMES)
    best_q, best_l = (a.copy() for a in keyed)
    seen = (yield from _evaluated_clip(scene, obj, info, frames, sampled))[:, joints]
    best = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)[sampled].max()
    aim = wanted.copy()
    written = False
    for _ in range(EVALUATED_PASSES):
        if best * scale < EVALUATED_TOL:
            break
        miss = np.zeros_like(wanted)
        miss[sampled] = wanted[sampled] - seen[sampled]
        aim[idx] += interpolate_changes(frames[idx], sampled[idx], miss[idx])
        shifted = edited_arm.copy()
        shifted[:, joints] = aim
        try:
            q, loc = rig_io.solve_rotations(info, quats, locs, shifted,
                                            {j: aim[:, k] for k, j in enumerate(joints)})
        except ValueError:
            break
        q[~live], loc[~live] = best_q[~live], best_l[~live]
        write(q, loc)
        written = True
        seen = (yield from _evaluated_clip(scene, obj, info, frames, sampled))[:, joints]
        now = np.linalg.norm(seen - wanted, axis=-1).max(axis=-1)[sampled].max()
        if now >= best:
            break
        stalled = now > best * EVALUATED_STALL
        best_q, best_l, best = q, loc, now
        written = False
        if stalled:
            break
    if written:  # the last pass got no closer: back to the best keys
        write(best_q, best_l)


def _evaluated_clip(scene: bpy.types.Scene, obj: bpy.types.Object, info: rig_io.RigInfo,
                    frames: np.ndarray, rows: np.ndarray
                    ) -> Generator[float, None, np.ndarray]:
    """(T, 21, 3) armature-space joints as Blender evaluates them at ``frames[rows]`` (one
    frame change each: constraints are evaluated a frame at a time); other rows are NaN.
    Yields the share of the rows done every :data:`FRAMES_PER_STEP` frames (a modal run
    can stop there)."""
    out = np.full((len(frames), len(JOINTS), 3), np.nan)
    todo = np.flatnonzero(rows)
    for i, k in enumerate(todo):
        scene.frame_set(int(frames[k]))
        out[k] = rig_io.evaluated_joints(obj, info)
        if i % FRAMES_PER_STEP == FRAMES_PER_STEP - 1:
            yield CORRECTING + (1.0 - CORRECTING) * (i + 1) / len(todo)
    return out
