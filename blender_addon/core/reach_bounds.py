"""How far apart two joints of a rig can ever be, so a request no pose can meet is named.

On a rig every bone keeps its length and the pelvis and chest are one rigid bone each
(:mod:`.rigid_branches`), so two joints are never further apart than the bones along the
path between them, stretched in line, with the pelvis and chest crossed at their fixed
sizes. Two goals further apart than that (a dragged hand and the held head, both hands
pulled apart) cannot both be met by any pose the rig can take: classic FABRIK meets them
by stretching the chest, which a rig shows as a hand off its target. A necessary
condition only: goals within it may still be out of reach (a joint's bend limits, other
goals), but goals beyond it always are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from . import native
from .quaternions import norm
from .skeleton import JOINT_INDEX, JOINTS, NUM_JOINTS, PARENTS

CM = 100.0  # per metre, for notes
NOTE_MARK = "beyond the rig's reach"  # every note of :func:`describe` says it
PULL_PASSES = 4  # :func:`pulled_within`: one goal pulled per pose and pass

# Each rigid bone's joints: the branch point first, then the children it carries.
RIGID_SETS = tuple(tuple(JOINT_INDEX[j] for j in names) for names in (
    ("pelvis", "spine", "l_thigh", "r_thigh"), ("chest", "neck", "l_clavicle", "r_clavicle")))


def _path(a: int, b: int) -> list[int]:
    """The joints from ``a`` to ``b`` along the tree."""
    up_a, up_b = [a], [b]
    while up_a[-1] >= 0:
        up_a.append(int(PARENTS[up_a[-1]]))
    while up_b[-1] >= 0:
        up_b.append(int(PARENTS[up_b[-1]]))
    common = next(j for j in up_a if j in up_b)
    return up_a[:up_a.index(common) + 1] + up_b[:up_b.index(common)][::-1]


def _segments(path: list[int]) -> list[tuple[int, int]]:
    """The joint pairs of fixed distance the path crosses: its bones, with two bones that
    meet at a rigid bone's branch point taken as that bone's fixed span between them."""
    out, i = [], 0
    while i < len(path) - 1:
        nxt = path[i + 2] if i + 2 < len(path) else None
        rigid = next((s for s in RIGID_SETS if path[i + 1] == s[0] and path[i] in s
                      and nxt in s), None)
        if rigid is not None:
            out.append((min(path[i], nxt), max(path[i], nxt)))
            i += 2
        else:
            out.append((min(path[i], path[i + 1]), max(path[i], path[i + 1])))
            i += 1
    return out


def _tables() -> tuple[np.ndarray, np.ndarray]:
    paths = {(a, b): _segments(_path(a, b)) for a in range(NUM_JOINTS) for b in range(NUM_JOINTS)}
    pairs = sorted({s for segs in paths.values() for s in segs})
    index = {s: k for k, s in enumerate(pairs)}
    use = np.zeros((NUM_JOINTS, NUM_JOINTS, len(pairs)))
    for (a, b), segs in paths.items():
        for s in segs:
            use[a, b, index[s]] += 1.0
    return np.array(pairs), use.reshape(NUM_JOINTS * NUM_JOINTS, len(pairs))


_PAIRS, _USE = _tables()  # (S, 2) the fixed-distance pairs; (21 * 21, S) who crosses them
_PAIR_LIST = _PAIRS.tolist()
_SEGMENTS = tuple(tuple(np.flatnonzero(row).tolist()) for row in _USE)  # each pair's, as lists
# The same for the compiled kernel: the pairs, and each joint pair's path padded with -1.
_NATIVE_PAIRS = np.ascontiguousarray(_PAIRS, dtype=np.int64)
_NATIVE_SEGMENTS = np.full((len(_SEGMENTS), max(map(len, _SEGMENTS))), -1, dtype=np.int64)
for _k, _path in enumerate(_SEGMENTS):
    _NATIVE_SEGMENTS[_k, :len(_path)] = _path
_NATIVE_TABLES = (native.address(_NATIVE_PAIRS), native.address(_NATIVE_SEGMENTS))


def max_spans(pose: np.ndarray, joints: np.ndarray | None = None) -> np.ndarray:
    """(B, 21, 21) the largest distance between each two joints that the rig of ``pose``
    (B, 21, 3) can show: its bone lengths and rigid spans are read off the pose. Of
    ``joints`` (G,) alone: (B, G, G)."""
    fixed = norm(pose[:, _PAIRS[:, 0]] - pose[:, _PAIRS[:, 1]])  # (B, S)
    if joints is None:
        return (fixed @ _USE.T).reshape(len(pose), NUM_JOINTS, NUM_JOINTS)
    use = _USE.reshape(NUM_JOINTS, NUM_JOINTS, -1)[np.ix_(joints, joints)]
    return (fixed @ use.reshape(len(joints) ** 2, -1).T).reshape(len(pose), len(joints),
                                                                 len(joints))


def beyond_reach(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For each goal joint (``goals`` (B, 21): what is held too, as pins and planted feet),
    how far its target (``targets`` (B, 21, 3)) lies beyond the rig's reach from another
    goal's (B, 21; 0 where within every one, and off the goals), and which goal that is
    (B, 21; -1 where none). Two goals too far apart count against the one whose target is
    further from its joint in ``pose`` (the one the user moved): a held goal a hair off
    its joint is never the one named."""
    if len(pose) == 1:
        return _beyond_reach_one(pose[0], goals[0], targets[0])
    # Among the joints some pose holds (a spread's frames hold the same few: 25 pairs of
    # the 441: 999 frames holding 5 goals, 15.5 -> 1.4 ms).
    cols = np.flatnonzero(goals.any(axis=0))
    over = np.zeros(goals.shape)
    other = np.full(goals.shape, -1, dtype=np.int64)
    if not cols.size:
        return over, other
    aims, held = targets[:, cols], goals[:, cols]
    apart = norm(aims[:, :, None] - aims[:, None, :])  # (B, G, G)
    moves = norm(aims - pose[:, cols])
    both = held[:, :, None] & held[:, None, :] & (moves[:, :, None] >= moves[:, None, :])
    excess = np.where(both, apart - max_spans(pose, cols), 0.0)
    worst = excess.argmax(axis=2)
    over[:, cols] = np.maximum(np.take_along_axis(excess, worst[..., None], axis=2)[..., 0],
                               0.0)
    other[:, cols] = np.where(over[:, cols] > 0.0, cols[worst], -1)
    return over, other


