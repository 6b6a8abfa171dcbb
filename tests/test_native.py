"""The compiled kernels' loader and build: every shipped platform has a build, the cross
builds are libraries of their platform exporting the kernels, a library that is missing,
foreign or disagrees with the numpy code leaves numpy in charge. (The kernels' numbers are
held to the numpy code and the per-bone reference in test_rotations*.py, which run every
solver and FK test on both.)"""

from __future__ import annotations

import ctypes
import logging
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import build_addon
from blender_addon.core import native, native_check
from blender_addon.core.rig import forward_kinematics
from blender_addon.core.solver import positions_to_rotations
from scripts import build_native
from tests.conftest import kernels_missing
from tests.test_rotations import production_rig, random_pose

# Every function the source exports (NPE_API), as the libraries must name them: npe_native.c
# and the parts it includes.
EXPORTS = tuple(dict.fromkeys(name.encode() for part in sorted(build_native.NATIVE_DIR.glob("*.c"))
                              for name in re.findall(r"NPE_API[^(;]*?\b(npe_\w+)\(",
                                                     part.read_text())))
ELF_X86_64, PE_AMD64, MACHO_ARM64 = 62, 0x8664, 0x0100000C
LC_CODE_SIGNATURE = 0x1D  # Apple Silicon loads signed code only (ad hoc will do)


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader as a new process finds it (restored afterwards)."""
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_refused", None)
    monkeypatch.delenv(native.SWITCH, raising=False)


def built() -> native.Kernels:
    loaded = native._load()  # loaded, not checked: the tests check it themselves
    if loaded is None:
        kernels_missing("compiled kernels not built")
    return loaded


def test_every_shipped_platform_has_a_kernel_build() -> None:
    """The build, the loader and the extension's zips name the same platforms and files."""
    assert set(build_native.TARGETS) == set(build_addon.PLATFORMS)
    assert {(t.machine, (t.name, t.file)) for t in build_native.TARGETS.values()} \
        == set(native.PLATFORMS.items())


def macho_commands(data: bytes) -> list[int]:
    ncmds = struct.unpack_from("<I", data, 16)[0]
    commands, offset = [], 32
    for _ in range(ncmds):
        command, size = struct.unpack_from("<II", data, offset)
        commands.append(command)
        offset += size
    return commands


def test_the_kernels_are_cross_compiled_for_every_platform(tmp_path: Path) -> None:
    """Real zig, every target: each file is a library of its platform's format and machine
    that exports every kernel (only this machine's can be loaded here)."""
    paths = build_native.build(list(build_native.TARGETS), build_native.SOURCE, tmp_path)
    files = {p.parent.name: p.read_bytes() for p in paths}
    elf = files["linux-x64"]
    assert elf[:4] == b"\x7fELF" and struct.unpack_from("<H", elf, 18)[0] == ELF_X86_64
    pe = files["windows-x64"]
    header = struct.unpack_from("<I", pe, 0x3C)[0]
    assert pe[:2] == b"MZ" and pe[header:header + 4] == b"PE\0\0"
    assert struct.unpack_from("<H", pe, header + 4)[0] == PE_AMD64
    macho = files["macos-arm64"]
    assert struct.unpack_from("<Ii", macho, 0) == (0xFEEDFACF, MACHO_ARM64)
    assert LC_CODE_SIGNATURE in macho_commands(macho)
    assert len(EXPORTS) >= 14 and b"npe_refine_run" in EXPORTS  # the source read right
    for name, data in files.items():
        missing = [e.decode() for e in EXPORTS if e not in data]
        assert not missing, f"{name} lacks {missing}"


def test_a_failed_compile_names_the_platform_and_keeps_the_old_library(tmp_path: Path) -> None:
    source = tmp_path / "npe_native.c"
    source.write_text("int broken(void) { return }\n")
    kept = build_native.library(build_native.TARGETS["linux-x64"], tmp_path)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"the previous build")
    with pytest.raises(build_native.NativeBuildError,
                       match=r"(?s)linux-x64: zig cc failed on npe_native.c.*1:27: error"):
        build_native.build(["linux-x64"], source, tmp_path)
    assert kept.read_bytes() == b"the previous build"
    assert sorted(p.name for p in kept.parent.iterdir()) == [kept.name]  # no temp left


