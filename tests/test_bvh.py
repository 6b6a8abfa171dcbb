"""BVH reader: hand-checked forward kinematics, resampling, units, errors, archives, real data."""

from __future__ import annotations

import itertools
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blender_addon.core.bvh import (
    UNITS,
    BvhClip,
    BvhError,
    iter_bvh_texts,
    parse_bvh,
    read_bvh,
    read_bvh_paths,
)

# An extra root above the hips, orders ZXY / XYZ / YZX, position channels on the non-root
# Hips (replacing a junk OFFSET), a lone Zposition amid Leg's rotations, End Sites. Lengths
# are written multiplied by {s}: 1 gives metres, 100 centimetres.
SMALL = """\
HIERARCHY
ROOT World
{{
  OFFSET 0 0 0
  CHANNELS 3 Xposition Yposition Zposition
  JOINT Hips
  {{
    OFFSET 0 {h} {hz}
    CHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation
    JOINT Spine
    {{
      OFFSET 0 {spine} 0
      CHANNELS 3 Xrotation Yrotation Zrotation
      End Site
      {{
        OFFSET 0 {head} 0
      }}
    }}
    JOINT Leg
    {{
      OFFSET {leg_x} 0 0
      CHANNELS 4 Yrotation Zposition Zrotation Xrotation
      End Site
      {{
        OFFSET 0 {foot} 0
      }}
    }}
  }}
}}
MOTION
Frames: 3
Frame Time: 0.0333333
{f0}
{f1}
{f2}
"""


def small_bvh(s: float = 1.0) -> str:
    """SMALL in metres (s=1) or another unit; frames: rest, then 90° turns."""

    def frame(world: tuple, hips_rot: str, spine_rot: str, leg_rot: str) -> str:
        w = " ".join(f"{v * s:g}" for v in world)
        leg_y, leg_z, leg_x = leg_rot.split()
        return f"{w} 0 {s:g} 0 {hips_rot} {spine_rot} {leg_y} {0.1 * s:g} {leg_z} {leg_x}"

    return SMALL.format(
        h=5 * s, hz=-4 * s, spine=0.5 * s, head=0.25 * s, leg_x=0.2 * s, foot=-0.5 * s,
        f0=frame((0, 0, 0), "0 0 0", "0 0 0", "0 0 0"),
        f1=frame((1, 0, 0), "90 0 0", "90 0 0", "90 0 0"),
        f2=frame((0, 0, 2), "90 90 0", "90 90 0", "90 90 0"),
    )  # fmt: skip


# Worked by hand with Rx90 (x,y,z)->(x,-z,y), Ry90 ->(z,y,-x), Rz90 ->(-y,x,z).
# Frame 1: Hips R = Rz90; Spine R = Rz Rx; Leg R = Rz Ry. Frame 2: Hips R = Rz90 Rx90,
# Spine R = Hips Rx90 Ry90, Leg R = Hips Ry90 Rz90. Leg's translation is (0.2, 0, 0.1).
EXPECTED = np.array(
    [
        [[0, 0, 0], [0, 1, 0], [0, 1.5, 0], [0.2, 1, 0.1]],
        [[1, 0, 0], [1, 1, 0], [0.5, 1, 0], [1, 1.2, 0.1]],
        [[0, 0, 2], [0, 1, 2], [0, 1, 2.5], [0.1, 1.2, 2]],
    ]
)
EXPECTED_SPINE_END = np.array([[0, 1.75, 0], [0.5, 1, 0.25], [0.25, 1, 2.5]])
EXPECTED_LEG_END = np.array([[0.2, 0.5, 0.1], [1.5, 1.2, 0.1], [-0.4, 1.2, 2]])


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based number of the nth line containing needle."""
    hits = [i + 1 for i, ln in enumerate(text.split("\n")) if needle in ln]
    return hits[nth]


def test_forward_kinematics_by_hand() -> None:
    clip = parse_bvh(small_bvh(), "small.bvh", units="m")
    assert clip.names == ["World", "Hips", "Spine", "Leg"]
    assert clip.parents.tolist() == [-1, 0, 1, 1] and clip.parents.dtype == np.int64
    np.testing.assert_allclose(clip.offsets[1], [0, 5, -4])
    np.testing.assert_allclose(clip.end_sites[2], [0, 0.25, 0])
    assert set(clip.end_sites) == set(clip.end_positions) == {2, 3}
    assert clip.positions.shape == (3, 4, 3) and clip.fps == 30.0
    assert clip.source_fps == pytest.approx(30.0, abs=1e-4) and clip.units_scale == 1.0
    np.testing.assert_allclose(clip.positions, EXPECTED, atol=1e-12)
    np.testing.assert_allclose(clip.end_positions[2], EXPECTED_SPINE_END, atol=1e-12)
    np.testing.assert_allclose(clip.end_positions[3], EXPECTED_LEG_END, atol=1e-12)


def test_crlf_tabs_blank_lines_parse_identically() -> None:
    plain = parse_bvh(small_bvh(), units="m")
    messy = (
        small_bvh()
        .replace("End Site", "End site")
        .replace("  ", "\t")
        .replace(" ", " \t ")
        .replace("\n", "  \r\n\r\n")
    )
    clip = parse_bvh(messy, units="m")
    assert clip.names == plain.names
    np.testing.assert_array_equal(clip.positions, plain.positions)
    np.testing.assert_array_equal(clip.end_positions[3], plain.end_positions[3])


def motion_at(fps: float, frame_time: str, seconds: float = 1.0) -> str:
    """SMALL's skeleton moving smoothly for `seconds`, sampled at `fps`."""
    head, _ = small_bvh().split("MOTION")
    t = np.arange(round(seconds * fps) + 1) / fps
    rows = [
        f"{x:.9f} 0 0 0 1 0 {40 * x:.9f} {20 * x:.9f} 0 {30 * x:.9f} 0 0 {45 * x:.9f} 0.1 0 0"
        for x in t
    ]
    return f"{head}MOTION\nFrames: {len(t)}\nFrame Time: {frame_time}\n" + "\n".join(rows) + "\n"


