"""The decoded pose given the rig's bone lengths, and its Jacobian."""

from __future__ import annotations

import numpy as np

from .. import skeleton
from ..normalize import set_bone_lengths_unchecked
from ..quaternions import norm
from .layout import _BONE_SUMS, _PARENTS, _POSE_DIM
from .weights import FD_STEP


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
