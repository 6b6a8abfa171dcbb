"""Spread an edit made at one frame over its neighbours, in one batched solve.

For a clip (T, 21, 3), an edit at frame n and a weight curve W, every frame with W(t) > 0
is solved like a single pose (:meth:`PoseEditor.solve_arrays`, the same options) with the
edit scaled by W(t): an effector's target is the frame's own joint plus W(t) times the
offset made at frame n (in body space, so it turns with the body), a metric request the
frame's value plus W(t) times the change asked at frame n (``delta``) or towards the value
(``absolute``). So the motion underneath is kept, the frame at the curve's peak is the
single-frame solve, an effector gets W(t) of its move, and frames where W = 0 come back
bit-identical. Each frame's change is then smoothed over time (:func:`smooth_changes`),
the limbs not dragged bent in their own planes turned with the edit
(:func:`turn_bend_planes`) and the frame made a rig's pose on its targets again
(:meth:`PoseEditor.settle`), twice over (:data:`SETTLE_ROUNDS`; the second without the
dragged goals no rig pose reaches there, :func:`beyond_held`): frames solved on their own
popped against their neighbours.
(The 2023 paper blends latents, ``(1 - W) z + W M(z)``; measured, a hand then got
61-85 % of its move at W = 0.5, and the edited frame differed from its own solve.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import exact_reach, reach_bounds, skeleton
from .normalize import facing_yaw, leg_scale, rotate_y
from .pipeline import MISS_NOTE_M, MOVED_M, Effector, PoseEditor, SolveOptions
from .pipeline.constants import _MOVED_LIMBS
from .pipeline.request import _moved
from .quaternions import EPS, norm

CURVES = ("hat", "smooth", "constant", "custom")
# Each frame is solved on its own, and neighbouring frames can take different last resorts
# (a goal just within reach bends the trunk to get there; one just beyond it stays short):
# a pose then pops against its neighbours. The solved changes are smoothed over time with a
# Gaussian of this many frames (sigma), weighted by W(t) so the curve's own shape is kept,
# then each frame is made a rig's pose on its targets again (:meth:`PoseEditor.settle`).
SMOOTH_FRAMES = 2.0
_SMOOTH_TAPS = int(np.ceil(3.0 * SMOOTH_FRAMES))
METRIC_MODES = ("delta", "absolute")
# A long range is solved on a subset of its frames: at most this many, evenly spaced (its
# ends and the edited frame always among them); the other frames' changes are interpolated
# between them in body space, smoothed and settled on their targets like every frame. Each
# solved frame runs the full refinement (about 0.25-0.45 ms a frame), so solving all 999
# frames of a 1,000-frame range took 370-540 ms; a range of up to this many frames is
# solved whole, as before (the propagation suite's 79-frame ranges among them).
SOLVED_FRAMES = 100
# The settle re-aims each limb from its smoothed pose, and where a limb meets full extension
# or its target comes within reach that puts a corner back into the motion (a bend goes as
# the square root of what the limb has left): the settled changes are smoothed and settled
# again. CMU's BVH clips, every end held: 2 -> 0 clips over 1.1x their own acceleration,
# worst 1.80x -> 1.01x; a third round did no better.
SETTLE_ROUNDS = 2


def weight_curve(num_frames: int, center: int, radius: float, kind: str = "smooth",
                 samples: Sequence[float] | None = None, start: int | None = None,
                 end: int | None = None) -> np.ndarray:
    """W(t) for t = 0..T-1: 1 at ``center``, falling to 0 at ``radius`` frames away.

    hat: linear; smooth: cosine; constant: 1 inside the radius; custom: ``samples`` of W
    over the normalized distance 0..1 (first sample at the center), linearly interpolated.
    ``start``/``end`` (inclusive) clip the range explicitly: W = 0 outside.
    """
    if kind not in CURVES:
        raise ValueError(f"weight curve must be one of {CURVES}, got {kind!r}")
    if not 0 <= center < num_frames:
        raise ValueError(f"edited frame {center} is outside the clip (0..{num_frames - 1})")
    if radius <= 0:
        raise ValueError(f"radius must be positive, got {radius}")
    d = np.abs(np.arange(num_frames) - center) / radius
    if kind == "hat":
        w = np.clip(1.0 - d, 0.0, 1.0)
    elif kind == "smooth":
        w = np.where(d < 1.0, 0.5 * (1.0 + np.cos(np.pi * np.minimum(d, 1.0))), 0.0)
    elif kind == "constant":
        w = (d <= 1.0).astype(np.float64)
    else:
        s = np.asarray(samples if samples is not None else (), dtype=np.float64)
        if s.ndim != 1 or len(s) < 2 or not np.isfinite(s).all():
            raise ValueError("a custom curve needs at least 2 finite samples")
        w = np.where(d <= 1.0, np.interp(np.minimum(d, 1.0), np.linspace(0, 1, len(s)), s),
                     0.0)
        w = np.clip(w, 0.0, 1.0)
    frames = np.arange(num_frames)
    if start is not None:
        w[frames < start] = 0.0
    if end is not None:
        w[frames > end] = 0.0
    return w


def curve_warning(kind: str) -> str | None:
    """What a user should know about a falloff before using it, or None."""
    if kind == "constant":
        return ("Constant falloff pops: the edit starts and stops at full strength at the "
                "range's ends")
    return None


def propagate(editor: PoseEditor, clip: np.ndarray, frame: int, weights: np.ndarray,
              effectors: Sequence[Effector] = (), metrics: dict[str, float] | None = None,
              metric_mode: str = "delta", options: SolveOptions | None = None,
              smooth: bool = True) -> np.ndarray:
    """The edited clip (T, 21, 3); effector targets and metric values are those at ``frame``
    (metric values in the rig's units). ``smooth=False`` keeps every frame as solved (the
    propagation benchmark's baseline)."""
    options = options or SolveOptions()
    options.check()
    if options.solver == "classic":
        raise ValueError("propagation needs the neural solver")
    if metric_mode not in METRIC_MODES:
        raise ValueError(f"metric_mode must be one of {METRIC_MODES}, got {metric_mode!r}")
    clip = np.asarray(clip, dtype=np.float64)
    if clip.ndim != 3 or clip.shape[1:] != (skeleton.NUM_JOINTS, 3):
        raise ValueError(f"clip must have shape (T, {skeleton.NUM_JOINTS}, 3), got {clip.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(clip),) or not np.isfinite(w).all() or (w < 0).any() or (w > 1).any():
        raise ValueError(f"weights must be {len(clip)} values in [0, 1]")
    if not 0 <= frame < len(clip):
        raise ValueError(f"edited frame {frame} is outside the clip (0..{len(clip) - 1})")
    out = clip.copy()
    live = np.flatnonzero(w > 0)
    if live.size == 0:
        return out
    mask1, targets1, weights1 = editor.effector_arrays(clip[frame:frame + 1], effectors)
    metrics = editor.check_metrics(metrics or {}, 1)
    poses, wl = clip[live], w[live, None, None]
    yaw = facing_yaw(poses)
    # The offset made at frame n, in its body's facing frame, turned into each frame's.
    offset = rotate_y(targets1 - clip[frame:frame + 1], -facing_yaw(clip[frame:frame + 1]))
    targets = poses + rotate_y(offset * wl, yaw)
    values: dict[str, np.ndarray] = {}
    if metrics:
        now = editor.metric_values(poses)
        at_frame = editor.metric_values(clip[frame:frame + 1])
        for name, value in metrics.items():
            goal = value[0] - at_frame[name][0] + now[name] if metric_mode == "delta" \
                else np.full(len(live), value[0])
            values[name] = now[name] + w[live] * (goal - now[name])
    mask = np.repeat(mask1, len(live), axis=0)
    weights = np.repeat(weights1, len(live), 0)
    settles = smooth and options.fix_lengths and options.refine_steps
    # The edited frame is solved exactly as a single pose; the others share one batch.
    edited = live == frame
    everything = np.ones(len(live), dtype=bool)
    solved = spaced_rows(everything, SOLVED_FRAMES, edited) if settles else everything
    for rows, each_pose in ((edited, True), (~edited & solved, False)):
        if rows.any():
            result = editor.solve_arrays(poses[rows], mask[rows], targets[rows],
                                         weights[rows], {k: v[rows] for k, v in values.items()},
                                         options, each_pose=each_pose)
            out[live[rows]] = result.positions
            if each_pose:  # the neighbours are asked for what the edited frame reached
                targets = _reached_targets(targets, result.positions[0], edited, mask1,
                                           weights1, poses, yaw, wl)
    others = ~edited
    # Refinement off, a frame shows the networks' answer, not its goals reached: kept as
    # solved (the settling re-aims the goals exactly).
    if settles and others.any():
        change = np.zeros_like(clip)  # each frame's change in its own facing frame
        change[live] = rotate_y(out[live] - poses, -yaw)
        if not solved.all():
            change[live] = interpolate_changes(live, solved, change[live])
        # Neighbours blend into the edited frame (what it reached is what they were asked).
        anchor = frame if edited.any() else None
        if anchor is not None:  # (the engine's test of a moved target: Blender's empties
            # hold a joint only to float32 rounding)
            scale = leg_scale(skeleton.bone_lengths(clip[frame:frame + 1]))[0]
            dragged = _moved(mask1, targets1, clip[frame:frame + 1], MOVED_M / scale)[0]
            turns = bend_plane_turns(clip[frame], out[frame])
        later_mask = mask[others] if anchor is None else np.where(beyond_held(
            poses[others], mask[others], targets[others], weights[others], dragged), 0.0,
            mask[others])
        for k in range(SETTLE_ROUNDS):
            smoothed = rotate_y(smooth_changes(change, w, anchor)[live[others]], yaw[others])
            ahead = poses[others] + smoothed
            if anchor is not None:
                ahead = turn_bend_planes(ahead, poses[others], w[live[others]], turns,
                                         dragged)
            out[live[others]] = editor.settle(ahead, poses[others],
                                              later_mask if k else mask[others],
                                              targets[others], weights[others],
                                              tuple(values), options)
            change[live] = rotate_y(out[live] - poses, -yaw)
    return out


def left_short(pose: np.ndarray, solved: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(21,) the joints that the edited frame's solve (``solved`` (21, 3) from ``pose``
    (21, 3)) leaves over :data:`MISS_NOTE_M` (on the models' body) off their ``targets``
    (21, 3): goals beyond the rig's reach, which a spread asks only as far as they got."""
    scale = leg_scale(skeleton.bone_lengths(pose[None]))[0]
    return np.linalg.norm(solved - targets, axis=-1) * scale > MISS_NOTE_M


def beyond_held(poses: np.ndarray, mask: np.ndarray, targets: np.ndarray,
                weights: np.ndarray, dragged: np.ndarray) -> np.ndarray:
    """(B, 21) the ``dragged`` (21,) goals that no pose of the rig reaches with the other
    full-weight goals held (:func:`.reach_bounds.beyond_reach`, by over
    :data:`MISS_NOTE_M` on the models' body) in frames ``poses`` (B, 21, 3), those of a
    dragged end's own limb aside (a pose turned by hand holds its elbow too).

    A spread's second settle leaves them out, each frame's body where the smoothing puts
    it, the first round's lean included: re-aimed onto them, each frame leaned to the edge
    of what its held goals allow, and that edge moves as a held leg straightens (a Bandai
    Namco test clip, every other end held: the pelvis 23, 36, 50 mm off the clip over three
    frames and 41 mm at the next, where the left leg came straight, and the knee snapped
    straight in one frame; 1.24x the clip's largest acceleration, 1.09x so, the hand 64 ->
    74 mm short at its furthest). Left out of both rounds, the frames kept the solves' own
    leans, each its last resort: 1.49x."""
    held = (mask > 0) & (weights >= 1.0) & ~(dragged @ _MOVED_LIMBS > 0)[None]
    far = reach_bounds.beyond_reach(poses, held | dragged[None], targets)[0]
    scale = leg_scale(skeleton.bone_lengths(poses))[:, None]
    return dragged[None] & (far * scale > MISS_NOTE_M)


def kept_short(pose: np.ndarray, solved: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(21,) the goals a write keeps where the solve put them: left short
    (:func:`left_short`) and beyond their limb's reach in ``solved``
    (:func:`.exact_reach.beyond_limbs`). Re-aimed onto a target it cannot reach, the limb
    would lock straight (a hand dragged past the rig's reach: its elbow 0.16 degrees where
    the solve left 5); one the re-aim reaches is put on its target (a Live update without
    refinement left the BVH rig's hand 2.4 mm short, median, where it was kept)."""
    return left_short(pose, solved, targets) & exact_reach.beyond_limbs(solved, targets)


def _reached_targets(targets: np.ndarray, solved: np.ndarray, edited: np.ndarray,
                     mask: np.ndarray, weights: np.ndarray, poses: np.ndarray,
                     yaw: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The live frames' ``targets`` (L, 21, 3), with those of the full-weight effectors
    that the edited frame's solve (``solved`` (21, 3), the row ``edited``) leaves short
    (:func:`left_short`) taken as W(t) of the move it made there: the neighbours are asked
    for what the animator sees at the edited frame. Asked for the move no pose reaches, a
    neighbour reached further than the edited frame (a hand at W = 0.5 moved 2.2 times the
    edited frame's move), or leaned for it and then let go (a pop)."""
    k = int(np.flatnonzero(edited)[0])
    short = (mask[0] > 0) & (weights[0] >= 1.0) & left_short(poses[k], solved, targets[k])
    if not short.any():
        return targets
    move = rotate_y((solved - poses[k])[None], -yaw[k:k + 1]) / w[k]  # at W = 1, body frame
    reached = poses + rotate_y(move * w, yaw)
    return np.where(short[None, :, None], reached, targets)


def spaced_rows(rows: np.ndarray, count: int, keep: np.ndarray | None = None) -> np.ndarray:
    """Of the ``rows`` (bool), the ones a long range is worked on: all of them up to
    ``count``, else ``count`` evenly spaced with the first and last, and those of ``keep``
    (bool, e.g. the edited frame)."""
    idx = np.flatnonzero(rows)
    if len(idx) <= count:
        return np.array(rows, dtype=bool)
    out = np.zeros(len(rows), dtype=bool)
    out[idx[np.linspace(0, len(idx) - 1, count).round().astype(int)]] = True
    if keep is not None:
        out |= keep & rows
    return out


def interpolate_changes(live: np.ndarray, solved: np.ndarray, change: np.ndarray
                        ) -> np.ndarray:
    """Changes (L, ...) of the ``live`` frames, those of the ``solved`` ones kept and the
    others interpolated between them over frame numbers (Catmull-Rom: no kink at a solved
    frame for the smoothing to leave as a pop)."""
    known = np.flatnonzero(solved)
    x = live[known].astype(np.float64)
    y = change[known]
    seg = np.clip(np.searchsorted(x, live, side="right") - 1, 0, len(x) - 2)
    x0, x1 = x[seg], x[seg + 1]
    u = ((live - x0) / (x1 - x0)).reshape(-1, *([1] * (change.ndim - 1)))
    # Tangents per solved frame (finite differences over frame numbers, one-sided at ends).
    slope = np.gradient(y, x, axis=0, edge_order=2) if len(x) > 2 else np.repeat(
        ((y[1] - y[0]) / (x[1] - x[0]))[None], len(x), axis=0)
    span = (x1 - x0).reshape(u.shape)
    u2, u3 = u * u, u * u * u
    out = ((2 * u3 - 3 * u2 + 1) * y[seg] + (u3 - 2 * u2 + u) * span * slope[seg]
           + (-2 * u3 + 3 * u2) * y[seg + 1] + (u3 - u2) * span * slope[seg + 1])
    out[solved] = change[solved]
    return out


def smooth_changes(change: np.ndarray, weights: np.ndarray, anchor: int | None = None
                   ) -> np.ndarray:
    """Per-frame changes (T, ...) smoothed over time by :data:`SMOOTH_FRAMES`, as W(t)
    times the W-weighted average of change / W around t (normalized convolution): an edit
    that changes every frame alike by W(t) comes back as it was, a frame that changes
    unlike its neighbours moves towards them. Frames with W = 0 stay unchanged.

    ``anchor`` (the edited frame, kept as its own solve) keeps its change exactly, and its
    neighbours blend into it over the same Gaussian: smoothed around it but not under it,
    they had kinked against it (an FBX character's elbow at the edited frame, 42 mm/frame²
    against 11 blended)."""
    taps = np.arange(-_SMOOTH_TAPS, _SMOOTH_TAPS + 1)
    kernel = np.exp(-0.5 * (taps / SMOOTH_FRAMES) ** 2)
    t = len(change)
    padded = np.zeros((t + 2 * _SMOOTH_TAPS, *change.shape[1:]))
    padded[_SMOOTH_TAPS:_SMOOTH_TAPS + t] = change
    w_padded = np.zeros(t + 2 * _SMOOTH_TAPS)
    w_padded[_SMOOTH_TAPS:_SMOOTH_TAPS + t] = weights
    total = np.zeros_like(change)
    weight = np.zeros(t)
    for k, tap in zip(taps, kernel, strict=True):  # over the kernel's taps, not frames
        total += tap * padded[_SMOOTH_TAPS + k:_SMOOTH_TAPS + k + t]
        weight += tap * w_padded[_SMOOTH_TAPS + k:_SMOOTH_TAPS + k + t]
    scale = np.where(weight > 0.0, weights / np.where(weight > 0.0, weight, 1.0), 0.0)
    shape = (-1, *([1] * (change.ndim - 1)))
    smoothed = total * scale.reshape(shape)
    if anchor is not None and weights[anchor] > 0.0:
        bump = np.exp(-0.5 * ((np.arange(t) - anchor) / SMOOTH_FRAMES) ** 2)
        share = weights * bump / weights[anchor]  # 1 at the anchor, 0 where W = 0
        smoothed += share.reshape(shape) * (change[anchor] - smoothed[anchor])
    return smoothed


# A limb whose middle joint lies under this share of its length off its start-end line at
# the edited frame (0.05 mm on an arm), in the clip or as solved, is straight there: its
# plane is rounding, and the turn read from it fades out (a null spread on a Rigify rig
# whose IK arm is straight at the edited frame turned its elbow 8 mm at other frames).
# Any bend above that turns in full: a straighter bound (bends under 1-5 degrees) left the
# frames beside the edited one in another plane than its own, 1.08x -> 1.17x.
PLANE_SIDE_SHARE = 1e-4
# (4, 3): each arm's and leg's start, middle and end joint, as the re-aims know them
_LIMB_JOINTS = np.stack([exact_reach._START, exact_reach._MID, exact_reach._END],
                        axis=1)[exact_reach._LIMBS]


def _bend_sides(poses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(..., 4, 3) each arm's and leg's start -> end direction, and its middle joint's
    offset square to that line (the bend: its direction is the limb's bend plane)."""
    start, middle, end = (poses[..., _LIMB_JOINTS[:, k], :] for k in range(3))
    axis = end - start
    axis /= np.maximum(norm(axis), EPS)[..., None]
    side = middle - start
    return axis, side - axis * np.add.reduce(side * axis, -1, keepdims=True)


def bend_plane_turns(clip_at: np.ndarray, solved_at: np.ndarray) -> np.ndarray:
    """(4,) how far the edited frame's solve (``solved_at`` (21, 3), from ``clip_at``)
    turned each arm's and leg's bend plane about the limb, in radians; none for a limb
    straight there, in the clip or as solved, which has no plane to measure a turn from
    (:data:`PLANE_SIDE_SHARE`)."""
    axis_at, solved_side = _bend_sides(solved_at)
    own_at = _bend_sides(clip_at)[1]
    own_at -= axis_at * np.add.reduce(own_at * axis_at, -1, keepdims=True)
    turn = np.arctan2(np.add.reduce(np.cross(own_at, solved_side) * axis_at, -1),
                      np.add.reduce(own_at * solved_side, -1))
    start, middle, end = (solved_at[_LIMB_JOINTS[:, k]] for k in range(3))
    span = norm(middle - start) + norm(end - middle)
    return turn * np.clip(np.minimum(norm(own_at), norm(solved_side))
                          / np.maximum(PLANE_SIDE_SHARE * span, EPS), 0.0, 1.0)


def turn_bend_planes(ahead: np.ndarray, poses: np.ndarray, weights: np.ndarray,
                     turns: np.ndarray, dragged: np.ndarray) -> np.ndarray:
    """Smoothed frames ``ahead`` (B, 21, 3) of the clip's ``poses`` (B, 21, 3) with the
    middle joint of each arm and leg whose end is not ``dragged`` (21,) turned about its
    limb into the bend plane a spread asks: the frame's own, turned W(t) (``weights``
    (B,)) of the edited frame's ``turns`` (:func:`bend_plane_turns`), averaged with the
    smoothed frame's plane, each counted by its bend (a straight limb's plane is noise).
    The re-aim that follows keeps the plane and sets the bend.

    The solves choose a nearly straight limb's plane afresh each frame (a Bandai Namco
    test clip's planted knee 110 degrees off its own at the edited frame, 60 degrees from
    one frame to the next); the smoothing averaged them into a plane spinning 30 degrees
    a frame, a pop (1.44x the clip's largest acceleration) once the settle bent the knee
    in it. A dragged limb keeps the solves' plane: its own may mean nothing there (a CMU
    clip's arm straight in the clip, bent 120 degrees off its plane by the solve: turned
    with the clip's, its elbow popped at 3.6x, 1.8x as smoothed)."""
    axis, side = _bend_sides(ahead)
    own = _bend_sides(poses)[1]
    own -= axis * np.add.reduce(own * axis, -1, keepdims=True)
    angle = weights[:, None, None] * turns[None, :, None]
    asked = own * np.cos(angle) + np.cross(axis, own) * np.sin(angle) + side
    asked *= (norm(side) / np.maximum(norm(asked), EPS))[..., None]
    out = ahead.copy()
    turned = ~dragged[_LIMB_JOINTS[:, 2]]
    out[:, _LIMB_JOINTS[turned, 1]] += (asked - side)[:, turned]
    return out