def test_resampling_to_30_fps() -> None:
    c30 = parse_bvh(motion_at(30, "0.0333333"), units="m")
    c60 = parse_bvh(motion_at(60, "0.0166667"), units="m")
    assert c30.positions.shape[0] == c60.positions.shape[0] == 31
    assert c60.fps == 30.0 and c60.source_fps == pytest.approx(60.0, rel=1e-5)
    np.testing.assert_allclose(c60.positions, c30.positions, atol=1e-4)
    np.testing.assert_allclose(c60.end_positions[3], c30.end_positions[3], atol=1e-4)
    c24 = parse_bvh(motion_at(24, "0.0416667"), units="m")
    assert c24.positions.shape == (31, 4, 3)
    np.testing.assert_allclose(c24.positions[:, 0, 0], np.arange(31) / 30, atol=1e-5)
    np.testing.assert_allclose(c24.positions, c30.positions, atol=2e-3)  # chords vs arcs
    short = parse_bvh(motion_at(24, "0.0416667", seconds=9 / 24), units="m")  # last t 0.375
    assert short.positions.shape[0] == 12  # k/30 <= 0.375 for k = 0..11
    kept = parse_bvh(motion_at(24, "0.0416667"), units="m", target_fps=None)
    assert kept.positions.shape[0] == 25 and kept.fps == pytest.approx(24.0, rel=1e-5)


def test_units_auto_and_explicit() -> None:
    metres = parse_bvh(small_bvh())
    cm = parse_bvh(small_bvh(100.0))
    inches = parse_bvh(small_bvh(1 / 0.0254))
    assert (metres.units_scale, cm.units_scale, inches.units_scale) == (1.0, 0.01, 0.0254)
    np.testing.assert_allclose(cm.positions, metres.positions, atol=1e-9)
    np.testing.assert_allclose(inches.positions, metres.positions, atol=1e-5)
    forced = parse_bvh(small_bvh(100.0), units="m")
    assert forced.units_scale == 1.0
    np.testing.assert_allclose(forced.positions, 100 * metres.positions, atol=1e-7)
    assert parse_bvh(small_bvh(), units=0.5).units_scale == 0.5
    assert set(UNITS) == {"m", "cm", "mm", "in"}
    with pytest.raises(ValueError, match="units"):
        parse_bvh(small_bvh(), units="furlong")


GOOD = small_bvh()
ZERO_JOINTS = "HIERARCHY\nMOTION\nFrames: 0\nFrame Time: 0.1\n"


def edit(old: str, new: str, count: int = 1) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, count)


