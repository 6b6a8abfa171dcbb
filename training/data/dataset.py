"""Pose datasets: BVH mocap -> model-space poses in one ``.npz``, and loading it back.

The ``.npz`` holds poses ``(N, 21, 3)`` float32 in model space, each frame's clip id and
frame index, the clip sources, a seeded train/val/test split (by clip, or by subject where
a dataset keeps one folder per subject, so the same person is never in two splits) and the
train split's per-feature mean/std. Clips are parsed in worker processes while the main
process streams the archives, so decompression and parsing overlap.

Per clip, a synthetic T-pose frame 0 (added by some BVH conversions, e.g. every CMU clip
of the Daz-friendly release) is dropped before resampling to 30 fps, and clips that are
not usable motion (too short, static, or with joints that jump) are skipped with a reason.
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
from blender_addon.core.bvh import BvhClip, BvhError, iter_bvh_texts, parse_bvh, resample
from blender_addon.core.fileio import atomic_open
from blender_addon.core.mapping import (
    MIN_END_SITE_LENGTH,
    JointMap,
    MappingError,
    apply_mapping,
    resolve_mapping,
)
from blender_addon.core.normalize import flatten_pose, to_model_space

SPLITS = ("train", "val", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)
FORMAT_VERSION = 2
TARGET_FPS = 30.0
FIRST_FRAME_RULES = ("auto", "always", "never")
UP_AXES = ("auto", "y", "z")
# auto: a dataset is Z-up where most of its first clips have their spines (pelvis -> neck,
# median over each clip's frames) within about 37 degrees of +Z. Blender's own BVH exporter
# writes Z-up files (as 3ds Max can); BVH's convention is Y-up. The up axis is the
# exporter's, so a dataset votes: a clip alone cannot tell Z-up motion from Y-up motion
# lying along Z (22 of CMU's 2,108 clips: swimming, lying down, would pass for Z-up).
Z_UP_MIN_COS = 0.8
UP_VOTE_CLIPS = 25
Z_UP_NOTE = "Z-up: turned to Y-up"
SPLIT_RULES = ("auto", "clip", "subject")
# A frame 0 is a synthetic T-pose when both arms are straight and level, both legs straight
# and vertical, and frame 1 is a different pose (some joint > 10 cm away, pelvis-relative).
TPOSE_STRAIGHT = 0.97  # |end - root of the limb| / summed bone lengths
TPOSE_LEVEL = 0.2  # |vertical| / length of the arm vector (about 11.5 degrees)
TPOSE_JUMP_M = 0.10
# Usable motion: at least this many frames, some joint moving more than STATIC_M over the
# clip, and no joint jumping more than JUMP_M between two 30 fps frames (45 m/s: beyond
# any limb; CMU's fastest kicks and flips, some clips played 2x fast, stay under 1.4 m).
# Both measured in the rig's own space relative to the pelvis (the body, not root travel).
MIN_CLIP_FRAMES = 10
STATIC_M = 0.02
JUMP_M = 1.5
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
    dataset: int = 0  # index of the --bvh entry the clip came from
    dropped_first: bool = False


def _limb_ratio(p: np.ndarray, chain: Sequence[str]) -> np.ndarray:
    """Per frame: straightness of a chain of joints (end-to-end over summed bone lengths)."""
    idx = skeleton.joint_indices(list(chain))
    seg = np.linalg.norm(np.diff(p[..., idx, :], axis=-2), axis=-1).sum(-1)
    return np.linalg.norm(p[..., idx[-1], :] - p[..., idx[0], :], axis=-1) / np.maximum(seg, 1e-9)


def is_synthetic_tpose(canon: np.ndarray) -> bool:
    """Whether frame 0 of a canonical clip (T, 21, 3), Y up, is an added T-pose: arms
    straight and level, legs straight and vertical, and frame 1 a different pose."""
    if len(canon) < 2:
        return False
    f = canon[0]
    for side in "lr":
        arm = (f"{side}_upperarm", f"{side}_forearm", f"{side}_hand")
        leg = (f"{side}_thigh", f"{side}_shin", f"{side}_foot")
        vec = f[skeleton.JOINT_INDEX[arm[-1]]] - f[skeleton.JOINT_INDEX[arm[0]]]
        down = f[skeleton.JOINT_INDEX[leg[-1]]] - f[skeleton.JOINT_INDEX[leg[0]]]
        if (_limb_ratio(f, arm) < TPOSE_STRAIGHT or _limb_ratio(f, leg) < TPOSE_STRAIGHT
                or abs(vec[1]) > TPOSE_LEVEL * np.linalg.norm(vec)
                or -down[1] < TPOSE_STRAIGHT * np.linalg.norm(down)):
            return False
    rel = canon[:2] - canon[:2, :1]
    return float(np.linalg.norm(rel[1] - rel[0], axis=-1).max()) > TPOSE_JUMP_M


def _parse_mapped(source: str, text: str, map_spec: str, units: str
                  ) -> tuple[BvhClip, JointMap]:
    clip = parse_bvh(text, source=source, units=units, target_fps=None)
    has_end = {clip.names[j]: float(np.linalg.norm(off)) > MIN_END_SITE_LENGTH
               for j, off in clip.end_sites.items()}
    return clip, resolve_mapping(clip.names, clip.parents, map_spec,
                                 has_end_site=lambda n: has_end.get(n, False))


def _spine_along_z(clip: BvhClip, joint_map: JointMap) -> bool:
    """Whether a clip's spine, pelvis -> neck, points along +Z (median over its frames)."""
    pelvis, neck = (clip.positions[:, clip.names.index(joint_map.joints[c])]
                    for c in ("pelvis", "neck"))
    spine = np.median(neck - pelvis, axis=0)
    return bool(spine[2] >= Z_UP_MIN_COS * max(float(np.linalg.norm(spine)), 1e-12))


