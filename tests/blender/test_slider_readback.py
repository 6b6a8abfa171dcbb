"""Every pose-metric slider, as the user sees it: a request of 10 degrees (or 5 cm) either
way from the rig's own value, measured back on the rig Blender evaluates."""

from __future__ import annotations

import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import errors, metric_requests  # noqa: E402

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
    for item in scene.npe.metrics:
        want = item.measured + sign * STEP[item.unit]
        if not item.range_min < want < item.range_max:
            continue
        tried += 1
        start = item.measured
        item.enabled = True
        setattr(item, item.value_prop, want)  # the slider: its update callback edits the pose
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