FRAME0, FRAME1, FRAME2 = GOOD.split("Frame Time: 0.0333333\n")[1].split("\n")[:3]
MALFORMED = [  # (text, expected line, words in the message)
    (GOOD.rstrip("\n").rsplit("\n", 1)[0] + "\n", line_of(GOOD, FRAME2), "truncated"),
    (edit(FRAME2, FRAME2.rsplit(" ", 1)[0]), line_of(GOOD, FRAME2), "values"),
    (edit(FRAME1, FRAME1.replace(" 90 ", " abc ", 1)), line_of(GOOD, FRAME1), "non-numeric"),
    (edit(FRAME1, FRAME1 + " 7"), line_of(GOOD, FRAME1), "values"),
    (edit(FRAME0, FRAME0.replace("0", "nan", 1)), line_of(GOOD, FRAME0), "non-finite"),
    (edit("    JOINT Leg", "    WIDTH 3\n    JOINT Leg"), line_of(GOOD, "JOINT Leg"), "WIDTH"),
    (edit("MOTION\n", ""), line_of(GOOD, "Frames:") - 1, "MOTION"),
    (GOOD.split("MOTION")[0], len(GOOD.split("MOTION")[0].split("\n")), "missing MOTION"),
    (edit("Frames: 3\n", ""), line_of(GOOD, "Frames:"), "Frames:"),
    (edit("Frame Time: 0.0333333\n", ""), line_of(GOOD, "Frame Time"), "Frame Time"),
    (edit("Frame Time: 0.0333333", "Frame Time: 0"), line_of(GOOD, "Frame Time"), "Frame Time"),
    (edit("Frame Time: 0.0333333", "Frame Time: -1"), line_of(GOOD, "Frame Time"), "Frame Time"),
    (edit("Frames: 3", "Frames: 2"), line_of(GOOD, FRAME2), "more frame lines"),
    (edit("Frames: 3", "Frames: x"), line_of(GOOD, "Frames:"), "Frames:"),
    (edit("      }\n    }\n", "      }\n", 1), line_of(GOOD, "MOTION") - 1, "unbalanced"),
    (edit("}\nMOTION", "}\n}\nMOTION"), line_of(GOOD, "MOTION"), "unbalanced"),
    (
        edit("CHANNELS 3 Xrotation", "CHANNELS 2 Xrotation"),
        line_of(GOOD, "CHANNELS 3 Xrot"),
        "count",
    ),
    (edit("Yrotation Zposition", "Wrotation Zposition"), line_of(GOOD, "CHANNELS 4"), "Wrotation"),
    (edit("OFFSET 0 0.5 0", "OFFSET 0 0.5"), line_of(GOOD, "OFFSET 0 0.5"), "OFFSET"),
    (edit("      OFFSET 0 0.25 0\n", ""), line_of(GOOD, "OFFSET 0 0.25"), "OFFSET"),
    (ZERO_JOINTS, 2, "no joints"),
]


