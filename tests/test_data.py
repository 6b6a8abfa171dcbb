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
from training.data.dataset import (
    Z_UP_NOTE,
    DataError,
    PoseData,
    canonical_clip,
    dataset_up,
    prepare,
)

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


FPS_24 = 1 / 24


HIPS_X_ROTATION = 10  # motion column: joint_Root's 6 channels, then Hips' X/Y/Z pos, Z/X rot


ROOT_X_ROTATION = 4  # the motion column of the first root's X rotation (synthetic_bvh)


def _edit_frames(text: str, rows: dict[int, tuple[int, float] | None]) -> str:
    """Edit some motion rows: None zeroes every rotation (the skeleton's T-pose), a
    (column, degrees) pair adds to that channel."""
    lines = text.rstrip("\n").split("\n")
    top = lines.index("MOTION") + 3
    for row, value in rows.items():
        vals = [float(v) for v in lines[top + row].split()]
        if value is None:
            vals[9:] = [0.0] * (len(vals) - 9)  # hips rotation and every joint below
        else:
            vals[value[0]] += value[1]
        lines[top + row] = " ".join(f"{v:.5f}" for v in vals)
    return "\n".join(lines) + "\n"


def _resampled_count(frames: int) -> int:
    return int(np.floor((frames - 1) * FPS_24 * 30 + 1e-6)) + 1


def test_synthetic_tpose_frame_zero_is_dropped_before_resampling(tmp_path: Path) -> None:
    frames = 49
    text = _edit_frames(synthetic_bvh(frames=frames, seed=4, frame_time=FPS_24), {0: None})
    auto, notes = canonical_clip("t.bvh", text)
    assert "frame 0 dropped (synthetic T-pose)" in notes
    assert len(auto) == _resampled_count(frames - 1)
    kept, _ = canonical_clip("t.bvh", text, first_frame="never")
    assert len(kept) == _resampled_count(frames)
    # auto output is exactly the clip without its first frame: no blend with the T-pose
    lines = text.split("\n")
    top = lines.index("MOTION")
    without = "\n".join([*lines[:top + 1], f"Frames: {frames - 1}", lines[top + 2],
                         *lines[top + 4:]])
    ref, _ = canonical_clip("t.bvh", without, first_frame="never")
    np.testing.assert_allclose(auto, ref, atol=1e-9)
    plain = synthetic_bvh(frames=frames, seed=4, frame_time=FPS_24)
    assert len(canonical_clip("p.bvh", plain)[0]) == _resampled_count(frames)  # kept
    assert len(canonical_clip("p.bvh", plain, first_frame="always")[0]) == \
        _resampled_count(frames - 1)
    with pytest.raises(ValueError, match="exclude-first-frame"):
        canonical_clip("p.bvh", plain, first_frame="sometimes")


