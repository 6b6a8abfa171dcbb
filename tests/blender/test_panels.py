"""The N-panel's draw code against a recording layout (background Blender draws no UI):
every property, operator and list it names must exist, in every state the panel shows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy45 / .venv-bpy50)")

from blender_addon import panels  # noqa: E402
from tests.blender import rigs  # noqa: E402

_CONTAINERS = ("row", "column", "box", "split", "grid_flow", "column_flow")


def _has_prop(data: Any, name: str) -> bool:
    """An RNA property, or an ID property drawn as ``'["key"]'``."""
    if name.startswith('["') and name.endswith('"]'):
        return name[2:-2] in data.keys()
    return name in data.bl_rna.properties


def _operator(idname: str) -> Any:
    family, name = idname.split(".")
    op = getattr(getattr(bpy.ops, family), name)
    op.get_rna_type()  # raises for an unknown operator
    return op


class _OperatorProps:
    def __init__(self, idname: str) -> None:
        object.__setattr__(self, "_rna", _operator(idname).get_rna_type())

    def __setattr__(self, name: str, value: object) -> None:
        assert name in self._rna.properties, f"operator has no property {name!r}"


class RecordingLayout:
    """Checks every call the panels make; records labels for the assertions."""

    def __init__(self, labels: list[str]) -> None:
        self.labels = labels

    def __getattr__(self, name: str) -> Any:
        if name in _CONTAINERS:
            return lambda *_a, **_k: RecordingLayout(self.labels)
        raise AttributeError(f"the test layout does not know UILayout.{name}")

    def prop(self, data: Any, prop: str, **_kw: object) -> None:
        assert _has_prop(data, prop), f"{data} has no property {prop!r}"

    def prop_search(self, data: Any, prop: str, search_data: Any, search_prop: str,
                    **_kw: object) -> None:
        assert _has_prop(data, prop) and _has_prop(search_data, search_prop)

    def operator(self, idname: str, **_kw: object) -> _OperatorProps:
        return _OperatorProps(idname)

    def operator_menu_enum(self, idname: str, prop: str, **_kw: object) -> None:
        assert prop in _operator(idname).get_rna_type().properties

    def label(self, text: str = "", **_kw: object) -> None:
        self.labels.append(text)

    def separator(self, **_kw: object) -> None:
        pass

    def progress(self, factor: float = 0.0, text: str = "", **_kw: object) -> None:
        assert 0.0 <= factor <= 1.0
        self.labels.append(text)

    def template_curve_mapping(self, data: Any, prop: str, **_kw: object) -> None:
        assert _has_prop(data, prop)

    def template_list(self, list_type: str, _list_id: str, data: Any, prop: str,
                      active_data: Any, active_prop: str, **_kw: object) -> None:
        assert _has_prop(data, prop) and _has_prop(active_data, active_prop)
        ui_list = getattr(panels, list_type)
        for i, item in enumerate(getattr(data, prop)):
            ui_list.draw_item(None, bpy.context, RecordingLayout(self.labels), data, item, 0,
                              active_data, active_prop, i)


def _draw_all() -> list[str]:
    labels: list[str] = []
    for cls in panels.CLASSES:
        if issubclass(cls, bpy.types.Panel):
            if hasattr(cls, "poll") and not cls.poll(bpy.context):
                continue
            fake = type("FakePanel", (), {"layout": RecordingLayout(labels)})()
            cls.draw(fake, bpy.context)
    return labels


def test_panels_draw_in_every_state(scene: bpy.types.Scene) -> None:
    labels = _draw_all()  # nothing selected
    assert "Select an armature" in labels
    obj = rigs.mixamo()
    rigs.select_only(obj)
    assert any("not mapped" in label for label in _draw_all())
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    bpy.ops.npe.add_effectors("EXEC_DEFAULT", True, preset="LIMBS")
    scene.npe.propagation.curve = "CUSTOM"
    labels = _draw_all()
    assert any("21 joints mapped" in label for label in labels)
    assert any(label.startswith("Models: ") for label in labels)
    assert any(label.endswith("°") for label in labels)  # measured metric values
    obj.data.npe_mapping.warning = "hand Blender poses itself: map the controls"
    assert "hand Blender poses itself: map the controls" in _draw_all()
    obj.data.npe_mapping.warning = ""
    knee = next(m for m in obj.npe.metrics if m.name == "l_knee_bend")
    knee.enabled = True  # its slider spans the range the models know on this rig
    assert knee.range_min < knee.measured < knee.range_max
    _draw_all()
    knee.enabled = False
    bpy.data.objects.remove(obj.npe.effectors[0].empty)
    assert any("empty deleted" in label for label in _draw_all())
    rigs.select_only(obj.npe.effectors[1].empty)  # an effector shows its armature
    assert any("21 joints mapped" in label for label in _draw_all())
    assert np.isfinite([m.measured for m in obj.npe.metrics]).all()


def test_a_long_status_is_wrapped_to_the_sidebar(scene: bpy.types.Scene) -> None:
    """A note too long for one line of the sidebar is drawn as several, every word kept
    and in order, each line within the width the wrap allows; a short one stays one."""
    from blender_addon.core.pipeline import SHORT_MARK
    from blender_addon.errors import STATUS

    obj = rigs.mixamo()
    rigs.select_only(obj)
    bpy.ops.npe.map_rig("EXEC_DEFAULT", True)
    note = (f"l_hand: 1.7 cm {SHORT_MARK}: no pose was found that reaches it while holding "
            "the planted feet: move it nearer, or turn Keep Planted Feet off")
    width = len(panels.wrap_lines("x " * 200, bpy.context)[0]) + 1  # the wrap's width
    for text, several in ((note, True), ("Cannot solve", False)):
        STATUS[obj.name] = text
        labels = _draw_all()
        start = next(i for i, label in enumerate(labels) if label and text.startswith(label))
        lines = [labels[start]]
        while " ".join(lines) != text and text.startswith(" ".join(lines)):
            lines.append(labels[start + len(lines)])
        assert " ".join(lines) == text, labels
        assert (len(lines) > 1) == several and all(len(line) <= width for line in lines)
    STATUS.pop(obj.name)


def test_panel_defaults_are_the_engines(fresh_scene: bpy.types.Scene) -> None:
    """What a user gets in a character's panel is what the engine's API (and its
    benchmarks) use."""
    from dataclasses import fields

    from blender_addon.core.pipeline import SolveOptions

    obj = rigs.mixamo()
    rna = obj.npe.bl_rna.properties
    engine = SolveOptions()
    for f in fields(SolveOptions):
        assert f.name in rna, f"no panel option for SolveOptions.{f.name}"
        want = getattr(engine, f.name)
        for got in (rna[f.name].default, getattr(obj.npe, f.name)):
            assert got == (pytest.approx(want) if isinstance(want, float) else want), f.name


def test_model_picker_lists_every_shipped_set_with_its_licence(
        fresh_scene: bpy.types.Scene, models_dir: Any, tmp_path: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """models/ (the default set, here without an "about") and models/cmu-bandai/ (with
    one): both in the picker with their licence in one line; the summary names the data."""
    import json
    import shutil

    from blender_addon import model_sets

    def one_set(folder: str, names: list[str]) -> list[str]:  # a set, not its sub-sets
        return [n for n in names if (Path(folder) / n).is_dir()]

    shipped = tmp_path / "models"
    shutil.copytree(models_dir, shipped, ignore=one_set)
    manifest = json.loads((shipped / "manifest.json").read_text())
    manifest.pop("about", None)  # a set made before manifests had one
    (shipped / "manifest.json").write_text(json.dumps(manifest))
    second = shipped / "cmu-bandai"
    shutil.copytree(models_dir, second, ignore=one_set)
    manifest["about"] = {"name": "CMU + Bandai", "data": "CMU mocap + Bandai Namco",
                         "licence": "CC BY-NC 4.0", "commercial_use": False,
                         "credit": "The data used in this project was obtained from "
                                   "mocap.cs.cmu.edu."}
    (second / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(model_sets, "default_models_dir", lambda: shipped)
    model_sets.forget()
    items = model_sets.items(bpy.context, "")
    assert [i[1] for i in items] == ["Shipped · licence terms in its README",
                                     "CMU + Bandai · CC BY-NC 4.0, non-commercial use only"]
    assert "mocap.cs.cmu.edu" in items[1][2]
    fresh_scene.npe.model_set = items[1][0]
    assert fresh_scene.npe.model_path == "shipped:cmu-bandai"
    assert model_sets.folder(fresh_scene) == second
    summary = model_sets.summary(fresh_scene)
    assert max(len(line) for line in summary) <= model_sets.SUMMARY_WIDTH  # labels clip
    text = " ".join(line.strip() for line in summary)
    assert "Trained on: CMU mocap + Bandai Namco" in text
    assert "Licence: CC BY-NC 4.0, non-commercial use only" in text
    assert model_sets.load(fresh_scene).folder == second
    fresh_scene.npe.model_set = items[0][0]
    assert fresh_scene.npe.model_path == "" and model_sets.folder(fresh_scene) == shipped
    model_sets.forget()


def test_the_preferences_say_which_engine_runs(scene: bpy.types.Scene) -> None:
    """The add-on's preferences show whether the compiled kernels run (and which library),
    or why numpy does."""
    from blender_addon import preferences
    from blender_addon.core import native

    prefs = preferences.get_preferences()
    labels: list[str] = []
    fake = type("FakePreferences", (), {"layout": RecordingLayout(labels),
                                        "bl_rna": prefs.bl_rna})()
    preferences.NPE_AddonPreferences.draw(fake, bpy.context)
    assert labels[labels.index("Compiled Kernels") + 1] == native.status()
    if os.environ.get("NPE_REQUIRE_NATIVE") == "1":
        assert native.status() == f"on ({native.library_path().name})"
