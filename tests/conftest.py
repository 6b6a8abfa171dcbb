"""Shared fixtures: where the real mocap lives, skipped with a message when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BANDAI_DIR = REPO.parent / "shared" / "data" / "bandai-namco"
BANDAI_SMALL_ARCHIVE = BANDAI_DIR / "bandai-namco-dataset-1.tar.xz"


@pytest.fixture(scope="session")
def bandai_dir() -> Path:
    """The Bandai Namco archives folder; skips the test when ../shared is not beside the repo."""
    if not BANDAI_SMALL_ARCHIVE.is_file():
        pytest.skip(f"real mocap not found at {BANDAI_DIR} (needs ../shared beside the repo)")
    return BANDAI_DIR


@pytest.fixture(scope="session")
def bandai_small_archive(bandai_dir: Path) -> Path:
    """Dataset 1 (174 clips, 7 MB): small enough to stream in a test."""
    return BANDAI_SMALL_ARCHIVE
