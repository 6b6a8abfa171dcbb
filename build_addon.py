"""Build the installable Blender extension zips, one per platform, into ``dist/``.

``python3 build_addon.py`` stages ``blender_addon/`` (the extension root, without caches and
tests) with the model sets from ``models/`` (the default set, and the sets in its
sub-folders such as ``models/cmu-bandai/``) in its ``models/`` folder, downloads the
onnxruntime wheel pinned for each platform in ``addon-wheels.txt`` (cached in
``build/wheels/``), writes the staged manifest's ``platforms`` and ``wheels``, and lets
Blender's own extension CLI (``blender_ext.py``, from the bpy package in ``.venv-bpy45``,
created on first use) build ``--split-platforms`` and validate each zip. Each zip is then
checked to hold exactly its platform's wheels, the models and the add-on, because
``blender_ext.py`` happily writes a zip whose wheels are missing. Zips are built in a temp
folder and moved into ``dist/`` only when every one passed, so a failed build leaves no
half-written zip. The add-on's compiled kernels are built first for the platforms zipped
(``scripts/build_native.py``: zig cross-compiles them all here) and ship in each zip, the
loader picking its platform's. Stdlib only: this runs before any venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from scripts import build_native
from scripts.venvs import VenvError, ensure_venv

ROOT = Path(__file__).resolve().parent
ADDON_DIR = ROOT / "blender_addon"
MODELS_DIR = ROOT / "models"
WHEEL_PINS = ROOT / "addon-wheels.txt"
WHEEL_CACHE = ROOT / "build" / "wheels"
DIST_DIR = ROOT / "dist"
# blender_ext.py comes from the bpy wheel; this is the venv the Blender 4.5 tests use too.
BPY_VENV = ROOT / ".venv-bpy45"
BPY_REQUIREMENTS = [ROOT / "requirements-bpy45.txt"]
BLENDER_EXT_GLOB = "*/scripts/addons_core/bl_pkg/cli/blender_ext.py"
BLENDER_TAGS_GLOB = "*/scripts/modules/_bpy_internal/extensions/tags.py"

MANIFEST_NAME = "blender_manifest.toml"
MODELS_MANIFEST = "manifest.json"  # a model folder without it is not a model set
STAGED_MODELS = "models"  # core.models.default_models_dir() looks at <extension root>/models
STAGED_WHEELS = "wheels"
GENERATED_KEYS = ("platforms", "wheels")  # written by the build, never committed
# The wheels are CPython 3.11 builds: Blender 4.2 to 5.0 run Python 3.11, 5.1 moves to 3.13.
PYTHON_VERSION = "3.11"
PYTHON_ABI = "cp311"
BLENDER_VERSION_MAX = "5.1.0"  # exclusive, written unless the committed manifest sets one
EXCLUDE_DIRS = {"__pycache__", ".pytest_cache", "tests"}
EXCLUDE_SUFFIXES = {".pyc", ".pyo"}
DOWNLOAD_WORKERS = 3  # network-bound: one pip per platform at a time
PIP_ERROR_LINES = 4  # lines of pip's stderr quoted in a download error


class BuildError(RuntimeError):
    """A build step failed; the message names the platform, package or file at fault."""


@dataclass(frozen=True)
class Platform:
    """A Blender platform, how addon-wheels.txt's markers and pip name it, which wheels fit."""
    name: str  # Blender's name, used in the manifest and the zip's name
    sys_platform: str  # the value of `sys_platform` in addon-wheels.txt markers
    pip_platform: str  # `pip download --platform`: the oldest OS the platform's Blender runs on
    wheel_tag: str  # regex a wheel's platform tag must match ("any" always fits)


PLATFORMS: dict[str, Platform] = {p.name: p for p in (
    # Blender 4.2+ on Linux needs glibc 2.28; on macOS 11.2 (Apple Silicon).
    Platform("linux-x64", "linux", "manylinux_2_28_x86_64", r"(many)?linux\w*_x86_64"),
    Platform("windows-x64", "win32", "win_amd64", r"win_amd64"),
    Platform("macos-arm64", "darwin", "macosx_11_0_arm64", r"macosx_\d+_\d+_(arm64|universal2)"),
)}


