"""Source skeleton -> the 21 canonical joints: presets, auto-detection and JSON maps.

A source skeleton is a BVH file's joints or a Blender armature's bones, given as names and
parent indices (a joint's position is its bone's head). Named presets cover the common
families by name alone, since real rigs (Rigify's DEF bones especially) are not always
parented in a strict chain. Anything else goes through a name + structure heuristic;
a JSON file can pin some joints and let the rest be detected. Toes are optional: a leg
that ends at the foot gets a synthesized toe, placed by :func:`apply_mapping`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fileio import write_json
from .skeleton import BONE_LENGTHS, JOINT_INDEX, JOINTS

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


_SUMMARY_CHAINS = (
    ("torso", ("pelvis", "spine", "chest", "neck", "head")),
    ("left arm", ("l_clavicle", "l_upperarm", "l_forearm", "l_hand")),
    ("right arm", ("r_clavicle", "r_upperarm", "r_forearm", "r_hand")),
    ("left leg", ("l_thigh", "l_shin", "l_foot", "l_toe")),
    ("right leg", ("r_thigh", "r_shin", "r_foot", "r_toe")),
)


def _sided(center: dict[str, str], left: dict[str, str], right: dict[str, str]) -> dict:
    """One preset in JOINTS order from its centre joints and the two sides' names."""
    limbs = {f"l_{k}": v for k, v in left.items()} | {f"r_{k}": v for k, v in right.items()}
    merged = center | limbs
    return {c: merged[c] for c in JOINTS if c in merged}


def _limb_names(fmt: str, roles: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    return {role: fmt.format(name) for role, name in zip(roles, names, strict=True)}


_LIMB_ORDER = ("clavicle", "upperarm", "forearm", "hand", "thigh", "shin", "foot", "toe")


def _preset(center: Sequence[str], fmt_l: str, fmt_r: str, limbs: Sequence[str]) -> dict:
    c = dict(zip(("pelvis", "spine", "chest", "neck", "head"), center, strict=True))
    return _sided(c, _limb_names(fmt_l, _LIMB_ORDER, limbs), _limb_names(fmt_r, _LIMB_ORDER, limbs))


_RIGIFY_LIMBS = ("shoulder", "upper_arm", "forearm", "hand", "thigh", "shin", "foot", "toe")
_RIGIFY_SPINE = ("spine", "spine.001", "spine.003", "spine.004", "spine.006")
# A generated Rigify rig posed through its FK controls (its DEF/ORG bones follow them by
# constraints): the torso control at the pelvis, the upper spine's FK controls, and the
# limbs' FK controls (they carry the solve; a limb left in IK gets its IK controls
# placed where they are, see blender_addon/rig_controls.py).
_RIGIFY_CONTROL_SPINE = ("torso", "spine_fk.002", "spine_fk.003", "neck", "head")
_RIGIFY_CONTROL_LIMBS = ("shoulder", "upper_arm_fk", "forearm_fk", "hand_fk", "thigh_fk",
                         "shin_fk", "foot_fk", "toe_fk")
# Control presets: a control rig's controls hang from mechanism bones by design, so the
# hierarchy check of _contradicted does not apply to them.
CONTROL_PRESETS = frozenset({"rigify_controls"})

PRESETS: dict[str, dict[str, str]] = {
    "bandai": _preset(
        ("Hips", "Spine", "Chest", "Neck", "Head"), "{}_L", "{}_R",
        ("Shoulder", "UpperArm", "LowerArm", "Hand", "UpperLeg", "LowerLeg", "Foot", "Toes"),
    ),
    "cmu": _preset(
        ("Hips", "LowerBack", "Spine1", "Neck", "Head"), "Left{}", "Right{}",
        ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase"),
    ),
    "mixamo": _preset(
        ("Hips", "Spine", "Spine2", "Neck", "Head"), "Left{}", "Right{}",
        ("Shoulder", "Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase"),
    ),
    "daz": _preset(
        ("hip", "abdomen", "chest", "neck", "head"), "l{}", "r{}",
        ("Collar", "Shldr", "ForeArm", "Hand", "Thigh", "Shin", "Foot", "Toe"),
    ),
    # OptiTrack Motive's skeleton (its NatNet and FBX names, often behind "<asset>_").
    "optitrack": _preset(
        ("Hip", "Ab", "Chest", "Neck", "Head"), "L{}", "R{}",
        ("Shoulder", "UArm", "FArm", "Hand", "Thigh", "Shin", "Foot", "Toe"),
    ),
    "rigify_controls": _preset(_RIGIFY_CONTROL_SPINE, "{}.L", "{}.R", _RIGIFY_CONTROL_LIMBS),
    "rigify": _preset(
        tuple(f"DEF-{n}" for n in _RIGIFY_SPINE), "DEF-{}.L", "DEF-{}.R", _RIGIFY_LIMBS
    ),
    "metarig": _preset(_RIGIFY_SPINE, "{}.L", "{}.R", _RIGIFY_LIMBS),
}  # fmt: skip

# --- name normalization ------------------------------------------------------------------

_RIG_PREFIX = re.compile(r"^(DEF|ORG)[-_.]", re.IGNORECASE)
_LEADING_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9]*[\s_.\-]")
# A lowercase letter glued to a capitalised name, like Second Life's ``mPelvis``.
_GLUED_LETTER = re.compile(r"^[a-z](?=[A-Z])")
_SEPARATORS = re.compile(r"[\s_.\-]+")
_TOKEN = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SIDE_WORDS = {"l": "l", "left": "l", "r": "r", "right": "r"}
# A centre marker on an unsided joint: VRoid's ``J_Bip_C_Hips``, AdvancedSkeleton's
# ``Spine1_M``; dropped like a side.
_CENTER_MARKERS = frozenset({"c", "m", "center", "centre", "mid", "middle"})
_HELPER_WORDS = frozenset(
    {"twist", "roll", "helper", "share", "mch", "ik", "fk", "pole", "target", "ctrl", "ctl"}
)
_NEUTRAL_WORDS = frozenset({"bend", "joint", "jnt", "bone"})  # lShldrBend is the upper arm

