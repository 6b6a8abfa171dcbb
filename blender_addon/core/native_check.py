"""The compiled kernels' one self-check, run once per session when :func:`.native.kernels`
first loads the library: each kernel that runs on every solve's own arrays, through its
public function, against its numpy code on fixed cases. A library built wrong for this
machine (a calling convention, a compiler's bug) is caught here, once.

The kernels that run a model set's networks (``npe_decode``, ``npe_universal``,
``npe_refine_run`` and the refinement's steps) are checked by their owners on each set's
first use, against onnxruntime and the numpy refinement (:mod:`.compiled_networks`,
:func:`.refine.refine`): they need the set's weights.

Imported by :func:`.native.kernels` when it loads the library (this module imports the
kernels' owners, which import :mod:`.native`: no import circle at module level).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import exact_reach, native, reach_bounds, rig_ik, rigid_branches
from .quaternions import EPS, quat_to_matrix
from .rig import Rig, forward_kinematics
from .skeleton import JOINT_INDEX, NUM_JOINTS, PARENTS, bone_lengths
from .solver import RotationSolver

SEED = 0
TOLERANCE = 1e-9  # the tests hold the kernels to the numpy code at this
# Rig IK's steps are accepted or not by comparing sums, which rounding may tip where both
# sides are all but equal: a few steps of a well-posed pull, held more loosely.
IK_STEPS, IK_TOLERANCE = 5, 1e-6


def cases() -> dict[str, tuple[Callable[[], object], float]]:
    """Each kernel's case: a call of its public function and the tolerance it is held to.
    A rig of the canonical skeleton with random rest frames, three random poses and
    targets, every kind of bone (a placed pelvis, swings, fits, an oriented hand); its
    first pose as a body for rig IK, exact reach, the rigid branches and the reach bound."""
    rng = np.random.default_rng(SEED)

    def unit_quats(*shape: int) -> np.ndarray:
        q = rng.normal(size=(*shape, 4))
        return q / np.linalg.norm(q, axis=-1, keepdims=True)

    rig = Rig([f"j{j}" for j in range(NUM_JOINTS)], PARENTS,
              rng.normal(scale=0.2, size=(NUM_JOINTS, 3)), quat_to_matrix(unit_quats(NUM_JOINTS)))
    q, loc = unit_quats(3, NUM_JOINTS), rng.normal(scale=0.1, size=(3, NUM_JOINTS, 3))
    targets = rng.normal(scale=0.5, size=(3, NUM_JOINTS, 3))
    hand = {NUM_JOINTS - 1: quat_to_matrix(unit_quats(3))}
    solver = RotationSolver(rig, range(NUM_JOINTS))
    with native.switched_off():
        body = forward_kinematics(rig, q[:1], loc[:1])[1]
    goals = np.zeros((1, NUM_JOINTS), dtype=bool)
    goals[0, [JOINT_INDEX[j] for j in ("l_hand", "l_foot", "r_foot", "head")]] = True
    pulled = body.copy()
    pulled[0, JOINT_INDEX["l_hand"]] += [0.2, 0.0, 0.0]
    far = body + rng.normal(scale=0.3, size=body.shape)
    return {
        "positions -> rotations": (lambda: solver.solve(q, loc, targets, hand), TOLERANCE),
        "forward kinematics": (lambda: forward_kinematics(rig, q, loc), TOLERANCE),
        "rig IK": (lambda: rig_ik.solve(body, goals, pulled, 1e-4, IK_STEPS), IK_TOLERANCE),
        "exact reach": (lambda: exact_reach.solve(body, goals, far, bone_lengths(body), 1e-4),
                        TOLERANCE),
        "rigid branches": (lambda: rigid_branches.keep_rigid(far, body), TOLERANCE),
        "reach bounds": (lambda: reach_bounds.beyond_reach(body, goals, far), TOLERANCE),
    }


def self_check(loaded: native.Kernels) -> str | None:
    """What the kernels ``loaded`` get wrong against the numpy code, or None: each case
    once with them and once with numpy."""
    if loaded.eps != EPS:
        return f"built with eps {loaded.eps:g}, the engine's is {EPS:g}: rebuild it"
    with native.checking(loaded):
        for name, (run, tolerance) in cases().items():
            try:
                got = run()
            except (RuntimeError, ValueError, OSError) as exc:  # a kernel that refused
                return f"{name}: {exc}"
            with native.switched_off():
                want = run()
            worst = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
                *(x if isinstance(x, tuple) else (x,) for x in (got, want)), strict=True))
            if not worst <= tolerance:
                return f"{name}: {worst:.1e} off numpy's answers"
    return None
