"""Classic full-body FABRIK (Aristidou & Lasenby 2011), the non-learned baseline and mode.

Multi-end-effector FABRIK on the canonical tree, with no joint limits as in the seed
paper's comparison. Each iteration has two stages:

- **inward** (the paper's "forward" stage): from the deepest joints to the pelvis, every
  effector joint is put on its target and every joint with an effector below it is pulled
  to the bone length from its child; a sub-base with several such children (the chest for
  head and arms, the pelvis for spine and legs) takes the centroid of their proposals;
- **outward** (the "backward" stage): from the fixed pelvis out, every bone takes its
  length again along its new direction (:func:`normalize.set_bone_lengths`); branches
  with no effector follow rigidly.

Any joint may be an effector, not only chain ends. Batched over poses, each with its own
effector mask; the loops run over the tree's depth levels and iterations, not over poses.
"""

from __future__ import annotations

import numpy as np

from .normalize import set_bone_lengths
from .quaternions import norm
from .rigid_branches import branch_shapes, turn_branches
from .skeleton import ANCESTORS, DEPTHS, NUM_JOINTS, PARENTS, ROOT, bone_lengths

DEFAULT_ITERATIONS = 20
DEFAULT_TOLERANCE = 1e-3  # metres: stop once every effector is this close
RIG_SHAPED_ITERATIONS = 60  # rig-shaped FABRIK (rigid pelvis and chest) converges slower
_EPS = 1e-12

# Per depth level (deepest first, pelvis excluded): the joints at that level.
_LEVELS: tuple[np.ndarray, ...] = tuple(
    np.flatnonzero(DEPTHS == d) for d in range(int(DEPTHS.max()), 0, -1)
)
_MAX_CHILDREN = max(int((PARENTS == j).sum()) for j in range(NUM_JOINTS))
# _CHILD_TABLE[j] lists j's children, padded with j itself (masked out below).
_CHILD_TABLE = np.array([
    list(np.flatnonzero(PARENTS == j)) + [j] * (_MAX_CHILDREN - int((PARENTS == j).sum()))
    for j in range(NUM_JOINTS)
])
_CHILD_VALID = np.array([[c != j for c in row] for j, row in enumerate(_CHILD_TABLE)])


def _pull(child: np.ndarray, joint: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Where ``joint`` goes to sit ``length`` away from ``child``, along the joint's side."""
    d = joint - child
    n = np.sqrt(np.einsum("...i,...i->...", d, d))[..., None]
    return child + d * (length[..., None] / np.maximum(n, _EPS))


def solve(positions: np.ndarray, mask: np.ndarray, targets: np.ndarray,
          lengths: np.ndarray | None = None, iterations: int = DEFAULT_ITERATIONS,
          tolerance: float | np.ndarray = DEFAULT_TOLERANCE, rig_shaped: bool = False
          ) -> np.ndarray:
    """Move ``positions`` (..., 21, 3) so that joints with ``mask`` reach ``targets``.

    ``lengths`` (21,) or (..., 21) default to the input's bone lengths; the pelvis stays.
    ``tolerance``: metres, or one per pose (...,). ``rig_shaped``: the pelvis and chest
    keep the input's shape, as a rig's rigid bones do (:mod:`.rigid_branches`): each
    outward stage turns a branch as a whole to best fit its children's new directions,
    so the answer is one a rig can take (the classic algorithm averages them apart).
    """
    p = np.array(positions, dtype=np.float64)
    batch = p.shape[:-2]
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), (*batch, NUM_JOINTS))
    targets = np.broadcast_to(np.asarray(targets, dtype=np.float64), p.shape)
    lengths = bone_lengths(p) if lengths is None else np.broadcast_to(
        np.asarray(lengths, dtype=np.float64), (*batch, NUM_JOINTS))
    active = (mask.astype(np.float64) @ ANCESTORS) > 0  # an effector at or below the joint
    eff = mask & (np.arange(NUM_JOINTS) != ROOT)
    branches = branch_shapes(p, active) if rig_shaped else None
    # What each level's inward step needs and no iteration changes, made once.
    steps = []
    for level in _LEVELS:
        children = _CHILD_TABLE[level]  # (n, C)
        valid = _CHILD_VALID[level] & active[..., children]  # (..., n, C)
        count = valid.sum(-1)
        steps.append((level, children, valid[..., None], np.maximum(count, 1)[..., None],
                      (count > 0)[..., None], eff[..., level, None], targets[..., level, :],
                      lengths[..., children]))
    for _ in range(iterations):
        err = np.where(eff, norm(p - targets), 0.0)
        running = err.max(axis=-1, initial=0.0) > tolerance  # each pose stops on its own
        if not running.any():
            break
        q = p.copy()
        for level, children, valid, count, some, fixed, goal, length in steps:
            proposals = _pull(q[..., children, :], q[..., level, None, :], length)
            centroid = (proposals * valid).sum(-2) / count
            moved = np.where(some, centroid, q[..., level, :])
            q[..., level, :] = np.where(fixed, goal, moved)
        # Branches without effectors follow rigidly: their bones keep their old directions.
        bones = np.where(active[..., None], q - q[..., PARENTS.clip(min=0), :],
                         p - p[..., PARENTS.clip(min=0), :])
        bones[..., ROOT, :] = 0.0
        if branches is not None:
            bones = turn_branches(bones, branches)
        solved = set_bone_lengths(p[..., ROOT:ROOT + 1, :] + ANCESTORS @ bones, lengths)
        p = np.where(running[..., None, None], solved, p)
    return p