# Limb roles: synonym sets, best tier first. "shoulder" is decided by structure.
_LIMB_ROLES: dict[str, tuple[frozenset[str], ...]] = {
    "clavicle": (frozenset({"clavicle", "clav", "collar", "collarbone", "scapula"}),),
    "upperarm": (frozenset({"upperarm", "uparm", "arm", "shldr", "humerus"}),),
    "forearm": (frozenset({"forearm", "lowerarm", "loarm", "radius"}), frozenset({"elbow"})),
    "hand": (frozenset({"hand"}), frozenset({"wrist"})),
    "thigh": (frozenset({"upleg", "upperleg", "thigh", "femur"}), frozenset({"hip"})),
    "shin": (frozenset({"leg", "lowerleg", "loleg", "shin", "calf", "tibia"}),
             frozenset({"knee"})),
    "foot": (frozenset({"foot"}), frozenset({"ankle"})),
    "toe": (frozenset({"toe", "toes", "toebase", "ball"}),),
}
_SHOULDER = "shoulder"
_LIMB_WORDS = frozenset().union(*(w for tiers in _LIMB_ROLES.values() for w in tiers)) | {_SHOULDER}
_CENTER_WORDS: dict[str, frozenset[str]] = {  # for pelvis/head detection and suggestions
    "pelvis": frozenset({"hips", "hip", "pelvis"}),
    "spine": frozenset({"spine", "abdomen", "lowerback", "waist", "torso"}),
    "chest": frozenset({"chest", "upperchest", "thorax", "spine2"}),
    "neck": frozenset({"neck"}),
    "head": frozenset({"head"}),
}


_ROLE_WORDS = _LIMB_WORDS.union(*_CENTER_WORDS.values())


def _strip(name: str, prefix: str = "") -> tuple[str, int]:
    """Name without namespace, DEF-/ORG- and a common rig prefix; and its DEF/ORG rank."""
    base = name.rsplit(":", 1)[-1]
    rank = 2
    if m := _RIG_PREFIX.match(base):
        rank = 0 if m.group(1).upper() == "DEF" else 1
        base = base[m.end() :]
    if prefix and base.startswith(prefix) and len(base) > len(prefix):
        base = base[len(prefix) :]
    return base, rank


def _key(base: str) -> str:
    """Case- and separator-insensitive form of a stripped name."""
    return _SEPARATORS.sub("", base).lower()


