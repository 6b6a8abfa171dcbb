"""Inside bpy: the README's five-minute walkthrough, run through the real operators on a
Bandai Namco BVH character and rendered before and after each step (started by
``python -m training render-walkthrough``).

Writes raw pictures and ``walkthrough.json`` (which pictures make which figure, with the
numbers each step produced) into ``--out``; the dev side composes and compresses them.
The scene only adds what rendering needs: capsules on the bones, a sphere on each effector
empty (empties do not render), a marker for the drag, a floor, a camera.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bpy
import numpy as np

from blender_addon import mapped_rig, metric_requests, propagation
from blender_addon.core.fileio import write_json
from training.blender_side import host, rigs, stage

PANEL = (400, 400)  # px: each before/after picture
STRIP_PANEL = (200, 280)  # px: each frame of the propagation strip
EDIT_FRAME = 20  # the frame edited in steps 1-5 (the clip's character stands)
PROPAGATE_FRAME = 61  # step 6 edits this frame (mid-bow) and spreads it over +-RADIUS
RADIUS = 20
STRIP_STEP = 10  # frames between the strip's pictures
# Where the right hand's empty is dragged, from the right shoulder (m, world; the body's
# own forward and right, level): step 3 raises the hand in front, above the shoulder;
# step 6 holds the arm out to the side.
RAISE_OFFSET = (0.20, 0.05, 0.36)  # (forward, right, up)
SIDE_OFFSET = (0.05, 0.42, 0.08)
METRICS = ("l_knee_bend", "r_knee_bend")  # sliders step 4 ticks (both knees: a crouch)
BEND_DEG = 40.0  # requested on top of each measured bend
CAMERA_SIDE = 0.6  # of the body's right per unit of its forward: a 3/4 front view
CAMERA_RISE = 0.3  # of the height per unit of forward: looking slightly down
LOOK_HEIGHT = 0.95  # m: the camera aims at this height above the pelvis's ground point
EXTENT = 1.95  # m: vertical extent a picture frames
MOVED = "r_hand"
# Step 7, Neural Grab in Pose Mode: the left foot pinned, the left hand (on the hip at the
# keyed frame; the right one is raised) grabbed and moved this far (the body's own forward,
# right, up; m), as typed after Ctrl+Shift+G.
GRABBED = "l_hand"
GRAB_OFFSET = (0.25, 0.0, 0.10)
PINNED = "l_foot"


def _op(op: Any, **kwargs: Any) -> None:
    """Call an operator as a user would (with an undo step); stop on anything else than
    FINISHED, so a picture never shows a step that did not happen."""
    result = op("EXEC_DEFAULT", True, **kwargs)
    if result != {"FINISHED"}:
        raise RuntimeError(f"{op.idname_py()} returned {result}")


def _empty(obj: bpy.types.Object, joint: str) -> bpy.types.Object:
    return next(item.empty for item in obj.npe.effectors if item.joint == joint)


def _heads(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    return rigs.mapped_heads(obj)


class Shots:
    """Renders pictures into ``raw/`` and records the figures made of them."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.raw = out / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.figures: list[dict[str, Any]] = []

    def shoot(self, name: str, size: Sequence[int] = PANEL) -> str:
        stage.setup_render(*size)
        host.progress(f"render {name}")
        stage.render(self.raw / f"{name}.png")
        return f"raw/{name}.png"

    def figure(self, file: str, rows: list[list[tuple[str, str]]], **facts: Any) -> None:
        """A figure: rows of (picture, caption)."""
        self.figures.append({"file": file, "rows": rows, "facts": facts})


def shoulder_target(obj: bpy.types.Object, offset: Sequence[float]) -> np.ndarray:
    """A point ``offset`` (forward, right, up) from the right shoulder joint."""
    fwd, right = stage.facing(obj)
    return _heads(obj)["r_upperarm"] + offset[0] * fwd + offset[1] * right + \
        offset[2] * np.array([0.0, 0.0, 1.0])


def aim_camera(obj: bpy.types.Object, frames: Sequence[int] | None = None) -> None:
    """A 3/4 front view from the character's right, framing it (over ``frames``)."""
    scene = bpy.context.scene
    now = scene.frame_current
    pelvis = []
    for f in frames or (now,):
        scene.frame_set(f)
        pelvis.append(_heads(obj)["pelvis"])
    if frames:
        scene.frame_set(now)
    fwd, right = stage.facing(obj)
    target = np.mean(pelvis, axis=0)
    target[2] = LOOK_HEIGHT
    stage.camera_looking_at(target, fwd + CAMERA_SIDE * right + np.array([0, 0, CAMERA_RISE]),
                            EXTENT)


def _select_bones(obj: bpy.types.Object, names: Sequence[str]) -> None:
    """Select these pose bones only (the flag moved from Bone in 4.x to PoseBone in 5.0)."""
    for pb in obj.pose.bones:
        (pb if "select" in pb.bl_rna.properties else pb.bone).select = pb.name in names


