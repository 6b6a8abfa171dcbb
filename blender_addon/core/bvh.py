"""Read BVH motion capture into world joint positions (metres, Y up), fast and strict.

Pure numpy + stdlib so the add-on and the training package share one reader. The MOTION
block is parsed in one C call (``np.loadtxt``) and forward kinematics runs over all frames
at once, one joint at a time; a slow line-by-line scan runs only to pinpoint a bad line.
Every problem with the text is a :class:`BvhError` naming the source and the line.

Conventions: rotation channels are Euler degrees applied in the listed order (intrinsic):
``Zrotation Xrotation Yrotation`` means ``R = Rz @ Rx @ Ry`` on column vectors. A joint's
local translation is its position channels where present and its OFFSET for the rest.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import tarfile
import warnings
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .conversions import euler_to_matrix

UNITS: dict[str, float] = {"m": 1.0, "cm": 0.01, "mm": 0.001, "in": 0.0254}
HUMAN_SIZE_M = 1.0  # longest root-to-leaf bone path of a person (pelvis to toe), roughly
SAME_FPS_TOL = 1e-3  # source and target rates closer than this: keep frames as they are
RESAMPLE_SLACK = 0.01  # fraction of a target frame the last sample may lie past the clip end
MIN_FRAME_TIME, MAX_FRAME_TIME = 1e-6, 10.0  # seconds; outside is a corrupt header
BVH_SUFFIX = ".bvh"
ARCHIVE_SUFFIXES = (".tar.xz", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar", ".zip")

_AXIS = {"X": 0, "Y": 1, "Z": 2}
# Frames of forward kinematics at once: enough that numpy's per-call cost fades, few enough
# that the temporaries stay in cache (and page faults, costly in VMs, stay few).
_FRAMES = 1024
_CHANNELS = frozenset(f"{a}{kind}" for a in _AXIS for kind in ("position", "rotation"))


class BvhError(ValueError):
    """Malformed BVH text; ``str()`` is ``"{source}:{line}: {what}"`` (``line`` 1-based or None)."""

    def __init__(self, source: str, line: int | None, what: str) -> None:
        self.source, self.line, self.what = source, line, what
        super().__init__(f"{source}: {what}" if line is None else f"{source}:{line}: {what}")

    def __reduce__(self):  # picklable across worker processes despite the custom __init__
        return type(self), (self.source, self.line, self.what)


@dataclass
class BvhClip:
    """One clip as world positions; joints in file order, End Sites kept apart."""

    source: str
    names: list[str]
    parents: np.ndarray  # (J,) int64, -1 for a root
    offsets: np.ndarray  # (J, 3) metres
    end_sites: dict[int, np.ndarray]  # joint -> End Site OFFSET (3,), metres
    positions: np.ndarray  # (T, J, 3) metres at `fps`
    end_positions: dict[int, np.ndarray]  # joint -> (T, 3) End Site world positions
    fps: float
    source_fps: float
    units_scale: float


@dataclass
class _Joint:
    name: str
    parent: int
    offset: np.ndarray | None = None
    channels: tuple[str, ...] = ()
    column: int = 0  # first column of this joint's channels in a frame line


def _parse_hierarchy(
    lines: list[str], source: str
) -> tuple[list[_Joint], dict[int, np.ndarray], int]:
    """Joints and End Site offsets (file units), and the index of the MOTION line."""

    def err(line: int, what: str) -> BvhError:
        return BvhError(source, line, what)

    def numbers(toks: list[str], line: int, what: str) -> np.ndarray:
        try:
            vals = [float(t) for t in toks]
        except ValueError:
            raise err(line, f"{what} needs numbers, got {' '.join(toks)!r}") from None
        if len(vals) != 3 or not all(map(math.isfinite, vals)):
            raise err(line, f"{what} needs 3 finite numbers, got {' '.join(toks)!r}")
        return np.array(vals)

    joints: list[_Joint] = []
    end_sites: dict[int, np.ndarray] = {}
    stack: list[int] = []  # open blocks: joint index, or -1 - parent for an End Site
    pending: int | None = None  # block announced by ROOT/JOINT/End Site, waiting for "{"
    seen_header = False
    for i, raw in enumerate(lines):
        toks, lineno = raw.split(), i + 1
        while toks:
            tok = toks.pop(0)
            if pending is not None and tok != "{":
                raise err(lineno, f"expected '{{', got {tok!r}")
            if not seen_header:
                if tok != "HIERARCHY":
                    raise err(lineno, f"expected HIERARCHY, got {tok!r}")
                seen_header = True
            elif tok in ("ROOT", "JOINT"):
                if (tok == "ROOT") != (not stack) or (stack and stack[-1] < 0):
                    raise err(lineno, f"{tok} not allowed here")
                name_toks = []
                while toks and toks[0] != "{":
                    name_toks.append(toks.pop(0))
                if not name_toks:
                    raise err(lineno, f"{tok} without a name")
                name = " ".join(name_toks)
                if any(j.name == name for j in joints):
                    raise err(lineno, f"duplicate joint name {name!r}")
                joints.append(_Joint(name, stack[-1] if stack else -1))
                pending = len(joints) - 1
            elif tok == "End":
                if not toks or toks.pop(0) not in ("Site", "site"):
                    raise err(lineno, "expected 'End Site'")
                if not stack or stack[-1] < 0:
                    raise err(lineno, "End Site outside a joint")
                if stack[-1] in end_sites:
                    raise err(lineno, f"second End Site in joint {joints[stack[-1]].name!r}")
                pending = -1 - stack[-1]
            elif tok == "{":
                if pending is None:
                    raise err(lineno, "unexpected '{'")
                stack.append(pending)
                pending = None
            elif tok == "}":
                if not stack:
                    raise err(lineno, "unbalanced braces: '}' without '{'")
                top = stack.pop()
                if (joints[top].offset if top >= 0 else end_sites.get(-1 - top)) is None:
                    raise err(lineno, "block closed without an OFFSET")
            elif tok == "OFFSET":
                if not stack:
                    raise err(lineno, "OFFSET outside a joint")
                vals, toks = numbers(toks[:3], lineno, "OFFSET"), toks[3:]
                top = stack[-1]
                if (joints[top].offset if top >= 0 else end_sites.get(-1 - top)) is not None:
                    raise err(lineno, "second OFFSET in a block")
                if top >= 0:
                    joints[top].offset = vals
                else:
                    end_sites[-1 - top] = vals
            elif tok == "CHANNELS":
                if not stack or stack[-1] < 0:
                    raise err(lineno, "CHANNELS outside a joint")
                head = toks[0] if toks else ""
                names, toks = tuple(toks[1:]), []
                if not (head.isascii() and head.isdigit() and int(head) == len(names)):
                    raise err(lineno, f"CHANNELS count {head!r} does not match {len(names)} names")
                bad = [c for c in names if c not in _CHANNELS]
                if bad:
                    raise err(lineno, f"unknown channel {bad[0]!r}")
                if len(set(names)) != len(names) or joints[stack[-1]].channels:
                    raise err(lineno, "repeated CHANNELS")
                joints[stack[-1]].channels = names
            elif tok == "MOTION":
                if stack or pending is not None:
                    raise err(lineno, f"unbalanced braces: {len(stack)} block(s) open at MOTION")
                if toks:
                    raise err(lineno, f"unexpected {toks[0]!r} after MOTION")
                if not joints:
                    raise err(lineno, "no joints in HIERARCHY")
                if not any(j.channels for j in joints):
                    raise err(lineno, "no CHANNELS in HIERARCHY: nothing moves")
                return joints, end_sites, i
            elif not stack and joints:
                raise err(lineno, f"expected ROOT or MOTION, got {tok!r}")
            else:
                raise err(lineno, f"unknown keyword {tok!r} in HIERARCHY")
    raise err(len(lines), "missing MOTION" if seen_header else "missing HIERARCHY")


def _motion_header(lines: list[str], start: int, source: str) -> tuple[int, float, int]:
    """Frames and Frame Time after MOTION; returns them and the index of the first frame line."""
    fields: list[tuple[str, int]] = []  # (value, 1-based line)
    i = start
    for key, ntok in (("Frames:", 2), ("Frame Time:", 3)):
        i += 1
        while i < len(lines) and not lines[i].split():
            i += 1
        toks = lines[i].split() if i < len(lines) else []
        if " ".join(toks[: ntok - 1]) != key or len(toks) != ntok:
            raise BvhError(source, min(i + 1, len(lines)), f"expected '{key} <value>'")
        fields.append((toks[-1], i + 1))
    (count, count_line), (step, step_line) = fields
    try:
        frames = int(count) if count.isascii() and count.isdigit() else -1
    except ValueError:  # beyond int's digit limit
        frames = -1
    if frames < 0:
        raise BvhError(source, count_line, f"Frames: must be a count, got {count!r}")
    frame_time = float(step) if _is_float(step) else math.nan
    if not MIN_FRAME_TIME <= frame_time <= MAX_FRAME_TIME:
        raise BvhError(
            source, step_line, f"Frame Time {step!r} s outside [{MIN_FRAME_TIME}, {MAX_FRAME_TIME}]"
        )
    return frames, frame_time, i + 1


def _parse_motion(lines: list[str], first: int, frames: int, width: int, source: str) -> np.ndarray:
    """(frames, width) values; one C call, or a line scan that names the first bad line."""
    body = lines[first:]
    if frames > 0 and width > 0:
        try:
            with warnings.catch_warnings():  # all-blank body: the scan below reports it
                warnings.simplefilter("ignore", UserWarning)
                data = np.loadtxt(body, dtype=np.float64, comments=None, ndmin=2)
        except (ValueError, OverflowError):
            data = None
        if data is not None and data.shape == (frames, width) and np.isfinite(data).all():
            return data
    rows: list[list[float]] = []
    last = first  # 1-based number of the line before the next expected frame
    for k, raw in enumerate(body):
        toks, lineno = raw.split(), first + k + 1
        if not toks:
            continue
        if len(rows) == frames:
            raise BvhError(source, lineno, f"more frame lines than 'Frames: {frames}'")
        if len(toks) != width:
            raise BvhError(source, lineno, f"frame has {len(toks)} values, channels need {width}")
        try:
            row = [float(t) for t in toks]
        except ValueError:
            bad = next(t for t in toks if not _is_float(t))
            raise BvhError(source, lineno, f"non-numeric value {bad!r}") from None
        if not all(map(math.isfinite, row)):
            raise BvhError(source, lineno, "non-finite value in frame")
        rows.append(row)
        last = lineno
    if len(rows) < frames:
        line = min(last + 1, len(lines))  # where the next frame was due
        raise BvhError(source, line, f"truncated motion: {len(rows)} of {frames} frames")
    return np.array(rows, dtype=np.float64).reshape(frames, width)


def _is_float(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _forward_kinematics(
    joints: list[_Joint], end_sites: dict[int, np.ndarray], data: np.ndarray
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """:func:`_fk_step` over all frames, ``_FRAMES`` at a time."""
    steps = [_fk_step(joints, end_sites, data[i : i + _FRAMES])
             for i in range(0, max(len(data), 1), _FRAMES)]  # fmt: skip
    ends = {j: np.concatenate([e[j] for _, e in steps]) for j in end_sites}
    return np.concatenate([p for p, _ in steps]), ends


def _fk_step(
    joints: list[_Joint], end_sites: dict[int, np.ndarray], data: np.ndarray
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """World positions (T, J, 3) and End Site positions (T, 3) in file units, frames at once.

    Arrays are component-major (..., T) so every numpy op runs along frames. A world
    rotation is kept as its columns ``(3, 3, T)`` (column, row, frame): a child's are its
    parent's weighted by the local rotation's entries. Local rotations and translations are
    batched over all joints, as short clips pay per numpy call. Parents precede children.
    """
    n, cols = data.shape[0], np.ascontiguousarray(data.T)
    chans = [
        (j, jt.column + k, c) for j, jt in enumerate(joints) for k, c in enumerate(jt.channels)
    ]
    moved = [(j, _AXIS[c[0]], col) for j, col, c in chans if c[1:] == "position"]
    offsets = np.array([jt.offset for jt in joints], dtype=np.float64)
    trans = np.repeat(offsets[:, :, None], n, axis=2) if moved else offsets[:, :, None]
    if moved:
        mj, ma, mc = zip(*moved, strict=True)
        trans[list(mj), list(ma)] = cols[list(mc)]
    has_child = {j.parent for j in joints}
    turning = [
        j for j in range(len(joints)) if j in has_child or (j in end_sites and end_sites[j].any())
    ]  # a leaf's rotation moves nothing
    local = _local_rotations(joints, cols, turning)
    pos = np.empty((len(joints), 3, n))
    rots: list[np.ndarray | None] = [None] * len(joints)  # None: no turn at or above
    for j, jt in enumerate(joints):
        prot = rots[jt.parent] if jt.parent >= 0 else None
        if jt.parent < 0:
            pos[j] = trans[j]
        elif prot is None:
            pos[j] = pos[jt.parent] + trans[j]
        else:
            pos[j] = pos[jt.parent] + (prot * trans[j][:, None]).sum(axis=0)
        m = local.get(j)  # (3, 3, T): row, column, frame
        if m is None or prot is None:
            rots[j] = prot if m is None else m.transpose(1, 0, 2)
        else:
            rots[j] = (prot[:, None] * m[:, :, None]).sum(axis=0)
    ends: dict[int, np.ndarray] = {}
    for j, off in end_sites.items():
        rot = rots[j]
        end = pos[j] + (off[:, None] if rot is None else (rot * off[:, None, None]).sum(axis=0))
        ends[j] = np.ascontiguousarray(end.T)
    return np.ascontiguousarray(pos.transpose(2, 0, 1)), ends


def _local_rotations(
    joints: list[_Joint], cols: np.ndarray, which: list[int]
) -> dict[int, np.ndarray]:
    """Local rotations ``(3, 3, T)`` of the joints in ``which`` that have rotation channels,
    by :func:`.conversions.euler_to_matrix`, one call per Euler order."""
    groups: dict[str, list[tuple[int, list[int]]]] = {}
    zero = len(cols)  # a row of zeros: the angle of an axis without a channel
    for j in which:
        if layout := _euler_layout(joints[j].channels):
            at = joints[j].column
            source = [zero if k < 0 else at + k for k in layout[1]]
            groups.setdefault(layout[0], []).append((j, source))
    if any(zero in src for members in groups.values() for _, src in members):
        cols = np.concatenate([cols, np.zeros((1, cols.shape[1]))])
    out: dict[int, np.ndarray] = {}
    for order, members in groups.items():
        angles = np.deg2rad(cols[np.transpose([src for _, src in members])])  # (3, G, T)
        m = euler_to_matrix(angles, order, components_first=True)  # (3, 3, G, T)
        out.update((j, m[:, :, g]) for g, (j, _) in enumerate(members))
    return out


@functools.cache
def _euler_layout(channels: tuple[str, ...]) -> tuple[str, tuple[int, ...]] | None:
    """Blender's Euler order of a joint's rotation channels, BVH's ``Zrotation Xrotation
    Yrotation`` being ``'YXZ'`` (the same turns listed the other way round; an axis without
    a channel turns last, by zero), and each axis' channel index (-1: none); None: no
    rotation channels."""
    listed = {c[0]: k for k, c in enumerate(channels) if c[1:] == "rotation"}
    if not listed:
        return None
    order = "".join(listed) + "".join(a for a in _AXIS if a not in listed)
    return order[::-1], tuple(listed.get(a, -1) for a in _AXIS)


def _auto_scale(joints: list[_Joint], end_sites: dict[int, np.ndarray], first: np.ndarray) -> float:
    """The UNITS factor that brings the skeleton's size nearest HUMAN_SIZE_M (log scale).

    Size is the longest root-to-leaf path along bones in ``first`` (J, 3). Bones into the
    root and the single-child chain below it down to the first branching joint (Bandai's
    ``joint_Root`` -> ``Hips``) are global translation, not anatomy, so they count zero.
    """
    parents = [j.parent for j in joints]
    children: list[list[int]] = [[] for _ in joints]
    for j, p in enumerate(parents):
        if p >= 0:
            children[p].append(j)
    length = np.linalg.norm(first - first[np.maximum(parents, 0)], axis=1)  # 0 for roots
    for root in (j for j, p in enumerate(parents) if p < 0):
        chain, j = [], root
        while len(children[j]) == 1:
            j = children[j][0]
            chain.append(j)
        if len(children[j]) > 1:  # a pure chain has no body below it: keep its bones
            length[chain] = 0.0
    path = np.zeros(len(joints))
    for j, p in enumerate(parents):
        path[j] = length[j] + (path[p] if p >= 0 else 0.0)
    for j, off in end_sites.items():
        path[j] += float(np.linalg.norm(off))  # rotations keep lengths
    size = float(path.max())
    if not (size > 0.0 and math.isfinite(size)):
        return UNITS["m"]
    return min(UNITS.values(), key=lambda f: abs(math.log(size) + math.log(f / HUMAN_SIZE_M)))


def resample(x: np.ndarray, frame_time: float, target_fps: float) -> np.ndarray:
    """Linear interpolation along axis 0 onto k / target_fps, up to the clip's last time."""
    n = x.shape[0]
    if n < 2:
        return x
    last = (n - 1) * frame_time
    count = math.floor(last * target_fps + RESAMPLE_SLACK) + 1
    idx = np.minimum(np.arange(count) / target_fps, last) / frame_time
    i0 = np.minimum(np.floor(idx).astype(np.int64), n - 2)
    w = (idx - i0).reshape((-1,) + (1,) * (x.ndim - 1))
    return x[i0] * (1.0 - w) + x[i0 + 1] * w