def _common_prefix(bases: Sequence[str]) -> str:
    """The leading words most names share, like MotionBuilder's ``Character1_``, VRoid's
    ``J_Bip_``, Reallusion's ``CC_Base_`` or Second Life's glued ``m``: one word at a time,
    while one is on enough of the names."""
    prefix = ""
    for _ in range(PREFIX_MAX_WORDS):
        rest = [b[len(prefix):] for b in bases if b.startswith(prefix) and len(b) > len(prefix)]
        leads = Counter(m.group(0) for b in rest
                        if (m := _LEADING_WORD.match(b) or _GLUED_LETTER.match(b)))
        if not leads:
            break
        lead, count = leads.most_common(1)[0]
        word = lead.rstrip(" _.-").lower()
        if count < max(PREFIX_MIN_COUNT, PREFIX_SHARE * len(bases)) or word in _SIDE_WORDS \
                or word in _CENTER_MARKERS - {"m"}:
            break
        prefix += lead
    return prefix


@dataclass(frozen=True)
class _Info:
    name: str
    key: str  # whole normalized name, side included: "upperarml"
    side: str  # "l", "r" or ""
    core: str  # role words without side, number and helper words: "upperarm"
    number: str  # trailing number ("001" of upper_arm.L.001), or ""
    helper: bool  # twist/roll/IK helper: used only when nothing else fits
    rank: int  # 0 DEF-, 1 ORG-, 2 neither


def _from_marker(toks: list[str]) -> list[str]:
    """The tokens from a one-letter side or centre marker on, where only words no role
    uses come before it: a prefix most names do not share, as VRoid's ``J_Bip_L_Hand``
    beside its many ``J_Sec_`` hair bones."""
    for i, t in enumerate(toks[1:-1], start=1):
        if len(t) == 1 and (t in _SIDE_WORDS or t in _CENTER_MARKERS):
            return toks[i:] if not any(w in _ROLE_WORDS for w in toks[:i]) else toks
    return toks


def _describe(names: Sequence[str]) -> list[_Info]:
    """Split every name into side, role words and flags, then enforce mirror consistency."""
    first = [_strip(n) for n in names]
    prefix = _common_prefix([b for b, _ in first])
    raw = []
    for name in names:
        base, rank = _strip(name, prefix)
        toks = [t.lower() for t in _TOKEN.findall(base)]
        helper = any(t in _HELPER_WORDS for t in toks)
        toks = [t for t in toks if t not in _HELPER_WORDS] or toks
        toks = _from_marker(toks)
        if len(toks) > 1 and toks[0] in _CENTER_MARKERS:
            toks = toks[1:]
        if len(toks) > 1 and toks[-1] in _CENTER_MARKERS:
            toks = toks[:-1]
        number = ""
        while toks and toks[-1].isdigit():
            number = toks.pop() + number
        side, letter = "", False
        full = [t for t in toks if t in ("left", "right")]
        if full:
            side = _SIDE_WORDS[full[0]]
            toks = [t for t in toks if t != full[0]]
        elif len(toks) > 1 and toks[0] in _SIDE_WORDS:
            side, letter, toks = _SIDE_WORDS[toks[0]], True, toks[1:]
        elif len(toks) > 1 and toks[-1] in _SIDE_WORDS:
            side, letter, toks = _SIDE_WORDS[toks[-1]], True, toks[:-1]
        while toks and toks[-1].isdigit() and not number:
            number = toks.pop()
        core = "".join(t for t in toks if t not in _NEUTRAL_WORDS) or "".join(toks)
        if not side and core[:1] in ("l", "r") and core[1:] in _LIMB_WORDS:
            side, letter, core = core[0], True, core[1:]  # all-lowercase "lshldr"
        raw.append([name, _key(base), side, core, number, helper, rank, letter])
    # A bare L/R letter is a side on a limb word, or when the mirrored joint exists too.
    sided = {(r[2], r[3]) for r in raw if r[2]}
    infos = []
    for name, key, side, core, number, helper, rank, letter in raw:
        mirrored = (("r" if side == "l" else "l"), core) in sided
        if letter and not mirrored and core not in _LIMB_WORDS:
            side, core = "", side + core
        infos.append(_Info(name, key, side, core, number, helper, rank))
    return infos


# --- structure ---------------------------------------------------------------------------


