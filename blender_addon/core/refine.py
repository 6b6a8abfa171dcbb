"""Latent refinement: Gauss-Newton on what the user asked, with the rest of the body kept.

After the networks propose a latent ``z_net``, the pose ``x + D(z) - D(z_base)`` (the
input plus the decoded *change*, so an unmoved request changes nothing), given the rig's
bone lengths along its bones' directions (what the rig will show: a decoded change that
stretched a forearm to raise a hand would be undone there, and a rig with shorter arms than
the models' body would fall short), is refined over ``z`` to minimise, in model space
(facing +Z, scaled to the models' leg length):

- **requests**: effector and pin errors (weight ``w`` each), and metric errors in the
  metric's unit times :data:`METRIC_UNIT_M` (1 degree counts as 1 cm), measured on the pose
  as a rig shows it (:class:`MetricRows`);
- **least change**: how far the joints nobody asked about move from where they should stay:
  the input pose at ``body_follow`` 0, the networks' own answer at 1, a blend between;
  held firmly in a local drag, loosely in a full-body request;
- **rigid branches** (effector edits): the distances between the pelvis's children and
  between the chest's, which a rig's one pelvis bone and one chest bone keep.

The latent moves along the few directions that move the decoded pose most on real poses
(:attr:`ModelSet.jacobian_basis`, chosen at export), not along every latent axis: the
same drag and pair figures, for a cheaper Jacobian and smaller normal equations. The
decoder's exact Jacobian along them (the ``decoder_jacobian`` graph, one call, or the
compiled decoder's, :mod:`.compiled_networks`) is taken once at ``z_net``; each step then
costs one decode (a chord Gauss-Newton), and a step is kept only where it lowers the cost;
with the compiled kernels, an effector edit's steps and decodes are one kernel call. Metric rows use
the metric's gradient with respect to the pose (a batched forward difference through the
same formula the sliders use). Everything is batched over poses.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from . import native, skeleton
from .compiled_networks import CompiledDecoder, compiled_decoder
from .conversions import axis_angle_to_matrix
from .metrics import MetricSpec, evaluate_metric
from .models import ModelSet
from .normalize import set_bone_lengths_unchecked
from .quaternions import EPS, norm
from .rigid_branches import FIT_JOINTS, keep_rigid

METRIC_UNIT_M = {"deg": 0.01, "m": 1.0}  # a metric error's weight in metres of joint error
# Per unit of effector weight, chosen on the drag and engine benchmarks (CMU test split,
# default set): heavier lets the learned body do the reaching (other joints nearer real
# motion on hands+feet+head: 1.34 cm at 3, 1.17 at 30; classic FABRIK 3.01) but moves the
# other joints more in a one-hand drag (1.66 cm at 3, 1.71 at 5, 1.85 at 30; FABRIK 1.21).
EFFECTOR_WEIGHT = 5.0
# A request that moves most of the end joints (hands, feet, head: at least
# FULL_BODY_MIN_ENDS) describes the whole body, and the learned body should do the reaching
# (the universal solver is trained the same way on such pairs): its effectors weigh
# FULL_BODY_EFFECTOR_WEIGHT. The weight grows geometrically with the move of the
# FULL_BODY_MIN_ENDS-th most moved end, reaching it at FULL_BODY_MOVE (model metres), so a
# pose never jumps when one more end starts to move. Engine benchmark, hands+feet+head,
# refined non-effector MPJPE: CMU set on CMU 1.41 -> 1.17 cm (FABRIK 3.18), on Bandai Namco
# 1.59 -> 1.16 (3.40); CMU + Bandai set on Bandai Namco 1.43 -> 0.90 (300: 0.91, 3000:
# 0.90). With the least change weighted the same way (LEAST_CHANGE below), a move of 2 cm
# instead of 5 for the full weights: CMU 1.21 -> 1.17 cm, CMU + Bandai on Bandai Namco
# 1.09 -> 1.06. Drags move one or two ends: unchanged.
FULL_BODY_MIN_ENDS = 4
FULL_BODY_EFFECTOR_WEIGHT = 1000.0
FULL_BODY_MOVE = 0.02
# A requested metric: 1 degree off costs like a local effector 25 cm off. In an edit with
# metric requests the effectors and pins (planted feet among them) weigh as much as a
# requested metric, 1 cm like 1 degree: the refinement must hold them while it changes the
# pose, or the exact-reach pass puts them back afterwards by bending the legs behind the
# sliders' back. The metrics nobody asked about are held (during a metric-only edit) at
# 1/300 of a request: firmer holds meet the sweep's bound everywhere but find poses the
# metrics do not see (lowering the hands 20 cm with knees and trunk held tilts the whole
# body at the ankles: twice the motion and further from the learned poses). Slider sweep,
# 100 CMU test poses, other metrics' largest change (median) / joints moved / manifold
# distance, lowering the hands 20 cm: 300 / 1 and effectors at 5: 15.8 deg / 8.6 / 0.67
# cm; these: 4.9 / 14.3 / 0.89; holds at 300: 1.0 / 19.5 / 0.95. Flexing the spine 40 deg:
# 5.6 / 8.5 / 2.58, 38 % of poses with an angle out of range; these: 1.3 / 10.7 / 1.52, 22 %.
METRIC_WEIGHT = 3000.0
HOLD_WEIGHT = 10.0  # metrics nobody asked about, during a metric-only edit
BALANCE_WEIGHT = HOLD_WEIGHT  # the body's lean over its feet (:func:`balance`), per metre
# Per non-requested joint coordinate, for a local request (LEAST_CHANGE) and a full-body
# one (FULL_BODY_LEAST_CHANGE), between them as the effector weight (geometrically with the
# same share). A local drag's answers are taken as a rig takes them (pelvis and chest
# rigid, limbs re-aimed exactly): a firm hold keeps the networks' body, and the exact-reach
# pass does the last centimetres in the dragged limb. Drag benchmark, one hand moved 10-25
# cm, CMU set on CMU, other joints' mean displacement / out-of-range angles (classic FABRIK
# 1.21 cm / 21 %): at 0.8 1.87 cm / 26 %, 3: 1.78 / 21 %, 10: 1.76 / 16 % (on Bandai Namco
# poses 2.22 -> 2.08 cm, FABRIK 1.31). A full-body request holds them loosely, as the
# learned body does the reaching (engine benchmark, hands+feet+head, CMU set on CMU / CMU +
# Bandai set on Bandai Namco: 1.17 / 1.06 cm at 0.8, 1.15 / 1.03 at 0.2; 1.27 on CMU at 10).
LEAST_CHANGE = 10.0
FULL_BODY_LEAST_CHANGE = 0.2
# In an edit with metric requests the held metrics (and the body's balance over its feet)
# keep the body; a firmer least change there spreads the request over the held metrics.
# Slider sweep, 60 CMU test poses, the other metrics' largest change (median) / joints
# moved: lowering the hands 20 cm 16.2 deg / 13.3 cm at 0.5, 12.9 / 15.2 at 0.2 (4.2 /
# 19.8 at 0.05 without the balance hold, by leaning the body over its feet); flexing the
# spine 40 deg 1.4 / 11.5 at 0.5, 0.6 / 12.3 at 0.2; every request still reached.
LEAST_CHANGE_METRIC_EDIT = 0.2
LEARNED_PRIOR = 1e-4  # m^2 per latent unit^2: stay near the networks' latent
SHIFT_PRIOR = 1.0  # a body shift along the floor costs like missing a target by as much
DAMPING = 1e-6  # keeps the normal equations well posed whatever the weights
LM_START, LM_UP, LM_DOWN = 1e-4, 10.0, 0.3  # Levenberg-Marquardt damping, its changes
FD_STEP = 1e-4  # metres: the metric gradient's finite-difference step
# An angle of 0 or 180 degrees (two vectors in line, as a T-pose's clavicles) is a kink: any
# move opens it, so a forward difference there points every way at once. A metric held at
# such a value (value and target within this of it) keeps its cost but no gradient: its
# rows would otherwise fight every other request (lowering a T-pose rig's hands reached
# 95 % of the request with the clavicle angle held at 0 through its gradient).
KINK_DEG = 0.5
# A rig's pelvis bone carries the spine and both hips rigidly, its chest bone the neck and
# both clavicles (:mod:`.rigid_branches`): rows on the distances between each branch's
# children (in metres, this weight each) keep the refinement near answers a rig can take,
# so the rigid fit afterwards moves little. Engine benchmark, hands+feet+head, CMU + Bandai
# set on Bandai Namco, refined non-effector MPJPE: 1.03 cm without, 0.99 at 10, 100 or
# 1000; the drag benchmark's figures stay within 0.01 cm and 1 point. Not in slider edits,
# where the held metrics keep the body (lowering the hands 20 cm, CMU test poses, the
# elbows' change: 2.9 degrees without the rows, 3.1 with).
RIGID_WEIGHT = 100.0
_RIGID_PAIRS = np.array([[skeleton.JOINT_INDEX[a], skeleton.JOINT_INDEX[b]] for a, b in (
    ("spine", "l_thigh"), ("spine", "r_thigh"), ("l_thigh", "r_thigh"),
    ("neck", "l_clavicle"), ("neck", "r_clavicle"), ("l_clavicle", "r_clavicle"))]).T
_RIGID_SIGNS = (np.eye(skeleton.NUM_JOINTS)[_RIGID_PAIRS[0]]
                - np.eye(skeleton.NUM_JOINTS)[_RIGID_PAIRS[1]])  # (6, 21)
_POSE_DIM = skeleton.NUM_JOINTS * 3
# The clavicles' turns (a shrug or the shoulders let down, and a hunch or the shoulders
# drawn back), each clavicle bone turned about its clavicle joint with the arm carried as it
# hangs: variables of their own in an edit that asks for a metric reading a clavicle
# (:func:`moves_shoulders`). CMU's clavicles never move (the angle between them is
# 31.0-31.1 degrees in 99 % of its poses), so its latent has no shrug and met such a
# request by bending the chest, which a rig's one chest bone cannot take, and the rest of
# the body with it. A radian of elevation costs like a joint moved SHRUG_PRIOR ** 0.5 m, a
# radian of protraction PROTRACTION_PRIOR ** 0.5 m: left as cheap, it let the refinement
# bend the body elsewhere. Slider sweep, the other metrics' largest change (median),
# opening 150 CMU test poses' shoulders 20 degrees / closing 20 Bandai Namco test poses'
# with the CMU set: 8.1 / 0.6 degrees at 1e-2, 2.1 / 1.7 at 0.3; on 300 Bandai Namco
# test poses, closing / opening by 20: 2.2 / 4.0 degrees at 0.3, 2.7 / 1.7 at 0.7, 3.1 /
# 1.4 at 1 (CMU poses the same at 0.3 and 1: 2.3 opening). Turning the whole arm
# about the clavicle joint instead of carrying it swung the hands and bent the knees to
# hold their height (6.3 degrees opening CMU poses' by 20 with 300 poses); elevation alone
# reached 31 % of a closing request on Bandai Namco poses. Those figures are of requests the
# networks answered first; the refinement now starts such a request from the pose as it
# stands (PoseEditor._solve), where these priors measured best (300 poses of 60 BVH clips
# each, the other metrics' largest change, median, and the joints' mean move): opening
# CMU's skeleton's shoulders 20 degrees 0.0 degrees / 0.10 cm, 0.6 cm moved (0.3 and 0.3:
# 0.1 / 0.14, 0.9), Bandai Namco's 40 degrees 0.0 / 0.11, 0.7 cm (0.3 and 0.3: 0.4 / 0.10,
# 1.2).
SHRUG_PRIOR = 1e-2
PROTRACTION_PRIOR = 0.7
_SHRUG_VARIABLES = 4  # elevation and protraction, each side
_SHRUG_SIDES = skeleton.joint_indices(["l_clavicle", "r_clavicle"])
_SHRUG_NEXT = skeleton.joint_indices(["l_upperarm", "r_upperarm"])
# What hangs below each shoulder (elbow, wrist): carried along by a shrug, not swung.
_SHRUG_BELOW = np.stack([np.flatnonzero(skeleton.ANCESTORS[:, j] > 0)[1:] for j in _SHRUG_NEXT])
# Pose coordinates (63,) a clavicle turn does not carry: the body a request that only turns
# the clavicles keeps as firmly as a drag keeps it (LEAST_CHANGE; at LEAST_CHANGE_METRIC_EDIT
# the latent's small moves turned the chest 0.1-0.6 degrees and moved these joints 1-2.5 mm
# opening the shoulders 20 degrees, 0.1-0.6 mm held; the other metrics the same).
_UNCARRIED = np.isin(np.arange(skeleton.NUM_JOINTS), np.r_[_SHRUG_NEXT, _SHRUG_BELOW.ravel()],
                     invert=True).repeat(3)
_TRUNK_UP = skeleton.joint_indices(["chest", "neck"])
_ENDS = skeleton.joint_indices(skeleton.END_JOINTS)
_BONE_SUMS = skeleton.ANCESTORS[:, 1:]  # joints relative to the pelvis from bone vectors
_PARENTS = skeleton.PARENTS[1:]


def _fixed(pose: np.ndarray, lengths: np.ndarray, jac: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """The pose with these bone lengths (B, 21) (directions kept) and, given the pose's
    Jacobian (B, 63, L), the fixed pose's: each bone's change loses its component along
    the bone and is scaled by length / |bone|, then summed down the tree."""
    out = set_bone_lengths_unchecked(pose, lengths)
    if jac is None:
        return out, None
    b, latent = jac.shape[0], jac.shape[-1]
    j = jac.reshape(b, skeleton.NUM_JOINTS, 3, latent)
    vec = pose[:, 1:] - pose[:, _PARENTS]  # (B, 20, 3)
    length = norm(vec)
    unit = vec / length[..., None]
    dvec = j[:, 1:] - j[:, _PARENTS]  # (B, 20, 3, L)
    along = np.add.reduce(unit[..., None] * dvec, 2)
    stretch = (lengths[:, 1:] / length)[..., None, None]
    dbone = (dvec - unit[..., None] * along[:, :, None]) * stretch
    djoint = (_BONE_SUMS @ dbone.reshape(b, len(_PARENTS), -1)).reshape(j.shape)
    djoint += j[:, :1]
    return out, djoint.reshape(b, _POSE_DIM, latent)
_EYE_POSE = np.eye(_POSE_DIM).reshape(_POSE_DIM, skeleton.NUM_JOINTS, 3) * FD_STEP


def full_body_share(mask: np.ndarray, targets: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """(B,) how much each request describes the whole body, 0 (local) to 1: the move of its
    :data:`FULL_BODY_MIN_ENDS`-th most moved end over :data:`FULL_BODY_MOVE` (model space)."""
    move = np.where(mask[:, _ENDS] > 0,
                    np.linalg.norm(targets[:, _ENDS] - pose[:, _ENDS], axis=-1), 0.0)
    ends_moved = np.sort(move, axis=1)[:, -FULL_BODY_MIN_ENDS]
    return np.minimum(ends_moved / FULL_BODY_MOVE, 1.0)


def effector_weights(share: np.ndarray) -> np.ndarray:
    """(B,) the effectors' weight per pose: :data:`EFFECTOR_WEIGHT` for a local request,
    rising to :data:`FULL_BODY_EFFECTOR_WEIGHT` with its :func:`full_body_share`."""
    return EFFECTOR_WEIGHT * (FULL_BODY_EFFECTOR_WEIGHT / EFFECTOR_WEIGHT) ** share


def least_change_weights(share: np.ndarray) -> np.ndarray:
    """(B,) the least-change weight per pose: :data:`LEAST_CHANGE` for a local request,
    :data:`FULL_BODY_LEAST_CHANGE` for a full-body one (see :func:`full_body_share`)."""
    return LEAST_CHANGE * (FULL_BODY_LEAST_CHANGE / LEAST_CHANGE) ** share


def moves_shoulders(spec: MetricSpec) -> bool:
    """Whether a metric reads a clavicle bone (a clavicle joint and its upper arm), so a
    request for it gets the clavicles' turns as variables (:data:`SHRUG_PRIOR`)."""
    joints = {skeleton.JOINT_INDEX[j] for j in spec.joints}
    return any({int(c), int(u)} <= joints for c, u in zip(_SHRUG_SIDES, _SHRUG_NEXT,
                                                           strict=True))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(norm(v), EPS)[..., None]


