"""Reading a bone's name: its prefix, side, role words and helper markers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .types import PREFIX_MAX_WORDS, PREFIX_MIN_COUNT, PREFIX_SHARE

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
