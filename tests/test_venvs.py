"""scripts/venvs.py: when a venv counts as up to date (the build and test.sh both rely on it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scripts import venvs


def write_pins(folder: Path) -> tuple[Path, Path]:
    base, top = folder / "requirements.txt", folder / "requirements-x.txt"
    base.write_text("numpy==1.26.4\n")
    top.write_text("# comment\n-r requirements.txt\npytest==8.4.2\n")
    return base, top


def test_stamp_follows_includes(tmp_path: Path) -> None:
    base, top = write_pins(tmp_path)
    assert venvs.requirement_files([top]) == [top.resolve(), base.resolve()]
    before = venvs.stamp([top])
    base.write_text("numpy==1.26.3\n")
    assert venvs.stamp([top]) != before


def test_missing_include_is_reported(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("--requirement missing.txt\n")
    with pytest.raises(venvs.VenvError, match=r"missing\.txt"):
        venvs.stamp([tmp_path / "r.txt"])


def test_current_only_with_a_matching_stamp(tmp_path: Path) -> None:
    _, top = write_pins(tmp_path)
    venv = tmp_path / "venv"
    assert not venvs.is_current(venv, [top])
    venvs.venv_python(venv).parent.mkdir(parents=True)
    venvs.venv_python(venv).write_text("")
    assert not venvs.is_current(venv, [top])  # no stamp: an install never finished
    (venv / venvs.STAMP_NAME).write_text(venvs.stamp([top]) + "\n")
    assert venvs.is_current(venv, [top])
    assert venvs.ensure_venv(venv, [top]) == venvs.venv_python(venv)  # nothing to do
    top.write_text(top.read_text() + "ruff==0.14.3\n")
    assert not venvs.is_current(venv, [top])


def test_a_full_disk_is_refused_before_pip_runs(tmp_path: Path) -> None:
    venv = tmp_path / "not" / "yet" / "venv"
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(venvs.VenvError, match=r"GiB free on the disk of .*free some space"):
        venvs.check_free_space(venv, min_free=free * 2)
    venvs.check_free_space(venv, min_free=1)  # enough: no error
    assert not venv.exists()
