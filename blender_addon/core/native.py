"""The compiled kernels (``_native/npe_native.c``), where this platform's library was built.

A single pose is a few hundred numpy calls on arrays of a few dozen numbers: their overhead,
not the arithmetic, sets a Live update's time. The kernels are those stages written pose by
pose in plain C (no Python API, loaded with ctypes: one build per platform serves every
Python; ``scripts/build_native.py`` cross-compiles all of them with zig). Everything works
without them: :func:`kernels` is None where the library is missing, refused or switched
off (``NPE_NATIVE=0``), and the numpy code runs instead. A caller that finds a kernel
disagreeing with its numpy code calls :func:`refuse`, and numpy serves from then on.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

LIBRARY_DIR = Path(__file__).resolve().parent / "_native"
SOURCE = LIBRARY_DIR / "npe_native.c"
ABI_VERSION = 9  # npe_native.c's NPE_ABI_VERSION
SWITCH = "NPE_NATIVE"  # "0": numpy only
# "1": the networks' plain code even where the processor has AVX2 (the build every
# processor runs: the tests run with it too, in CI).
BASELINE_SWITCH = "NPE_NATIVE_BASELINE"
# (sys.platform, machine) -> the build's platform name (as build_addon.py names them), file.
PLATFORMS = {
    ("linux", "x86_64"): ("linux-x64", "npe_native.so"),
    ("win32", "amd64"): ("windows-x64", "npe_native.dll"),
    ("darwin", "arm64"): ("macos-arm64", "npe_native.dylib"),
}

_P = ctypes.c_void_p  # every array goes by its address
_I = ctypes.c_int64
_D = ctypes.c_double


def platform_name() -> str | None:
    """This machine's platform as the build names it, or None where none is built."""
    key = (sys.platform, platform.machine().lower())
    return PLATFORMS[key][0] if key in PLATFORMS else None


def library_path(name: str | None = None) -> Path | None:
    """Where the library of platform ``name`` (default: this one) is built."""
    name = name or platform_name()
    files = {p: f for p, f in PLATFORMS.values()}
    return LIBRARY_DIR / name / files[name] if name in files else None


class Kernels:
    """The loaded library, its functions typed."""

    def __init__(self, lib: ctypes.CDLL, path: Path, eps: float) -> None:
        self.path, self.eps = path, eps  # (the self-check compares eps with the engine's)
        self.positions_to_rotations = lib.npe_positions_to_rotations
        self.positions_to_rotations.restype = None
        self.positions_to_rotations.argtypes = [
            _I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _D, _P, _P, _P, _P, _P, _P, _P]
        self.forward_kinematics = lib.npe_forward_kinematics
        self.forward_kinematics.restype = None
        self.forward_kinematics.argtypes = [_I, _I, _P, _P, _P, _P, _P, _P, _P]
        self.rig_ik = lib.npe_rig_ik
        self.rig_ik.restype = _I
        self.rig_ik.argtypes = [_I, _I, _P, _P, _I, _P, _P, _P, _P, _P, _P, _P, _I, *[_D] * 10]
        self.keep_rigid = lib.npe_keep_rigid
        self.keep_rigid.restype = None
        self.keep_rigid.argtypes = [_I, _I, _P, _P, _D, _P, _P, _P, _P, _P]
        self.decode = lib.npe_decode
        self.decode.restype = _I
        self.decode.argtypes = [_P, _I, _P, _P, _P, _P]
        self.decoder_avx2 = lib.npe_decoder_avx2
        self.decoder_avx2.restype = _I
        self.decoder_avx2.argtypes = []
        self.decoder_allow_avx2 = lib.npe_decoder_allow_avx2
        self.decoder_allow_avx2.restype = None
        self.decoder_allow_avx2.argtypes = [_I]
        self.universal = lib.npe_universal
        self.universal.restype = _I
        self.universal.argtypes = [_P, _P, _P, _I, _P, *[_P] * 6]
        self.unmoved_cache_size = lib.npe_unmoved_cache_size
        self.unmoved_cache_size.restype = _I
        self.unmoved_cache_size.argtypes = []
        self.refine_run = lib.npe_refine_run
        self.refine_run.restype = _I
        self.refine_run.argtypes = [_P, _P, _I, _I, _I, _I, _P, _P, _P, _D, _D, _D, *[_P] * 31]
        self.beyond_reach = lib.npe_beyond_reach
        self.beyond_reach.restype = None
        self.beyond_reach.argtypes = [_I, _I, _I, *[_P] * 7]
        self.exact_reach = lib.npe_exact_reach
        self.exact_reach.restype = _I
        self.exact_reach.argtypes = [_I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _D, _I, _D, _D,
                                     _D, _I, _I]


_loaded: Kernels | None = None
_tried = False
_refused: str | None = None


def _load() -> Kernels | None:
    path = library_path()
    if path is None or not path.is_file():
        return None
    try:
        lib = ctypes.CDLL(str(path))
        version = lib.npe_abi_version
        version.restype = _I
        eps = lib.npe_eps
        eps.restype = _D
        if version() != ABI_VERSION:
            log.warning("%s is of another version (ABI %d; this code wants %d): rebuild it "
                        "(python scripts/build_native.py); numpy serves meanwhile",
                        path, version(), ABI_VERSION)
            return None
        loaded = Kernels(lib, path, eps())
        if os.environ.get(BASELINE_SWITCH, "0") == "1":
            loaded.decoder_allow_avx2(0)
        return loaded
    except (OSError, AttributeError) as exc:
        log.warning("could not load %s (%s): numpy serves instead", path, exc)
        return None


def kernels() -> Kernels | None:
    """The kernels, or None: numpy then. The first call loads the library and checks it
    against the numpy code (:func:`.native_check.self_check`, imported here: this module
    imports nothing of the engine, the check imports the kernels' owners)."""
    global _loaded, _tried
    if _refused is not None or os.environ.get(SWITCH, "1") == "0":
        return None
    if not _tried:
        _tried = True
        loaded = _load()
        if loaded is not None:
            from .native_check import self_check
            if problem := self_check(loaded):
                refuse(f"{loaded.path.name}: {problem}")
                return None
        _loaded = loaded
    return _loaded


@contextmanager
def checking(loaded: Kernels) -> Iterator[None]:
    """Within the block, :func:`kernels` gives ``loaded`` (the self-check runs each kernel
    through its public function)."""
    global _loaded, _tried
    before = _loaded, _tried
    _loaded, _tried = loaded, True
    try:
        yield
    finally:
        _loaded, _tried = before


def status() -> str:
    """One line for the add-on's preferences: which kernels run, or why numpy does."""
    if os.environ.get(SWITCH, "1") == "0":
        return f"off ({SWITCH}=0): numpy"
    loaded = kernels()
    if loaded is not None:
        return f"on ({loaded.path.name})"
    if _refused is not None:
        return f"off, numpy: {_refused}"
    return f"off, numpy: no library built for this machine ({platform_name() or sys.platform})"


def refuse(reason: str) -> None:
    """Stop using the kernels for this process (a kernel disagreed with its numpy code)."""
    global _refused
    if _refused is None:
        log.warning("compiled kernels switched off: %s", reason)
    _refused = reason


@contextmanager
def switched_off() -> Iterator[None]:
    """numpy alone within the block (tests, A/B timings)."""
    old = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = old


def address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (checked: a kernel reads it flat)."""
    if not a.flags.c_contiguous:
        raise ValueError("a kernel's array must be C-contiguous")
    if a.flags.writeable and a.nbytes:  # a third of ``a.ctypes.data``'s time: a solve
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # passes a few dozen arrays
    return a.ctypes.data