class _Tree:
    """Parent links with cached ancestor lists (self first), robust to cycles."""

    def __init__(self, parents: Sequence[int], n: int | None = None) -> None:
        n = len(parents) if n is None else n
        if len(parents) != n:
            raise MappingError(f"{n} joint names but {len(parents)} parent indices")
        self.parent = [int(p) for p in parents]
        if any(not -1 <= p < n for p in self.parent):
            raise MappingError(f"parent indices must be -1 or in [0, {n}): {self.parent}")
        self.chain: list[list[int]] = []
        for i in range(n):
            path, j = [i], self.parent[i]
            while j >= 0 and len(path) <= n:
                path.append(j)
                j = self.parent[j]
            self.chain.append(path)

    def depth(self, i: int) -> int:
        return len(self.chain[i]) - 1

    def is_ancestor(self, a: int, b: int) -> bool:
        """Whether ``a`` is ``b`` or above it."""
        return a in self.chain[b]

    def lca(self, nodes: Sequence[int]) -> int | None:
        sets = [set(self.chain[i]) for i in nodes[1:]]
        return next((a for a in self.chain[nodes[0]] if all(a in s for s in sets)), None)

    def below(self, top: int, node: int) -> int | None:
        """The joint right below ``top`` on the path down to ``node`` (None if not below)."""
        path = self.chain[node]
        if top not in path or path.index(top) == 0:
            return None
        return path[path.index(top) - 1]


class _Detector:
    """The name + structure heuristic; ``fixed`` joints (a JSON override) anchor it."""

    def __init__(self, infos: list[_Info], tree: _Tree, fixed: dict[str, int]) -> None:
        self.infos, self.tree = infos, tree
        self.out = dict(fixed)
        self.used = set(fixed.values())
        plain = {(f.side, f.core) for f in infos if not f.number}
        self.dup = [bool(f.number) and (f.side, f.core) in plain for f in infos]
        self.ball_of_foot: dict[str, int] = {}  # SMPL-like: a "foot" below an "ankle"

    def order(self, i: int) -> tuple:
        """Tie-break among equally named candidates: plain over .001, DEF over ORG, shallow."""
        f = self.infos[i]
        return (self.dup[i], f.rank, self.tree.depth(i), i)

    def limb_tier(self, i: int, role: str) -> int | None:
        f = self.infos[i]
        if f.core == _SHOULDER:  # Shoulder_L over UpperArm_L is a clavicle; under lCollar, not
            is_clav = any(
                g.side == f.side and g.core in _LIMB_ROLES["upperarm"][0]
                and not self.tree.is_ancestor(j, i)
                for j, g in enumerate(self.infos)
            )  # fmt: skip
            if role == "clavicle":
                return 0 if is_clav else None
            if role == "upperarm" and not is_clav:
                under_collar = any(
                    self.infos[a].core in _LIMB_ROLES["clavicle"][0] for a in self.tree.chain[i]
                )
                return 0 if under_collar else 1
            return None
        return next((t for t, words in enumerate(_LIMB_ROLES[role]) if f.core in words), None)

    def pick(self, cands: list[tuple[int, int]], anchor: int | None) -> int | None:
        """Best (tier, index) candidate, preferring those below the chain's previous joint."""
        cands = [(t, i) for t, i in cands if i not in self.used]
        if anchor is not None:
            below = [(t, i) for t, i in cands if i != anchor and self.tree.is_ancestor(anchor, i)]
            cands = below or cands
        if not cands:
            return None
        return min(cands, key=lambda c: (self.infos[c[1]].helper, c[0], *self.order(c[1])))[1]

    def take(self, canon: str, idx: int | None) -> int | None:
        if canon in self.out:
            return self.out[canon]
        if idx is not None:
            self.out[canon] = idx
            self.used.add(idx)
        return idx

    def limb(self, side: str, roles: Sequence[str]) -> None:
        anchor = None
        for role in roles:
            canon = f"{side}_{role}"
            if canon in self.out:
                anchor = self.out[canon]
                continue
            cands = [
                (t, i) for i, f in enumerate(self.infos)
                if f.side == side and (t := self.limb_tier(i, role)) is not None
            ]  # fmt: skip
            idx = self.pick(cands, anchor)
            if role == "toe":  # a foot below an ankle is the ball (Second Life's toe: the tip)
                idx = self.ball_of_foot.get(side, idx)
            if role in ("hand", "foot") and idx is not None:
                idx = self._joint_over_end(side, role, idx, cands)
            anchor = self.take(canon, idx) if idx is not None else anchor

    def _joint_over_end(self, side: str, role: str, idx: int, cands: list[tuple[int, int]]
                        ) -> int:
        """A wrist above a ``hand`` (SMPL's, the ASF skeletons' finger base) or an ankle
        above a ``foot`` (at the ball: the toe joint) is the joint itself."""
        joints = [
            i for t, i in cands
            if t > 0 and i not in self.used and i != idx and self.tree.is_ancestor(i, idx)
            and not self.infos[i].helper
        ]  # fmt: skip
        if self.infos[idx].core in _LIMB_ROLES[role][0] and joints:
            if role == "foot":
                self.ball_of_foot[side] = idx
            return max(joints, key=self.tree.depth)
        return idx

    def center(self, role: str, near: int | None = None) -> int | None:
        """Best unsided joint named for ``role``, preferring those below ``near``."""
        cands = [
            (0, i) for i, f in enumerate(self.infos)
            if not f.side and f.core in _CENTER_WORDS[role]
        ]  # fmt: skip
        return self.pick(cands, near)

    def run(self) -> dict[str, int]:
        for side in "lr":
            self.limb(side, ("clavicle", "upperarm", "forearm", "hand"))
            self.limb(side, ("thigh", "shin", "foot", "toe"))
        out, tree = self.out, self.tree
        # chest: the joint the clavicles hang from (down past neck-named joints, Biped-like)
        clav_parents = [
            tree.parent[out[c]] for c in ("l_clavicle", "r_clavicle")
            if c in out and tree.parent[out[c]] >= 0
        ]  # fmt: skip
        chest = tree.lca(clav_parents) if clav_parents else None
        while chest is not None and self.infos[chest].core == "neck" and tree.parent[chest] >= 0:
            chest = tree.parent[chest]
        if chest is None or chest in self.used:
            chest = self.center("chest")
        chest = self.take("chest", chest)
        head = self.take("head", self.center("head", chest))
        # pelvis: the joint the thighs and the spine hang from, hips-named if one fits
        anchors = [out[c] for c in ("l_thigh", "r_thigh", "chest") if c in out]
        top = tree.lca(anchors) if anchors else None
        named = [
            i for i, f in enumerate(self.infos)
            if not f.side and f.core in _CENTER_WORDS["pelvis"] and i not in self.used
        ]  # fmt: skip
        if top is not None:
            above = [i for i in named if tree.is_ancestor(i, top)]
            pelvis = max(above, key=tree.depth) if above else top
            pelvis = None if pelvis in self.used else pelvis
        else:
            pelvis = self.center("pelvis")
        pelvis = self.take("pelvis", pelvis)
        # spine / neck: the first joint above the pelvis / chest on the way up
        if pelvis is not None and chest is not None:
            spine = tree.below(pelvis, chest)
            self.take("spine", spine if spine not in (chest, None) else None)
        if chest is not None and head is not None:
            neck = tree.below(chest, head)
            self.take("neck", neck if neck not in (head, None) else None)
        return self.out