def _rest(joints: list[_Joint]) -> np.ndarray:
    """One frame of zero rotations with position channels at their OFFSET: the rest pose."""
    row = [
        jt.offset[_AXIS[c[0]]] if c.endswith("position") else 0.0
        for jt in joints
        for c in jt.channels
    ]
    return np.array(row, dtype=np.float64).reshape(1, -1)


def parse_bvh(
    text: str,
    source: str = "<string>",
    units: str | float = "auto",
    target_fps: float | None = 30.0,
) -> BvhClip:
    """Parse BVH text into world positions in metres at ``target_fps`` (None: keep the rate)."""
    fixed = None if units == "auto" else UNITS.get(units) if isinstance(units, str) else units
    if units != "auto" and not (isinstance(fixed, int | float) and 0 < fixed < math.inf):
        raise ValueError(f"units must be 'auto', one of {sorted(UNITS)} or a number > 0: {units!r}")
    text = text.removeprefix("\ufeff")
    if "\n" not in text:  # classic Mac line ends
        text = text.replace("\r", "\n")
    lines = text.split("\n")
    joints, end_sites, motion = _parse_hierarchy(lines, source)
    frames, frame_time, first = _motion_header(lines, motion, source)
    width = 0
    for jt in joints:
        jt.column, width = width, width + len(jt.channels)
    data = _parse_motion(lines, first, frames, width, source)
    with np.errstate(over="ignore", invalid="ignore"):
        pos, ends = _forward_kinematics(joints, end_sites, data)
        if not (np.isfinite(pos).all() and all(np.isfinite(e).all() for e in ends.values())):
            raise BvhError(source, None, "values too large: positions overflow")
        if fixed is None:
            rest = _forward_kinematics(joints, end_sites, _rest(joints))[0] if not frames else pos
            scale = _auto_scale(joints, end_sites, rest[0])
        else:
            scale = float(fixed)
    source_fps = 1.0 / frame_time
    positions = pos * scale
    end_positions = {j: e * scale for j, e in ends.items()}
    if target_fps is not None and abs(source_fps - target_fps) >= SAME_FPS_TOL:
        positions = resample(positions, frame_time, target_fps)
        end_positions = {j: resample(e, frame_time, target_fps) for j, e in end_positions.items()}
    return BvhClip(
        source=source,
        names=[j.name for j in joints],
        parents=np.array([j.parent for j in joints], dtype=np.int64),
        offsets=np.array([j.offset for j in joints], dtype=np.float64).reshape(-1, 3) * scale,
        end_sites={j: off * scale for j, off in end_sites.items()},
        positions=positions,
        end_positions=end_positions,
        fps=source_fps if target_fps is None else float(target_fps),
        source_fps=source_fps,
        units_scale=scale,
    )