def _beyond_reach_one(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`beyond_reach` of one pose (21, 3), among its goals alone, by the compiled
    kernel or in scalar math: a solve's few goals need a few of the 441 pairs, fewer float
    operations than the dozen numpy calls on tiny arrays cost (the same answer, ties to the
    first goal as there)."""
    over, other = np.zeros((1, NUM_JOINTS)), np.full((1, NUM_JOINTS), -1, dtype=np.int64)
    if (kernels := native.kernels()) is not None:
        arrays = [np.ascontiguousarray(a, dtype=t) for a, t in (
            (pose, np.float64), (goals, np.int64), (targets, np.float64))]
        kernels.beyond_reach(NUM_JOINTS, len(_NATIVE_PAIRS), _NATIVE_SEGMENTS.shape[1],
                             *_NATIVE_TABLES, *map(native.address, (*arrays, over, other)))
        return over, other
    g = np.flatnonzero(goals).tolist()
    if len(g) < 2:
        return over, other
    points, aims = pose.tolist(), targets.tolist()
    fixed = [math.dist(points[a], points[b]) for a, b in _PAIR_LIST]
    moves = [math.dist(aims[j], points[j]) for j in g]
    for a, ja in enumerate(g):
        most, worst = 0.0, -1
        for b, jb in enumerate(g):
            if moves[a] >= moves[b]:
                excess = math.dist(aims[ja], aims[jb]) - sum(
                    map(fixed.__getitem__, _SEGMENTS[ja * NUM_JOINTS + jb]))
                if excess > most:
                    most, worst = excess, jb
        over[0, ja], other[0, ja] = most, worst
    return over, other


def pulled_within(pose: np.ndarray, goals: np.ndarray, targets: np.ndarray,
                  margin: np.ndarray, passes: int = PULL_PASSES,
                  reach: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``targets`` (B, 21, 3) with each one :func:`beyond_reach` names pulled straight back
    towards the goal it is held against, onto the rig's reach from it less ``margin`` (B,):
    the nearest aim the least change can lean towards. Targets within reach come back
    unchanged, so the aims go continuously from reachable targets to those beyond (a pass
    each: a target pulled within one goal's reach may still be beyond another's).
    ``reach``: :func:`beyond_reach` of ``targets`` where the caller has it already."""
    aims = np.array(targets, dtype=np.float64)
    rows = np.arange(len(aims))
    for k in range(passes):
        over, other = reach if k == 0 and reach is not None else beyond_reach(pose, goals, aims)
        worst = over.argmax(axis=1)
        excess = over[rows, worst]
        pull = excess > 0.0
        if not pull.any():
            break
        r, j = rows[pull], worst[pull]
        anchor = aims[r, other[r, j]]
        away = aims[r, j] - anchor
        apart = norm(away)
        keep = np.maximum(apart - excess[pull] - margin[pull], 0.0) / np.maximum(apart, 1e-12)
        aims[r, j] = anchor + away * keep[:, None]
    return aims


def describe(over: Sequence[float], other: Sequence[int], least: float = 0.0) -> list[str]:
    """Notes for one pose's :func:`beyond_reach` answer (21 values each, arrays or lists),
    in metres: which targets no pose of the rig can reach, by more than ``least``, how far,
    and held against which other goal."""
    return [f"{JOINTS[j]}: its target lies {o * CM:.1f} cm {NOTE_MARK} "
            f"from the {JOINTS[int(k)]} goal, even with every bone stretched in line "
            f"(a rig's pelvis and chest are rigid): move one of them, or free it"
            for j, (o, k) in enumerate(zip(over, other, strict=True)) if o > least]