def _shrugged(pose: np.ndarray, turn: np.ndarray, jac: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """The pose (B, 21, 3) with each clavicle bone turned about its clavicle joint, the arm
    below carried along as it hangs (its shoulder moves, its direction stays: the shoulder
    joint takes the turn back, as a shrug does), and, given the pose's Jacobian (B, 63, V),
    the turned pose's with the turns' columns appended (the axes taken as fixed). ``turn``
    (B, 4) radians: the left and right clavicles' elevation (about the axis square to the
    trunk and the clavicle bone; positive lowers both), then their protraction (about the
    axis square to that one and the bone: a hunch)."""
    centre = pose[:, _SHRUG_SIDES]  # (B, 2, 3)
    up = pose[:, _TRUNK_UP[1]] - pose[:, _TRUNK_UP[0]]
    bone = pose[:, _SHRUG_NEXT] - centre
    lift = _unit(np.cross(up[:, None], bone))
    reach = _unit(np.cross(bone, lift))
    first = axis_angle_to_matrix(lift, turn[:, :2])
    second = axis_angle_to_matrix(reach, turn[:, 2:])
    rot = second @ first  # (B, 2, 3, 3)
    turned = (rot @ bone[..., None])[..., 0]
    move = turned - bone  # (B, 2, 3): the shoulder's, and all it carries
    out = pose.copy()
    out[:, _SHRUG_NEXT] += move
    out[:, _SHRUG_BELOW] += move[:, :, None]
    if jac is None:
        return out, None
    b, variables = len(pose), jac.shape[-1]
    j = jac.reshape(b, skeleton.NUM_JOINTS, 3, variables).copy()
    base = j[:, _SHRUG_SIDES]  # (B, 2, 3, V)
    dmove = rot @ (j[:, _SHRUG_NEXT] - base) - (j[:, _SHRUG_NEXT] - base)
    j[:, _SHRUG_NEXT] += dmove
    j[:, _SHRUG_BELOW] += dmove[:, :, None]
    # d/dturn of R2 R1 bone: (R2 lift) x (R bone), and reach x (R bone).
    lift_now = (second @ lift[..., None])[..., 0]
    columns = np.zeros((b, skeleton.NUM_JOINTS, 3, 4))
    for k, axis in enumerate((lift_now, reach)):
        moved = np.cross(axis, turned)  # (B, 2, 3)
        for side in range(2):
            carried = np.r_[_SHRUG_NEXT[side], _SHRUG_BELOW[side]]
            columns[..., 2 * k + side][:, carried] = moved[:, side, None]
    return out, np.concatenate([j, columns], axis=3).reshape(b, _POSE_DIM, variables + 4)


@dataclass
class MetricRows:
    """Metric residuals of one refinement: specs, their targets (B,) in model units, and
    their weights (B,) (0 switches a row off). ``start`` (B, 21, 3): measure the metrics on
    the pose as a rig shows it, its pelvis and chest branches put back in the start's
    shape (:func:`.rigid_branches.keep_rigid`, as the engine does afterwards); None: on
    the pose itself."""
    specs: list[MetricSpec]
    targets: list[np.ndarray]
    weights: list[np.ndarray]
    start: np.ndarray | None = None
    # (B, 2) the pelvis's floor offset from the ankles to keep (:func:`balance`) and its
    # weights (B,), or None.
    balance: np.ndarray | None = None
    balance_weights: np.ndarray | None = None


# The pelvis's offset along the floor (x, z) from the midpoint of the ankles, as rows over
# the flat pose (2, 63): how far the body leans over its feet. No slider measures it, so
# without a hold a request the held metrics resist (lowering the hands 20 cm with knees
# and trunk held) is met by tilting straight legs: the body slides half a metre over its
# planted feet.
_ANKLES = skeleton.joint_indices(["l_foot", "r_foot"])
_BALANCE_ROWS = np.zeros((2, skeleton.NUM_JOINTS, 3))
for _row, _axis in enumerate((0, 2)):
    _BALANCE_ROWS[_row, skeleton.ROOT, _axis] = 1.0
    _BALANCE_ROWS[_row, _ANKLES, _axis] = -0.5
_BALANCE_ROWS = _BALANCE_ROWS.reshape(2, _POSE_DIM)


def balance(pose: np.ndarray) -> np.ndarray:
    """(B, 2) the pelvis's floor offset from the midpoint of the ankles, of poses (B, 21, 3)."""
    return pose.reshape(len(pose), -1) @ _BALANCE_ROWS.T


def _as_rig_shows(pose: np.ndarray, start: np.ndarray | None) -> np.ndarray:
    """Poses (B, ..., 21, 3) as a rig shows them (see :class:`MetricRows`)."""
    if start is None:
        return pose
    flat = pose.reshape(len(pose), -1, skeleton.NUM_JOINTS, 3)
    starts = np.repeat(start, flat.shape[1], axis=0)
    return keep_rigid(flat.reshape(-1, skeleton.NUM_JOINTS, 3), starts).reshape(pose.shape)


def _probes(pose: np.ndarray, shown: np.ndarray, start: np.ndarray | None) -> np.ndarray:
    """The forward difference's probes (B, 63, 21, 3): the pose with each coordinate moved
    by :data:`FD_STEP`, as a rig shows it. A probe moving a joint outside
    :data:`.rigid_branches.FIT_JOINTS` is the shown pose with that joint moved (the fit
    does not see it): only the others go through the fit."""
    if start is None:
        return pose[:, None] + _EYE_POSE[None]
    probes = shown[:, None] + _EYE_POSE[None]
    probes[:, _FIT_COORDS] = _as_rig_shows(pose[:, None] + _EYE_POSE[_FIT_COORDS][None], start)
    return probes


_FIT_COORDS = (3 * FIT_JOINTS[:, None] + np.arange(3)).ravel()  # their coordinates in 63


def _metric_block(pose: np.ndarray, rows: MetricRows, gradient: bool = True
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """Weighted metric residuals (B, M) and, with ``gradient``, their gradients with respect
    to the pose (B, M, 63): a batched forward difference through the metrics as the sliders
    measure them, on the pose as a rig shows it; rows weighted 0 for every pose are
    skipped."""
    shown = _as_rig_shows(pose, rows.start)
    probes = _probes(pose, shown, rows.start) if gradient else None
    res, grads = [], []
    for spec, target, weight in zip(rows.specs, rows.targets, rows.weights, strict=True):
        if not weight.any():
            continue
        value = evaluate_metric(shown, spec)
        s = np.sqrt(weight) * METRIC_UNIT_M[spec.unit]
        res.append((value - target) * s)
        if gradient:
            grad = (evaluate_metric(probes, spec) - value[:, None]) / FD_STEP
            if spec.kind == "angle":
                grad[_at_kink(value) & _at_kink(target)] = 0.0
            grads.append(grad * s[:, None])
    if rows.balance is not None:
        s = np.sqrt(rows.balance_weights)[:, None]
        res.extend(((balance(pose) - rows.balance) * s).T)
        if gradient:
            grads.extend(np.broadcast_to(_BALANCE_ROWS[None] * s[..., None],
                                         (len(pose), *_BALANCE_ROWS.shape)).transpose(1, 0, 2))
    return np.stack(res, axis=1), np.stack(grads, axis=1) if gradient else None


def _at_kink(angle: np.ndarray) -> np.ndarray:
    """Angles (degrees) within :data:`KINK_DEG` of 0 or 180."""
    return np.minimum(angle, 180.0 - angle) < KINK_DEG


def _rigid_gaps(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vectors between each rigid branch's children in ``pose`` (B, 21, 3), (B, 6, 3),
    and their lengths (B, 6)."""
    gap = pose[:, _RIGID_PAIRS[0]] - pose[:, _RIGID_PAIRS[1]]
    return gap, norm(gap)


def rigid_spans(pose: np.ndarray) -> np.ndarray:
    """(B, 6) the distances between each rigid branch's children in ``pose`` (B, 21, 3):
    what :func:`refine` keeps (``spans``)."""
    return _rigid_gaps(pose)[1]


def _rigid_block(pose: np.ndarray, jac: np.ndarray | None, spans: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """Weighted rigid-branch residuals (B, 6), each child distance off its span, and,
    given the pose's Jacobian (B, 63, V), their Jacobian (B, 6, V)."""
    gap, dist = _rigid_gaps(pose)
    scale = np.sqrt(RIGID_WEIGHT)
    res = (dist - spans) * scale
    if jac is None:
        return res, None
    unit = gap * (scale / np.maximum(dist, 1e-12))[..., None]
    # d dist / d pose: +unit on the first joint of a pair, -unit on the second.
    rows = (_RIGID_SIGNS[..., None] * unit[:, :, None, :]).reshape(len(pose), -1, _POSE_DIM)
    return res, rows @ jac


def refine(models: ModelSet, z_net: np.ndarray, offset: np.ndarray, base: np.ndarray,
           targets: np.ndarray, weights: np.ndarray, metrics: MetricRows | None,
           body_follow: np.ndarray, steps: int, shift: np.ndarray, lengths: np.ndarray,
           relinearize: bool = False, effector_weight: np.ndarray | float = EFFECTOR_WEIGHT,
           least_change: np.ndarray | float = LEAST_CHANGE, spans: np.ndarray | None = None,
           shrug: bool = False, shrug_only: bool = False
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Refined latents (B, L), model-space poses (B, 21, 3) and body shifts (B, 2).

    ``offset``: what is added to the decoded pose (``x - D(z_base)``, or 0); ``base``: the
    input pose the least-change term keeps; ``targets``/``weights``: per-joint requests
    (weight 0 where none); ``lengths`` (B, 21): the bone lengths the decoded pose takes
    (the rig's, in model units), so residuals are measured on what the rig will show.
    Besides the latent, the refinement moves the whole body along the floor (``shift``,
    x and z, starting from the given one): model space keeps the pelvis over its origin,
    so a hip shift towards a far target, or a dragged pelvis, is this translation with the
    legs re-posed by the latent. Rows with nothing requested come back unchanged.
    ``relinearize``: a new Jacobian every accepted step (metric requests on single poses).
    ``effector_weight``: per unit of request weight, and ``least_change``: per other joint
    coordinate, each one for all or (B,) (:func:`effector_weights`,
    :func:`least_change_weights`). ``spans`` (B, 6): the rigid branches' child distances
    to keep (:func:`rigid_spans` of the start pose), or None. ``shrug``: the clavicles'
    turns are variables too (see :data:`SHRUG_PRIOR`); ``shrug_only``: and they are all the
    metric requests ask for, so the joints they do not carry are held as a drag holds the
    body (:data:`LEAST_CHANGE`).

    The one place the backend is chosen: an effector edit (no metric rows, no shrug, no
    re-linearizing, rigid spans given) runs in one kernel call where the kernels and the
    set's compiled decoder load (:func:`_refine_native`; its first call is checked against
    the numpy steps), everything else in the numpy steps (:func:`_refine_numpy`).
    """
    effectors_only = metrics is None and not shrug and not relinearize and spans is not None
    if effectors_only and (kernels := native.kernels()) is not None:
        refined = _refine_native(kernels, models, z_net, offset, base, targets, weights,
                                 body_follow, steps, shift, lengths, effector_weight,
                                 least_change, spans)
        if refined is not None and not _native_checked:
            # Checked once, on its first real call, against the numpy steps (it needs a
            # model set, which native's own self-check has not), which decode as it does.
            want = _refine_numpy(models, z_net, offset, base, targets, weights, None,
                                 body_follow, steps, shift, lengths, False, effector_weight,
                                 least_change, spans)
            _checked_native(refined, want)
        if refined is not None and native.kernels() is not None:
            return refined
    return _refine_numpy(models, z_net, offset, base, targets, weights, metrics, body_follow,
                         steps, shift, lengths, relinearize, effector_weight, least_change,
                         spans, shrug, shrug_only)


def _refine_numpy(models: ModelSet, z_net: np.ndarray, offset: np.ndarray, base: np.ndarray,
                  targets: np.ndarray, weights: np.ndarray, metrics: MetricRows | None,
                  body_follow: np.ndarray, steps: int, shift: np.ndarray, lengths: np.ndarray,
                  relinearize: bool = False,
                  effector_weight: np.ndarray | float = EFFECTOR_WEIGHT,
                  least_change: np.ndarray | float = LEAST_CHANGE,
                  spans: np.ndarray | None = None, shrug: bool = False,
                  shrug_only: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`refine` in numpy (the specification): batched Gauss-Newton steps."""
    b = len(z_net)
    point = _Point(models, z_net.astype(np.float64), offset, lengths, shrug)
    rank = point.rank
    n_vars = rank + _SHRUG_VARIABLES * shrug + 2
    # The variables: the latent's move along the basis, the clavicles' turns (with
    # ``shrug``), then the body's shift.
    v_net = np.concatenate([np.zeros((b, n_vars - 2)), shift], axis=1)
    v = v_net.copy()
    pose, jac = point.linearize(v)
    # Per-coordinate weights of the pose rows: requests where asked, least change elsewhere,
    # towards the input pose (body_follow 0) or the networks' own pose (1), or between.
    asked = weights.repeat(3, axis=1) > 0
    per_pose = _per_pose(effector_weight, b)
    hold = _per_pose(least_change, b)
    if metrics is not None:  # held as firmly as a requested metric (see METRIC_WEIGHT)
        per_pose = np.maximum(per_pose, METRIC_WEIGHT)
        hold = np.where(_UNCARRIED, LEAST_CHANGE, LEAST_CHANGE_METRIC_EDIT)[None] if shrug_only \
            else np.full((b, 1), LEAST_CHANGE_METRIC_EDIT)
    row_w = np.where(asked, weights.repeat(3, axis=1) * per_pose, hold)
    follow = _per_pose(body_follow, b)
    keep = (1.0 - follow) * base.reshape(b, -1) + follow * pose.reshape(b, -1)
    goal = np.where(asked, targets.reshape(b, -1), keep)
    prior = _prior(rank, shrug)
    cost, rres = _cost(pose, v, v_net, goal, row_w, metrics, prior, spans)
    rjac = None
    # Levenberg-Marquardt damping per pose, relative to the Gauss-Newton diagonal: raised
    # where a step fails (and lowered again where a re-linearized one succeeds).
    damping = np.full(b, LM_START)
    hess = inverse = None
    eye = np.eye(n_vars)
    measured_at = None  # the pose the metric rows (mres) were last measured on
    mgrad = None
    for _ in range(steps):
        if metrics is not None and measured_at is not pose:
            # Residuals on every new pose; their gradient (a forward difference) where the
            # Jacobian is taken: every step when re-linearizing, else once (a chord method,
            # as for the pose rows).
            fresh = relinearize or mgrad is None
            mres, gradient = _metric_block(pose, metrics, fresh)
            if fresh:
                mgrad = gradient
            measured_at = pose
        # Metric rows are strongly curved: a single pose's metric request re-linearizes
        # every step. Otherwise the first Jacobian, and its factorization while no step
        # fails, serve every step (a chord method; the exact-reach pass removes what is
        # left).
        if hess is None or relinearize:
            hess = jac.transpose(0, 2, 1) @ (jac * row_w[:, :, None])
            if metrics is not None:
                mjac = mgrad @ jac  # (B, M, K + 2)
                hess += mjac.transpose(0, 2, 1) @ mjac
            if spans is not None:
                _, rjac = _rigid_block(pose, jac, spans)
                hess += rjac.transpose(0, 2, 1) @ rjac
            scale = np.einsum("bii->b", hess) / n_vars
            hess += prior * eye
            inverse = None
        if inverse is None:
            inverse = np.linalg.inv(hess + (damping * scale)[:, None, None] * eye)
        grad = (((pose.reshape(b, -1) - goal) * row_w)[:, None, :] @ jac)[:, 0]
        grad += prior * (v - v_net)
        if metrics is not None:
            grad += (mres[:, None, :] @ mjac)[:, 0]
        if spans is not None:
            grad += (rres[:, None, :] @ rjac)[:, 0]
        v_try = v - (inverse @ grad[..., None])[..., 0]
        pose_try = point.pose(v_try)
        cost_try, rres_try = _cost(pose_try, v_try, v_net, goal, row_w, metrics, prior, spans)
        better = cost_try < cost
        if not better.all():
            damping = np.where(better, damping, damping * LM_UP)
            inverse = None
        elif relinearize:
            damping = damping * LM_DOWN
        if not relinearize and not better.any():
            break
        v = np.where(better[:, None], v_try, v)
        cost = np.where(better, cost_try, cost)
        if spans is not None:
            rres = np.where(better[:, None], rres_try, rres)
        if relinearize and better.any():
            pose, jac = point.linearize(v)
        else:
            pose = np.where(better[:, None, None], pose_try, pose)
    return point.latent(v).astype(np.float32), pose, v[:, -2:]


class _NativeWork:
    """The kernels' arrays for ``b`` poses and a basis of ``rank`` (inputs copied in, state,
    outputs) and their addresses, made once per shape: a Live drag refines one pose again
    and again, and taking an array's address costs about as much as the kernel's work."""

    def __init__(self, b: int, rank: int, latent: int) -> None:
        nv, dim, nj = rank + 2, _POSE_DIM, skeleton.NUM_JOINTS
        shapes = {"z_net": (b, latent), "offset": (b, dim), "raw": (b, dim),
                  "jac_latent": (b, dim, rank), "lengths": (b, nj),
                  "v": (b, nv), "v_net": (b, nv), "v_try": (b, nv), "base": (b, dim),
                  "targets": (b, dim), "weights": (b, nj), "follow": (b,),
                  "effector_weight": (b,), "least_change": (b,), "spans": (b, 6),
                  "pose": (b, dim), "jac": (b, dim, nv), "goal": (b, dim), "row_w": (b, dim),
                  "rjac": (b, 6, nv), "rres": (b, 6), "hess": (b, nv, nv),
                  "inverse": (b, nv, nv), "cost": (b,), "damping": (b,), "scale": (b,)}
        self.arrays = {k: np.zeros(shape) for k, shape in shapes.items()}
        self.arrays["stale"] = np.zeros(b, dtype=np.int64)
        # The compiled decoder's: the latents it decodes, its poses and Jacobians.
        for name, shape in (("latent", (b, latent)), ("decoded", (b, dim)),
                            ("jac_f", (b, dim, rank))):
            self.arrays[name] = np.zeros(shape, dtype=np.float32)
        self.at = {k: native.address(v) for k, v in self.arrays.items()}
        self.shape = (native.address(skeleton.SKELETON_PARENTS), native.address(_NATIVE_RIGID),
                      native.address(_native_prior(rank)), float(np.sqrt(RIGID_WEIGHT)))
        at = self.at
        # npe_refine_run's, around the decoder's basis.
        self.run_head = (*self.shape, LM_START, LM_UP, at["z_net"])
        self.run_tail = tuple(at[k] for k in (
            "offset", "latent", "decoded", "jac_f", "raw", "jac_latent", "lengths", "v",
            "v_net", "v_try", "base", "targets", "weights", "follow", "effector_weight",
            "least_change", "spans", "pose", "jac", "goal", "row_w", "rjac", "rres", "hess",
            "inverse", "cost", "damping", "scale", "stale"))


_WORK: dict[tuple[int, int, int], _NativeWork] = {}
_WORK_KEPT = 4  # shapes kept (a drag's single pose, a propagation's batches)


def _native_work(b: int, rank: int, latent: int) -> _NativeWork:
    work = _WORK.get((b, rank, latent))
    if work is None:
        if len(_WORK) >= _WORK_KEPT:
            _WORK.clear()
        work = _WORK[(b, rank, latent)] = _NativeWork(b, rank, latent)
    return work


def _refine_native(kernels: native.Kernels, models: ModelSet, z_net: np.ndarray,
                   offset: np.ndarray, base: np.ndarray, targets: np.ndarray,
                   weights: np.ndarray, body_follow: np.ndarray, steps: int,
                   shift: np.ndarray, lengths: np.ndarray,
                   effector_weight: np.ndarray | float, least_change: np.ndarray | float,
                   spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`refine`'s effector steps with the compiled kernels, in one call with the
    compiled decoder (:mod:`.compiled_networks`). None where the set's decoder is not
    compiled or a pose has a bone without direction (numpy then)."""
    point = _Point(models, z_net.astype(np.float64), offset, lengths)
    if point.compiled is None:
        return None
    b, rank, nj = len(z_net), point.rank, skeleton.NUM_JOINTS
    work = _native_work(b, rank, models.latent_size)
    arr = work.arrays
    arr["v_net"][:, :-2] = 0.0
    arr["v_net"][:, -2:] = shift
    arr["v"][:] = arr["v_net"]
    for name, value in (("lengths", lengths), ("base", base), ("targets", targets),
                        ("weights", weights), ("spans", spans)):
        arr[name][:] = value.reshape(arr[name].shape)
    arr["follow"][:] = _per_pose(body_follow, b)[:, 0]
    arr["effector_weight"][:] = _per_pose(effector_weight, b)[:, 0]
    arr["least_change"][:] = _per_pose(least_change, b)[:, 0]
    arr["stale"][:] = 0
    compiled = point.compiled
    arr["z_net"][:] = point.z_net
    arr["offset"][:] = offset.reshape(b, -1)
    if kernels.refine_run(compiled.address, compiled.work_address, b, nj, rank, steps,
                          *work.run_head, compiled.basis_address, *work.run_tail) != 0:
        return None
    return (arr["latent"].copy(), arr["pose"].reshape(b, nj, 3).copy(),
            arr["v"][:, -2:].copy())


_native_checked = False
NATIVE_AGREES_M = 1e-9  # the kernels' refined poses against the numpy steps' (measured 3e-15)


def _checked_native(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    """Refuse the kernels where their first refinement is not the numpy steps' answer."""
    global _native_checked
    _native_checked = True
    worst = float(np.abs(got[1] - want[1]).max())
    if not worst <= NATIVE_AGREES_M:
        native.refuse(f"effector refinement: {worst:.1e} m off the numpy steps' pose")


_NATIVE_RIGID = np.ascontiguousarray(_RIGID_PAIRS, dtype=np.int64)


@functools.cache
def _native_prior(rank: int) -> np.ndarray:
    return np.ascontiguousarray(_prior(rank, False))


def _per_pose(value: np.ndarray | float, b: int) -> np.ndarray:
    """A weight given for all poses or per pose (B,), as a column (B, 1)."""
    a = np.asarray(value, dtype=np.float64)
    return a.reshape(-1, 1) if a.ndim else np.full((b, 1), float(a))


_XZ = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a shift (x, z) as a vector
_SHIFT_JAC = np.tile(_XZ.T, (skeleton.NUM_JOINTS, 1))  # d pose / d shift (63, 2): every joint


@functools.cache
def _prior(rank: int, shrug: bool) -> np.ndarray:
    """Per-variable prior weights: the latent's moves, the clavicles' turns (with
    ``shrug``), then the body's shift."""
    out = np.r_[np.full(rank, LEARNED_PRIOR + DAMPING),
                np.full(2 * shrug, SHRUG_PRIOR), np.full(2 * shrug, PROTRACTION_PRIOR),
                np.full(2, SHIFT_PRIOR)]
    out.flags.writeable = False
    return out


def _shifted(pose: np.ndarray, v: np.ndarray) -> np.ndarray:
    return pose + (v[:, -2:] @ _XZ)[:, None]


class _Point:
    """The refinement's variables (a move along the latent basis, the clavicles' turns with
    ``shrug``, a floor shift) -> poses, around the networks' latent ``z_net``."""

    def __init__(self, models: ModelSet, z_net: np.ndarray, offset: np.ndarray,
                 lengths: np.ndarray, shrug: bool = False) -> None:
        self.models, self.z_net, self.offset, self.lengths = models, z_net, offset, lengths
        self.basis = models.jacobian_basis  # (K, L)
        self.graph = next(iter(models.by_role("decoder_jacobian")), None)
        # The kernels' decoder where it runs: the numpy steps then decode as the kernels'
        # refinement does (the first one is checked against them).
        self.compiled: CompiledDecoder | None = compiled_decoder(models)
        self.shrug = shrug
        self.rank = len(self.basis)

    def latent(self, v: np.ndarray) -> np.ndarray:
        return self.z_net + v[:, :self.rank] @ self.basis

    def _turns(self, v: np.ndarray) -> np.ndarray:
        return v[:, self.rank:self.rank + _SHRUG_VARIABLES]

    def pose(self, v: np.ndarray) -> np.ndarray:
        """The length-fixed, shifted pose of variables ``v``."""
        z = self.latent(v).astype(np.float32)
        decoded = (self.compiled.decode(z)[0] if self.compiled is not None
                   else self.models.decode(z)).astype(np.float64)
        pose = _fixed(self.offset + decoded, self.lengths)[0]
        if self.shrug:
            pose = _shrugged(pose, self._turns(v))[0]
        return _shifted(pose, v)

    def linearize(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pose of variables ``v`` and its Jacobian (B, 63, variables)."""
        z = self.latent(v).astype(np.float32)
        if self.compiled is not None:
            decoded, jac = self.compiled.decode(z, jacobian=True)
            jac = jac.astype(np.float64)
        elif self.graph is not None:
            decoded, jac = self.graph.run_all(z)[:2]
            jac = jac.astype(np.float64)
        else:  # a set exported before the Jacobian graph: a forward difference, one call
            decoded, jac = _fd_jacobian(self.models, z, self.basis)
        pose, jac = _fixed(self.offset + decoded.astype(np.float64), self.lengths, jac)
        if self.shrug:
            pose, jac = _shrugged(pose, self._turns(v), jac)
        out = np.empty((*jac.shape[:2], jac.shape[2] + 2))
        out[..., :-2] = jac
        out[..., -2:] = _SHIFT_JAC
        return _shifted(pose, v), out


def _cost(pose: np.ndarray, v: np.ndarray, v_net: np.ndarray, goal: np.ndarray,
          row_w: np.ndarray, metrics: MetricRows | None, prior: np.ndarray,
          spans: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Each pose's cost (B,) and its rigid-branch residuals (B, 6) (None without spans)."""
    diff = pose.reshape(len(pose), -1) - goal
    dv = v - v_net
    cost = np.add.reduce(diff * diff * row_w, 1) + np.add.reduce(prior * (dv * dv), 1)
    res = None
    if spans is not None:
        res = _rigid_block(pose, None, spans)[0]
        cost += np.add.reduce(res * res, 1)
    if metrics is not None:
        shown = _as_rig_shows(pose, metrics.start)
        for spec, target, weight in zip(metrics.specs, metrics.targets, metrics.weights,
                                        strict=True):
            if not weight.any():
                continue
            err = (evaluate_metric(shown, spec) - target) * METRIC_UNIT_M[spec.unit]
            cost += weight * err * err
        if metrics.balance is not None:
            off = balance(pose) - metrics.balance
            cost += metrics.balance_weights * (off * off).sum(axis=1)
    return cost, res


FD_LATENT_STEP = 1e-2  # latent units: the fallback Jacobian's forward-difference step


def _fd_jacobian(models: ModelSet, z: np.ndarray, basis: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Decoded poses and a forward-difference Jacobian (B, 63, K) along the basis rows, one
    decoder call."""
    b, latent = z.shape
    rank = len(basis)
    probes = z[:, None, :] + np.vstack([np.zeros((1, latent)), basis * FD_LATENT_STEP])[None]
    out = models.decode(probes.reshape(-1, latent).astype(np.float32)).astype(np.float64)
    out = out.reshape(b, rank + 1, _POSE_DIM)
    jac = ((out[:, 1:] - out[:, :1]) / FD_LATENT_STEP).transpose(0, 2, 1)
    return out[:, 0].reshape(b, skeleton.NUM_JOINTS, 3), jac
