"""What Spread Edit refuses, naming the cause and changing nothing (issue 49): an action
the rig does not show as keyed (NLA switched off, a solo track, influence under 1, tweak
mode), muted and locked F-curves."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import edits, mapped_rig, rig_keys  # noqa: E402
from tests.blender.test_spread_edit import EDIT_TOL  # noqa: E402
from training.blender_side import spread_figures  # noqa: E402
from training.blender_side.spread_figures import CENTER, HAND  # noqa: E402


@pytest.mark.parametrize("case,mode,refusal", [
    ("nla-off", "LAYER", "NLA tracks are switched off"),
    ("solo", "EVERY_FRAME", "is solo"),
    ("influence", "KEYS", "plays at influence 0.50"),
])
def test_an_action_the_rig_does_not_show_is_refused(clip_rig: bpy.types.Object, case: str,
                                                    mode: str, refusal: str) -> None:
    """Where the NLA does not show the action as its keys hold it, a spread is refused and
    changes nothing (it had reported an edit the rig did not show: the hand 100 mm off
    with the NLA switched off in Layer mode, 83 mm under another track's solo, 252 mm with
    the action at influence 0.5). With the NLA off, Every Frame spreads as usual."""
    obj = clip_rig
    scene = bpy.context.scene
    anim = obj.animation_data
    if case == "nla-off":
        anim.use_nla = False
    elif case == "solo":
        anim.nla_tracks.new().is_solo = True
    else:
        anim.action_influence = 0.5
    scene.frame_set(CENTER)
    before, tracks = spread_figures.curves(obj), len(anim.nla_tracks)
    target = spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=refusal):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                radius=12)
    assert spread_figures.curves(obj) == before and len(anim.nla_tracks) == tracks
    if case == "nla-off":
        assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="EVERY_FRAME",
                                       range_mode="RADIUS", radius=12) == {"FINISHED"}
        hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
        assert np.linalg.norm(hand - target) < EDIT_TOL


@pytest.mark.parametrize("flag,mode", [("mute", "KEYS"), ("mute", "LAYER"),
                                       ("lock", "EVERY_FRAME"), ("lock", "LAYER")])
def test_muted_and_locked_curves(clip_rig: bpy.types.Object, flag: str, mode: str) -> None:
    """The right forearm's F-curves muted or locked. Muted, the rig does not show their
    keys: every mode refuses (written anyway, the hand stayed 95 mm off its target, 111 mm
    in a layer). Locked (an animator's guard), Keys and Every Frame refuse (they had
    rewritten them), and a layer, which leaves them as they are, reaches the target.
    Insert Keyframe keys the rest and says which it left, as Blender's keying does."""
    obj = clip_rig
    info = mapped_rig.rig_for(obj)
    forearm = info.names[info.joint_bones[spread_figures.JOINT_INDEX["r_forearm"]]]
    for fc in rig_keys.channelbag(obj).fcurves:
        if f'"{forearm}"' in fc.data_path:
            setattr(fc, flag, True)
    scene = bpy.context.scene
    scene.frame_set(CENTER)
    before, tracks = spread_figures.curves(obj), len(obj.animation_data.nla_tracks)
    target = spread_figures.move_hand(obj)
    if flag == "mute" or mode != "LAYER":
        said = "are muted" if flag == "mute" else "are locked"
        with pytest.raises(RuntimeError, match=f"F-curve.*{said}"):
            bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                    radius=12)
        assert spread_figures.curves(obj) == before
        assert len(obj.animation_data.nla_tracks) == tracks
        return
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode=mode, range_mode="RADIUS",
                                   radius=12) == {"FINISHED"}
    assert spread_figures.curves(obj) == before
    hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
    assert np.linalg.norm(hand - target) < EDIT_TOL
    outcome = edits.insert_keyframe(scene, obj)
    assert any(n.startswith("3 locked F-curve(s) not keyed") for n in outcome.notes)
    after = spread_figures.curves(obj)
    assert all(after[k] == before[k] for k in before if f'"{forearm}"' in k[0])


def test_an_nla_strip_in_tweak_mode_is_refused(clip_rig: bpy.types.Object) -> None:
    """The action tweaked in an NLA strip (Tab) is in the strip's time: Spread Edit says to
    leave tweak mode and changes nothing (it said to mute the strip's own track). Left,
    the edit goes into a layer over the strip."""
    obj = clip_rig
    anim = obj.animation_data
    strip = anim.nla_tracks.new().strips.new("clip", 1, anim.action)
    anim.action = None
    strip.select = True
    anim.use_tweak_mode = True
    assert anim.use_tweak_mode and anim.action is not None
    before = spread_figures.curves(obj)
    spread_figures.move_hand(obj)
    with pytest.raises(RuntimeError, match=r"tweak mode: leave it.*a layer over the strips"):
        bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, mode="KEYS", radius=12)
    assert spread_figures.curves(obj) == before
    anim.use_tweak_mode = False
    target = spread_figures.move_hand(obj)
    assert bpy.ops.npe.spread_edit("EXEC_DEFAULT", True, radius=12) == {"FINISHED"}
    assert anim.nla_tracks[-1].name.startswith("Spread Edit")
    hand = spread_figures.core_joints(obj, np.array([CENTER]))[0, HAND]
    assert np.linalg.norm(hand - target) < EDIT_TOL
