"""Pose datasets: BVH mocap -> model-space poses in one ``.npz``, and loading it back.

The ``.npz`` holds poses ``(N, 21, 3)`` float32 in model space, each frame's clip id and
frame index, the clip sources, a seeded clip-level train/val/test split and the train
split's per-feature mean/std. Clips are parsed in worker processes while the main process
streams the archives, so decompression and parsing overlap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blender_addon.core import skeleton
from blender_addon.core.bvh import BvhError, iter_bvh_texts, parse_bvh
from blender_addon.core.fileio import atomic_open
from blender_addon.core.mapping import MappingError, apply_mapping, resolve_mapping
from blender_addon.core.normalize import flatten_pose, to_model_space

SPLITS = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)
FORMAT_VERSION = 1
_STD_FLOOR = 1e-4  # metres; keeps constant features (pelvis x/z) from dividing by zero
_MAX_PENDING_PER_WORKER = 8  # clips in flight per worker: bounds memory while streaming


class DataError(ValueError):
    """A dataset file that is missing, malformed or made for another skeleton."""


@dataclass
class ClipResult:
    source: str
    poses: np.ndarray | None = None  # (T, 21, 3) float32 model space
    lengths: np.ndarray | None = None  # (21,) median rig bone lengths, metres
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def canonical_clip(source: str, text: str, map_spec: str = "auto", units: str = "auto"
                   ) -> tuple[np.ndarray, list[str]]:
    """One BVH text -> canonical joint positions (T, 21, 3) in the source's proportions."""
    clip = parse_bvh(text, source=source, units=units)
    has_end = {clip.names[j]: float(np.linalg.norm(off)) > 1e-3
               for j, off in clip.end_sites.items()}
    joint_map = resolve_mapping(clip.names, clip.parents, map_spec,
                                has_end_site=lambda n: has_end.get(n, False))
    return apply_mapping(joint_map, clip.names, clip.positions, clip.end_positions)


def process_clip(source: str, text: str, map_spec: str, units: str) -> ClipResult:
    """Parse, map and normalize one clip; errors come back as text, not exceptions."""
    try:
        canon, notes = canonical_clip(source, text, map_spec, units)
        model, frame = to_model_space(canon)
        return ClipResult(source, model.astype(np.float32),
                          np.median(frame.lengths, axis=0), notes)
    except (BvhError, MappingError, ValueError) as exc:
        return ClipResult(source, error=str(exc))


def _process_star(args: tuple[str, str, str, str]) -> ClipResult:
    return process_clip(*args)


def _parallel_map(items: Iterator[tuple[str, str, str, str]], workers: int
                  ) -> Iterator[ClipResult]:
    """Ordered map over worker processes with a bounded queue (archives stream lazily)."""
    if workers <= 1:
        yield from map(_process_star, items)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending = []
        for item in items:
            pending.append(pool.submit(_process_star, item))
            if len(pending) >= workers * _MAX_PENDING_PER_WORKER:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()


def split_clips(num_clips: int, fractions: Sequence[float], seed: int) -> np.ndarray:
    """Seeded clip-level split: 0 train, 1 val, 2 test, for each clip."""
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise DataError(f"--split fractions must be three non-negative numbers summing to 1, "
                        f"got {list(fractions)}")
    order = np.random.default_rng(seed).permutation(num_clips)
    n_train = round(fractions[0] * num_clips)
    n_val = round(fractions[1] * num_clips)
    split = np.zeros(num_clips, dtype=np.int8)
    split[order[n_train:n_train + n_val]] = 1
    split[order[n_train + n_val:]] = 2
    return split


def atomic_savez(path: str | Path, **arrays: np.ndarray) -> None:
    """``np.savez`` without ever leaving a half-written dataset."""
    with atomic_open(path) as fh:
        np.savez(fh, **arrays)


