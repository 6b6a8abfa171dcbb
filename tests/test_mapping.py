"""Skeleton mapping: presets, auto-detection, JSON overrides, toe synthesis."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import mapping
from blender_addon.core.mapping import (
    PRESETS,
    TOE_PITCH_DEG,
    JointMap,
    MappingError,
    apply_mapping,
    detect_mapping,
    load_mapping_json,
    resolve_mapping,
    save_mapping_json,
)
from blender_addon.core.skeleton import BONE_LENGTHS, JOINT_INDEX, JOINTS, yup_to_blender
from tests.rig_families import (
    CENTER,
    FAMILIES,
    HEURISTIC_FAMILIES,
    Rig,
    bandai_rig,
    build,
    chain,
    character1_rig,
    cmu_rig,
    daz_rig,
    metarig,
    mixamo_rig,
    optitrack_rig,
    rigify_rig,
)


def heuristic(rig: Rig) -> dict[str, str]:
    """The name + structure heuristic alone (presets bypassed), as source names."""
    names, parents = rig
    infos = mapping._describe(names)
    found = mapping._Detector(infos, mapping._Tree(parents), {}).run()
    return {c: names[found[c]] for c in JOINTS if c in found}


def shuffled(rig: Rig, seed: int) -> Rig:
    """The same skeleton with its joints listed in another order (Blender bone order)."""
    names, parents = rig
    perm = np.random.default_rng(seed).permutation(len(names))
    new_index = {int(old): new for new, old in enumerate(perm)}
    return [names[i] for i in perm], [-1 if parents[i] < 0 else new_index[parents[i]] for i in perm]


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_detection_maps_every_family(family: str) -> None:
    make, preset = FAMILIES[family]
    (names, parents), want = make()
    jm = detect_mapping(names, parents)
    assert jm.joints == want
    assert jm.source == preset
    assert set(jm.synthesized) == {"l_toe", "r_toe"} - set(want)


@pytest.mark.parametrize("family", HEURISTIC_FAMILIES)
def test_heuristic_alone_agrees_in_any_joint_order(family: str) -> None:
    rig, want = FAMILIES[family][0]()
    assert heuristic(rig) == want
    for seed in range(3):
        assert heuristic(shuffled(rig, seed)) == want


@pytest.mark.parametrize("preset", ["bandai", "cmu", "mixamo", "daz", "optitrack", "rigify",
                                    "metarig"])
def test_presets_by_name(preset: str) -> None:
    make = {"bandai": bandai_rig, "cmu": cmu_rig, "mixamo": mixamo_rig, "daz": daz_rig,
            "optitrack": optitrack_rig, "rigify": rigify_rig,
            "metarig": metarig}[preset]  # fmt: skip
    (names, parents), want = make()
    jm = resolve_mapping(names, parents, preset)
    assert (jm.joints, jm.source) == (want, preset)
    assert set(PRESETS[preset]) <= set(JOINTS)
    assert preset in jm.summary() and f"left arm: {want['l_clavicle']}," in jm.summary()


def test_preset_that_does_not_fit_names_the_missing_source_joints() -> None:
    (names, parents), _ = bandai_rig()
    with pytest.raises(MappingError, match="LowerBack"):
        resolve_mapping(names, parents, "cmu")


def test_full_generated_rigify_rig_prefers_deform_bones() -> None:
    (def_names, def_parents), want = rigify_rig()
    (org_names, org_parents), _ = rigify_rig("ORG-")
    controls = ["root", "torso", "hips", "chest", "neck", "head", "shoulder.L", "shoulder.R",
                "thigh_fk.L", "MCH-thigh_parent.L", "upper_arm_fk.L"]  # fmt: skip
    names = org_names + controls + def_names
    parents = org_parents + [-1] * len(controls)
    parents += [p + len(org_names) + len(controls) if p >= 0 else -1 for p in def_parents]
    jm = detect_mapping(names, parents)
    assert (jm.joints, jm.source) == (want, "rigify")


def test_rigify_twist_bones_are_never_mapped() -> None:
    (names, parents), _ = rigify_rig()
    for jm in (detect_mapping(names, parents), resolve_mapping(names, parents, "metarig")):
        assert not any(n.endswith(".001") and "spine" not in n for n in jm.joints.values())


def test_chest_is_the_clavicles_parent() -> None:
    (names, parents), _ = character1_rig()  # Spine..Spine3: the clavicles hang from Spine3
    jm = detect_mapping(names, parents)
    assert jm.joints["chest"] == "Character1_Spine3"
    assert jm.joints["spine"] == "Character1_Spine"
    # clavicles on Spine2: chest follows and neck is the next joint up (a Mixamo-named rig
    # like this one fits the mixamo preset too, whose neck is Neck: check the heuristic)
    for s in ("Left", "Right"):
        parents[names.index(f"Character1_{s}Shoulder")] = names.index("Character1_Spine2")
    found = heuristic((names, parents))
    assert (found["chest"], found["neck"]) == ("Character1_Spine2", "Character1_Spine3")


def test_biped_like_clavicles_under_the_neck() -> None:
    pairs = [("Bip01", None), *chain("Bip01", "Bip01 Pelvis", "Bip01 Spine", "Bip01 Spine1",
                                     "Bip01 Neck", "Bip01 Head")]  # fmt: skip
    for s in "LR":
        arm = ("Clavicle", "UpperArm", "Forearm", "Hand")
        pairs += chain("Bip01 Neck", *(f"Bip01 {s} {n}" for n in arm))
        pairs += chain(
            "Bip01 Spine", *(f"Bip01 {s} {n}" for n in ("Thigh", "Calf", "Foot", "Toe0"))
        )
    names, parents = build(pairs)
    jm = detect_mapping(names, parents)
    assert [jm.joints[c] for c in CENTER] == [
        "Bip01 Pelvis", "Bip01 Spine", "Bip01 Spine1", "Bip01 Neck", "Bip01 Head"
    ]  # fmt: skip
    assert (jm.joints["l_thigh"], jm.joints["r_toe"]) == ("Bip01 L Thigh", "Bip01 R Toe0")


def test_missing_hand_lists_it_with_close_source_names() -> None:
    (names, parents), _ = bandai_rig()
    names[names.index("Hand_L")] = "Hnd_L"
    with pytest.raises(MappingError) as err:
        detect_mapping(names, parents)
    message = str(err.value)
    assert "l_hand" in message and "Hnd_L" in message
    assert "r_hand" not in message


def test_missing_spine_joints_are_listed() -> None:
    names, parents = build(
        [*chain(None, "Hips", "Chest", "Head")]
        + [p for s in "LR" for p in chain("Chest", f"Shoulder_{s}", f"UpperArm_{s}",
                                          f"LowerArm_{s}", f"Hand_{s}")]
        + [p for s in "LR" for p in chain("Hips", f"UpperLeg_{s}", f"LowerLeg_{s}", f"Foot_{s}")]
    )  # fmt: skip
    with pytest.raises(MappingError, match=r"spine .*neck "):
        detect_mapping(names, parents)


# --- JSON maps -----------------------------------------------------------------------------


def test_json_round_trip_and_override(tmp_path: Path) -> None:
    (names, parents), want = cmu_rig()
    jm = detect_mapping(names, parents)
    path = tmp_path / "cmu_map.json"
    save_mapping_json(path, jm)
    assert load_mapping_json(path) == want
    assert [p.name for p in tmp_path.iterdir()] == ["cmu_map.json"]  # no temp file left
    again = resolve_mapping(names, parents, path)
    assert (again.joints, again.source) == (want, str(path))
    # a partial override: the rest is still detected
    path.write_text(json.dumps({"joints": {"spine": "Spine"}}))
    partial = resolve_mapping(names, parents, str(path))
    assert partial.joints == want | {"spine": "Spine"}
    # a bare {canonical: source} object works too
    path.write_text(json.dumps({"spine": "Spine"}))
    assert load_mapping_json(path) == {"spine": "Spine"}


def test_override_anchors_the_heuristic(tmp_path: Path) -> None:
    (names, parents), want = character1_rig()
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"joints": {"chest": "Character1_Spine2"}}))
    jm = resolve_mapping(names, parents, path)
    assert jm.joints == want | {"chest": "Character1_Spine2", "neck": "Character1_Spine3"}


def test_bad_json_overrides_name_the_file(tmp_path: Path) -> None:
    (names, parents), _ = bandai_rig()
    cases = {
        "ghost.json": ({"joints": {"l_hand": "Hand_Left"}}, "Hand_Left"),
        "unknown.json": ({"joints": {"left_hand": "Hand_L"}}, "left_hand"),
        "typed.json": ({"joints": {"l_hand": 3}}, "l_hand"),
        "broken.json": ("{not json", "cannot read"),
        "twice.json": ({"joints": {"chest": "Spine"}}, "twice"),
    }
    for file, (content, needle) in cases.items():
        path = tmp_path / file
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(MappingError) as err:
            resolve_mapping(names, parents, path)
        assert file in str(err.value) or "twice" in str(err.value)
        assert needle in str(err.value)
    with pytest.raises(MappingError, match="neither"):
        resolve_mapping(names, parents, tmp_path / "absent.json")


# --- applying a map --------------------------------------------------------------------------


def test_apply_mapping_picks_the_source_joints() -> None:
    (names, parents), want = mixamo_rig()
    jm = detect_mapping(names, parents)
    positions = np.random.default_rng(0).normal(size=(5, len(names), 3))
    out, notes = apply_mapping(jm, names, positions)
    assert out.shape == (5, 21, 3) and notes == []
    for canon, src in want.items():
        np.testing.assert_array_equal(out[:, JOINT_INDEX[canon]], positions[:, names.index(src)])


def standing_daz(
    scale: float, yaw_deg: float, frames: int = 3
) -> tuple[JointMap, list, np.ndarray]:
    """DAZ (toeless) positions: a standing body of ``scale`` x canonical size, turned by yaw."""
    (names, parents), _ = daz_rig()
    jm = resolve_mapping(names, parents, "auto", has_end_site=lambda n: False)
    rng = np.random.default_rng(1)
    pos = rng.normal(scale=0.3, size=(len(names), 3))  # irrelevant joints anywhere
    shin = BONE_LENGTHS[JOINT_INDEX["l_foot"]] * scale
    for s, x in (("l", 0.1), ("r", -0.1)):
        pos[names.index(f"{s}Thigh")] = (x, 0.9, 0.02)
        pos[names.index(f"{s}Shin")] = (x, 0.5, 0.05)
        pos[names.index(f"{s}Foot")] = (x, 0.5 - shin, 0.05)
    yaw = np.radians(yaw_deg)
    rot = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
    return jm, names, np.repeat((pos @ rot.T)[None], frames, axis=0)


@pytest.mark.parametrize("yaw_deg", [0.0, 90.0, -135.0])
def test_synthesized_toe_points_forward_and_down(yaw_deg: float) -> None:
    scale = 1.5
    jm, names, pos = standing_daz(scale, yaw_deg)
    assert jm.synthesized["l_toe"] == "canonical offset from lFoot"
    out, notes = apply_mapping(jm, names, pos)
    yaw = np.radians(yaw_deg)
    forward = np.array([np.sin(yaw), 0.0, np.cos(yaw)])  # +Z turned about Y
    pitch = np.radians(TOE_PITCH_DEG)
    direction = np.cos(pitch) * forward - np.sin(pitch) * np.array([0.0, 1.0, 0.0])
    length = BONE_LENGTHS[JOINT_INDEX["l_toe"]] * scale
    for s in "lr":
        toe = out[:, JOINT_INDEX[f"{s}_toe"]] - out[:, JOINT_INDEX[f"{s}_foot"]]
        np.testing.assert_allclose(toe, np.broadcast_to(direction * length, toe.shape), atol=1e-9)
    assert len(notes) == 2 and all("no End Site" in n for n in notes)
    # Blender's Z-up world gives the same toes in its own axes
    out_z, _ = apply_mapping(jm, names, yup_to_blender(pos), up_axis=2)
    np.testing.assert_allclose(out_z, yup_to_blender(out), atol=1e-9)


def test_toe_at_the_end_site_when_there_is_one() -> None:
    jm, names, pos = standing_daz(1.0, 0.0)
    foot = names.index("lFoot")
    end = pos[:, foot] + np.array([0.0, -0.06, 0.12])
    out, notes = apply_mapping(jm, names, pos, end_positions={foot: end})
    np.testing.assert_allclose(out[:, JOINT_INDEX["l_toe"]], end)
    assert "lFoot's End Site" in notes[0] and "no End Site" in notes[1]
    # a placeholder End Site (shorter than 1 mm) falls back to the canonical offset
    stub = pos[:, foot] + 0.0004
    out, notes = apply_mapping(jm, names, pos, end_positions={foot: stub})
    toe = out[:, JOINT_INDEX["l_toe"]] - out[:, JOINT_INDEX["l_foot"]]
    np.testing.assert_allclose(np.linalg.norm(toe, axis=-1), BONE_LENGTHS[JOINT_INDEX["l_toe"]])
    assert "shorter than 1 mm" in notes[0]
    (names2, parents2), _ = daz_rig()
    jm2 = resolve_mapping(names2, parents2, "daz", has_end_site=lambda n: n == "lFoot")
    assert jm2.synthesized == {"l_toe": "from lFoot's End Site",
                               "r_toe": "canonical offset from rFoot"}  # fmt: skip


def test_apply_mapping_rejects_a_map_for_another_rig() -> None:
    (names, parents), _ = bandai_rig()
    jm = detect_mapping(names, parents)
    (other, _), _ = cmu_rig()
    with pytest.raises(MappingError, match="Chest"):
        apply_mapping(jm, other, np.zeros((1, len(other), 3)))


# --- real data -----------------------------------------------------------------------------


def bvh_hierarchy(lines: Sequence[str]) -> tuple[list[str], list[int], set[str]]:
    """Joint names, parents, and the joints with an End Site, from BVH HIERARCHY lines."""
    names: list[str] = []
    parents: list[int] = []
    ends: set[str] = set()
    stack: list[int] = []
    pending = -1
    for line in lines:
        words = line.split()
        if not words:
            continue
        if words[0] == "MOTION":
            break
        if words[0] in ("ROOT", "JOINT"):
            names.append(words[1])
            parents.append(stack[-1] if stack else -1)
            pending = len(names) - 1
        elif words[0] == "End":
            ends.add(names[stack[-1]])
            pending = stack[-1]  # the End Site's braces keep its joint on the stack
        elif words[0] == "{":
            stack.append(pending)
        elif words[0] == "}":
            stack.pop()
    return names, parents, ends


@pytest.mark.realdata
def test_real_bandai_file_auto_detects_the_bandai_preset(bandai_small_archive: Path) -> None:
    with tarfile.open(bandai_small_archive, "r|xz") as tar:
        member = next(m for m in tar if m.isfile() and m.name.endswith(".bvh"))
        text = tar.extractfile(member).read().decode("utf-8", errors="replace")
    names, parents, ends = bvh_hierarchy(text.splitlines())
    assert names[0] == "joint_Root" and len(names) == 22
    jm = resolve_mapping(names, parents, "auto", has_end_site=ends.__contains__)
    assert (jm.source, jm.joints, jm.synthesized) == ("bandai", PRESETS["bandai"], {})
