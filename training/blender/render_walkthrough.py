"""``python -m training render-walkthrough``: the README's walkthrough pictures, made by
running the five-minute walkthrough through the add-on's real operators in Blender.

The steps run in the bpy venv (:mod:`training.blender_side.walkthrough`, which renders
with Workbench); this side extracts the clip, starts it, then lays the pictures out as
captioned before/after figures and writes them as small palette PNGs (they are committed,
so the whole set stays well under ~1.5 MB).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from training.blender.run import BANDAI_ARCHIVE, check_inputs, extract_clips, run_in_blender

DEFAULT_OUT = "docs/walkthrough"
DEFAULT_WORK = "runs/walkthrough"
DEFAULT_CLIP = "dataset-1_bow_normal_001.bvh"  # a test-split clip: stands, bows, stands
DEFAULT_TIMEOUT_S = 900
CAPTION_PX = 22
GAP_PX = 4
FONT_PX = 13
BACKGROUND = (38, 41, 46)
TEXT = (235, 235, 235)
PALETTE_COLORS = 128  # flat-shaded renders lose nothing visible at this many colours
# (octree keeps small patches of colour, such as the red of the dragged effector, that a
# median cut merges away)


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: a fixed bitmap font
        return ImageFont.load_default()


def compose(figure: dict[str, Any], raw_dir: Path, out: Path) -> Path:
    """Rows of pictures, each with its caption below, on a dark background."""
    from PIL import Image, ImageDraw

    rows = [[(Image.open(raw_dir / pic).convert("RGB"), caption) for pic, caption in row]
            for row in figure["rows"]]
    width = max(sum(im.width for im, _ in row) + GAP_PX * (len(row) - 1) for row in rows)
    heights = [max(im.height for im, _ in row) + CAPTION_PX for row in rows]
    sheet = Image.new("RGB", (width, sum(heights) + GAP_PX * (len(rows) - 1)), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = _font(FONT_PX)
    y = 0
    for row, height in zip(rows, heights, strict=True):
        x = (width - (sum(im.width for im, _ in row) + GAP_PX * (len(row) - 1))) // 2
        for im, caption in row:
            sheet.paste(im, (x, y))
            draw.text((x + im.width // 2, y + im.height + CAPTION_PX // 2), caption, fill=TEXT,
                      font=font, anchor="mm")
            x += im.width + GAP_PX
        y += height + GAP_PX
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.quantize(colors=PALETTE_COLORS, method=Image.Quantize.FASTOCTREE).save(
        out, optimize=True)
    return out


def render(models: str, venv: str, out: str = DEFAULT_OUT, work: str = DEFAULT_WORK,
           archive: Path = BANDAI_ARCHIVE, clip: str = DEFAULT_CLIP,
           timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[list[Path], dict[str, Any]]:
    """Run the walkthrough in Blender, compose its figures into ``out``; the raw renders
    and the JSON of what each step did stay in ``work``."""
    check_inputs(models, archive)
    work_dir = Path(work)
    with tempfile.TemporaryDirectory(prefix="npe-walkthrough-") as tmp:
        (bvh,) = extract_clips(archive, [clip], Path(tmp))
        run_in_blender("walkthrough", ["--models", str(Path(models).resolve()), "--bvh",
                                       str(bvh), "--out", str(work_dir.resolve())],
                       venv, timeout_s)
    result = json.loads((work_dir / "walkthrough.json").read_text())
    written = [compose(fig, work_dir, Path(out) / fig["file"]) for fig in result["figures"]]
    return written, result