@dataclass(frozen=True)
class Pin:
    """One line of addon-wheels.txt: ``name==version`` for every platform or just one."""
    name: str
    version: str
    sys_platform: str | None = None  # None: every platform

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def applies_to(self, platform: Platform) -> bool:
        return self.sys_platform in (None, platform.sys_platform)


PIN_RE = re.compile(r"""^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>[^\s;]+)\s*
                        (?:;\s*sys_platform\s*==\s*(?P<q>["'])(?P<plat>[^"']+)(?P=q)\s*)?$""",
                    re.VERBOSE)


def log(message: str) -> None:
    """A progress line for the slow steps (downloads, Blender's build and validation)."""
    print(f"[build] {message}", flush=True)


def read_pins(path: Path = WHEEL_PINS) -> list[Pin]:
    """Parse the pins; at most one pin of a package per platform."""
    known = {p.sys_platform for p in PLATFORMS.values()}
    pins: list[Pin] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = PIN_RE.match(line)
        if m is None:
            raise BuildError(f"{path.name}:{number}: expected 'name==version' with an optional "
                             f"'; sys_platform == \"...\"' marker, got {raw.strip()!r}")
        if m["plat"] is not None and m["plat"] not in known:
            raise BuildError(f"{path.name}:{number}: unknown sys_platform {m['plat']!r} "
                             f"(one of {', '.join(sorted(known))})")
        pins.append(Pin(m["name"], m["version"], m["plat"]))
    for platform in PLATFORMS.values():
        names = [normalize(p.name) for p in pins_for(platform, pins)]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise BuildError(f"{path.name}: {platform.name} gets more than one pin of "
                             f"{', '.join(dupes)}")
    return pins


def pins_for(platform: Platform, pins: Iterable[Pin]) -> list[Pin]:
    return [p for p in pins if p.applies_to(platform)]


def normalize(name: str) -> str:
    """A project name as wheel filenames spell it (PEP 427 / 503)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_fits(filename: str, platform: Platform) -> bool:
    """Whether a wheel's platform tag (compressed tags split on '.') fits the platform."""
    tags = filename.removesuffix(".whl").split("-")[-1].split(".")
    return any(t == "any" or re.fullmatch(platform.wheel_tag, t) for t in tags)


def wheel_matches(filename: str, pin: Pin) -> bool:
    name, version = filename.split("-")[:2]
    return normalize(name) == normalize(pin.name) and version == pin.version


def check_platform_wheels(platform: Platform, pins: Iterable[Pin], wheels: Iterable[str]) -> None:
    """Each pin for the platform has exactly one fitting wheel, and no other wheel is there."""
    wheels = sorted(wheels)
    expected = pins_for(platform, pins)
    for pin in expected:
        found = [w for w in wheels if wheel_matches(w, pin)]
        if not found:
            raise BuildError(f"{platform.name}: no wheel for {pin.requirement}")
        if len(found) > 1:
            raise BuildError(f"{platform.name}: several wheels for {pin.requirement}: {found}")
        if not wheel_fits(found[0], platform):
            raise BuildError(f"{platform.name}: {found[0]} is not a {platform.name} wheel")
    if extra := [w for w in wheels if not any(wheel_matches(w, p) for p in expected)]:
        raise BuildError(f"{platform.name}: unexpected wheels {extra}")


# -- downloads -------------------------------------------------------------------------------

def cached_wheel(pin: Pin, platform: Platform, cache: Path) -> Path | None:
    folder = cache / platform.name
    hits = [w for w in sorted(folder.glob("*.whl"))
            if wheel_matches(w.name, pin) and wheel_fits(w.name, platform)]
    return hits[0] if hits else None