# --- presets -----------------------------------------------------------------------------


def _match_preset(preset: dict[str, str], infos: list[_Info]) -> tuple[dict[str, int], int]:
    """Canonical -> source index for every preset name found, and how many matched exactly."""
    exact = {f.name: i for i, f in reversed(list(enumerate(infos)))}
    by_key: dict[str, list[int]] = {}
    for i, f in enumerate(infos):
        by_key.setdefault(f.key, []).append(i)
    found, n_exact = {}, 0
    for canon, src in preset.items():
        if src in exact:
            found[canon], n_exact = exact[src], n_exact + 1
        elif cands := by_key.get(_key(_strip(src)[0])):
            found[canon] = min(cands, key=lambda i: (infos[i].rank, i))
    return found, n_exact


def _contradicted(found: dict[str, int], tree: _Tree) -> bool:
    """Whether the hierarchy shows the clavicles hanging from a joint above the preset's chest.

    Presets go by names (real rigs are not always parented in a chain), but a HumanIK rig
    with Spine..Spine3 has Mixamo's names and a higher chest: leave it to the heuristic.
    """
    hang = {tree.parent[found[c]] for c in ("l_clavicle", "r_clavicle")}
    if len(hang) != 1 or (top := hang.pop()) < 0 or top == found["chest"]:
        return False
    return tree.is_ancestor(found["chest"], top)


