"""``export --about``: the manifest says which data a model set learned from and its licence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TinySet
from training.cli import main

ABOUT = {"name": "CMU", "data": "CMU mocap, 2,101 clips", "licence": "free for all uses",
         "commercial_use": True, "credit": "The data used in this project was obtained from "
         "mocap.cs.cmu.edu. The database was created with funding from NSF EIA-0196217."}


def test_export_about_lands_in_the_manifest(tiny_set: TinySet, tmp_path: Path) -> None:
    about = tmp_path / "about.json"
    about.write_text(json.dumps(ABOUT))
    out = tmp_path / "models"
    assert main(["export", "--runs", str(tiny_set.runs), "--out", str(out),
                 "--about", str(about)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["about"] == ABOUT


@pytest.mark.parametrize("about", [{"name": "x"}, {**ABOUT, "commercial_use": "yes"}, None])
def test_bad_about_is_refused_before_writing(about: dict | None, tiny_set: TinySet,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "about.json"
    path.write_text("{not json" if about is None else json.dumps(about))
    out = tmp_path / "models"
    assert main(["export", "--runs", str(tiny_set.runs), "--out", str(out),
                 "--about", str(path)]) == 2
    assert "about.json" in capsys.readouterr().err
    assert not out.exists()
