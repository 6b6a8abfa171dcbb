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

from .quaternions import EPS, quat_to_matrix
from .skeleton import PARENTS

log = logging.getLogger(__name__)

LIBRARY_DIR = Path(__file__).resolve().parent / "_native"
SOURCE = LIBRARY_DIR / "npe_native.c"
ABI_VERSION = 7  # npe_native.c's NPE_ABI_VERSION
SWITCH = "NPE_NATIVE"  # "0": numpy only
# (sys.platform, machine) -> the build's platform name (as build_addon.py names them), file.
PLATFORMS = {
    ("linux", "x86_64"): ("linux-x64", "npe_native.so"),
    ("win32", "amd64"): ("windows-x64", "npe_native.dll"),
    ("darwin", "arm64"): ("macos-arm64", "npe_native.dylib"),
}

SELF_CHECK_SEED = 0
SELF_CHECK_TOLERANCE = 1e-9  # the tests hold the kernels to the numpy code at this
# Rig IK's steps are accepted or not by comparing sums, which rounding may tip where both
# sides are all but equal: a few steps of a well-posed pull, held more loosely.
SELF_CHECK_IK_STEPS, SELF_CHECK_IK_TOLERANCE = 5, 1e-6

# The skeleton's parents as the kernels read them (int64, contiguous; read-only).
SKELETON_PARENTS = np.ascontiguousarray(PARENTS, dtype=np.int64)
SKELETON_PARENTS.flags.writeable = False

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

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        self.path = path
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
        self.refine_start = lib.npe_refine_start
        self.refine_start.restype = _I
        self.refine_start.argtypes = [_I, _I, _I, _P, _P, _P, _D, _D, *[_P] * 22]
        self.refine_step = lib.npe_refine_step
        self.refine_step.restype = _I
        self.refine_step.argtypes = [_I, _I, _I, *[_P] * 15]
        self.refine_accept = lib.npe_refine_accept
        self.refine_accept.restype = _I
        self.refine_accept.argtypes = [_I, _I, _I, _P, _P, _P, _D, _D, *[_P] * 13]
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
        self.begin = lib.npe_begin
        self.begin.restype = _I
        self.begin.argtypes = [*[_P] * 11, _I, _I, _D, _I, *[_P] * 5]
        self.solve_one = lib.npe_solve_one
        self.solve_one.restype = _I
        self.solve_one.argtypes = [*[_P] * 11, _I, _D, _I, *[_P] * 6, _I, *[_P] * 9, _I,
                                   *[_P] * 3]
        self.refine_run = lib.npe_refine_run
        self.refine_run.restype = _I
        self.refine_run.argtypes = [_P, _P, _I, _I, _I, _I, _P, _P, _P, _D, _D, _D, *[_P] * 31]
        self.beyond_reach = lib.npe_beyond_reach
        self.beyond_reach.restype = None
        self.beyond_reach.argtypes = [_I, _I, _I, *[_P] * 7]
        self.request = lib.npe_request
        self.request.restype = None
        self.request.argtypes = [_P, _P, _P, _P, _P, _P, _P, _I, _I, _D, _P]
        self.start = lib.npe_start
        self.start.restype = _I
        self.start.argtypes = [_P, _I, *[_P] * 5]
        self.finish = lib.npe_finish
        self.finish.restype = _I
        self.finish.argtypes = [_P, _I, _I, *[_P] * 9, _I, *[_P] * 12]
        self.exact_reach = lib.npe_exact_reach
        self.exact_reach.restype = _I
        self.exact_reach.argtypes = [_I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _D, _D, _I, _D,
                                     _D, _D, _I, _I]


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
        if version() != ABI_VERSION or eps() != EPS:
            log.warning("%s is of another version (ABI %d, eps %g; this code wants %d, %g): "
                        "rebuild it (python scripts/build_native.py); numpy serves meanwhile",
                        path, version(), eps(), ABI_VERSION, EPS)
            return None
        return Kernels(lib, path)
    except (OSError, AttributeError) as exc:
        log.warning("could not load %s (%s): numpy serves instead", path, exc)
        return None