def _best_preset(infos: list[_Info], tree: _Tree) -> tuple[str, dict[str, int]] | None:
    """The preset that finds every non-toe joint and the most joints, exact names first."""
    best, best_score = None, None
    for order, (name, preset) in enumerate(PRESETS.items()):
        found, n_exact = _match_preset(preset, infos)
        if any(c not in found for c in preset if c not in TOES) or (
                name not in CONTROL_PRESETS and _contradicted(found, tree)):
            continue
        score = (len(found), n_exact, -order)
        if best_score is None or score > best_score:
            best, best_score = (name, found), score
    return best


# --- errors ------------------------------------------------------------------------------


def _queries(canon: str) -> list[str]:
    """Normalized names a source joint for ``canon`` might have, for suggestions."""
    if canon[:2] not in ("l_", "r_"):
        return sorted(_CENTER_WORDS[canon])
    role, sides = canon[2:], (("l", "left") if canon[0] == "l" else ("r", "right"))
    words = set().union(*_LIMB_ROLES[role])
    if role in ("clavicle", "upperarm"):
        words.add(_SHOULDER)
    return [q for w in sorted(words) for s in sides for q in (s + w, w + s)]


def _closest(queries: Sequence[str], infos: list[_Info], exclude: set[int]) -> list[str]:
    """Source names closest to any query (difflib on normalized names), best first."""
    by_key: dict[str, list[str]] = {}
    for i, f in enumerate(infos):
        if i not in exclude:
            by_key.setdefault(f.key, []).append(f.name)
    score: dict[str, float] = {}
    for q in queries:
        for k in difflib.get_close_matches(q, list(by_key), CLOSE_MATCHES, CLOSE_CUTOFF):
            score[k] = max(score.get(k, 0.0), difflib.SequenceMatcher(None, q, k).ratio())
    keys = sorted(score, key=lambda k: -score[k])
    return [n for k in keys for n in by_key[k]][:CLOSE_MATCHES]


def _missing_error(missing: Sequence[str], infos: list[_Info], used: set[int], what: str) -> str:
    parts = []
    for canon in missing:
        close = _closest(_queries(canon), infos, used)
        parts.append(f"{canon} (closest source joints: {', '.join(close) or 'none'})")
    return (
        f"{what}: cannot map {len(missing)} canonical joint(s) onto this skeleton of "
        f"{len(infos)} joints: {'; '.join(parts)}. Pick a preset ({', '.join(PRESETS)}) or "
        'a JSON file {"joints": {"<canonical>": "<source joint>"}}.'
    )


# --- public API ----------------------------------------------------------------------------


def _finish(
    found: dict[str, int], infos: list[_Info], source: str,
    has_end_site: Callable[[str], bool] | None,
) -> JointMap:  # fmt: skip
    """Check completeness and uniqueness, then name the source joints and synthesized toes."""
    missing = [c for c in JOINTS if c not in found and c not in TOES]
    if missing:
        raise MappingError(_missing_error(missing, infos, set(found.values()), source))
    twice = Counter(found.values())
    clashes = [f"{infos[i].name} ({', '.join(c for c in JOINTS if found.get(c) == i)})"
               for i, n in twice.items() if n > 1]  # fmt: skip
    if clashes:
        raise MappingError(f"{source}: source joint(s) mapped twice: {'; '.join(clashes)}")
    joints = {c: infos[found[c]].name for c in JOINTS if c in found}
    synthesized = {}
    for toe in TOES:
        if toe not in found:
            foot = joints[toe[:2] + "foot"]
            end = None if has_end_site is None else has_end_site(foot)
            synthesized[toe] = (
                f"from {foot}'s End Site, else a canonical offset" if end is None
                else f"from {foot}'s End Site" if end
                else f"canonical offset from {foot}"
            )  # fmt: skip
    return JointMap(joints, synthesized, source)


def _with_toes(found: dict[str, int], infos: list[_Info], tree: _Tree) -> dict[str, int]:
    """A preset's joints with the toes it did not name found by the heuristic below their
    feet (LaFAN1 and Truebones have Mixamo's names but ``LeftToe``, not ``LeftToeBase``):
    a real toe joint beats a synthesized one."""
    if all(t in found for t in TOES):
        return found
    try:
        more = _Detector(infos, tree, found).run()
    except MappingError:
        return found
    toes = {t: more[t] for t in TOES if t not in found and t in more
            and tree.is_ancestor(found[t[:2] + "foot"], more[t])}
    return found | toes