def pip_error(stderr: str) -> str:
    """pip's ERROR lines (its WARNING lines about unreachable extra indexes are noise)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")] or lines
    return " / ".join(errors[-PIP_ERROR_LINES:]) or "no output"


def download_wheel(pin: Pin, platform: Platform, cache: Path = WHEEL_CACHE,
                   python: str | Path = sys.executable) -> Path:
    """The pinned wheel for the platform, from the cache or downloaded into it by pip."""
    if (hit := cached_wheel(pin, platform, cache)) is not None:
        return hit
    folder = cache / platform.name
    folder.mkdir(parents=True, exist_ok=True)
    log(f"{platform.name}: downloading {pin.requirement} ...")
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [str(python), "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
               "--platform", platform.pip_platform, "--python-version", PYTHON_VERSION,
               "--implementation", "cp", "--abi", PYTHON_ABI, "--disable-pip-version-check",
               "--quiet", "--dest", tmp, pin.requirement]
        result = subprocess.run(cmd, capture_output=True, text=True)
        got = sorted(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or len(got) != 1:
            raise BuildError(f"{platform.name}: pip could not download {pin.requirement} "
                             f"({platform.pip_platform}, {PYTHON_ABI}): "
                             f"{pip_error(result.stderr)}")
        if not (wheel_matches(got[0].name, pin) and wheel_fits(got[0].name, platform)):
            raise BuildError(f"{platform.name}: pip returned {got[0].name} for {pin.requirement}")
        target = folder / got[0].name
        os.replace(got[0], target)
    return target


def download_all(platforms: list[Platform], pins: list[Pin], cache: Path,
                 python: str | Path) -> dict[str, list[Path]]:
    """Every platform's wheels, downloads in parallel; the first failure is raised."""
    jobs = [(pl, pin) for pl in platforms for pin in pins_for(pl, pins)]
    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:
        futures = [pool.submit(download_wheel, pin, pl, cache, python) for pl, pin in jobs]
        paths = [f.result() for f in futures]
    wheels: dict[str, list[Path]] = {pl.name: [] for pl in platforms}
    for (pl, _), path in zip(jobs, paths, strict=True):
        wheels[pl.name].append(path)
    return wheels


# -- staging and the manifest ----------------------------------------------------------------

def wanted(rel: Path) -> bool:
    """Ship sources and data, not caches, tests or hidden files."""
    return (not any(p in EXCLUDE_DIRS or p.startswith(".") for p in rel.parts)
            and rel.suffix not in EXCLUDE_SUFFIXES)


def copy_tree(src: Path, dest: Path) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_file() and wanted(rel):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)


def check_sources(addon_dir: Path, models_dir: Path) -> None:
    """The extension root and the model set look right (checked before anything slow)."""
    if not (addon_dir / MANIFEST_NAME).is_file():
        raise BuildError(f"{addon_dir} has no {MANIFEST_NAME}")
    if not (models_dir / MODELS_MANIFEST).is_file():
        raise BuildError(f"no model set in {models_dir} ({MODELS_MANIFEST} missing): train and "
                         f"export one (python -m training train-all / export) or pass --models")
    for reserved in (STAGED_MODELS, STAGED_WHEELS):
        if (addon_dir / reserved).exists():
            raise BuildError(f"{addon_dir / reserved} would clash with the build's {reserved}/")
    shipped_sets(models_dir)


def shipped_sets(models_dir: Path) -> list[str]:
    """The model sets shipped: the default one (``models/`` itself) and every sub-folder
    holding one (``models/cmu-bandai/``); a sub-folder with model files but no manifest
    is a set copied half-way, and an error."""
    sets = ["."]
    for sub in sorted(p for p in models_dir.iterdir() if p.is_dir() and wanted(Path(p.name))):
        if (sub / MODELS_MANIFEST).is_file():
            sets.append(sub.name)
        elif any(f.suffix == ".onnx" for f in sub.rglob("*")):
            raise BuildError(f"{sub} holds models but no {MODELS_MANIFEST}: finish exporting "
                             "that set or remove the folder")
    return sets


def stage_addon(addon_dir: Path, models_dir: Path, dest: Path) -> None:
    """Copy the extension root and the model sets (into ``models/``) to ``dest``."""
    check_sources(addon_dir, models_dir)
    copy_tree(addon_dir, dest)
    copy_tree(models_dir, dest / STAGED_MODELS)


def staged_files(stage: Path) -> set[str]:
    return {p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()}