def test_a_z_up_dataset_is_turned_y_up(tmp_path: Path) -> None:
    """The same motion with its world turned Z-up (the root's first rotation 90 degrees
    about X, as Blender's own BVH exporter writes its files) reads as the Y-up clip once
    its dataset is found Z-up; read as Y-up, it lies on its back."""
    frames = 40
    text = synthetic_bvh(frames=frames, seed=6)
    z_up = _edit_frames(text, {row: (ROOT_X_ROTATION, 90.0) for row in range(frames)})
    _write(tmp_path / "y", "a.bvh", text)
    for k in range(3):  # a Z-up dataset with one clip lying along Y: the majority wins
        _write(tmp_path / "z", f"{k}.bvh", z_up if k else _edit_frames(
            text, {row: (ROOT_X_ROTATION, -90.0) for row in range(frames)}))
    assert (dataset_up(tmp_path / "y"), dataset_up(tmp_path / "z")) == ("y", "z")
    ref, ref_notes = canonical_clip("y.bvh", text)
    got, notes = canonical_clip("z.bvh", z_up, up="z")
    assert Z_UP_NOTE in notes and Z_UP_NOTE not in ref_notes
    np.testing.assert_allclose(got, ref, atol=1e-9)
    lying, _ = canonical_clip("z.bvh", z_up)
    spine = lying[:, skeleton.JOINT_INDEX["neck"]] - lying[:, skeleton.JOINT_INDEX["pelvis"]]
    assert np.median(np.abs(spine[:, 1]) / np.linalg.norm(spine, axis=-1)) < 0.3  # not upright
    with pytest.raises(ValueError, match="up must be"):
        canonical_clip("z.bvh", z_up, up="x")
    summary = prepare([str(tmp_path / "y"), str(tmp_path / "z")], tmp_path / "d.npz",
                      workers=1, progress=False, fractions=(1.0, 0.0, 0.0))
    assert [d["up"] for d in summary["datasets"]] == ["y", "z"]
    poses = PoseData.load(tmp_path / "d.npz").poses
    np.testing.assert_allclose(poses[:len(poses) // 4], poses[len(poses) // 2:3 * len(poses) // 4],
                               atol=1e-5)


def _write(folder: Path, rel: str, text: str) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_text(text)


def test_subject_split_keeps_each_person_in_one_split(tmp_path: Path) -> None:
    cmu, other = tmp_path / "cmu", tmp_path / "other"
    for s in range(1, 11):
        for t in range(1, 4):
            _write(cmu, f"{s:02d}/{s:02d}_{t:02d}.bvh",
                   synthetic_bvh(frames=20 + t, seed=100 * s + t))
    for i in range(6):
        _write(other, f"take_{i}.bvh", synthetic_bvh(frames=25, seed=500 + i))
    out = tmp_path / "both.npz"
    summary = prepare([str(cmu), str(other)], out, workers=1, progress=False)
    rules = {Path(d["path"]).name: d["split_by"] for d in summary["datasets"]}
    assert rules == {"cmu": "subject", "other": "clip"}
    assert summary["datasets"][0]["groups"] == 10
    data = PoseData.load(out)
    with np.load(out) as z:
        groups, dataset = z["clip_group"], z["clip_dataset"]
    subject_split: dict[str, set[int]] = {}
    for g, sp, d in zip(groups, data.clip_split, dataset, strict=True):
        if d == 0:
            subject_split.setdefault(str(g), set()).add(int(sp))
    assert len(subject_split) == 10 and all(len(v) == 1 for v in subject_split.values())
    assert {s for v in subject_split.values() for s in v} == {0, 1, 2}
    assert set(data.clip_split[dataset == 1].tolist()) <= {0, 1, 2}
    by_clip = tmp_path / "by_clip.npz"
    summary = prepare([str(cmu)], by_clip, workers=1, progress=False, split_by="clip")
    assert summary["datasets"][0]["split_by"] == "clip"
    with pytest.raises(DataError, match=r"take_0\.bvh"):
        prepare([str(other)], tmp_path / "x.npz", workers=1, progress=False,
                split_by="subject")


def test_static_and_broken_clips_are_skipped_with_a_reason(tmp_path: Path) -> None:
    folder = tmp_path / "clips"
    _write(folder, "good.bvh", synthetic_bvh(frames=30, seed=1))
    lines = synthetic_bvh(frames=30, seed=2).rstrip("\n").split("\n")
    top = lines.index("MOTION") + 3
    lines[top + 1:] = [lines[top]] * 29  # one pose held: nothing moves
    _write(folder, "static.bvh", "\n".join(lines) + "\n")
    flipped = {15: (HIPS_X_ROTATION, 180.0)}  # one frame upside down: feet jump ~1.7 m
    _write(folder, "jump.bvh", _edit_frames(synthetic_bvh(frames=30, seed=3), flipped))
    _write(folder, "short.bvh", synthetic_bvh(frames=5, seed=4))
    summary = prepare([str(folder)], tmp_path / "p.npz", workers=1, progress=False)
    assert summary["clips"] == 1
    reasons = {Path(s.split(":")[0]).name: s for s in summary["skipped"]}
    assert "static" in reasons["static.bvh"]
    assert "broken motion" in reasons["jump.bvh"] and "jumps" in reasons["jump.bvh"]
    assert "too short" in reasons["short.bvh"]
