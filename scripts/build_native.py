"""Compile the add-on's kernels (``blender_addon/core/_native/npe_native.c``) for each platform.

``python3 scripts/build_native.py`` builds every platform the extension ships for (Linux
x64, Windows x64, macOS arm64) from this one machine: zig's C compiler cross-compiles, with
the C library of each target bundled (the ``ziglang`` wheel, pinned in
``requirements-native.txt``, in ``.venv-native``). ``--platform host`` builds this
machine's alone (what the tests load). Each library lands in
``blender_addon/core/_native/<platform>/`` (not committed) by an atomic rename, so a
failed build leaves the previous library or none, never half of one. Stdlib only: this runs
before any venv exists.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repo root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.venvs import VenvError, ensure_venv

ROOT = Path(__file__).resolve().parents[1]
NATIVE_DIR = ROOT / "blender_addon" / "core" / "_native"
SOURCE = NATIVE_DIR / "npe_native.c"
VENV = ROOT / ".venv-native"
REQUIREMENTS = [ROOT / "requirements-native.txt"]
# -O2, no fused multiply-adds (every platform rounds alike), strict C99 with every warning an
# error, symbols hidden but the exported ones, no debug info.
FLAGS = ("-O2", "-ffp-contract=off", "-std=c99", "-Wall", "-Wextra", "-Werror",
         "-fvisibility=hidden", "-shared", "-s")


@dataclass(frozen=True)
class Target:
    """A platform as build_addon.py names it, zig's target triple and the library's file."""

    name: str
    triple: str
    file: str
    machine: tuple[str, str]  # (sys.platform, platform.machine().lower()) where it runs


TARGETS = {t.name: t for t in (
    # Blender 4.2+ needs glibc 2.28 on Linux and macOS 11 on Apple Silicon.
    Target("linux-x64", "x86_64-linux-gnu.2.28", "npe_native.so", ("linux", "x86_64")),
    Target("windows-x64", "x86_64-windows-gnu", "npe_native.dll", ("win32", "amd64")),
    Target("macos-arm64", "aarch64-macos.11.0", "npe_native.dylib", ("darwin", "arm64")),
)}


class NativeBuildError(RuntimeError):
    """zig is missing or failed: the message names the platform and quotes the compiler."""


def host_target() -> Target:
    here = (sys.platform, platform.machine().lower())
    for t in TARGETS.values():
        if t.machine == here:
            return t
    raise NativeBuildError(f"no kernel build for this machine ({here[0]}, {here[1]}); "
                           f"built: {', '.join(TARGETS)}")


def library(target: Target, native_dir: Path = NATIVE_DIR) -> Path:
    return native_dir / target.name / target.file


def compile_one(zig_python: Path, target: Target, source: Path = SOURCE,
                native_dir: Path = NATIVE_DIR) -> Path:
    """Compile ``source`` for ``target`` into its folder (atomically); the library's path."""
    out = library(target, native_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="npe-native-", dir=out.parent) as tmp:
        built = Path(tmp) / target.file
        cmd = [str(zig_python), "-m", "ziglang", "cc", "-target", target.triple, *FLAGS,
               "-o", str(built), str(source)]
        # zig keeps its cache beside the venv, not in the user's home.
        env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(VENV / "zig-cache")}
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0 or not built.is_file():
            raise NativeBuildError(f"{target.name}: zig cc failed on {source.name}:\n"
                                   f"{(result.stderr or result.stdout).strip()}")
        os.replace(built, out)
    return out


def build(names: list[str], source: Path = SOURCE, native_dir: Path = NATIVE_DIR) -> list[Path]:
    """Build the named platforms' libraries ("host": this machine's); their paths."""
    targets = [host_target() if n == "host" else TARGETS[n] for n in names]
    try:
        zig_python = ensure_venv(VENV, REQUIREMENTS)
    except (VenvError, subprocess.CalledProcessError) as e:
        raise NativeBuildError(f"could not set up {VENV} for zig: {e}") from e
    built = []
    for t in dict.fromkeys(targets):
        # zig builds each target's C library once into its cache: a minute or two the first
        # time, then a second.
        print(f"compiling {source.name} for {t.name} ({t.triple}) ...", flush=True)
        built.append(compile_one(zig_python, t, source, native_dir))
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", action="append", choices=[*TARGETS, "host"],
                        help="build only this platform (repeatable; default: all)")
    args = parser.parse_args(argv)
    try:
        for path in build(args.platform or list(TARGETS)):
            print(f"built {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")
    except NativeBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
