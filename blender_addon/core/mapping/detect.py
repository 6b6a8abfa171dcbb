"""Detecting a mapping: a preset that fits, or each joint found by name and place in the tree."""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from ..skeleton import JOINTS
from .files import load_mapping_json
from .names import _CENTER_WORDS, _LIMB_ROLES, _SHOULDER, _describe, _Info, _key, _strip
from .presets import CONTROL_PRESETS, PRESETS
from .types import CLOSE_CUTOFF, CLOSE_MATCHES, TOES, JointMap, MappingError

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
