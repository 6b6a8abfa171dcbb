"""Live mode as the user sees it: a drag's updates against the pose its pause keeps."""

from __future__ import annotations

import numpy as np

from blender_addon.core.pipeline import PoseEditor
from training import latency

START_POSES = 6
WITHIN_REACH = (0.02, 0.05)  # m: a hand moved this far stays within its arm's reach
FAR_BEYOND = (0.9, 1.0)  # m: further than any arm reaches with the feet and head held


def test_a_drag_within_reach_shows_the_pose_its_pause_keeps(shipped_models,
                                                             manifold_clip) -> None:
    """Every update reaches its targets, and the pause moves no joint by 5 mm or more."""
    poses = manifold_clip[:: len(manifold_clip) // START_POSES][:START_POSES]
    c = latency.drag_continuity(PoseEditor(shipped_models), poses,
                                np.random.default_rng(0), WITHIN_REACH)
    assert c["drags"] == START_POSES and c["updates"] == START_POSES * latency.DRAG_STEPS
    assert c["updates_off_pct"] == 0.0 and c["pauses_off_pct"] == 0.0
    assert c["jumps_over"] == 0 and c["jump_max_mm"] < latency.JUMP_M * 1000.0


def test_a_drag_past_the_rigs_reach_keeps_its_pose_at_the_pause(shipped_models,
                                                                 manifold_clip) -> None:
    """A hand pulled a metre away with the other hand, the feet and the head held: no pose
    of the rig reaches it, the updates and the pauses leave it off (the figures say so),
    and the pause keeps the pose the drag showed instead of straining the body towards it
    with full-body FABRIK (which moved it by centimetres)."""
    poses = manifold_clip[:: len(manifold_clip) // START_POSES][:START_POSES]
    c = latency.drag_continuity(PoseEditor(shipped_models), poses,
                                np.random.default_rng(0), FAR_BEYOND)
    assert c["updates_off_pct"] > 0.0 and c["pauses_off_pct"] == 100.0
    assert c["jumps_over"] == 0 and c["jump_max_mm"] < latency.JUMP_M * 1000.0
