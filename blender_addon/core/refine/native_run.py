"""The refinement in the compiled kernels: one call with the compiled decoder, checked
against the numpy steps on its first run."""

from __future__ import annotations

import functools

import numpy as np

from .. import native, skeleton
from ..models import ModelSet
from .layout import _POSE_DIM
from .point import _Point
from .weights import _RIGID_PAIRS, LM_START, LM_UP, RIGID_WEIGHT, _per_pose, _prior


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