def grab_steps(obj: bpy.types.Object) -> dict[str, Any]:
    """The user guide's "Grabbing the rig" steps, through the operators: Pose Mode, the left
    foot's bone selected and pinned (Ctrl+Shift+P), the left hand's bone selected and
    grabbed (Ctrl+Shift+G) by :data:`GRAB_OFFSET`, confirmed; back to Object Mode. Returns
    what it did (world target, how far the hand ended from it, how far the pinned foot
    and the other joints moved)."""
    joints = mapped_rig.mapping_dict(obj.data)
    rigs.select_only(obj)
    bpy.ops.object.mode_set(mode="POSE")
    _select_bones(obj, [joints[PINNED]])
    _op(bpy.ops.npe.toggle_pin)
    _select_bones(obj, [joints[GRABBED]])
    fwd, right = stage.facing(obj)
    offset = GRAB_OFFSET[0] * fwd + GRAB_OFFSET[1] * right + np.array([0.0, 0.0,
                                                                        GRAB_OFFSET[2]])
    before = _heads(obj)
    _op(bpy.ops.npe.neural_grab, offset=offset.tolist())
    after = _heads(obj)
    bpy.ops.object.mode_set(mode="OBJECT")
    target = before[GRABBED] + offset
    others = [j for j in before if j not in (GRABBED, PINNED)]
    return {"start": before[GRABBED].tolist(), "target": target.tolist(),
            "moved_cm": float(np.linalg.norm(offset) * 100),
            "reach_mm": float(np.linalg.norm(after[GRABBED] - target) * 1e3),
            "pinned_moved_mm": float(np.linalg.norm(after[PINNED] - before[PINNED]) * 1e3),
            "others_moved_cm": float(np.mean([np.linalg.norm(after[j] - before[j])
                                              for j in others]) * 100)}