def prepare(bvh_paths: Sequence[str], out: str | Path, map_spec: str = "auto",
            units: str = "auto", fractions: Sequence[float] = DEFAULT_FRACTIONS,
            seed: int = 0, workers: int | None = None, progress: bool = True) -> dict:
    """Build the pose dataset; returns the summary that the CLI prints."""
    from tqdm import tqdm

    start = time.perf_counter()
    workers = workers or os.cpu_count() or 1
    items = ((src, text, map_spec, units) for src, text in iter_bvh_texts(bvh_paths))
    clips: list[ClipResult] = []
    skipped: list[str] = []
    notes: set[str] = set()
    bar = tqdm(desc="prepare", unit="clip", disable=not progress)
    for res in _parallel_map(items, workers):
        bar.update(1)
        if res.error is not None:
            skipped.append(res.error)
            bar.write(f"skipped: {res.error}")
            continue
        if len(res.poses) == 0:
            skipped.append(f"{res.source}: no frames")
            continue
        clips.append(res)
        notes.update(res.notes)
    bar.close()
    if not clips:
        raise DataError(f"no usable BVH clip found in {list(bvh_paths)} "
                        f"({len(skipped)} skipped)")

    clips.sort(key=lambda c: c.source)  # the split must not depend on worker timing
    split = split_clips(len(clips), fractions, seed)
    counts = np.array([len(c.poses) for c in clips])
    poses = np.concatenate([c.poses for c in clips])
    clip_id = np.repeat(np.arange(len(clips), dtype=np.int32), counts)
    frame = np.concatenate([np.arange(n, dtype=np.int32) for n in counts])
    train_vec = flatten_pose(poses[split[clip_id] == 0])
    if len(train_vec) == 0:
        train_vec = flatten_pose(poses)
    mean = train_vec.mean(axis=0, dtype=np.float64)
    std = np.maximum(train_vec.std(axis=0, dtype=np.float64), _STD_FLOOR)
    rig_lengths = np.median(np.stack([c.lengths for c in clips]), axis=0)
    atomic_savez(
        Path(out), format_version=np.int32(FORMAT_VERSION), joints=np.array(skeleton.JOINTS),
        poses=poses, clip=clip_id, frame=frame,
        sources=np.array([c.source for c in clips]), clip_split=split,
        mean=mean.astype(np.float32), std=std.astype(np.float32),
        source_bone_lengths=rig_lengths.astype(np.float32), fps=np.float32(30.0),
        map_spec=np.array(map_spec),
    )
    return {
        "clips": len(clips), "frames": len(poses), "skipped": skipped,
        "split_clips": {s: int((split == i).sum()) for i, s in enumerate(SPLITS)},
        "split_frames": {s: int((split[clip_id] == i).sum()) for i, s in enumerate(SPLITS)},
        "elapsed_s": time.perf_counter() - start, "notes": sorted(notes),
        "bone_lengths": dict(zip(skeleton.JOINTS, rig_lengths.round(4).tolist(), strict=True)),
        "out": str(out),
    }


@dataclass
class PoseData:
    """A prepared dataset, loaded and checked against the canonical skeleton."""
    path: Path
    poses: np.ndarray  # (N, 21, 3) float32
    clip: np.ndarray  # (N,) int32
    frame: np.ndarray  # (N,) int32
    sources: np.ndarray  # (C,) str
    clip_split: np.ndarray  # (C,) int8
    mean: np.ndarray  # (63,) float32
    std: np.ndarray  # (63,) float32

    @classmethod
    def load(cls, path: str | Path) -> PoseData:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: dataset not found (make one with "
                            f"`python -m training prepare --bvh ... --out {path}`)")
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as exc:  # zipfile/format errors differ by cause; name the file
            raise DataError(f"{path}: not a readable .npz dataset ({exc})") from exc
        required = ("joints", "poses", "clip", "frame", "sources", "clip_split", "mean", "std")
        missing = [k for k in required if k not in arrays]
        if missing:
            raise DataError(f"{path}: missing arrays {missing}; re-run `python -m training "
                            "prepare`")
        joints = tuple(str(j) for j in arrays["joints"])
        if joints != skeleton.JOINTS:
            raise DataError(f"{path}: skeleton mismatch: dataset joints {list(joints)} differ "
                            f"from the canonical {list(skeleton.JOINTS)}")
        return cls(path, *(arrays[k] for k in required[1:]))

    def split_mask(self, split: str) -> np.ndarray:
        """Per-frame mask of one split."""
        return self.clip_split[self.clip] == SPLITS.index(split)

    def clip_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-frame first and last index of the frame's own clip (for pair sampling)."""
        starts = np.flatnonzero(np.r_[True, self.clip[1:] != self.clip[:-1]])
        ends = np.r_[starts[1:], len(self.clip)] - 1
        run = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(self.clip)]))
        return starts[run], ends[run]
