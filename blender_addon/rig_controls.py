"""Control rigs: mapped bones that Blender overrides, and Rigify's IK/FK limbs.

A bone whose pose comes from constraints or drivers does not move when the add-on writes
its rotation: :func:`driven_bones` finds such mapped bones so Map Rig can say so. A
generated Rigify rig is posed through its FK controls (the ``rigify_controls`` preset):
they carry the solve. Its limbs show their FK controls only with their ``IK_FK`` switch at
1; the switch is the animator's and is never changed. A limb in IK (``IK_FK`` < 1) is
handled as Rigify's own snap buttons would: before a solve its FK controls are put where
the limb is shown (:func:`match_fk_to_shown`, Rigify's FK→IK snap), and after a write of
the FK controls its IK control, pole and toe are put where the FK controls are
(:func:`follow_fk`, Rigify's IK→FK snap, :mod:`.ik_snap`; once a write's correction from
the evaluated rig is done, :func:`deferred`; a drag's update takes one step without
evaluating, :func:`dragging`), so Blender's IK shows the solved pose. Keys go on the
controls each limb uses (:func:`keyed_bones`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import bpy
import numpy as np
from mathutils import Matrix

from . import app_hooks, fk_match, ik_snap
from .ik_snap import IK_FK, POLE_SWITCH, Limb  # noqa: F401 - IK_FK is the switch's name here too

IK_SUFFIX = "_ik"  # Rigify's IK control of a limb's end: ORG-hand.L -> hand_ik.L
MECHANISM_PREFIXES = ("ORG-", "MCH-", "DEF-", "VIS_")  # Rigify's bones that are no controls
FK_SUFFIX = re.compile(r"^(?P<base>.+)_fk(?P<side>\.[LR](?:\.\d+)?)?$")
PARENT_SUFFIX = "_parent"
ORG_PREFIX = "ORG-"
# Constraint types that only limit or scale a bone: they leave the add-on's pose in charge.
HARMLESS = frozenset({"LIMIT_ROTATION", "LIMIT_LOCATION", "LIMIT_SCALE", "LIMIT_DISTANCE",
                      "MAINTAIN_VOLUME", "COPY_SCALE"})
POSE_CHANNELS = ("location", "rotation_quaternion", "rotation_euler", "rotation_axis_angle")
# A bone channel's data path (``pose.bones["name"].prop``, the name escaped).
BONE_PATH = re.compile(r'^pose\.bones\["(?P<bone>(?:[^"\\]|\\.)*)"\]\.(?P<prop>\w+)$')


def parse_bone_path(path: str) -> tuple[str, str] | None:
    """(bone, property) of a bone channel's data path (drivers, F-curves, keying sets),
    or None."""
    m = BONE_PATH.match(path or "")
    if m is None:
        return None
    return m["bone"].replace('\\"', '"').replace("\\\\", "\\"), m["prop"]


def _active(constraint: bpy.types.Constraint) -> bool:
    return not constraint.mute and constraint.influence > 0.0 \
        and getattr(constraint, "enabled", True)


def driven_bones(obj: bpy.types.Object, names: Iterable[str]) -> dict[str, str]:
    """Of the bones ``names``, those Blender poses by itself: bone -> why ("follows
    constraints (Copy Transforms)", "is in the IK chain of X", "has drivers")."""
    wanted = set(names)
    out: dict[str, str] = {}
    pbones = obj.pose.bones
    for name in wanted:
        pb = pbones.get(name)
        if pb is None:
            continue
        kinds = [c.type for c in pb.constraints if _active(c) and c.type not in HARMLESS]
        if kinds:
            labels = ", ".join(dict.fromkeys(k.replace("_", " ").title().replace("Ik", "IK")
                                             for k in kinds))
            out[name] = f"follows constraints ({labels})"
    for pb in pbones:  # IK chains reach up from their owner
        for c in pb.constraints:
            if c.type not in ("IK", "SPLINE_IK") or not _active(c):
                continue
            bone, depth = pb.bone, 0
            limit = getattr(c, "chain_count", 0) or 1 << 30
            if c.type == "IK" and not getattr(c, "use_tail", True):
                bone = bone.parent
            while bone is not None and depth < limit:
                if bone.name in wanted and bone.name not in out:
                    out[bone.name] = f"is in the IK chain of {pb.name}"
                bone, depth = bone.parent, depth + 1
    anim = obj.animation_data
    for fc in anim.drivers if anim is not None else ():
        channel = parse_bone_path(fc.data_path)
        if channel and channel[1] in POSE_CHANNELS and not fc.mute:
            bone = channel[0]
            if bone in wanted and bone not in out:
                out[bone] = "has drivers on its pose"
    return out


FOLLOW_REST_ATOL = 1e-4  # armature units: a copying bone this near its source at rest follows it


def followed_parents(obj: bpy.types.Object, names: Sequence[str], parents: np.ndarray,
                     rest: np.ndarray, skip: Iterable[int] = ()) -> np.ndarray:
    """Each bone's parent as Blender's evaluation moves it: a bone whose last active
    constraint is a Copy Transforms from another bone of the rig (world to world, full
    influence, replacing; the two bones alike at rest, ``rest`` (B, 4, 4) armature space)
    takes that bone's place whatever its own parent does, so it hangs from that bone.
    A control rig's ORG bones do this: Rigify's ``ORG-shoulder.L`` copies the
    ``shoulder.L`` control and the upper arm hangs from it, so the clavicle control moves
    the arm (by the hierarchy alone it moves nothing, and a solve that turns it leaves
    the shoulder behind). The copying bone's own pose, which the constraint overrides, is
    taken as its rest (a control rig never poses its ORG bones). ``names`` / ``parents``
    (B,): the armature's bones (``-1`` for a root); ``skip``: bones kept as they are
    (mapped ones, which an edit poses itself)."""
    index = {n: i for i, n in enumerate(names)}
    out = np.array(parents, dtype=np.int64)
    kept = set(skip)
    pbones = obj.pose.bones
    for b, name in enumerate(names):
        pb = pbones.get(name)
        if b in kept or pb is None:
            continue
        active = [c for c in pb.constraints if _active(c)]
        c = active[-1] if active else None
        if c is None or c.type != "COPY_TRANSFORMS" or c.influence < 1.0 \
                or c.target != obj or c.subtarget not in index \
                or (c.owner_space, c.target_space, c.mix_mode) != ("WORLD", "WORLD", "REPLACE") \
                or c.head_tail != 0.0:
            continue
        source = index[c.subtarget]
        if not np.allclose(rest[b], rest[source], atol=FOLLOW_REST_ATOL):
            continue
        up = source
        while up >= 0 and up != b:  # never under itself
            up = int(out[up])
        if up != b:
            out[b] = source
    return out


def _limb_switches(obj: bpy.types.Object, names: Iterable[str]
                   ) -> dict[str, list[str]]:
    """IK/FK switch bone -> the mapped FK controls of its limb (parents first)."""
    pbones = obj.pose.bones
    out: dict[str, list[str]] = {}
    for name in names:
        m = FK_SUFFIX.match(name)
        if m is None or pbones.get(name) is None:
            continue
        bone, top = pbones[name].bone, m
        while bone is not None:  # the limb's first FK control is the topmost *_fk above
            first = FK_SUFFIX.match(bone.name)
            if first and first["side"] == m["side"]:
                top = first
            bone = bone.parent
        holder = f"{top['base']}{PARENT_SUFFIX}{top['side'] or ''}"
        if pbones.get(holder) is not None and IK_FK in pbones[holder]:
            out.setdefault(holder, []).append(name)
    for controls in out.values():
        controls.sort(key=lambda n: len(pbones[n].bone.parent_recursive))
    return out


def _ik_partner(org: bpy.types.PoseBone, fk: str) -> str | None:
    """The bone an ORG bone copies besides its FK control (its IK chain's), or None."""
    for c in org.constraints:
        if c.type == "COPY_TRANSFORMS" and c.subtarget and c.subtarget != fk:
            return c.subtarget
    return None


def _is_control(name: str) -> bool:
    return not name.startswith(MECHANISM_PREFIXES)


def _limb(obj: bpy.types.Object, holder: str, controls: list[str]) -> Limb | None:
    """The limb of a switch from its mapped FK controls; None when it is not a two-bone
    IK chain built as Rigify's limbs are."""
    pbones = obj.pose.bones
    orgs, partners = [], []
    for fk in controls:
        org = pbones.get(ORG_PREFIX + FK_SUFFIX.sub(r"\g<base>\g<side>", fk))
        partner = _ik_partner(org, fk) if org is not None else None
        if partner is None or pbones.get(partner) is None:
            return None
        orgs.append(org.name)
        partners.append(partner)
    if len(controls) < 3:
        return None
    ik_out = tuple(partners[:3])
    end = pbones[ik_out[2]]
    control = FK_SUFFIX.sub(rf"\g<base>{IK_SUFFIX}\g<side>", controls[2])
    if pbones.get(control) is None or control not in {b.name for b in end.bone.parent_recursive}:
        return None  # no IK control carrying the chain's end
    poles = [c.pole_subtarget for c in pbones[ik_out[1]].constraints
             if c.type == "IK" and c.subtarget == ik_out[2] and c.pole_target == obj
             and c.pole_subtarget in pbones]
    tails = tuple((fk, ik) for fk, ik in zip(controls[3:], partners[3:], strict=True)
                  if _is_control(ik))
    return Limb(holder, tuple(controls), tuple(orgs), ik_out, control,
                ik_out[0] if _is_control(ik_out[0]) else None, poles[0] if poles else None,
                tails)


_LIMBS: dict[tuple[str, tuple[str, ...]], tuple[Limb, ...]] = {}  # (armature, names) ->
_LIMBS_KEPT = 64  # name sets kept (each write asks with the bones it turned)


def limbs(obj: bpy.types.Object, names: Iterable[str]) -> list[Limb]:
    """The limbs with an IK/FK switch whose FK controls are among the mapped ``names``.
    Kept per armature until its rig changes (:func:`.rig_io.rig_info`) or Map Rig reads
    it again: reading a Rigify rig's constraints takes some 0.3 ms, and every write and
    panel redraw asks."""
    key = (obj.name, tuple(names))
    found = _LIMBS.get(key)
    if found is None:
        if len(_LIMBS) >= _LIMBS_KEPT:
            _LIMBS.clear()
        made = (_limb(obj, holder, controls)
                for holder, controls in _limb_switches(obj, key[1]).items())
        found = _LIMBS[key] = tuple(limb for limb in made if limb is not None)
    return list(found)


def forget(obj_name: str | None = None) -> None:
    """Forget the limbs found on one armature (all when None)."""
    for key in [k for k in _LIMBS if obj_name is None or k[0] == obj_name]:
        del _LIMBS[key]


def ik_limbs(obj: bpy.types.Object, names: Iterable[str]) -> list[Limb]:
    """Of :func:`limbs`, those that show their IK chain, wholly or partly (``IK_FK`` < 1)."""
    return [limb for limb in limbs(obj, names) if limb.switch(obj) < 1.0]


def match_fk_to_shown(obj: bpy.types.Object, names: Iterable[str],
                      view_layer: bpy.types.ViewLayer) -> list[str]:
    """Put the FK controls of limbs in IK where the limb is shown, as Rigify's FK→IK snap
    does, when they are elsewhere (the animator moved the IK controls, or changed frame):
    the solve reads its start pose from the FK controls. Nothing shown moves and the
    switch stays. Returns the switches of the limbs matched (see :func:`.fk_match.match_fk`)."""
    found = ik_limbs(obj, names)
    if not found:
        return []
    return [limb.holder for limb in fk_match.match_fk(obj, found, view_layer)]


_DEFERRED = {"depth": 0, "rough": 0, "unstepped": 0}  # see deferred() and dragging()
_ENDS: dict[str, Matrix] = {}  # limb (holder) -> its IK end control's matrix: ends_placed()
_PENDING: dict[str, set[str]] = {}  # armature -> FK controls written while deferred
_ROUGH: dict[str, set[str]] = {}  # armature -> FK controls a drag update placed roughly
# Placement passes for a drag's update where the add-on's kinematics cannot tell where the
# FK controls went (:func:`follow_dragged`): one pass puts the IK controls on the FK pose
# to within Blender's IK shortfall (some 0.2 mm), at two evaluations of the rig instead of
# three to five; the drag's pause places them exactly. Elsewhere a drag's update takes one
# step without evaluating (:func:`follow_fk`).
DRAG_PASSES = 1


@contextmanager
def deferred(step: bool = True) -> Iterator[None]:
    """While set (inside a ``depsgraph_update_post`` handler, where evaluating the
    depsgraph again crashes Blender), :func:`follow_fk` only notes what to place;
    :func:`follow_pending` places it (a timer :func:`follow_later` starts, or the drag's
    pause). Without ``step``, the IK controls take no step either (their values are
    written next, as Spread Edit writes them as read)."""
    _DEFERRED["depth"] += 1
    _DEFERRED["unstepped"] += not step
    try:
        yield
    finally:
        _DEFERRED["depth"] -= 1
        _DEFERRED["unstepped"] -= not step


@contextmanager
def dragging() -> Iterator[None]:
    """While set (a drag's step: Live, Neural Grab), :func:`follow_fk` places roughly
    (:data:`DRAG_PASSES`); the drag's pause or confirming step places exactly."""
    _DEFERRED["rough"] += 1
    try:
        yield
    finally:
        _DEFERRED["rough"] -= 1


@contextmanager
def ends_placed(ends: Mapping[str, Matrix]) -> Iterator[None]:
    """While set, placing the limbs of ``ends`` (by their IK/FK switch's bone) puts their
    IK end control at the matrix given (armature space), leaves their toe as it is and
    turns their chain's plane alone (:func:`.ik_snap.place`)."""
    before = dict(_ENDS)
    _ENDS.update(ends)
    try:
        yield
    finally:
        _ENDS.clear()
        _ENDS.update(before)


def follow_fk(obj: bpy.types.Object, names: Iterable[str], passes: int | None = None,
              written: Callable[[list[str]], Mapping[str, Matrix]] | None = None,
              shown: bool = True) -> None:
    """After the FK controls ``names`` were written: place the IK controls of the limbs in
    IK so that Blender's IK shows the FK controls' pose (see :mod:`.ik_snap`; ``passes``:
    at most that many, default until placed, or :data:`DRAG_PASSES` while
    :func:`dragging`). Nothing happens on a rig without such limbs, or outside a view
    layer. ``written``: the FK controls' matrices as the pose just written puts them (by
    name, :func:`.rig_io.kinematic_matrices`): while :func:`dragging`, the IK controls take
    one step towards them without an evaluation of the rig (the drag's next one shows it;
    two evaluations of the generated Rigify rig, 3.7 ms each, a step cost before) where
    :func:`_steps` allows; the drag's pause places them exactly. While :func:`deferred`
    alone (a write's correction from the evaluated rig), they take that step too, so the
    correction's evaluations show them near their place and the placement after it
    starts from there. ``shown``: False leaves
    the rig unevaluated after a placement pass that settled (:func:`.ik_snap.place`)."""
    names = list(names)
    found = ik_limbs(obj, names)
    view_layer = bpy.context.view_layer
    if not found or view_layer is None:
        return
    if written is not None and (_DEFERRED["rough"] or _DEFERRED["depth"]) \
            and not _DEFERRED["unstepped"] and _steps(obj, found, names):
        matrices = written([n for limb in found for n in ik_snap.fk_names(limb)])
        poses = {limb.holder: pose for limb in found
                 if (pose := ik_snap.FkPose.given(limb, matrices)) is not None}
        if len(poses) == len(found):  # a step: no evaluation
            ik_snap.step(obj, found, poses, _ENDS)
            if _DEFERRED["rough"]:  # a drag's: placed exactly at its pause
                _ROUGH.setdefault(obj.name, set()).update(names)
                return
    if _DEFERRED["depth"]:
        _PENDING.setdefault(obj.name, set()).update(names)
        return
    if passes is None:
        passes = DRAG_PASSES if _DEFERRED["rough"] else ik_snap.MAX_PASSES
    ik_snap.place(obj, found, view_layer, passes, _ENDS, shown)


def unplaced(obj: bpy.types.Object) -> set[str]:
    """The FK controls of limbs in IK written while :func:`deferred` whose IK controls are
    not placed yet: where the placement will put the limb."""
    names = _PENDING.get(obj.name)
    if not names:
        return set()
    return {n for limb in ik_limbs(obj, names) for n in limb.fk_controls}


def place_unplaced(obj: bpy.types.Object, shown: bool = True) -> bool:
    """Place exactly, now, the IK controls of ``obj``'s limbs left for later
    (:func:`deferred`); whether there were any. ``shown``: see :func:`follow_fk`."""
    names = _PENDING.pop(obj.name, None)
    if not names:
        return False
    _place({obj.name: names}, None, shown)
    return True


def _steps(obj: bpy.types.Object, found: list[Limb], names: list[str]) -> bool:
    """Whether a write can step the IK controls of ``found`` without evaluating:
    every limb wholly in IK (a blend shows the FK chain too), its control and pole not
    moved by the bones written (:func:`.ik_snap.carried`: set under their parent as last
    evaluated, they would miss by its move)."""
    moved = frozenset(names)
    return all(limb.switch(obj) <= 0.0 and not ik_snap.carried(obj, limb, moved)
               for limb in found)


def _place(pending: dict[str, set[str]], passes: int | None, shown: bool = True) -> None:
    """:func:`follow_fk` for each armature of ``pending`` (looked up by name: one may be
    gone)."""
    from .guard import busy

    for name, names in pending.items():
        obj = bpy.data.objects.get(name)
        if obj is not None and obj.type == "ARMATURE" and obj.mode != "EDIT":
            with busy():
                follow_fk(obj, names, passes, shown=shown)


def follow_dragged() -> None:
    """Place the IK controls :func:`follow_fk` left for later, roughly
    (:data:`DRAG_PASSES`): the timer a Live drag's update starts (returns None: runs
    once; called directly, as background Blender runs no timers, it stops that timer: one
    left registered can hang bpy 4.5 at exit). :func:`follow_pending` places them
    exactly."""
    app_hooks.stop_timer(follow_dragged)
    pending = dict(_PENDING)
    _PENDING.clear()
    _place(pending, DRAG_PASSES)
    for name, names in pending.items():
        _ROUGH.setdefault(name, set()).update(names)


def follow_pending() -> None:
    """Place exactly, now, what :func:`follow_fk` left for later or a drag's update
    placed roughly (the drag's pause; background Blender, which runs no timers)."""
    app_hooks.stop_timer(follow_dragged)
    ik_snap.forget_carried()
    pending = dict(_ROUGH)
    for name, names in _PENDING.items():
        pending.setdefault(name, set()).update(names)
    _PENDING.clear()
    _ROUGH.clear()
    _place(pending, None)


def follow_later() -> None:
    """Run :func:`follow_dragged` as soon as Blender is out of the handler: a timer,
    persistent (Blender 4.5 can hang at exit after a file load freed a timer)."""
    if _PENDING:
        app_hooks.start_timer(follow_dragged)


def cancel_follow() -> None:
    """Drop what was left to place, and its timer (a file load, unregistering)."""
    _PENDING.clear()
    _ROUGH.clear()
    ik_snap.forget_carried()
    app_hooks.stop_timer(follow_dragged)


def keyed_bones(obj: bpy.types.Object, mapped_bone_names: Sequence[str],
                found: Sequence[Limb] | None = None,
                switches: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """The bones whose keys hold the pose the add-on wrote on the mapped bones: each mapped
    bone, except that a limb in IK is keyed on its IK controls (end, chain base, pole when
    used, toe) instead of its FK controls, and a limb between the two (0 < ``IK_FK`` < 1)
    on both. The switch itself is never keyed: it stays as the animator set it.
    ``found``: :func:`limbs` of those bones where the caller has them; ``switches``: the
    lowest and highest ``IK_FK`` of each limb (by its holder) over the frames keyed, where
    the animation switches it (a limb in IK on some frames and FK on others: both)."""
    out = list(mapped_bone_names)
    extra: list[str] = []
    for limb in limbs(obj, mapped_bone_names) if found is None else found:
        low, high = (switches or {}).get(limb.holder) or (limb.switch(obj),) * 2
        if low >= 1.0:
            continue
        if high <= 0.0:
            fk = set(limb.fk)
            out = [n for n in out if n not in fk]
        extra += [n for n in limb.ik_controls(obj) if n not in out and n not in extra]
    return out + extra


def ik_notes(obj: bpy.types.Object, names: Iterable[str]) -> list[str]:
    """The Map Rig report lines for limbs in IK: those whose IK controls each solve
    places, and those it cannot (an IK chain not built as Rigify's limbs are)."""
    names = list(names)
    pbones = obj.pose.bones
    found = ik_limbs(obj, names)
    placed = {limb.holder for limb in found}
    stuck = [h for h in _limb_switches(obj, names)
             if h not in placed and float(pbones[h][IK_FK]) < 1.0]
    notes = []
    if found:
        notes.append(f"{', '.join(limb.holder for limb in found)} in IK: each solve places "
                     f"their IK controls ({', '.join(limb.control for limb in found)}) "
                     "where the FK controls put the limb; the IK/FK switches are left as "
                     "they are")
    if stuck:
        notes.append(f"{', '.join(stuck)} in IK, with an IK chain the add-on cannot place: "
                     f"set {IK_FK} to 1 (FK) to pose {'it' if len(stuck) == 1 else 'them'}")
    return notes
