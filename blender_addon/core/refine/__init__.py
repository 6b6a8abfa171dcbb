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

One idea per module: :mod:`.weights` (the weights and shares), :mod:`.shrug` (the
clavicles' turns), :mod:`.lengths` (the rig's lengths and their Jacobian),
:mod:`.metric_rows`, :mod:`.rigid` (the rigid branches' rows), :mod:`.point` (variables ->
poses, the cost), :mod:`.native_run` (the kernels' run) and :mod:`.steps` (the backend
chosen in one place, the numpy steps).

(Names imported ``as`` themselves are internals the tests read.)
"""

from __future__ import annotations

from .lengths import _EYE_POSE as _EYE_POSE
from .lengths import _fixed as _fixed
from .metric_rows import MetricRows, balance
from .metric_rows import _as_rig_shows as _as_rig_shows
from .metric_rows import _metric_block as _metric_block
from .metric_rows import _probes as _probes
from .native_run import NATIVE_AGREES_M
from .point import FD_LATENT_STEP
from .rigid import _rigid_block as _rigid_block
from .rigid import rigid_spans
from .shrug import _SHRUG_BELOW as _SHRUG_BELOW
from .shrug import _SHRUG_NEXT as _SHRUG_NEXT
from .shrug import PROTRACTION_PRIOR, SHRUG_PRIOR, moves_shoulders
from .shrug import _shrugged as _shrugged
from .steps import refine
from .weights import _RIGID_PAIRS as _RIGID_PAIRS
from .weights import (
    BALANCE_WEIGHT,
    DAMPING,
    EFFECTOR_WEIGHT,
    FD_STEP,
    FULL_BODY_EFFECTOR_WEIGHT,
    FULL_BODY_LEAST_CHANGE,
    FULL_BODY_MIN_ENDS,
    FULL_BODY_MOVE,
    HOLD_WEIGHT,
    KINK_DEG,
    LEARNED_PRIOR,
    LEAST_CHANGE,
    LEAST_CHANGE_METRIC_EDIT,
    LM_DOWN,
    LM_START,
    LM_UP,
    METRIC_UNIT_M,
    METRIC_WEIGHT,
    RIGID_WEIGHT,
    SHIFT_PRIOR,
    effector_weights,
    full_body_share,
    least_change_weights,
)

__all__ = [
    "BALANCE_WEIGHT",
    "DAMPING",
    "EFFECTOR_WEIGHT",
    "FD_LATENT_STEP",
    "FD_STEP",
    "FULL_BODY_EFFECTOR_WEIGHT",
    "FULL_BODY_LEAST_CHANGE",
    "FULL_BODY_MIN_ENDS",
    "FULL_BODY_MOVE",
    "HOLD_WEIGHT",
    "KINK_DEG",
    "LEARNED_PRIOR",
    "LEAST_CHANGE",
    "LEAST_CHANGE_METRIC_EDIT",
    "LM_DOWN",
    "LM_START",
    "LM_UP",
    "METRIC_UNIT_M",
    "METRIC_WEIGHT",
    "NATIVE_AGREES_M",
    "PROTRACTION_PRIOR",
    "RIGID_WEIGHT",
    "SHIFT_PRIOR",
    "SHRUG_PRIOR",
    "MetricRows",
    "balance",
    "effector_weights",
    "full_body_share",
    "least_change_weights",
    "moves_shoulders",
    "refine",
    "rigid_spans",
]