def dataset_up(entry: str | os.PathLike, map_spec: str = "auto", units: str = "auto") -> str:
    """A dataset's up axis, ``"y"`` or ``"z"``: ``"z"`` where most of its first
    :data:`UP_VOTE_CLIPS` readable clips have their spines along +Z."""
    votes = []
    for source, text in iter_bvh_texts([entry]):
        try:
            votes.append(_spine_along_z(*_parse_mapped(source, text, map_spec, units)))
        except (BvhError, MappingError, ValueError):
            continue
        if len(votes) >= UP_VOTE_CLIPS:
            break
    return "z" if 2 * sum(votes) > len(votes) else "y"


def canonical_clip(source: str, text: str, map_spec: str = "auto", units: str = "auto",
                   first_frame: str = "auto", up: str = "y") -> tuple[np.ndarray, list[str]]:
    """One BVH text -> canonical joint positions (T, 21, 3) at 30 fps, source proportions.

    ``first_frame``: ``always`` drops frame 0, ``never`` keeps it, ``auto`` drops it when
    it is a synthetic T-pose (:func:`is_synthetic_tpose`). It is dropped before resampling,
    so no 30 fps frame blends the T-pose into the motion. ``up``: the file's up axis, ``y``
    (BVH's convention) or ``z`` (:func:`dataset_up` tells a dataset's), turned to Y-up by
    (x, y, z) -> (x, z, -y).
    """
    if first_frame not in FIRST_FRAME_RULES:
        raise ValueError(f"--exclude-first-frame must be one of {FIRST_FRAME_RULES}, "
                         f"got {first_frame!r}")
    if up not in ("y", "z"):
        raise ValueError(f"up must be 'y' or 'z', got {up!r}")
    clip, joint_map = _parse_mapped(source, text, map_spec, units)
    positions, ends = clip.positions, clip.end_positions
    z_up = up == "z"
    if z_up:
        positions = skeleton.blender_to_yup(positions)
        ends = {j: skeleton.blender_to_yup(e) for j, e in ends.items()}
    try:
        canon, notes = apply_mapping(joint_map, clip.names, positions, ends)
    except MappingError as exc:  # (a skeleton whose mapped limbs have no length)
        raise MappingError(f"{source}: {exc}") from exc
    if z_up:
        notes.append(Z_UP_NOTE)
    drop = first_frame == "always" or (first_frame == "auto" and is_synthetic_tpose(canon))
    if drop:
        canon = canon[1:]
        notes.append("frame 0 dropped (synthetic T-pose)" if first_frame == "auto"
                     else "frame 0 dropped (--exclude-first-frame always)")
    if abs(clip.source_fps - TARGET_FPS) >= 1e-3:
        canon = resample(canon, 1.0 / clip.source_fps, TARGET_FPS)
    return canon, notes


