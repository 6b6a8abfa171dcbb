"""A mapping's types and limits: the joint map, its error, the toe and prefix constants."""

from __future__ import annotations

from dataclasses import dataclass, field

TOES = ("l_toe", "r_toe")


# Median foot pitch of the Bandai actor (ankle -> ball of the foot, dataset 1): a
# synthesized toe points this far below the body's horizontal forward direction.
TOE_PITCH_DEG = 40.0


MIN_END_SITE_LENGTH = 1e-3  # metres: shorter End Sites are placeholders, not toes


CLOSE_MATCHES = 3  # source names suggested per unmapped joint


CLOSE_CUTOFF = 0.6  # difflib similarity below which a source name is not suggested


PREFIX_SHARE = 0.6  # a leading word on this share of the names is a rig prefix ...


PREFIX_MIN_COUNT = 3  # ... when it is on at least this many names


PREFIX_MAX_WORDS = 3  # leading words a rig prefix has at most ("J_Bip_", "CC_Base_")


_EPS = 1e-9


class MappingError(ValueError):
    """A source skeleton cannot be mapped; the message says which joints and why."""


_SUMMARY_CHAINS = (
    ("torso", ("pelvis", "spine", "chest", "neck", "head")),
    ("left arm", ("l_clavicle", "l_upperarm", "l_forearm", "l_hand")),
    ("right arm", ("r_clavicle", "r_upperarm", "r_forearm", "r_hand")),
    ("left leg", ("l_thigh", "l_shin", "l_foot", "l_toe")),
    ("right leg", ("r_thigh", "r_shin", "r_foot", "r_toe")),
)


@dataclass
class JointMap:
    """Which source joint gives each canonical joint, and which toes are synthesized."""

    joints: dict[str, str]  # canonical name -> source joint name
    synthesized: dict[str, str] = field(default_factory=dict)  # canonical -> how
    source: str = "auto"  # preset name, "auto", or a JSON file path

    def summary(self) -> str:
        """A few lines for CLI and operator reports: source, then one line per chain."""
        lines = [
            f"joint mapping ({self.source}): {len(self.joints)} mapped, "
            f"{len(self.synthesized)} synthesized"
        ]
        for label, chain in _SUMMARY_CHAINS:
            parts = [
                self.joints.get(c) or (f"<{c} {self.synthesized[c]}>" if c in self.synthesized
                                       else f"<{c} missing>")
                for c in chain
            ]  # fmt: skip
            lines.append(f"  {label}: {', '.join(parts)}")
        return "\n".join(lines)