@pytest.mark.parametrize(("text", "line", "what"), MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed_raises_bvh_error_with_line(text: str, line: int, what: str) -> None:
    with pytest.raises(BvhError) as info:
        parse_bvh(text, "bad.bvh")
    err = info.value
    assert (err.source, err.line) == ("bad.bvh", line), str(err)
    assert str(err).startswith(f"bad.bvh:{line}: ") and what in str(err)
    again = pickle.loads(pickle.dumps(err))  # crosses worker processes intact
    assert (type(again), str(again), again.line) == (BvhError, str(err), line)


KEYWORDS = [
    "HIERARCHY",
    "ROOT",
    "JOINT x",
    "End Site",
    "{",
    "}",
    "OFFSET",
    "CHANNELS 2",
    "MOTION",
    "Frames:",
    "Frame Time:",
    "Xrotation",
    "OFFSET 1 2",
    "CHANNELS 1 Z",
]
GARBAGE = st.one_of(
    st.sampled_from(["", "abc", "-", "1e999", "nan", "0x1f", "{", "}", "\t", "²", "\x00"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.text(max_size=6),
)


@st.composite
def mutated_bvh(draw: st.DrawFn) -> str:
    """GOOD after 1-3 random cuts, duplications, token swaps, truncations or insertions."""
    text = GOOD
    for op in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)):
        lines = text.split("\n")
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == 0:  # delete a span of characters
            a = draw(st.integers(0, len(text)))
            text = text[:a] + text[draw(st.integers(a, min(len(text), a + 80))) :]
        elif op == 1:  # duplicate or delete a line
            lines[i : i + 1] = [lines[i]] * draw(st.sampled_from([0, 2]))
            text = "\n".join(lines)
        elif op == 2:  # replace a token with garbage or a random number
            toks = lines[i].split(" ")
            toks[draw(st.integers(0, len(toks) - 1))] = draw(GARBAGE)
            lines[i] = " ".join(toks)
            text = "\n".join(lines)
        elif op == 3:  # truncate
            text = text[: draw(st.integers(0, len(text)))]
        else:  # insert a keyword line, or a keyword inside a line
            kw = draw(st.sampled_from(KEYWORDS))
            if op == 4:
                lines.insert(i, kw)
            else:
                lines[i] = f"{lines[i]} {kw}"
            text = "\n".join(lines)
    return text


@settings(max_examples=300, deadline=None)
@given(mutated_bvh())
def test_mutations_give_clip_or_bvh_error(text: str) -> None:
    try:
        clip = parse_bvh(text, "mutant.bvh")
    except BvhError as err:
        assert "mutant.bvh" in str(err)
        assert err.line is None or 1 <= err.line <= text.count("\n") + 1
    else:
        assert isinstance(clip, BvhClip)
        assert clip.positions.shape[1:] == (len(clip.names), 3)
        assert np.isfinite(clip.positions).all()


def test_archives_read_like_folders(tmp_path: Path) -> None:
    root = tmp_path / "clips"
    files = {"a.bvh": small_bvh(), "sub/b.bvh": motion_at(30, "0.0333333"),
             "sub/deeper/c.BVH": small_bvh(100.0)}  # fmt: skip
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "sub" / "labels.json").write_text("{}")
    for mode, name in (("w:gz", "c.tar.gz"), ("w:xz", "c.tar.xz")):
        with tarfile.open(tmp_path / name, mode) as tf:
            for rel in files:
                tf.add(root / rel, arcname=rel)
            tf.add(root / "sub" / "labels.json", arcname="sub/labels.json")
    with zipfile.ZipFile(tmp_path / "c.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            zf.write(root / rel, arcname=rel)

    def keyed(items: list[tuple[str, str]], cut: str) -> set[tuple[str, str]]:
        return {(name.split(cut, 1)[1], text) for name, text in items}

    folder = list(iter_bvh_texts([root]))
    assert [Path(n).name for n, _ in folder] == ["a.bvh", "b.bvh", "c.BVH"]  # sorted, recursive
    want = set(files.items())
    assert keyed(folder, f"{root}/") == want
    for name in ("c.tar.gz", "c.tar.xz", "c.zip"):
        got = list(iter_bvh_texts([str(tmp_path / name)]))
        assert keyed(got, f"{name}:") == want
        assert all(n.startswith(f"{tmp_path / name}:") for n, _ in got)
    (tmp_path / "only").mkdir()
    (tmp_path / "c.zip").rename(tmp_path / "only" / "c.zip")
    assert keyed(list(iter_bvh_texts([tmp_path / "only"])), "c.zip:") == want  # archive in folder
    with pytest.raises(FileNotFoundError, match="nowhere"):
        list(iter_bvh_texts([tmp_path / "nowhere.bvh"]))
    (root / "bad.bvh").write_text(small_bvh().replace("MOTION", "MOTON"))
    results = list(read_bvh_paths([root]))
    assert [type(r) for r in results] == [BvhClip, BvhError, BvhClip, BvhClip]
    assert str(root / "bad.bvh") in str(results[1])
    np.testing.assert_array_equal(read_bvh(root / "a.bvh").positions, results[0].positions)


@pytest.mark.realdata
def test_bandai_clips_stream_from_the_archive(bandai_small_archive: Path, tmp_path: Path) -> None:
    texts = list(itertools.islice(iter_bvh_texts([bandai_small_archive]), 5))
    assert len(texts) == 5
    clips = [parse_bvh(text, name) for name, text in texts]
    for clip in clips:
        assert clip.source.startswith(f"{bandai_small_archive}:") and clip.source.endswith(".bvh")
        assert clip.units_scale == 0.01 and len(clip.names) == 22
        assert clip.names[:2] == ["joint_Root", "Hips"] and clip.fps == 30.0
        assert np.isfinite(clip.positions).all() and clip.positions.shape[0] > 10
        assert 0.8 < float(np.median(clip.positions[:, 1, 1])) < 1.0  # Hips height, metres
        bones = [j for j, p in enumerate(clip.parents) if p >= 1]  # not joint_Root -> Hips
        lengths = np.linalg.norm(
            clip.positions[:, bones] - clip.positions[:, clip.parents[bones]], axis=-1
        )
        assert np.ptp(lengths, axis=0).max() < 1e-4
    member = clips[0].source.split(":", 1)[1]
    with tarfile.open(bandai_small_archive, "r|xz") as tf:
        for info in tf:
            if info.name == member:
                raw = tf.extractfile(info).read()  # type: ignore[union-attr]
                break
    unpacked = tmp_path / Path(member).name
    unpacked.write_bytes(raw)
    np.testing.assert_array_equal(read_bvh(unpacked).positions, clips[0].positions)
    assert raw.decode() == texts[0][1]
