"""Dataset builder: synthetic clips in folders and archives -> a checked .npz."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from blender_addon.core import skeleton
from blender_addon.core.normalize import facing_yaw
from tests.synth import synthetic_bvh
from training.cli import main
from training.data import DataError, PoseData, prepare

NUM_CLIPS = 10


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bvh")
    (folder / "sub").mkdir()
    for i in range(NUM_CLIPS):
        target = folder / ("sub" if i % 2 else ".") / f"clip_{i:02d}.bvh"
        target.write_text(synthetic_bvh(frames=20 + i, seed=i))
    broken = synthetic_bvh(frames=5, seed=99).rsplit("\n", 3)[0]  # truncated motion
    (folder / "broken.bvh").write_text(broken)
    return folder


@pytest.fixture(scope="module")
def prepared(clip_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("out") / "poses.npz"
    summary = prepare([str(clip_folder)], out, workers=2, progress=False)
    return summary, out


def test_summary_counts_and_skips_broken_file(prepared: tuple[dict, Path]) -> None:
    summary, _ = prepared
    assert summary["clips"] == NUM_CLIPS
    assert summary["frames"] == sum(20 + i for i in range(NUM_CLIPS))
    assert len(summary["skipped"]) == 1 and "broken.bvh" in summary["skipped"][0]
    assert sum(summary["split_clips"].values()) == NUM_CLIPS


def test_dataset_is_model_space_and_split_by_clip(prepared: tuple[dict, Path]) -> None:
    _, out = prepared
    data = PoseData.load(out)
    assert data.poses.shape == (sum(20 + i for i in range(NUM_CLIPS)), 21, 3)
    assert data.poses.dtype == np.float32
    lengths = skeleton.bone_lengths(data.poses.astype(np.float64))
    np.testing.assert_allclose(lengths, np.broadcast_to(skeleton.BONE_LENGTHS, lengths.shape),
                               atol=1e-5)
    np.testing.assert_allclose(data.poses[:, 0, [0, 2]], 0.0, atol=1e-6)
    assert np.abs(facing_yaw(data.poses.astype(np.float64))).max() < 1e-4
    for c in range(len(data.sources)):  # every frame of a clip has the clip's split
        assert len(np.unique(data.clip_split[data.clip[data.clip == c]])) == 1
    assert data.mean.shape == data.std.shape == (63,)
    assert (data.std > 0).all()
    first, last = data.clip_bounds()
    assert (data.clip[first] == data.clip).all() and (data.clip[last] == data.clip).all()
    assert (data.frame == np.arange(len(data.frame)) - first).all()


def test_split_is_seeded_and_archive_reads_like_folder(clip_folder: Path,
                                                       prepared: tuple[dict, Path],
                                                       tmp_path: Path) -> None:
    _, out = prepared
    archive = tmp_path / "clips.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(clip_folder, arcname="clips")
    again = tmp_path / "again.npz"
    prepare([str(archive)], again, workers=1, progress=False)
    a, b = PoseData.load(out), PoseData.load(again)
    np.testing.assert_array_equal(a.poses, b.poses)
    np.testing.assert_array_equal(a.clip_split, b.clip_split)
    other = tmp_path / "other.npz"
    prepare([str(clip_folder)], other, seed=7, workers=1, progress=False)
    assert not np.array_equal(PoseData.load(other).clip_split, a.clip_split)


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing\.npz"):
        PoseData.load(tmp_path / "missing.npz")
    bad = tmp_path / "other_skeleton.npz"
    np.savez(bad, joints=np.array(["a", "b"]), poses=np.zeros((1, 2, 3)), clip=np.zeros(1),
             frame=np.zeros(1), sources=np.array(["x"]), clip_split=np.zeros(1),
             mean=np.zeros(6), std=np.ones(6))
    with pytest.raises(DataError, match="skeleton mismatch"):
        PoseData.load(bad)
    junk = tmp_path / "junk.npz"
    junk.write_text("not a zip")
    with pytest.raises(DataError, match=r"junk\.npz"):
        PoseData.load(junk)


def test_cli_prepare_bad_path_exits_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture
                                            ) -> None:
    missing = tmp_path / "nowhere"
    out = tmp_path / "x.npz"
    assert main(["prepare", "--bvh", str(missing), "--out", str(out)]) != 0
    assert "nowhere" in capsys.readouterr().err
    assert not out.exists()
