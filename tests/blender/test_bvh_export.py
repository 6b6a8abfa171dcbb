"""Motion a Blender user exports with Blender's own BVH exporter (Z-up files) reads, for
training and the benchmarks, as the same motion as the clip it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy", reason="Blender as a Python module is not installed here "
                          "(run with .venv-bpy42 / .venv-bpy45 / .venv-bpy50)")

from blender_addon.core.normalize import to_model_space  # noqa: E402
from tests.blender import rigs  # noqa: E402
from training.data.dataset import Z_UP_NOTE, canonical_clip, dataset_up  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_scene")

EXPORTED_FRAMES = 30
CLIP_FPS = 30  # Bandai Namco's
ROUND_TRIP_TOL = 1e-5  # m, model space: the exporter writes 6 decimals; measured 0.8 µm


def test_a_clip_exported_by_blender_reads_as_the_original(bandai_bvh: Path,
                                                          tmp_path: Path) -> None:
    obj = rigs.import_bvh(bandai_bvh)
    rigs.select_only(obj)
    bpy.context.scene.render.fps = CLIP_FPS  # the exporter writes the scene's frame rate
    out = tmp_path / "exported.bvh"
    assert bpy.ops.export_anim.bvh(filepath=str(out), frame_start=1,
                                   frame_end=EXPORTED_FRAMES) == {"FINISHED"}
    original, _ = canonical_clip(bandai_bvh.name, bandai_bvh.read_text(), first_frame="never")
    assert dataset_up(out) == "z"
    exported, notes = canonical_clip(out.name, out.read_text(), first_frame="never", up="z")
    assert Z_UP_NOTE in notes
    n = min(len(exported), EXPORTED_FRAMES)
    want, _ = to_model_space(original[:n])
    got, _ = to_model_space(exported[:n])
    assert np.abs(got - want).max() < ROUND_TRIP_TOL
    lying, _ = canonical_clip(out.name, out.read_text(), first_frame="never")
    assert np.abs(to_model_space(lying[:n])[0] - want).max() > 0.1  # as it read before