def kernels() -> Kernels | None:
    """The kernels, or None: numpy then. The first call loads the library and checks it
    against the numpy code (:func:`_self_check`)."""
    global _loaded, _tried
    if _refused is not None or os.environ.get(SWITCH, "1") == "0":
        return None
    if not _tried:
        _tried = True
        loaded = _load()
        if loaded is not None and (problem := _self_check(loaded)):
            refuse(f"{loaded.path.name}: {problem}")
            return None
        _loaded = loaded
    return _loaded


def _self_check(loaded: Kernels) -> str | None:
    """What the kernels get wrong against the numpy code on fixed cases, or None: each
    kernel through its public function, once with ``loaded`` and once with numpy. A rig of
    the canonical skeleton with random rest frames, three random poses and targets, every
    kind of bone (a placed pelvis, swings, fits, an oriented hand); its first pose as a
    body for rig IK, exact reach and the rigid branches. A library built wrong for this
    machine (a calling convention, a compiler's bug) is caught here, once."""
    global _loaded, _tried
    from . import exact_reach, rig_ik, rigid_branches  # they use this module
    from .rig import Rig, forward_kinematics
    from .skeleton import JOINT_INDEX, NUM_JOINTS, PARENTS, bone_lengths
    from .solver import RotationSolver

    rng = np.random.default_rng(SELF_CHECK_SEED)

    def unit_quats(*shape: int) -> np.ndarray:
        q = rng.normal(size=(*shape, 4))
        return q / np.linalg.norm(q, axis=-1, keepdims=True)

    rig = Rig([f"j{j}" for j in range(NUM_JOINTS)], PARENTS,
              rng.normal(scale=0.2, size=(NUM_JOINTS, 3)), quat_to_matrix(unit_quats(NUM_JOINTS)))
    q, loc = unit_quats(3, NUM_JOINTS), rng.normal(scale=0.1, size=(3, NUM_JOINTS, 3))
    targets = rng.normal(scale=0.5, size=(3, NUM_JOINTS, 3))
    hand = {NUM_JOINTS - 1: quat_to_matrix(unit_quats(3))}
    solver = RotationSolver(rig, range(NUM_JOINTS))
    with switched_off():
        body = forward_kinematics(rig, q[:1], loc[:1])[1]
    goals = np.zeros((1, NUM_JOINTS), dtype=bool)
    goals[0, [JOINT_INDEX[j] for j in ("l_hand", "l_foot", "r_foot", "head")]] = True
    pulled = body.copy()
    pulled[0, JOINT_INDEX["l_hand"]] += [0.2, 0.0, 0.0]
    far = body + rng.normal(scale=0.3, size=body.shape)
    cases = {
        "positions -> rotations": (lambda: solver.solve(q, loc, targets, hand),
                                   SELF_CHECK_TOLERANCE),
        "forward kinematics": (lambda: forward_kinematics(rig, q, loc), SELF_CHECK_TOLERANCE),
        "rig IK": (lambda: rig_ik.solve(body, goals, pulled, 1e-4, SELF_CHECK_IK_STEPS),
                   SELF_CHECK_IK_TOLERANCE),
        "exact reach": (lambda: exact_reach.solve(body, goals, far, bone_lengths(body), 1e-4),
                        SELF_CHECK_TOLERANCE),
        "rigid branches": (lambda: rigid_branches.keep_rigid(far, body), SELF_CHECK_TOLERANCE),
    }
    before = _loaded, _tried
    _loaded, _tried = loaded, True  # kernels() gives it while checking
    try:
        for name, (run, tolerance) in cases.items():
            try:
                got = run()
            except (RuntimeError, ValueError, OSError) as exc:  # a kernel that refused
                return f"{name}: {exc}"
            with switched_off():
                want = run()
            worst = max(float(np.abs(a - b).max()) for a, b in zip(
                *(x if isinstance(x, tuple) else (x,) for x in (got, want)), strict=True))
            if not worst <= tolerance:
                return f"{name}: {worst:.1e} off numpy's answers"
        return None
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
