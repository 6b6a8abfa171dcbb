"""Every pose-metric slider, as the user sees it: a request of 10 degrees (or 5 cm) either
way from the rig's own value, measured back on the rig Blender evaluates."""

from __future__ import annotations

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import errors, mapped_rig, metric_requests  # noqa: E402

STEP = {"deg": 10.0, "m": 0.05}  # the request: the measured value plus or minus this
REACHED = (0.95, 1.05)  # achieved / requested change: the slider did what it says
# Sliders a rig may fall short on (lowering this rig's hands 5 cm reaches 94-95 %: the held
# metrics trade with the request); each says so in the panel.
MAY_FALL_SHORT = 1


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_a_slider_reaches_its_request_or_says_it_cannot(mixamo_rig: bpy.types.Object,
                                                        sign: float) -> None:
    scene = bpy.context.scene
    metric_requests.measure(scene, mixamo_rig)
    short = []
    tried = 0
    for item in mixamo_rig.npe.metrics:
        want = item.measured + sign * STEP[item.unit]
        if not item.range_min < want < item.range_max:
            continue
        tried += 1
        start = item.measured
        item.enabled = True
        item.set_requested(want)  # the slider: its update callback edits the pose
        share = (metric_requests.measure(scene, mixamo_rig)[item.name] - start) / (want - start)
        if not REACHED[0] <= share <= REACHED[1]:
            short.append(item.name)
            assert metric_requests.OFF_NOTE in errors.STATUS.get("metrics", ""), (
                item.name, share)
        item.enabled = False
        assert bpy.ops.npe.reset_edits("EXEC_DEFAULT", True) == {"FINISHED"}
        metric_requests.measure(scene, mixamo_rig)
    assert tried >= 5  # lowering: knees, spine, head and clavicles start near their ends
    assert len(short) <= MAY_FALL_SHORT, short


# Opening this rig's shoulders 10 degrees, read back: the other metrics change by 0.18 cm
# (the hands ride on the clavicles) and 0.01 degrees, the bones the clavicles do not carry
# move 1.4 mm; answered by the networks first, 0.65 cm and 4.4 mm.
SHRUG_OTHERS = {"deg": 0.1, "m": 0.003}
SHRUG_BODY_M = 0.003


def test_the_shoulders_slider_turns_the_clavicles_alone(mixamo_rig: bpy.types.Object) -> None:
    scene = bpy.context.scene
    start = metric_requests.measure(scene, mixamo_rig)
    joints = mapped_rig.mapping_dict(mixamo_rig.data)
    carried = {b.name for side in "lr"
               for b in mixamo_rig.data.bones[joints[f"{side}_clavicle"]].children_recursive}
    body = [pb for pb in mixamo_rig.pose.bones if pb.bone.use_deform and pb.name not in carried]
    before = np.array([mixamo_rig.matrix_world @ pb.head for pb in body])
    item = mixamo_rig.npe.metrics["shoulders_openness"]
    item.enabled = True
    item.set_requested(item.measured + STEP["deg"])
    got = metric_requests.measure(scene, mixamo_rig)
    share = (got[item.name] - start[item.name]) / STEP["deg"]
    assert REACHED[0] <= share <= REACHED[1], share
    for other in mixamo_rig.npe.metrics:
        if other.name != item.name:
            assert abs(got[other.name] - start[other.name]) < SHRUG_OTHERS[other.unit], (
                other.name, got[other.name] - start[other.name])
    bpy.context.view_layer.update()
    after = np.array([mixamo_rig.matrix_world @ pb.head for pb in body])
    assert np.linalg.norm(after - before, axis=-1).max() < SHRUG_BODY_M