def render_manifest(base: str, platforms: list[str], wheels: list[str]) -> str:
    """The committed manifest plus ``platforms``, ``wheels`` (and ``blender_version_max``).

    The keys go before the first table: appended after ``[permissions]`` they would belong
    to it. ``wheels`` are file names, listed as ``./wheels/<name>``.
    """
    data = tomllib.loads(base)
    if taken := [k for k in GENERATED_KEYS if k in data]:
        raise BuildError(f"{MANIFEST_NAME} must not set {', '.join(taken)}: the build writes them")
    paths = [f"./{STAGED_WHEELS}/{w}" for w in wheels]
    lines = ["# Added by build_addon.py."]
    if "blender_version_max" not in data:
        lines.append(f"blender_version_max = {json.dumps(BLENDER_VERSION_MAX)}")
    lines.append(f"platforms = {json.dumps(platforms)}")
    lines += ["wheels = [", *(f"  {json.dumps(p)}," for p in paths), "]", ""]
    text = base.splitlines()
    first_table = next((i for i, ln in enumerate(text) if ln.lstrip().startswith("[")), len(text))
    out = "\n".join([*text[:first_table], *lines, *text[first_table:]]) + "\n"
    parsed = tomllib.loads(out)
    assert parsed["platforms"] == platforms and parsed["wheels"] == paths, "manifest insertion"
    return out


# -- Blender's extension CLI -----------------------------------------------------------------

@dataclass(frozen=True)
class BlenderExt:
    python: Path
    script: Path
    tags: Path | None  # Blender's list of valid tags, checked by build and validate

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        tags = ["--valid-tags", str(self.tags)] if self.tags else []
        return subprocess.run([str(self.python), str(self.script), *args, *tags],
                              capture_output=True, text=True)


def find_blender_ext(python: Path) -> BlenderExt:
    """blender_ext.py inside the bpy package of the venv whose interpreter is ``python``."""
    where = subprocess.run([str(python), "-c", "import importlib.util as u; "
                            "print(u.find_spec('bpy').submodule_search_locations[0])"],
                           capture_output=True, text=True)
    if where.returncode != 0:
        raise BuildError(f"bpy is not installed for {python}: {where.stderr.strip()}")
    bpy_dir = Path(where.stdout.strip())
    scripts = sorted(bpy_dir.glob(BLENDER_EXT_GLOB))
    if not scripts:
        raise BuildError(f"no {BLENDER_EXT_GLOB} under {bpy_dir}")
    tags = sorted(bpy_dir.glob(BLENDER_TAGS_GLOB))
    return BlenderExt(python, scripts[-1], tags[-1] if tags else None)


def ensure_blender_ext() -> BlenderExt:
    try:
        python = ensure_venv(BPY_VENV, BPY_REQUIREMENTS)
    except (VenvError, subprocess.CalledProcessError) as e:
        raise BuildError(f"could not set up {BPY_VENV.name} for Blender's extension CLI: {e}") \
            from e
    return find_blender_ext(python)


def cli_output(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stdout + result.stderr).strip()


def zip_name(manifest: dict, platform: str) -> str:
    """What ``blender_ext.py build --split-platforms`` names a platform's zip."""
    return f"{manifest['id']}-{manifest['version']}-{platform.replace('-', '_')}.zip"


def check_zip(path: Path, platform: Platform, pins: list[Pin], stage_files: set[str]) -> None:
    """The zip holds its platform's wheels (and only those), the add-on, models and manifest."""
    with zipfile.ZipFile(path) as zf:
        names = {n for n in zf.namelist() if not n.endswith("/")}
        manifest = tomllib.loads(zf.read(MANIFEST_NAME).decode())
    prefix = f"{STAGED_WHEELS}/"
    wheels = sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix))
    check_platform_wheels(platform, pins, wheels)
    expected = {f for f in stage_files if not f.startswith(prefix)}
    expected |= {prefix + w for w in wheels}
    if missing := sorted(expected - names):
        raise BuildError(f"{platform.name}: {path.name} lacks {missing}")
    if extra := sorted(names - expected):
        raise BuildError(f"{platform.name}: {path.name} holds unexpected {extra}")
    generated = manifest.get("build", {}).get("generated", {})
    if generated.get("platforms") != [platform.name] or \
            sorted(generated.get("wheels", [])) != [f"./{prefix}{w}" for w in wheels]:
        raise BuildError(f"{platform.name}: {path.name}'s manifest lists {generated}")