def walkthrough(models: Path, bvh: Path, out: Path) -> dict[str, Any]:
    shots = Shots(out)
    scene = host.new_scene(models)

    # 1. Import the BVH (Blender's own importer) and map the rig.
    host.progress("step 1: import the BVH and map the rig")
    obj = rigs.import_bvh(bvh)
    rigs.select_only(obj)
    _op(bpy.ops.npe.map_rig, preset="auto")
    mapping = dict(mapped_rig.mapping_dict(obj.data))
    scene.frame_set(EDIT_FRAME)
    stage.dress(obj)
    stage.floor(0.0)
    aim_camera(obj)
    step1 = shots.shoot("01_mapped")
    shots.figure("1-import-and-map.png", [[(step1, f"{obj.name}: imported, mapped")]],
                 bones=len(obj.data.bones), mapped=len(mapping), source=obj.data.npe_mapping.source)

    # 2. Effectors on hands, feet and head.
    host.progress("step 2: add effectors")
    _op(bpy.ops.npe.add_effectors, preset="LIMBS")
    spheres = stage.effector_spheres(obj)
    step2 = shots.shoot("02_effectors")
    shots.figure("2-add-effectors.png", [[(step1, "before"),
                                          (step2, "after: Add Effectors › Hands, Feet and Head")]],
                 effectors=[item.joint for item in obj.npe.effectors])

    # 3. Live on; drag the right hand's empty up.
    host.progress("step 3: drag the right hand (live)")
    scene.npe.live = True
    empty = _empty(obj, MOVED)
    start = np.array(empty.location)
    target = shoulder_target(obj, RAISE_OFFSET)
    spheres = stage.effector_spheres(obj, active=MOVED)
    before3 = shots.shoot("03_before")
    empty.location = target
    bpy.context.view_layer.update()  # the live handler solves here
    reach = float(np.linalg.norm(_heads(obj)[MOVED] - target))
    marker = stage.drag_marker(start, target)
    step3 = shots.shoot("03_drag")
    shots.figure("3-drag-the-hand.png", [[(before3, "before"),
                                          (step3, "after: right hand's empty dragged up, Live")]],
                 reach_mm=reach * 1e3, moved_cm=float(np.linalg.norm(target - start) * 100))
    stage.remove(marker)

    # 4. Metric sliders: bend both knees (the head's effector would hold the body up).
    host.progress("step 4: metric sliders")
    stage.remove([spheres.pop("head")])
    obj.npe.active_effector = next(i for i, item in enumerate(obj.npe.effectors)
                                   if item.joint == "head")
    _op(bpy.ops.npe.remove_effectors)
    before4 = shots.shoot("04_before")
    start_values = metric_requests.measure(scene, obj)
    requested = {}
    for name in METRICS:
        item = obj.npe.metrics[name]
        item.enabled = True  # measures first: the slider starts at the pose's own value
        requested[name] = start_values[name] + BEND_DEG
        item.set_requested(requested[name])  # the slider's update solves
    after = {name: metric_requests.measure(scene, obj)[name] for name in METRICS}
    step4 = shots.shoot("04_metrics")
    bends = ", ".join(f"{start_values[n]:.0f}°" for n in METRICS)
    now = ", ".join(f"{after[n]:.0f}°" for n in METRICS)
    shots.figure("4-metric-sliders.png", [[(before4, f"before: knee bends {bends}"),
                                           (step4, f"after: sliders +{BEND_DEG:.0f}°, "
                                                   f"knee bends {now}")]],
                 before={n: start_values[n] for n in METRICS}, requested=requested,
                 after=after)

    # 5. Clean Pose, then Insert Keyframe.
    host.progress("step 5: clean pose, insert keyframe")
    _op(bpy.ops.npe.clean_pose)
    _op(bpy.ops.npe.insert_keyframe)
    step5 = shots.shoot("05_clean_keyed")
    shots.figure("5-clean-and-key.png", [[(step4, "before"),
                                          (step5, f"after: Clean Pose, Insert Keyframe "
                                                  f"(frame {EDIT_FRAME})")]])
    for name in METRICS:  # the requests are done with; later edits must not bend
        obj.npe.metrics[name].enabled = False

    # 6. Another frame: a fresh edit spread over +-RADIUS frames, keyed.
    host.progress("step 6: propagate an edit over neighbouring frames")
    scene.frame_set(PROPAGATE_FRAME)
    stage.remove(spheres.values())
    _op(bpy.ops.npe.remove_effectors, all=True)
    strip = list(range(PROPAGATE_FRAME - RADIUS, PROPAGATE_FRAME + RADIUS + 1, STRIP_STEP))
    aim_camera(obj, strip)
    originals, hands = [], []
    for f in strip:
        scene.frame_set(f)
        hands.append(_heads(obj)[MOVED])
        originals.append((shots.shoot(f"06_before_{f}", STRIP_PANEL), f"frame {f}"))
    scene.frame_set(PROPAGATE_FRAME)
    _op(bpy.ops.npe.add_effectors, preset="LIMBS")
    target = shoulder_target(obj, SIDE_OFFSET)
    _empty(obj, MOVED).location = target
    bpy.context.view_layer.update()  # live: the edited frame first
    p = scene.npe.propagation
    p.range_mode, p.radius, p.curve = "RADIUS", RADIUS, "SMOOTH"
    window, w = (a.tolist() for a in propagation.weights(scene))
    _op(bpy.ops.npe.spread_edit)
    scene.npe.live = False
    edited, moved = [], []
    for f, hand in zip(strip, hands, strict=True):
        scene.frame_set(f)
        weight = w[window.index(f)] if f in window else 0.0
        moved.append(round(float(np.linalg.norm(_heads(obj)[MOVED] - hand)) * 100, 1))
        edited.append((shots.shoot(f"06_after_{f}", STRIP_PANEL), f"W = {weight:.2f}"))
    scene.frame_set(PROPAGATE_FRAME)
    reach = float(np.linalg.norm(_heads(obj)[MOVED] - target))
    shots.figure("6-propagate.png", [originals, edited], frame=PROPAGATE_FRAME, radius=RADIUS,
                 frames=strip, hand_moved_cm=moved, reach_mm=reach * 1e3)

    # 7. Neural Grab in Pose Mode, on the keyed standing frame: pin a foot, grab a hand.
    host.progress("step 7: Neural Grab in Pose Mode")
    scene.frame_set(EDIT_FRAME)
    _op(bpy.ops.npe.remove_effectors, all=True)
    aim_camera(obj)
    before7 = shots.shoot("07_before")
    facts = grab_steps(obj)
    spheres = stage.effector_spheres(obj)  # the pin's empty
    marker = stage.drag_marker(facts["start"], facts["target"])
    step7 = shots.shoot("07_grab")
    shots.figure("7-grab.png", [[(before7, "before"),
                                 (step7, "after: left foot pinned, left hand grabbed")]],
                 **facts)
    stage.remove([*marker, *spheres.values()])
    return {"clip": bvh.name, "models": str(models), "blender": bpy.app.version_string,
            "edit_frame": EDIT_FRAME, "propagate_frame": PROPAGATE_FRAME,
            "figures": shots.figures}


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="training.blender_side.walkthrough", description=__doc__)
    p.add_argument("--models", required=True, type=Path)
    p.add_argument("--bvh", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path, help="folder for raw/ and the JSON")
    args = p.parse_args(argv)
    host.start()
    result = walkthrough(args.models, args.bvh, args.out)
    write_json(args.out / "walkthrough.json", result)
    host.progress(f"wrote {args.out / 'walkthrough.json'}")


if __name__ == "__main__":
    main()
