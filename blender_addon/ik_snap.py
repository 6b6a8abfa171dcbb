"""Rigify's snaps between a limb's IK and FK chains, for limbs left in IK.

:func:`place` is the "IK→FK" snap: it places the IK control, the pole (or the chain's
twist) and the toe so that Blender's IK shows the pose of the FK controls (the solve's
carrier). :func:`.fk_match.match_fk` is the other way ("FK→IK"): before a solve it puts the FK
controls where the limb is shown, so the solve starts from what the animator sees.

The method is Rigify's own (``RigifyLimbIk2FkBase.apply_frame_state`` in
``rigify/rigs/limbs/limb_rigs.py``, with ``match_pole_target`` / ``correct_rotation`` from
the generated ``rig_ui`` script): the end control takes the FK end's matrix through the
pose delta between the IK chain's end and that control
(``convert_pose_matrix_via_pose_delta``), the pole turns about the line from the chain's
root to its end by the angle between the IK and FK elbows, and without a pole the chain's
first control turns about its own Y axis (its only free channel) until the elbows agree;
a tail control (the toe) takes its FK twin's matrix. Reimplemented here rather than
called, because the ``rig_ui`` text is registered as a module only
when the file's scripts are trusted (a rig opened untrusted has none of its operators),
its operators need a pose-mode context, key by themselves and search the twist by a
ternary search over some twenty depsgraph updates; here every limb is placed at once, one
depsgraph update per pass, the twist found by secant steps on the signed angle between the
elbows (a few passes). Differences from Rigify's snap, on purpose: the foot's heel roll
and spin controls keep the animator's values (the end control is placed through them, as
the pose delta allows) instead of being reset; the chain's base scale is not corrected
(the add-on writes rotations only, so the FK controls keep their scale).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import bpy
from mathutils import Euler, Matrix, Quaternion, Vector

from .channel_writes import ChannelWrites

IK_FK = "IK_FK"  # Rigify's IK/FK switch (0: IK, 1: FK) on the limb's "<first>_parent" bone
POLE_SWITCH = "pole_vector"  # Rigify's "use a pole target" option, on the same bone


@dataclass(frozen=True)
class Limb:
    """A Rigify limb with an IK/FK switch, named as the generated rig has it (found from
    the ``ORG-`` bones' Copy Transforms constraints, not from name patterns)."""

    holder: str  # the bone with the IK_FK and pole_vector properties (upper_arm_parent.L)
    fk: tuple[str, ...]  # FK controls, root first: upper_arm_fk.L, forearm_fk.L, hand_fk.L
    orgs: tuple[str, ...]  # the ORG bones showing them: ORG-upper_arm.L, ...
    ik_out: tuple[str, str, str]  # what the ORG bones copy in IK: upper_arm_ik.L,
    # MCH-forearm_ik.L (carries the IK constraint), MCH-upper_arm_ik_target.L (the end)
    control: str  # the IK control moving the end: hand_ik.L, foot_ik.L
    base: str | None  # the IK chain's first control, its twist the plane without a pole
    pole: str | None  # the pole control: upper_arm_ik_target.L, thigh_ik_target.L
    tails: tuple[tuple[str, str], ...]  # past the end, (FK control, IK control): toe_fk.L

    def switch(self, obj: bpy.types.Object) -> float:
        """The ``IK_FK`` value now (0: IK, 1: FK)."""
        return float(obj.pose.bones[self.holder][IK_FK])

    def uses_pole(self, obj: bpy.types.Object) -> bool:
        """Rigify's own test (``RigifyLimbIk2FkBase.get_use_pole``)."""
        holder = obj.pose.bones[self.holder]
        return self.pole is not None and POLE_SWITCH in holder and bool(holder[POLE_SWITCH])

    @property
    def fk_controls(self) -> tuple[str, ...]:
        """The controls that pose the limb in FK: its chain's and the toe's."""
        return (*self.fk, *(fk for fk, _ik in self.tails))

    def ik_controls(self, obj: bpy.types.Object) -> list[str]:
        """The controls that pose the limb in IK: end, chain base, pole (when used), toe."""
        out = [self.control, *([self.base] if self.base else []),
               *([self.pole] if self.uses_pole(obj) else [])]
        return out + [ik for _fk, ik in self.tails]


# Armature units: IK end and toe this close to the FK ones are placed. Blender's IK
# stops short of its target by up to some 3e-5 whichever way the target moves by that much
# (a foot 2.5e-5 short, bpy 4.5): below this, passes change nothing.
PLACE_TOL = 5e-5
PLANE_TOL = 1e-4  # rad: the IK elbow's angle about the root->end line from the FK elbow
# A pass that leaves the end where it is and turns the plane less than this (rad), moving
# the IK target by less than this share of the chain's length for Blender's IK shortfall,
# ends near the tolerances above (secant and shortfall steps from there landed within
# 1.7e-4 rad, an elbow 0.011 mm off its plane, in the benchmark's spread; 9.8e-5 rad from
# 5e-3, at 29 % more placement evaluations); a placement that need not show its result
# stops there unevaluated.
SETTLED_PLANE = 0.015
SETTLED_SHORT = 1e-3
MAX_PASSES = 8  # depsgraph updates at most (measured: 3-5 to converge)
STRAIGHT = 1e-3  # of the chain's length: an elbow this near the root-end line has no plane
MAX_TWIST_STEP = math.pi / 2  # rad: one secant step of the chain's twist, at most
# The elbow's angle per turn of a pole-less chain's twist, before a limb's is measured
# (the secant's first step), and the range of the measured ones kept for the next placement
# (-0.98 to -1.02 seen on Rigify's arms and legs; starting from the last one saved 4 % of
# the placements' evaluations in the benchmark's spread through limbs in IK).
DEFAULT_SLOPE = -1.0
KEPT_SLOPES = (-4.0, -0.25)
_SLOPES: dict[tuple[str, str], float] = {}  # (armature, limb's holder) -> last slope


@dataclass
class _Search:
    """One limb's placement in progress: the secant search of a pole-less chain's twist
    (turned so far, and the last turn's (twist, remaining elbow angle)), and how far the
    IK target is put past the FK end to make up for where Blender's IK stops short."""

    turned: float = 0.0
    last: tuple[float, float] | None = None
    offset: Vector = field(default_factory=lambda: Vector((0.0, 0.0, 0.0)))
    slope: float = DEFAULT_SLOPE  # the elbow's angle per turn of the twist, last measured
    settled: bool = False  # the last pass's steps were small (:data:`SETTLED_PLANE`)


def set_rotation(pb: bpy.types.PoseBone, rotation: Quaternion, writes: ChannelWrites,
                  locks: bool = True) -> None:
    """Set a local rotation in the bone's own mode, continuous with the current one
    (``locks``: locked Euler channels kept)."""
    mode = pb.rotation_mode
    if mode == "QUATERNION":
        if rotation.dot(Quaternion(writes.value(pb, "rotation_quaternion"))) < 0.0:
            rotation = -rotation
        writes.set(pb, "rotation_quaternion", rotation)
    elif mode == "AXIS_ANGLE":
        axis, angle = rotation.to_axis_angle()
        writes.set(pb, "rotation_axis_angle", (angle, *axis))
    else:
        old = writes.value(pb, "rotation_euler")
        euler = rotation.to_euler(mode, Euler(old, mode))
        writes.set(pb, "rotation_euler", [o if lock and locks else new for o, new, lock
                                          in zip(old, euler, pb.lock_rotation, strict=True)])


def _set_matrix(obj: bpy.types.Object, pb: bpy.types.PoseBone, matrix: Matrix,
                writes: ChannelWrites, *, rotate: bool = True) -> None:
    """Give a control this armature-space matrix (its parent as last evaluated): location
    and rotation, locked channels and scale kept (Rigify's ``set_transform_from_matrix``)."""
    local = obj.convert_space(pose_bone=pb, matrix=matrix, from_space="POSE", to_space="LOCAL")
    if not pb.bone.use_connect:
        writes.set(pb, "location", [old if lock else new for old, new, lock
                                    in zip(writes.value(pb, "location"),
                                           local.to_translation(), pb.lock_location,
                                           strict=True)])
    if rotate:
        set_rotation(pb, local.to_quaternion(), writes)


def elbow_angle(s: Vector, end: Vector, fk_elbow: Vector, ik_elbow: Vector) -> float | None:
    """Signed angle (rad) about the root->end line taking the IK elbow to the FK one; None
    for a chain too straight to have a plane."""
    axis = end - s
    length = axis.length
    if length == 0.0:
        return None
    axis /= length
    want = (fk_elbow - s) - axis * (fk_elbow - s).dot(axis)
    have = (ik_elbow - s) - axis * (ik_elbow - s).dot(axis)
    if min(want.length, have.length) < STRAIGHT * length:
        return None
    return math.atan2(axis.dot(have.cross(want)), have.dot(want))


def _moved_angle(ik: list[bpy.types.PoseBone], end: Vector, fk_elbow: Vector) -> float | None:
    """:func:`elbow_angle` once the IK chain ``ik`` (as last evaluated) ends at ``end``:
    Blender's IK swings the chain by about the least turn taking its root->end line to
    the new one. Measured before the end moved, the angle was stale: the placement's first
    evaluation found the arms' planes 0.26-0.46 rad off in the benchmark's spread, 0.003-0.01
    rad with this (one pass fewer on most frames)."""
    root = ik[0].head
    turn = (ik[2].head - root).rotation_difference(end - root)
    return elbow_angle(root, end, fk_elbow, root + turn @ (ik[1].head - root))


def _turn_pole(obj: bpy.types.Object, pole: bpy.types.PoseBone, s: Vector, end: Vector,
               fk_elbow: Vector, angle: float, reach: float, writes: ChannelWrites) -> None:
    """Rigify's ``match_pole_target``, its two tries replaced by the signed angle: the pole
    turns about the root->end line; one lying on that line goes out towards the FK elbow."""
    axis = (end - s).normalized()
    offset = pole.head - s
    if (offset - axis * offset.dot(axis)).length < STRAIGHT * reach:
        toward = (fk_elbow - s) - axis * (fk_elbow - s).dot(axis)
        place = s + (end - s) / 2 + toward.normalized() * reach
    else:
        place = s + Matrix.Rotation(angle, 3, axis) @ offset
    matrix = pole.matrix.copy()
    matrix.translation = place
    _set_matrix(obj, pole, matrix, writes, rotate=False)


def _turn_base(base: bpy.types.PoseBone, twist: _Search, angle: float,
               writes: ChannelWrites) -> None:
    """Rigify's ``correct_rotation`` as secant steps: turn the chain's first control about
    its Y axis until the IK elbow meets the FK one (the first step by the slope last
    measured on the limb)."""
    if twist.last is not None:
        last_turned, last_angle = twist.last
        if abs(angle - last_angle) > 1e-12 and twist.turned != last_turned:
            twist.slope = (angle - last_angle) / (twist.turned - last_turned)
    step = -angle / twist.slope if twist.slope != 0.0 else angle
    step = max(-MAX_TWIST_STEP, min(MAX_TWIST_STEP, step))
    twist.last = (twist.turned, angle)
    twist.turned += step
    rotation = base.matrix_basis.to_quaternion() @ Quaternion((0.0, 1.0, 0.0), step)
    set_rotation(base, rotation, writes)


def matrix_gap(a: Matrix, b: Matrix) -> float:
    """How far two bone matrices are apart, scale included: their largest entry's gap."""
    return max(abs(x - y) for row_a, row_b in zip(a, b, strict=True)
               for x, y in zip(row_a, row_b, strict=True))


def matrix_miss(a: Matrix, b: Matrix) -> float:
    """How far two bone matrices are apart: their heads, and their unit axes."""
    return max((a.translation - b.translation).length,
               max((a.col[i].xyz.normalized() - b.col[i].xyz.normalized()).length
                   for i in range(3)))


@dataclass(frozen=True)
class FkPose:
    """Where a limb's FK controls put it (armature space): the end's matrix, the elbow's
    head and the tails' matrices (in :attr:`Limb.tails` order)."""

    end: Matrix
    elbow: Vector
    tails: tuple[Matrix, ...]

    @classmethod
    def evaluated(cls, obj: bpy.types.Object, limb: Limb) -> FkPose:
        """As the rig was last evaluated."""
        pbones = obj.pose.bones
        return cls(pbones[limb.fk[2]].matrix, pbones[limb.fk[1]].head,
                   tuple(pbones[f].matrix for f, _i in limb.tails))

    @classmethod
    def given(cls, limb: Limb, matrices: Mapping[str, Matrix]) -> FkPose | None:
        """From the FK controls' matrices (by name); None where one is missing."""
        if any(n not in matrices for n in fk_names(limb)):
            return None
        return cls(matrices[limb.fk[2]], matrices[limb.fk[1]].to_translation(),
                   tuple(matrices[f] for f, _i in limb.tails))


def fk_names(limb: Limb) -> tuple[str, ...]:
    """The FK controls :meth:`FkPose.given` reads."""
    return (limb.fk[1], limb.fk[2], *(f for f, _i in limb.tails))


def _adjust(obj: bpy.types.Object, limb: Limb, search: _Search, fk: FkPose,
            end: Matrix | None, measured: bool, writes: ChannelWrites) -> bool:
    """One pass of the placement of ``limb``'s IK controls towards ``fk`` from the rig as
    last evaluated. ``measured``: that evaluation shows ``fk``, so the IK shortfall and the
    twist's secant are measured; else ``fk`` is a pose just written, which Blender's IK
    shows at the next evaluation (a step on the way). ``end``: the end control's matrix
    (armature space) instead of where the FK end puts it, the toe left as it is. Whether
    anything was left to place."""
    pbones = obj.pose.bones
    ik = [pbones[n] for n in limb.ik_out]
    control = pbones[limb.control]
    target = Matrix.Translation(search.offset) @ fk.end
    target_miss = matrix_miss(ik[2].matrix, target)
    # where the IK chain ends, against the FK end
    short = fk.end.translation - ik[1].tail if measured else Vector((0.0, 0.0, 0.0))
    angle = elbow_angle(ik[0].head, ik[2].head, fk.elbow, ik[1].head)
    tails = [] if end is not None else [(m, pbones[i]) for m, (_f, i)
                                        in zip(fk.tails, limb.tails, strict=True)]
    tail_miss = max((matrix_miss(i.matrix, m) for m, i in tails), default=0.0)
    end_miss = 0.0
    if end is not None:  # the end control where it is asked: the plane follows the FK's
        target_miss, short = 0.0, Vector((0.0, 0.0, 0.0))
        end_miss = matrix_miss(control.matrix, end)
        if end_miss >= PLACE_TOL:
            _set_matrix(obj, control, end, writes)
    if max(target_miss, short.length, tail_miss, end_miss) < PLACE_TOL \
            and abs(angle or 0.0) < PLANE_TOL:
        return False
    search.settled = max(target_miss, tail_miss, end_miss) < PLACE_TOL \
        and abs(angle or 0.0) < SETTLED_PLANE \
        and short.length < SETTLED_SHORT * (ik[0].length + ik[1].length)
    if target_miss < PLACE_TOL and short.length >= PLACE_TOL:
        search.offset += short
        target = Matrix.Translation(search.offset) @ fk.end
        target_miss = PLACE_TOL
    follow = Matrix.Identity(4)  # how the end control moves: the toe follows it
    if target_miss >= PLACE_TOL:
        follow = target @ ik[2].matrix.inverted()
        _set_matrix(obj, control, follow @ control.matrix, writes)
        moved = _moved_angle(ik, target.translation, fk.elbow) if angle is not None else None
        if moved is not None:  # the plane as it will be once the end has moved
            angle = moved
    if angle is not None and abs(angle) >= PLANE_TOL:
        root, tip = ik[0].head, ik[2].head
        if limb.uses_pole(obj):
            reach = ik[0].length + ik[1].length
            _turn_pole(obj, pbones[limb.pole], root, tip, fk.elbow, angle, reach, writes)
        elif limb.base is not None:
            _turn_base(pbones[limb.base], search, angle, writes)
            if target_miss >= PLACE_TOL:  # seen before the end moved: no secant point
                search.last = None
    for m, i in tails:  # under their parents as the end's move will put them
        _set_matrix(obj, i, follow.inverted() @ m, writes)
    return True


def _searches(obj: bpy.types.Object, limbs: list[Limb]) -> dict[str, _Search]:
    return {limb.holder: _Search(slope=_SLOPES.get((obj.name, limb.holder), DEFAULT_SLOPE))
            for limb in limbs}


_CARRIED: dict[tuple[str, str, frozenset[str]], bool] = {}  # see carried(); one drag's
CARRIED_SEARCH = 200  # bones looked through at most (Rigify's arm control: some 10)


def carried(obj: bpy.types.Object, limb: Limb, written: frozenset[str]) -> bool:
    """Whether the limb's end control or pole (when used) moves with the bones ``written``
    (through its parents, and the targets of its constraints and theirs that act: a hand's
    IK parent switched to the chest), so a step that sets it under its parent as last
    evaluated would miss by that move. Kept until :func:`forget_carried` (a drag's pause):
    the answer changes with the animator's settings, not from one update to the next."""
    key = (obj.name, limb.holder, written)
    if key in _CARRIED:
        return _CARRIED[key]
    pbones = obj.pose.bones
    own = set(limb.ik_controls(obj))
    todo = [pbones[n].parent for n in (limb.control, *([limb.pole] if limb.uses_pole(obj)
                                                       else []))]
    seen: set[str] = set()
    found = False
    while todo and not found and len(seen) < CARRIED_SEARCH:
        pb = todo.pop()
        if pb is None or pb.name in seen or pb.name in own:
            continue
        seen.add(pb.name)
        found = pb.name in written
        todo.append(pb.parent)
        for c in pb.constraints:
            if c.mute or c.influence <= 0.0 or not getattr(c, "enabled", True):
                continue
            targets = [(t.target, t.subtarget) for t in getattr(c, "targets", ())
                       if getattr(t, "weight", 1.0) > 0.0]
            targets.append((getattr(c, "target", None), getattr(c, "subtarget", "")))
            todo += [pbones.get(sub) for target, sub in targets if target == obj and sub]
    _CARRIED[key] = found or len(seen) >= CARRIED_SEARCH
    return _CARRIED[key]


def forget_carried() -> None:
    """Drop :func:`carried`'s answers (a drag ended: the animator may switch a parent)."""
    _CARRIED.clear()


def step(obj: bpy.types.Object, limbs: list[Limb], poses: Mapping[str, FkPose],
         ends: Mapping[str, Matrix] | None = None) -> None:
    """One pass of :func:`place` towards the FK poses just written (``poses``, by limb
    holder, as the add-on's kinematics give them), from the rig as last evaluated, without
    evaluating it: the drag's next evaluation shows it. The twist turns by the slope last
    measured on each limb (fresh searches: no secant point from another update)."""
    searches = _searches(obj, limbs)
    writes = ChannelWrites(obj)
    for limb in limbs:
        if limb.holder in poses:
            _adjust(obj, limb, searches[limb.holder], poses[limb.holder],
                    (ends or {}).get(limb.holder), False, writes)
    writes.flush()


def place(obj: bpy.types.Object, limbs: list[Limb], view_layer: bpy.types.ViewLayer,
          passes: int = MAX_PASSES, ends: Mapping[str, Matrix] | None = None,
          shown: bool = True) -> None:
    """Place the IK controls of ``limbs`` (in IK) where their FK controls are, all limbs at
    once; evaluated after each pass (at most ``passes``), done when the IK chain's
    end (its last bone's tail, where the hand or foot hangs, and the end's axes) and toes
    are within :data:`PLACE_TOL` of the FK chain's and its elbow within :data:`PLANE_TOL`
    of the FK elbow's plane. Blender's IK stops a fraction of a millimetre short of its
    target: the target goes that much further, as :func:`.edits._settle` does for FK
    writes. The elbow itself can sit a few millimetres off in its plane: Rigify's IK chains
    stretch (``ik_stretch`` 0.1) when their end moves, so Blender's IK bends them a little
    less or more than the FK chain. The limbs in ``ends`` (by their switch's bone, the
    holder) have their end control put at the matrix given there (armature space), their
    toe left as it is: only their elbow's plane follows the FK chain (a limb Rigify's IK
    stretches past its FK bones, which no FK pose shows: :mod:`.spread_ik`). The rig is
    left evaluated; without ``shown``, it may be left after a pass that settled
    (:data:`SETTLED_PLANE`), unevaluated (Spread Edit keys the controls, and its next
    frame is evaluated anyway)."""
    searches = _searches(obj, limbs)
    pending = list(limbs)
    writes = ChannelWrites(obj)
    for number in range(passes + 1):
        view_layer.update()  # (what was written before is tagged already)
        if number == passes:
            break
        pending = [limb for limb in pending
                   if _adjust(obj, limb, searches[limb.holder], FkPose.evaluated(obj, limb),
                              (ends or {}).get(limb.holder), True, writes)]
        writes.flush()
        if not pending or (not shown and all(searches[limb.holder].settled
                                             for limb in pending)):
            break
    for holder, search in searches.items():
        if KEPT_SLOPES[0] <= search.slope <= KEPT_SLOPES[1]:
            _SLOPES[(obj.name, holder)] = search.slope