def publish(zips: list[Path], out_dir: Path) -> list[Path]:
    """Copy each zip beside its target under a hidden name, then rename it into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for z in zips:
        tmp = out_dir / f".{z.name}.tmp"
        try:
            shutil.copyfile(z, tmp)
            os.replace(tmp, out_dir / z.name)
        finally:
            tmp.unlink(missing_ok=True)
        done.append(out_dir / z.name)
    return done


# -- the build -------------------------------------------------------------------------------

def build_kernels(addon_dir: Path) -> None:
    """Compile the add-on's kernels for every platform (each zip carries them all, so none
    holds a stale one), where it has their source (an add-on without
    ``core/_native/npe_native.c`` ships none)."""
    native_dir = addon_dir / "core" / "_native"
    source = native_dir / build_native.SOURCE.name
    if not source.is_file():
        return
    log(f"compiling {source.name} for {', '.join(build_native.TARGETS)} ...")
    try:
        build_native.build(list(build_native.TARGETS), source, native_dir)
    except build_native.NativeBuildError as e:
        raise BuildError(str(e)) from e


def build(platform_names: Iterable[str] = tuple(PLATFORMS), out_dir: Path = DIST_DIR, *,
          models_dir: Path = MODELS_DIR, addon_dir: Path = ADDON_DIR,
          cache: Path = WHEEL_CACHE, pins_file: Path = WHEEL_PINS,
          blender_ext: BlenderExt | None = None) -> list[Path]:
    """Build, validate and check one zip per platform; the zips now in ``out_dir``."""
    platforms = [PLATFORMS[n] for n in dict.fromkeys(platform_names)]
    pins = read_pins(pins_file)
    check_sources(addon_dir, models_dir)
    build_kernels(addon_dir)
    blender_ext = blender_ext or ensure_blender_ext()
    wheels = download_all(platforms, pins, cache, blender_ext.python)
    with tempfile.TemporaryDirectory(prefix="npe-build-") as tmp:
        base_manifest = (addon_dir / MANIFEST_NAME).read_text()
        manifest = tomllib.loads(base_manifest)
        stage = Path(tmp) / manifest["id"]
        stage_addon(addon_dir, models_dir, stage)
        (stage / STAGED_WHEELS).mkdir()
        for path in {p for paths in wheels.values() for p in paths}:
            shutil.copyfile(path, stage / STAGED_WHEELS / path.name)
        names = sorted({p.name for paths in wheels.values() for p in paths})
        (stage / MANIFEST_NAME).write_text(
            render_manifest(base_manifest, [p.name for p in platforms], names))
        stage_files = staged_files(stage)

        log(f"building {', '.join(p.name for p in platforms)} with {blender_ext.script.name} ...")
        zips_dir = Path(tmp) / "zips"
        zips_dir.mkdir()
        result = blender_ext.run("build", "--split-platforms", "--source-dir", str(stage),
                                 "--output-dir", str(zips_dir))
        if result.returncode != 0:
            raise BuildError(f"blender_ext.py build failed:\n{cli_output(result)}")
        zips = []
        for platform in platforms:
            path = zips_dir / zip_name(manifest, platform.name)
            if not path.is_file():
                raise BuildError(f"{platform.name}: blender_ext.py wrote no {path.name}:\n"
                                 f"{cli_output(result)}")
            log(f"{platform.name}: validating {path.name} ...")
            check = blender_ext.run("validate", str(path))
            if check.returncode != 0:
                raise BuildError(f"{platform.name}: blender_ext.py validate rejected {path.name}:"
                                 f"\n{cli_output(check)}")
            check_zip(path, platform, pins, stage_files)
            zips.append(path)
        return publish(zips, out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", action="append", choices=list(PLATFORMS),
                        help="build only this platform (repeatable; default: all)")
    parser.add_argument("--out", type=Path, default=DIST_DIR, help="output folder (dist/)")
    parser.add_argument("--models", type=Path, default=MODELS_DIR,
                        help="model set to ship (models/)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        zips = build(args.platform or list(PLATFORMS), args.out, models_dir=args.models)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for z in zips:
        print(f"wrote {z} ({z.stat().st_size / 2**20:.1f} MiB)")
    log(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
