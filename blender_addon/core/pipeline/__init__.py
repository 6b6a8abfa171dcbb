"""The edit: rig positions -> model space -> latent -> modules -> decode -> rig positions.

One engine API serves the add-on, the benchmarks and clip propagation: :class:`PoseEditor`
with :meth:`PoseEditor.solve_arrays` (batched arrays) and :meth:`PoseEditor.solve`
(effector objects for one pose). Everything is batched over poses.

Modules (seed papers): the universal IK solver (any effector subset, pins as effectors
that hold their joint), the 2021 paper's chained specialized solvers, metric networks;
several combine by averaging their latents (2023 paper, default) or in sequence (2021).
The modules run twice in one batch, on the requests and on the same requests unmoved
(effectors at their joints, metrics at their values), and the edit is the input pose plus
the decoded *difference*: a null edit changes nothing. Feet on the floor that carry no
effector are pinned (``keep_planted_feet``). Then latent refinement (:mod:`.refine`:
Levenberg-Marquardt on effector and metric errors, with a least-change term towards a blend
of the input and the networks' answer set by ``body_follow``), the rig's bone lengths, and
the exact-reach pass (:mod:`.exact_reach`) that puts full-weight effectors on their targets.
``solver="classic"`` runs plain full-body FABRIK instead (:mod:`.fabrik`). Metric requests
and measurements are in the rig's units (:meth:`PoseEditor.metric_values`).

A solve reads as named stages, one module each: :mod:`.start` (the start pose's
preparation) -> :mod:`.request` (planted feet held, targets in model space) ->
:mod:`.networks` -> :func:`.refine.refine` -> :mod:`.finish` (the rig's lengths, rigid
branches, exact reach, the least change, FABRIK) -> :mod:`.notes`, driven by
:meth:`.editor.PoseEditor._solve_once`; :mod:`.sliders` holds the metric requests,
:mod:`.contacts` the contacts and unusual poses, :mod:`.constants` the constants.

The add-on's call, :meth:`PoseEditor.solve` with effectors only, is latency-bound: inputs
are checked once, the rest runs on checked arrays (``*_unchecked`` normalization), and a set
with the optional fused module (encoder, universal solver and decoder in one graph) runs
the networks in one session call; anything else takes the separate modules.
"""

from __future__ import annotations

from .constants import (
    CHAIN_ORDER,
    CLASSIC_TOLERANCE,
    COMBINE_MODES,
    CONTACT_HEIGHT,
    DEFAULT_BODY_FOLLOW,
    DEFAULT_REFINE_STEPS,
    DRAG_REFINE_STEPS,
    ELBOW_MIN_BEND_DEG,
    FAMILIAR_TILT_DEG,
    FOOT_JOINTS,
    FULL_REACH_BEND_DEG,
    LEAST_BEND_DRAG_M,
    LEAST_CHANGE_STAY_DECAY,
    LEAST_CHANGE_STEPS,
    LEAST_CHANGE_TILT_DEG,
    LOW_PELVIS_HEIGHT,
    MAX_REFINE_STEPS,
    METRIC_STEPS,
    MISS_NOTE_M,
    MOVED_M,
    NETWORK_LEAST_BEND_DEG,
    NETWORK_STRAIGHTEST,
    PLANTED_ANKLE_HEIGHT,
    PLANTED_TOE_HEIGHT,
    REACH_TOLERANCE,
    ROOT,
    SHORT_MARK,
    SOLVERS,
    STANCE_HOLD,
    START_CACHE_SIZE,
    UNFAMILIAR_TILT_DEG,
)
from .editor import PoseEditor
from .request import effector_errors
from .sliders import facing_pose
from .start import familiarity, planted_feet
from .types import EditResult, Effector, SolveOptions

__all__ = [
    "CHAIN_ORDER",
    "CLASSIC_TOLERANCE",
    "COMBINE_MODES",
    "CONTACT_HEIGHT",
    "DEFAULT_BODY_FOLLOW",
    "DEFAULT_REFINE_STEPS",
    "DRAG_REFINE_STEPS",
    "ELBOW_MIN_BEND_DEG",
    "FAMILIAR_TILT_DEG",
    "FOOT_JOINTS",
    "FULL_REACH_BEND_DEG",
    "LEAST_BEND_DRAG_M",
    "LEAST_CHANGE_STAY_DECAY",
    "LEAST_CHANGE_STEPS",
    "LEAST_CHANGE_TILT_DEG",
    "LOW_PELVIS_HEIGHT",
    "MAX_REFINE_STEPS",
    "METRIC_STEPS",
    "MISS_NOTE_M",
    "MOVED_M",
    "NETWORK_LEAST_BEND_DEG",
    "NETWORK_STRAIGHTEST",
    "PLANTED_ANKLE_HEIGHT",
    "PLANTED_TOE_HEIGHT",
    "REACH_TOLERANCE",
    "ROOT",
    "SHORT_MARK",
    "SOLVERS",
    "STANCE_HOLD",
    "START_CACHE_SIZE",
    "UNFAMILIAR_TILT_DEG",
    "EditResult",
    "Effector",
    "PoseEditor",
    "SolveOptions",
    "effector_errors",
    "facing_pose",
    "familiarity",
    "planted_feet",
]