def motion_problem(canon: np.ndarray) -> str | None:
    """Why a canonical clip (T, 21, 3) in metres at 30 fps is not usable motion, or None."""
    if len(canon) < MIN_CLIP_FRAMES:
        return f"too short ({len(canon)} frames at 30 fps, fewer than {MIN_CLIP_FRAMES})"
    rel = canon - canon[:, :1]
    spread = float(np.linalg.norm(rel - rel.mean(axis=0), axis=-1).max())
    if spread < STATIC_M:
        return f"static (no joint moves more than {STATIC_M * 100:g} cm)"
    step = np.linalg.norm(np.diff(rel, axis=0), axis=-1)
    if step.max() > JUMP_M:
        t, j = np.unravel_index(int(step.argmax()), step.shape)
        return (f"broken motion: {skeleton.JOINTS[j]} jumps {step.max() * 100:.0f} cm between "
                f"30 fps frames {t} and {t + 1}")
    return None


def process_clip(source: str, text: str, map_spec: str, units: str,
                 first_frame: str = "auto", dataset: int = 0, up: str = "y") -> ClipResult:
    """Parse, map and normalize one clip; errors come back as text, not exceptions."""
    try:
        canon, notes = canonical_clip(source, text, map_spec, units, first_frame, up)
        problem = motion_problem(canon)
        if problem is not None:
            return ClipResult(source, error=f"{source}: {problem}", dataset=dataset)
        model, frame = to_model_space(canon)
    except (BvhError, MappingError, ValueError) as exc:
        return ClipResult(source, error=str(exc), dataset=dataset)
    dropped = any(n.startswith("frame 0 dropped") for n in notes)
    return ClipResult(source, model.astype(np.float32), np.median(frame.lengths, axis=0),
                      [n for n in notes if not n.startswith("frame 0 dropped")], None,
                      dataset, dropped)


def _process_star(args: tuple) -> ClipResult:
    return process_clip(*args)


def _parallel_map(items: Iterator[tuple], workers: int) -> Iterator[ClipResult]:
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


def _check_fractions(fractions: Sequence[float]) -> None:
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise DataError(f"--split fractions must be three non-negative numbers summing to 1, "
                        f"got {list(fractions)}")


def split_clips(num_clips: int, fractions: Sequence[float], seed: int) -> np.ndarray:
    """Seeded clip-level split: 0 train, 1 val, 2 test, for each clip."""
    _check_fractions(fractions)
    order = np.random.default_rng(seed).permutation(num_clips)
    n_train = round(fractions[0] * num_clips)
    n_val = round(fractions[1] * num_clips)
    split = np.zeros(num_clips, dtype=np.int8)
    split[order[n_train:n_train + n_val]] = 1
    split[order[n_train + n_val:]] = 2
    return split


def split_groups(groups: Sequence[str], frames: Sequence[int], fractions: Sequence[float],
                 seed: int) -> np.ndarray:
    """Seeded split of whole groups (subjects): every clip of a group gets the same split.

    Groups are shuffled and walked in that order; a group goes to the split in which the
    middle of its frames falls, so the splits get about ``fractions`` of the frames even
    when subjects differ much in size.
    """
    _check_fractions(fractions)
    names, inverse = np.unique(np.asarray(groups), return_inverse=True)
    size = np.bincount(inverse, weights=np.asarray(frames, dtype=np.float64),
                       minlength=len(names))
    order = np.random.default_rng(seed).permutation(len(names))
    mid = (np.cumsum(size[order]) - size[order] / 2) / max(size.sum(), 1.0)
    group_split = np.empty(len(names), dtype=np.int8)
    group_split[order] = np.searchsorted(np.cumsum(fractions)[:2], mid, side="right")
    return group_split[inverse]


def subject_of(source: str) -> str | None:
    """The subject folder of a ``<subject>/<subject>_<trial>.bvh`` clip (CMU's layout)."""
    parts = source.replace("\\", "/").split(":")[-1].split("/")
    if len(parts) < 2:
        return None
    folder, stem = parts[-2], Path(parts[-1]).stem
    return folder if stem.startswith(f"{folder}_") else None


def split_rule(sources: Sequence[str], rule: str) -> str:
    """``subject`` or ``clip`` for one dataset: ``auto`` picks subject when every clip sits
    in a ``<subject>/<subject>_<trial>.bvh`` folder (CMU), else clip (e.g. Bandai Namco)."""
    if rule not in SPLIT_RULES:
        raise DataError(f"--split-by must be one of {SPLIT_RULES}, got {rule!r}")
    if rule != "auto":
        return rule
    return "subject" if all(subject_of(s) is not None for s in sources) else "clip"


def atomic_savez(path: str | Path, **arrays: np.ndarray) -> None:
    """``np.savez`` without ever leaving a half-written dataset."""
    with atomic_open(path) as fh:
        np.savez(fh, **arrays)


