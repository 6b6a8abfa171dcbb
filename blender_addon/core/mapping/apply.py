"""A mapping applied: the source's frames as the 21 canonical joints (toes made where missing)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..skeleton import BONE_LENGTHS, JOINT_INDEX, JOINTS
from .types import _EPS, MIN_END_SITE_LENGTH, TOE_PITCH_DEG, TOES, JointMap, MappingError

# Bones the engine bends a limb or holds the body by: an elbow or a knee on its shoulder,
# hip, wrist or ankle leaves a two-bone limb nothing to bend, and a head on the pelvis no
# trunk. Zero-length bones elsewhere are fine (CMU's ASF-converted BVH puts the lower back,
# the neck and the clavicles on their parents; the engine keeps them at zero length).
_NEEDS_LENGTH: tuple[tuple[str, str, str], ...] = (
    *((f"{side}_{a}", f"{side}_{b}", what)
      for side in "lr"
      for a, b, what in (("upperarm", "forearm", "upper arm"), ("forearm", "hand", "forearm"),
                         ("thigh", "shin", "thigh"), ("shin", "foot", "shin"))),
    ("pelvis", "head", "trunk"),
)


# Shorter than this share of the body's size (the mapped joints' extent) is no bone: a
# twist or helper joint mapped in the joint's place (real limbs' bones are 10-25 %).
MIN_BONE_SHARE = 0.02


def check_lengths(joint_map: JointMap, canonical: np.ndarray) -> None:
    """Refuse a mapping whose limbs or trunk have no length (see :data:`_NEEDS_LENGTH`),
    naming the joints, their source joints and what to map instead. ``canonical``: mapped
    positions (..., 21, 3), a rest pose or a clip's frames (the longest distance counts)."""
    pos = np.asarray(canonical, dtype=np.float64).reshape(-1, len(JOINTS), 3)
    if not len(pos):
        return
    mapped = [JOINT_INDEX[c] for c in JOINTS if c in joint_map.joints]
    extent = np.linalg.norm(pos[:, mapped].max(axis=1) - pos[:, mapped].min(axis=1),
                            axis=-1).max()
    problems = []
    for a, b, what in _NEEDS_LENGTH:
        length = np.linalg.norm(pos[:, JOINT_INDEX[b]] - pos[:, JOINT_INDEX[a]], axis=-1).max()
        if not length > MIN_BONE_SHARE * extent:
            problems.append(
                f"{b} ({joint_map.joints.get(b, b)}) is {length / max(extent, _EPS):.1%} of "
                f"the body's size from {a} ({joint_map.joints.get(a, a)}): the {what} has no "
                "length")
    if problems:
        raise MappingError(
            f"mapping ({joint_map.source}) does not fit this skeleton: {'; '.join(problems)} "
            f"(a bone under {MIN_BONE_SHARE:.0%} of it is a helper joint mapped in a joint's "
            "place): map the joints at the elbows, wrists, knees and ankles")


def _toe_offset(out: np.ndarray, side: str, up_axis: int) -> tuple[np.ndarray, float]:
    """Canonical foot -> toe vector: horizontal forward tilted down, scaled by the shin."""
    up = np.zeros(3)
    up[up_axis] = 1.0
    across = out[..., JOINT_INDEX["l_thigh"], :] - out[..., JOINT_INDEX["r_thigh"], :]
    across = across - (across @ up)[..., None] * up
    norm = np.linalg.norm(across, axis=-1, keepdims=True)
    default = np.eye(3)[1 if up_axis == 0 else 0]  # the body's left when the hips are degenerate
    across = np.where(norm > _EPS, across / np.maximum(norm, _EPS), default)
    forward = np.cross(across, up)
    pitch = np.radians(TOE_PITCH_DEG)
    direction = np.cos(pitch) * forward - np.sin(pitch) * up
    foot, shin = JOINT_INDEX[f"{side}_foot"], JOINT_INDEX[f"{side}_shin"]
    shin_len = float(np.mean(np.linalg.norm(out[..., foot, :] - out[..., shin, :], axis=-1)))
    scale = shin_len / BONE_LENGTHS[foot] if shin_len > _EPS else 1.0
    return direction * BONE_LENGTHS[JOINT_INDEX[f"{side}_toe"]] * scale, scale


def apply_mapping(
    joint_map: JointMap,
    names: Sequence[str],
    positions: np.ndarray,
    end_positions: dict[int, np.ndarray] | None = None,
    up_axis: int = 1,
) -> tuple[np.ndarray, list[str]]:
    """Pick the canonical joints out of ``(T, J, 3)`` source positions -> ``(T, 21, 3)``.

    ``end_positions`` maps a source joint index to its End Site's positions ``(T, 3)``;
    a synthesized toe sits there when it is longer than 1 mm, else at a canonical offset.
    Returns the positions and notes saying how each synthesized toe was placed.
    """
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim < 2 or pos.shape[-2:] != (len(names), 3):
        raise ValueError(f"positions must be (..., {len(names)}, 3), got {pos.shape}")
    if up_axis not in (0, 1, 2):
        raise ValueError(f"up_axis must be 0, 1 or 2, got {up_axis}")
    index = {n: i for i, n in reversed(list(enumerate(names)))}
    absent = sorted({s for s in joint_map.joints.values() if s not in index})
    if absent:
        raise MappingError(f"mapping ({joint_map.source}) names unknown source joints {absent}")
    unplaced = [c for c in JOINTS if c not in joint_map.joints and c not in joint_map.synthesized]
    odd = [c for c in joint_map.synthesized if c not in TOES or c in joint_map.joints]
    if unplaced or odd:
        raise MappingError(
            f"mapping ({joint_map.source}): joints not mapped {unplaced}, "
            f"only unmapped toes can be synthesized {odd}"
        )
    out = np.empty((*pos.shape[:-2], len(JOINTS), 3))
    for canon, src in joint_map.joints.items():
        out[..., JOINT_INDEX[canon], :] = pos[..., index[src], :]
    notes = []
    for toe in (t for t in TOES if t in joint_map.synthesized):
        side, ti = toe[0], JOINT_INDEX[toe]
        foot_name = joint_map.joints[f"{side}_foot"]
        foot = out[..., JOINT_INDEX[f"{side}_foot"], :]
        end = None if end_positions is None else end_positions.get(index[foot_name])
        reason = "no End Site"
        if end is not None and foot.size:
            end = np.broadcast_to(np.asarray(end, dtype=np.float64), foot.shape)
            length = float(np.mean(np.linalg.norm(end - foot, axis=-1)))
            if length > MIN_END_SITE_LENGTH:
                out[..., ti, :] = end
                notes.append(f"{toe}: at {foot_name}'s End Site ({length:.3f} m from the ankle)")
                continue
            reason = f"End Site shorter than {MIN_END_SITE_LENGTH * 1000:g} mm"
        if not foot.size:
            continue
        offset, scale = _toe_offset(out, side, up_axis)
        out[..., ti, :] = foot + offset
        notes.append(
            f"{toe}: synthesized from {foot_name} ({reason}): "
            f"{BONE_LENGTHS[ti] * scale:.3f} m forward, {TOE_PITCH_DEG:g} deg down "
            f"(canonical toe scaled by the rig's shin, x{scale:.2f})"
        )
    check_lengths(joint_map, out)
    return out, notes