def _auto(names: Sequence[str], parents: Sequence[int], fixed: dict[str, int]) -> dict:
    """Preset or heuristic result: {"found": canonical -> index, "source", "infos"}."""
    infos = _describe(names)
    tree = _Tree(parents, len(names))
    best = _best_preset(infos, tree)
    if best is not None:
        name, found = best
        return {"found": _with_toes(found, infos, tree) | fixed, "source": name,
                "infos": infos}
    return {"found": _Detector(infos, tree, fixed).run(), "source": "auto", "infos": infos}


def detect_mapping(names: Sequence[str], parents: Sequence[int]) -> JointMap:
    """Auto-detect: the best-fitting preset, else the name + structure heuristic."""
    r = _auto(names, parents, {})
    return _finish(r["found"], r["infos"], r["source"], None)


def resolve_mapping(
    names: Sequence[str],
    parents: Sequence[int],
    spec: str | os.PathLike[str] = "auto",
    has_end_site: Callable[[str], bool] | None = None,
) -> JointMap:
    """Map by ``spec``: "auto", a preset name, or a JSON file overriding some joints.

    ``has_end_site(foot_name)`` only words the synthesized toes' descriptions: where a
    toe lands is decided by :func:`apply_mapping` from the End Site positions it gets.
    """
    spec_str = os.fspath(spec)
    if spec_str.lower() == "auto":
        r = _auto(names, parents, {})
        return _finish(r["found"], r["infos"], r["source"], has_end_site)
    if spec_str.lower() in PRESETS:
        preset = spec_str.lower()
        infos = _describe(names)
        _Tree(parents, len(names))  # validates them, like the other specs
        found, _ = _match_preset(PRESETS[preset], infos)
        lost = [c for c in JOINTS if c not in found and c not in TOES]
        if lost:
            wanted = ", ".join(f"{PRESETS[preset][c]} ({c})" for c in lost)
            raise MappingError(
                f"preset {preset!r} does not fit this skeleton of {len(names)} joints: "
                f"no source joint {wanted}. Try 'auto', another preset "
                f"({', '.join(PRESETS)}) or a JSON file."
            )
        return _finish(found, infos, preset, has_end_site)
    path = Path(spec_str)
    if not path.is_file():
        raise MappingError(
            f"mapping {spec_str!r} is neither 'auto', a preset ({', '.join(PRESETS)}) "
            "nor an existing JSON file"
        )
    override = load_mapping_json(path)
    infos = _describe(names)
    exact = {n: i for i, n in reversed(list(enumerate(names)))}
    fixed = {}
    for canon, src in override.items():
        if src not in exact:
            close = _closest([_key(_strip(src)[0])], infos, set())
            raise MappingError(
                f"{path}: {canon} -> {src!r}: no source joint of that name "
                f"(closest: {', '.join(close) or 'none'})"
            )
        fixed[canon] = exact[src]
    r = _auto(names, parents, fixed)
    return _finish(r["found"], infos, str(path), has_end_site)


_SAVED_EXTRAS = ("source", "synthesized")  # informative keys save_mapping_json adds


def load_mapping_json(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read ``{"joints": {canonical: source}}`` (a bare mapping is accepted too); may be partial."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MappingError(f"{path}: cannot read mapping JSON: {exc}") from exc
    if isinstance(data, dict) and "joints" not in data:  # bare {canonical: source}
        data = {"joints": {k: v for k, v in data.items() if k not in _SAVED_EXTRAS}}
    joints = data.get("joints") if isinstance(data, dict) else None
    if not isinstance(joints, dict):
        raise MappingError(f'{path}: expected an object {{"joints": {{canonical: source}}}}')
    unknown = [k for k in joints if k not in JOINT_INDEX]
    if unknown:
        raise MappingError(
            f"{path}: unknown canonical joint(s) {unknown}; canonical joints are: "
            f"{', '.join(JOINTS)}"
        )
    bad = [k for k, v in joints.items() if not isinstance(v, str) or not v]
    if bad:
        raise MappingError(f"{path}: source joint names must be non-empty strings: {bad}")
    return dict(joints)


def save_mapping_json(path: str | os.PathLike[str], joint_map: JointMap) -> None:
    """Write the mapping (loadable as an override) atomically: temp file, then os.replace."""
    write_json(path, {
        "source": joint_map.source, "joints": joint_map.joints,
        "synthesized": joint_map.synthesized,
    })  # fmt: skip


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