def _items(bvh_paths: Sequence[str], map_spec: str, units: str, first_frame: str,
           ups: Sequence[str]) -> Iterator[tuple]:
    for dataset, (entry, up) in enumerate(zip(bvh_paths, ups, strict=True)):
        for src, text in iter_bvh_texts([entry]):
            yield src, text, map_spec, units, first_frame, dataset, up


def prepare(bvh_paths: Sequence[str], out: str | Path, map_spec: str = "auto",
            units: str = "auto", fractions: Sequence[float] = DEFAULT_FRACTIONS,
            seed: int = 0, workers: int | None = None, progress: bool = True,
            first_frame: str = "auto", split_by: str = "auto", up: str = "auto") -> dict:
    """Build the pose dataset; returns the summary that the CLI prints.

    Each ``--bvh`` entry is one dataset with its own split rule (``split_by``, see
    :func:`split_rule`) and its own seeded train/val/test split.
    """
    from tqdm import tqdm

    if first_frame not in FIRST_FRAME_RULES:
        raise DataError(f"--exclude-first-frame must be one of {FIRST_FRAME_RULES}, "
                        f"got {first_frame!r}")
    if split_by not in SPLIT_RULES:
        raise DataError(f"--split-by must be one of {SPLIT_RULES}, got {split_by!r}")
    if up not in UP_AXES:
        raise DataError(f"--up must be one of {UP_AXES}, got {up!r}")
    _check_fractions(fractions)
    start = time.perf_counter()
    workers = workers or os.cpu_count() or 1
    clips: list[ClipResult] = []
    skipped: list[str] = []
    notes: set[str] = set()
    ups = [dataset_up(entry, map_spec, units) if up == "auto" else up for entry in bvh_paths]
    bar = tqdm(desc="prepare", unit="clip", disable=not progress)
    for res in _parallel_map(_items(bvh_paths, map_spec, units, first_frame, ups), workers):
        bar.update(1)
        if res.error is not None:
            skipped.append(res.error)
            bar.write(f"skipped: {res.error}")
            continue
        clips.append(res)
        notes.update(res.notes)
    bar.close()
    if not clips:
        raise DataError(f"no usable BVH clip found in {list(bvh_paths)} "
                        f"({len(skipped)} skipped)")

    clips.sort(key=lambda c: (c.dataset, c.source))  # independent of worker timing
    counts = np.array([len(c.poses) for c in clips])
    dataset = np.array([c.dataset for c in clips], dtype=np.int32)
    groups = np.array([c.source for c in clips])
    split = np.zeros(len(clips), dtype=np.int8)
    datasets = []
    for d, entry in enumerate(bvh_paths):
        sel = np.flatnonzero(dataset == d)
        if not len(sel):
            continue
        rule = split_rule(groups[sel].tolist(), split_by)
        if rule == "subject":
            subjects = [subject_of(s) for s in groups[sel]]
            if None in subjects:
                bad = groups[sel][subjects.index(None)]
                raise DataError(f"--split-by subject: {bad} is not in a "
                                f"<subject>/<subject>_<trial>.bvh folder")
            groups[sel] = [f"{d}:{s}" for s in subjects]
        split[sel] = split_groups(groups[sel], counts[sel], fractions, seed)
        datasets.append({
            "path": str(entry), "split_by": rule, "clips": len(sel),
            "frames": int(counts[sel].sum()), "groups": len(np.unique(groups[sel])),
            "first_frame_dropped": int(sum(clips[i].dropped_first for i in sel)),
            "up": ups[d],
            "split_clips": {s: int((split[sel] == i).sum()) for i, s in enumerate(SPLITS)},
            "split_frames": {s: int(counts[sel][split[sel] == i].sum())
                             for i, s in enumerate(SPLITS)},
        })
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
        source_bone_lengths=rig_lengths.astype(np.float32), fps=np.float32(TARGET_FPS),
        map_spec=np.array(map_spec), clip_dataset=dataset, clip_group=groups,
        datasets=np.array([str(p) for p in bvh_paths]), first_frame=np.array(first_frame),
    )
    return {
        "clips": len(clips), "frames": len(poses), "skipped": skipped, "datasets": datasets,
        "split_clips": {s: int((split == i).sum()) for i, s in enumerate(SPLITS)},
        "split_frames": {s: int((split[clip_id] == i).sum()) for i, s in enumerate(SPLITS)},
        "elapsed_s": time.perf_counter() - start, "workers": workers, "notes": sorted(notes),
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