def _decode(data: bytes) -> str:
    """BVH is ASCII in practice; a BOM is dropped and stray bytes never raise here."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def read_bvh(
    path: str | os.PathLike, units: str | float = "auto", target_fps: float | None = 30.0
) -> BvhClip:
    """Read one BVH file (see :func:`parse_bvh`)."""
    return parse_bvh(_decode(Path(path).read_bytes()), str(path), units, target_fps)


def _is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _iter_archive(path: Path) -> Iterator[tuple[str, str]]:
    """Stream the .bvh members in archive order, never unpacking to disk."""
    if path.name.lower().endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.is_dir() and info.filename.lower().endswith(BVH_SUFFIX):
                    yield f"{path}:{info.filename}", _decode(zf.read(info))
        return
    with tarfile.open(path, "r|*") as tf:
        for member in tf:
            if member.isfile() and member.name.lower().endswith(BVH_SUFFIX):
                fh = tf.extractfile(member)
                if fh is not None:
                    yield f"{path}:{member.name}", _decode(fh.read())


def iter_bvh_texts(paths: Iterable[str | os.PathLike]) -> Iterator[tuple[str, str]]:
    """(source, text) of every BVH in the given files, folders (recursive) and archives.

    A file named explicitly is read whatever its suffix; folders yield their ``.bvh`` files
    and archives in sorted path order; archives stream members in their stored order.
    """
    for entry in paths:
        path = Path(entry)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "no such BVH file, folder or archive", str(path))
        if path.is_dir():
            for sub in sorted(path.rglob("*")):
                if sub.is_file() and _is_archive(sub):
                    yield from _iter_archive(sub)
                elif sub.is_file() and sub.name.lower().endswith(BVH_SUFFIX):
                    yield str(sub), _decode(sub.read_bytes())
        elif _is_archive(path):
            yield from _iter_archive(path)
        else:
            yield str(path), _decode(path.read_bytes())


def read_bvh_paths(
    paths: Iterable[str | os.PathLike], units: str | float = "auto", target_fps: float | None = 30.0
) -> Iterator[BvhClip | BvhError]:
    """Parse everything :func:`iter_bvh_texts` finds; bad clips come back as their BvhError."""
    for source, text in iter_bvh_texts(paths):
        try:
            yield parse_bvh(text, source, units, target_fps)
        except BvhError as exc:
            yield exc