@pytest.mark.usefixtures("fresh_loader")
def test_missing_or_foreign_libraries_leave_numpy_in_charge(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(native, "library_path", lambda: tmp_path / "none.so")
    assert native.kernels() is None
    monkeypatch.setattr(native, "_tried", False)
    foreign = tmp_path / "npe_native.so"
    foreign.write_bytes(b"not a library")
    monkeypatch.setattr(native, "library_path", lambda: foreign)
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.kernels() is None
    assert str(foreign) in caplog.text and "numpy serves" in caplog.text


@pytest.mark.usefixtures("fresh_loader")
def test_the_environment_switches_the_kernels_off(monkeypatch: pytest.MonkeyPatch) -> None:
    built()
    assert native.kernels() is not None
    monkeypatch.setenv(native.SWITCH, "0")
    assert native.kernels() is None
    with native.switched_off():
        assert native.kernels() is None
    monkeypatch.delenv(native.SWITCH)
    assert native.kernels() is not None


class _Off:
    """The real kernels, but positions_to_rotations writes quaternions ``error`` off."""

    def __init__(self, real: native.Kernels, error: float) -> None:
        self._real, self._error = real, error

    def __getattr__(self, name: str):  # the other kernels: the real ones
        return getattr(self._real, name)

    def positions_to_rotations(self, n, nb, *args) -> None:
        self._real.positions_to_rotations(n, nb, *args)
        out = (ctypes.c_double * (n * nb * 4)).from_address(args[-3])
        np.ctypeslib.as_array(out)[:] += self._error


@pytest.mark.usefixtures("fresh_loader")
def test_a_kernel_that_disagrees_with_numpy_is_refused(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real = built()
    assert native_check.self_check(real) is None
    assert native_check.self_check(_Off(real, 1e-10)) is None  # within the tests' tolerance
    monkeypatch.setattr(native, "_load", lambda: _Off(real, 1e-6))
    rig, joint_bones = production_rig(1.0)
    q, loc, start_q, start_loc = random_pose(rig, joint_bones, 2, 1.0, seed=3)
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        heads = forward_kinematics(rig, q, loc)[1]  # the first use: load, check, refuse
        tg = heads[:, [b if b is not None else 0 for b in joint_bones]]
        got = positions_to_rotations(rig, start_q, start_loc, joint_bones, tg)
    assert native.kernels() is None
    assert "positions -> rotations: 1.0e-06 off numpy's answers" in caplog.text
    with native.switched_off():
        want = positions_to_rotations(rig, start_q, start_loc, joint_bones, tg)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.usefixtures("fresh_loader")
def test_the_status_line_says_which_engine_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    real = built()
    assert native.status() == f"on ({real.path.name})"
    monkeypatch.setenv(native.SWITCH, "0")
    assert native.status() == f"off ({native.SWITCH}=0): numpy"
    monkeypatch.delenv(native.SWITCH)
    native.refuse("exact reach: 1.0e-03 off numpy's answers")
    assert native.status() == "off, numpy: exact reach: 1.0e-03 off numpy's answers"


class _Refusing:
    """The real kernels, but exact reach refuses every skeleton (returns -1)."""

    def __init__(self, real: native.Kernels) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    @staticmethod
    def exact_reach(*_args) -> int:
        return -1


@pytest.mark.usefixtures("fresh_loader")
def test_a_kernel_that_fails_its_self_check_leaves_numpy_in_charge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = built()
    monkeypatch.setattr(native, "_load", lambda: _Refusing(real))
    assert native.kernels() is None
    assert native._refused.startswith(f"{real.path.name}: exact reach: the exact-reach kernel")


@pytest.mark.usefixtures("fresh_loader")
def test_the_baseline_switch_runs_the_networks_plain_code(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """NPE_NATIVE_BASELINE=1: the networks' plain code even where the processor has AVX2
    (the build every processor runs; CI runs the engine's tests so too)."""
    built()
    monkeypatch.setenv(native.BASELINE_SWITCH, "1")
    loaded = native._load()
    assert loaded is not None and loaded.decoder_avx2() == 0
    loaded.decoder_allow_avx2(1)  # (the library is loaded once per process: as it was)
