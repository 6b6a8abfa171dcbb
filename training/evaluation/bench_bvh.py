"""Our BVH reader against the PyPI ``bvhio`` library: speed per frame and agreement.

Both read the same files from disk and produce the world position of every joint in every
frame. ``bvhio`` (``pip install bvhio==1.5.4``) is an optional dev dependency, imported here
only.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from blender_addon.core.bvh import iter_bvh_texts, read_bvh


def _bvhio_positions(path: Path) -> tuple[list[str], np.ndarray]:
    """Joint names and (T, J, 3) world positions in file units, the way bvhio's README does."""
    import bvhio

    root = bvhio.readAsHierarchy(str(path))
    joints = [joint for joint, _, _ in root.layout()]
    frames = root.getKeyframeRange()[1] + 1
    out = np.empty((frames, len(joints), 3))
    for t in range(frames):
        root.loadPose(t)
        for j, joint in enumerate(joints):
            out[t, j] = tuple(joint.PositionWorld)
    return [joint.Name for joint in joints], out


def benchmark_bvh_readers(paths: list[str], max_clips: int = 20, repeats: int = 3) -> dict:
    """Median µs per frame of parse + FK for ours and bvhio over the first ``max_clips``.

    ``paths`` may be BVH files, folders or archives; the clips are written to a temporary
    folder first so both readers start from plain files. ``ratio`` is bvhio's time over
    ours; ``max_abs_diff_m`` compares joint positions after our unit scaling.
    """
    with tempfile.TemporaryDirectory(prefix="bench_bvh_") as tmp:
        files = []
        for k, (name, text) in enumerate(itertools.islice(iter_bvh_texts(paths), max_clips)):
            files.append(Path(tmp) / f"{k:04d}_{Path(name.rsplit(':', 1)[-1]).name}")
            files[-1].write_text(text)
        if not files:
            raise ValueError(f"no BVH clips found in {paths}")

        def timed(read) -> tuple[float, list]:
            runs, results = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                results = [read(f) for f in files]
                runs.append(time.perf_counter() - start)
            return statistics.median(runs), results

        ours_s, ours = timed(lambda f: read_bvh(f, target_fps=None))
        theirs_s, theirs = timed(_bvhio_positions)
    frames = sum(clip.positions.shape[0] for clip in ours)
    diff = 0.0
    for clip, (names, pos) in zip(ours, theirs, strict=True):
        order = [clip.names.index(n) for n in names]
        diff = max(diff, float(np.abs(clip.positions[:, order] - pos * clip.units_scale).max()))
    from importlib.metadata import version

    result = {
        "bvhio_version": version("bvhio"),
        "repeats": repeats,
        "clips": len(files),
        "frames": frames,
        "ours_us_per_frame": ours_s / frames * 1e6,
        "bvhio_us_per_frame": theirs_s / frames * 1e6,
        "ratio": theirs_s / ours_s,
        "max_abs_diff_m": diff,
    }
    print(
        f"bvh readers on {len(files)} clips / {frames} frames: ours "
        f"{result['ours_us_per_frame']:.1f} µs/frame, bvhio {result['bvhio_us_per_frame']:.1f} "
        f"µs/frame ({result['ratio']:.0f}x), max |Δ| {diff:.2e} m"
    )
    return result


def markdown(result: dict) -> str:
    """The README's comparison: one row per reader, same clips, same run."""
    ours, theirs = result["ours_us_per_frame"], result["bvhio_us_per_frame"]
    return (
        f"| reader ({result['clips']} clips, {result['frames']:,} frames, median of "
        f"{result['repeats']} runs) | parse + world positions, µs per frame |\n"
        "|---|---|\n"
        f"| `bvhio` {result['bvhio_version']} | {theirs:,.0f} |\n"
        f"| ours (`core/bvh.py`) | **{ours:,.0f}** ({result['ratio']:.0f}x faster; positions "
        f"agree within {result['max_abs_diff_m'] * 1e6:.1f} µm) |\n"
    )
