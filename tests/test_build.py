"""build_addon.py: staging, pins, the manifest writer, the per-platform wheel check, pip
failures, and (when .venv-bpy45 has bpy) a whole build through Blender's own CLI on
stand-in wheels. Real pip, real blender_ext.py: nothing that can run here is mocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import build_addon
from build_addon import PLATFORMS, BuildError, Pin
from scripts import venvs

REPO = Path(__file__).resolve().parents[1]
BPY45_PYTHON = venvs.venv_python(build_addon.BPY_VENV)
LINUX, WINDOWS, MACOS = (PLATFORMS[n] for n in ("linux-x64", "windows-x64", "macos-arm64"))
MISSING_VERSION = "0.0.0.dev0"  # no package has this release: pip fails fast and for real
# A stand-in wheel file per platform (the real ones are 6-17 MB; blender_ext.py only copies).
STAND_IN_WHEELS = {
    "linux-x64": "onnxruntime-1.23.2-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    "windows-x64": "onnxruntime-1.18.1-cp311-cp311-win_amd64.whl",
    "macos-arm64": "onnxruntime-1.19.2-cp311-cp311-macosx_11_0_universal2.whl",
}
STAND_IN_PINS = """\
onnxruntime==1.23.2 ; sys_platform == "linux"
onnxruntime==1.18.1 ; sys_platform == "win32"
onnxruntime==1.19.2 ; sys_platform == 'darwin'
"""


def make_addon(root: Path) -> tuple[Path, Path]:
    """A small extension source (with the caches and tests a dev tree has) and a model set."""
    addon, models = root / "addon", root / "models"
    for rel, text in {
        "blender_manifest.toml": (REPO / "blender_addon/blender_manifest.toml").read_text(),
        "__init__.py": "def register():\n    pass\n\n\ndef unregister():\n    pass\n",
        "core/__init__.py": "",
        "core/engine.py": "X = 1\n",
        "core/__pycache__/engine.cpython-311.pyc": "",
        "core/stray.pyc": "",
        "tests/test_engine.py": "",
        ".pytest_cache/README.md": "",
        ".hidden": "",
    }.items():
        (addon / rel).parent.mkdir(parents=True, exist_ok=True)
        (addon / rel).write_text(text)
    for rel in ("manifest.json", "encoder.onnx", "README.md", "__pycache__/x.pyc"):
        (models / rel).parent.mkdir(parents=True, exist_ok=True)
        (models / rel).write_text("{}")
    return addon, models


ADDON_FILES = {"blender_manifest.toml", "__init__.py", "core/__init__.py", "core/engine.py",
               "models/manifest.json", "models/encoder.onnx", "models/README.md"}


def test_staging_excludes_caches_tests_and_hidden_files(tmp_path: Path) -> None:
    addon, models = make_addon(tmp_path)
    build_addon.stage_addon(addon, models, tmp_path / "stage")
    assert build_addon.staged_files(tmp_path / "stage") == ADDON_FILES


def test_staging_the_real_addon_ships_sources_only(tmp_path: Path) -> None:
    _, models = make_addon(tmp_path)
    build_addon.stage_addon(build_addon.ADDON_DIR, models, tmp_path / "stage")
    files = build_addon.staged_files(tmp_path / "stage")
    assert {"blender_manifest.toml", "__init__.py", "core/models.py", "models/manifest.json"} \
        <= files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")
                or f.startswith(("tests/", "wheels/"))]


def test_staging_carries_every_shipped_model_set(tmp_path: Path) -> None:
    """The default set (models/) and the sets in its sub-folders (models/cmu-bandai/)."""
    addon, models = make_addon(tmp_path)
    for rel in ("cmu-bandai/manifest.json", "cmu-bandai/encoder.onnx"):
        (models / rel).parent.mkdir(parents=True, exist_ok=True)
        (models / rel).write_text("{}")
    assert build_addon.shipped_sets(models) == [".", "cmu-bandai"]
    build_addon.stage_addon(addon, models, tmp_path / "stage")
    assert build_addon.staged_files(tmp_path / "stage") == ADDON_FILES | {
        "models/cmu-bandai/manifest.json", "models/cmu-bandai/encoder.onnx"}
    (models / "cmu-bandai" / "manifest.json").unlink()
    with pytest.raises(build_addon.BuildError, match=r"cmu-bandai.*manifest\.json"):
        build_addon.stage_addon(addon, models, tmp_path / "stage2")


def test_staging_needs_a_model_set(tmp_path: Path) -> None:
    addon, models = make_addon(tmp_path)
    (models / "manifest.json").unlink()
    with pytest.raises(BuildError, match=r"manifest\.json"):
        build_addon.stage_addon(addon, models, tmp_path / "stage")


def test_committed_manifest_is_blender_valid_without_wheels() -> None:
    manifest = tomllib.loads((build_addon.ADDON_DIR / build_addon.MANIFEST_NAME).read_text())
    assert not set(build_addon.GENERATED_KEYS) & set(manifest)
    assert manifest["blender_version_min"] == "4.2.0"
    assert manifest["permissions"]["files"]
    assert manifest["license"]
    assert not re.search(r"[.!?,;:]$", manifest["tagline"])


def test_manifest_writer_lists_exactly_the_given_wheels() -> None:
    base = (build_addon.ADDON_DIR / build_addon.MANIFEST_NAME).read_text()
    wheels = sorted(STAND_IN_WHEELS.values())
    text = build_addon.render_manifest(base, list(STAND_IN_WHEELS), wheels)
    data, original = tomllib.loads(text), tomllib.loads(base)
    assert data["platforms"] == list(STAND_IN_WHEELS)
    assert data["wheels"] == [f"./wheels/{w}" for w in wheels]
    assert data["permissions"] == original["permissions"]  # inserted before the table
    assert {k: v for k, v in data.items() if k in original} == original
    assert data["blender_version_max"] == build_addon.BLENDER_VERSION_MAX


def test_manifest_writer_refuses_a_committed_wheels_list() -> None:
    base = 'id = "x"\nwheels = ["./wheels/a-1-py3-none-any.whl"]\n'
    with pytest.raises(BuildError, match="wheels"):
        build_addon.render_manifest(base, ["linux-x64"], [])


def test_pins_give_each_platform_one_onnxruntime() -> None:
    pins = build_addon.read_pins()
    for platform in PLATFORMS.values():
        assert [p.name for p in build_addon.pins_for(platform, pins)] == ["onnxruntime"]


def test_linux_pin_is_the_version_the_engine_is_tested_with() -> None:
    tested = re.search(r"^onnxruntime==(\S+)", (REPO / "requirements.txt").read_text(), re.M)
    shipped = build_addon.pins_for(LINUX, build_addon.read_pins())[0]
    assert tested and shipped.version == tested.group(1)


@pytest.mark.parametrize("line, error", [
    ("onnxruntime>=1.18", "name==version"),
    ('onnxruntime==1.18.1 ; sys_platform == "cygwin"', "unknown sys_platform"),
    ("onnxruntime==1.18.1\nonnxruntime==1.19.2", "more than one pin"),
])
def test_bad_pins_are_reported(tmp_path: Path, line: str, error: str) -> None:
    (tmp_path / "pins.txt").write_text(f"# comment\n{line}\n")
    with pytest.raises(BuildError, match=error):
        build_addon.read_pins(tmp_path / "pins.txt")


@pytest.mark.parametrize("filename, fits", [
    ("onnxruntime-1.23.2-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
     {"linux-x64"}),
    ("onnxruntime-1.18.1-cp311-cp311-win_amd64.whl", {"windows-x64"}),
    ("onnxruntime-1.19.2-cp311-cp311-macosx_11_0_universal2.whl", {"macos-arm64"}),
    ("onnxruntime-1.23.2-cp311-cp311-macosx_13_0_arm64.whl", {"macos-arm64"}),
    ("onnxruntime-1.23.2-cp311-cp311-manylinux_2_28_aarch64.whl", set()),
    ("packaging-26.3-py3-none-any.whl", set(PLATFORMS)),
])
def test_wheel_platform_tags(filename: str, fits: set[str]) -> None:
    assert {n for n, p in PLATFORMS.items() if build_addon.wheel_fits(filename, p)} == fits


def test_wheel_check_catches_missing_foreign_and_extra_wheels() -> None:
    pins = build_addon.read_pins()
    build_addon.check_platform_wheels(LINUX, pins, [STAND_IN_WHEELS["linux-x64"]])
    with pytest.raises(BuildError, match=r"windows-x64: no wheel for onnxruntime==1\.18\.1"):
        build_addon.check_platform_wheels(WINDOWS, pins, [])
    with pytest.raises(BuildError, match="no wheel for onnxruntime"):  # another platform's
        build_addon.check_platform_wheels(WINDOWS, pins, [STAND_IN_WHEELS["linux-x64"]])
    with pytest.raises(BuildError, match="unexpected wheels"):
        build_addon.check_platform_wheels(LINUX, pins, [STAND_IN_WHEELS["linux-x64"],
                                                        "numpy-1.26.4-cp311-cp311-win_amd64.whl"])
    bad = "onnxruntime-1.18.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    with pytest.raises(BuildError, match="not a windows-x64 wheel"):
        build_addon.check_platform_wheels(WINDOWS, pins, [bad])


def test_zip_check_catches_a_zip_without_its_wheel(tmp_path: Path) -> None:
    """What blender_ext.py build --split-platforms happily writes when a wheel is missing."""
    addon, models = make_addon(tmp_path)
    build_addon.stage_addon(addon, models, tmp_path / "stage")
    files = build_addon.staged_files(tmp_path / "stage")
    zip_path = tmp_path / "x.zip"
    with zipfile.ZipFile(zip_path, "w") as zf:
        for rel in sorted(files - {"blender_manifest.toml"}):
            zf.write(tmp_path / "stage" / rel, rel)
        zf.writestr("blender_manifest.toml",
                    '[build.generated]\nplatforms = ["linux-x64"]\nwheels = []\n')
    with pytest.raises(BuildError, match="linux-x64: no wheel for onnxruntime"):
        build_addon.check_zip(zip_path, LINUX, build_addon.read_pins(), files)


def test_failed_pip_download_names_platform_and_package(tmp_path: Path) -> None:
    pin = Pin("onnxruntime", MISSING_VERSION)
    with pytest.raises(BuildError) as err:
        build_addon.download_wheel(pin, WINDOWS, tmp_path)
    message = str(err.value)
    assert "windows-x64" in message and f"onnxruntime=={MISSING_VERSION}" in message
    assert "ERROR" in message  # pip's own reason is quoted
    assert not list(tmp_path.rglob("*.whl")) and not list(tmp_path.rglob(".download-*"))


def test_a_failed_download_fails_the_build_and_writes_no_zip(tmp_path: Path) -> None:
    pins = tmp_path / "pins.txt"
    pins.write_text(f"onnxruntime=={MISSING_VERSION}\n")
    addon, models = make_addon(tmp_path)
    ext = build_addon.BlenderExt(Path(sys.executable), tmp_path / "never_run.py", None)
    out = tmp_path / "dist"
    with pytest.raises(BuildError, match="linux-x64: pip could not download onnxruntime=="):
        build_addon.build(["linux-x64"], out, models_dir=models, addon_dir=addon,
                          cache=tmp_path / "cache", pins_file=pins, blender_ext=ext)
    assert not out.exists()


def test_cli_exits_nonzero_with_the_reason(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Sources are checked before anything slow: no venv, no download, no zip."""
    out = tmp_path / "dist"
    assert build_addon.main(["--models", str(tmp_path), "--out", str(out)]) == 1
    assert "manifest.json" in capsys.readouterr().err
    assert not out.exists()


def test_download_uses_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    wheel = cache / "linux-x64" / STAND_IN_WHEELS["linux-x64"]
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"")
    got = build_addon.download_wheel(Pin("onnxruntime", "1.23.2"), LINUX, cache,
                                     python="/nonexistent/python")  # pip would fail
    assert got == wheel


def stand_in_cache(cache: Path) -> None:
    for platform, name in STAND_IN_WHEELS.items():
        (cache / platform).mkdir(parents=True)
        with zipfile.ZipFile(cache / platform / name, "w") as zf:
            zf.writestr("placeholder.txt", platform)


needs_bpy45 = pytest.mark.skipif(not BPY45_PYTHON.exists(),
                                 reason=".venv-bpy45 not set up (bash scripts/test.sh does it)")


@needs_bpy45
def test_build_splits_platforms_with_blenders_cli(tmp_path: Path) -> None:
    """The whole pipeline on stand-in wheels: each zip holds only its own wheel."""
    addon, models = make_addon(tmp_path)
    stand_in_cache(tmp_path / "cache")
    (tmp_path / "pins.txt").write_text(STAND_IN_PINS)
    out = tmp_path / "dist"
    zips = build_addon.build(list(PLATFORMS), out, models_dir=models, addon_dir=addon,
                             cache=tmp_path / "cache", pins_file=tmp_path / "pins.txt",
                             blender_ext=build_addon.find_blender_ext(BPY45_PYTHON))
    assert sorted(z.name for z in out.iterdir()) == sorted(z.name for z in zips)
    for platform, wheel in STAND_IN_WHEELS.items():
        zip_path = out / f"neural_pose_editor-0.1.0-{platform.replace('-', '_')}.zip"
        with zipfile.ZipFile(zip_path) as zf:
            names = set(zf.namelist())
            manifest = tomllib.loads(zf.read("blender_manifest.toml").decode())
        assert names == ADDON_FILES | {f"wheels/{wheel}"}
        assert manifest["build"]["generated"] == {"platforms": [platform],
                                                  "wheels": [f"./wheels/{wheel}"]}


@needs_bpy45
def test_a_manifest_blender_rejects_fails_the_build_and_writes_no_zip(tmp_path: Path) -> None:
    addon, models = make_addon(tmp_path)
    manifest = addon / "blender_manifest.toml"
    manifest.write_text(re.sub(r'(tagline = ".*)"', r'\1."', manifest.read_text()))
    stand_in_cache(tmp_path / "cache")
    (tmp_path / "pins.txt").write_text(STAND_IN_PINS)
    out = tmp_path / "dist"
    with pytest.raises(BuildError, match="tagline"):
        build_addon.build(["linux-x64"], out, models_dir=models, addon_dir=addon,
                          cache=tmp_path / "cache", pins_file=tmp_path / "pins.txt",
                          blender_ext=build_addon.find_blender_ext(BPY45_PYTHON))
    assert not out.exists()


ORT_PROBE = """
import sys
from pathlib import Path
sys.path[:0] = sys.argv[1:3]
import numpy as np
import onnxruntime as ort
DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64}
outputs = {}
for path in sorted(Path(sys.argv[3]).glob("*.onnx")):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {i.name: (0.3 * rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape])
                     ).astype(DTYPES[i.type]) for i in s.get_inputs()}
    for k, out in enumerate(s.run(None, feed)):
        outputs[f"{path.stem}:{k}"] = out
    # As a single pose's calls run it: the batch axis fixed when the session loads.
    options = ort.SessionOptions()
    options.add_free_dimension_override_by_name(s.get_inputs()[0].shape[0], 2)
    sized = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for k, out in enumerate(sized.run(None, feed)):
        outputs[f"{path.stem}:sized:{k}"] = out
np.savez(sys.argv[4], **outputs)
unbundled = ("coloredlogs", "flatbuffers", "google", "packaging", "sympy")
print(ort.__version__, [m for m in unbundled if m in sys.modules])
"""
PROBE_RTOL = 1e-4  # of an output's scale: another release's kernels, same graph


@pytest.mark.slow
@pytest.mark.parametrize("version", sorted({p.version for p in build_addon.read_pins()
                                            if p.name == "onnxruntime"}))
def test_every_pinned_onnxruntime_runs_the_shipped_models(version: str, tmp_path: Path) -> None:
    """Windows and macOS ship older onnxruntime releases than the tests use: their Linux
    builds (same operator set) must load and run every shipped model, with numpy as the
    only other package (what Blender offers), in an isolated interpreter."""
    import numpy as np

    models = Path(os.environ.get("NPE_TEST_MODELS", build_addon.MODELS_DIR))
    if not (models / build_addon.MODELS_MANIFEST).is_file():
        pytest.skip(f"no model set in {models} (train + export first)")
    wheel = build_addon.download_wheel(Pin("onnxruntime", version), LINUX)  # cached
    site, numpy_only = tmp_path / "site", tmp_path / "numpy_only"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    numpy_only.mkdir()
    numpy_dir = Path(np.__file__).parent
    for d in (numpy_dir, numpy_dir.with_name("numpy.libs")):
        if d.exists():
            (numpy_only / d.name).symlink_to(d)
    runs = {}
    for name, paths in (("pinned", (site, numpy_only)), ("tested", sys.path[:2])):
        out = tmp_path / f"{name}.npz"
        run = subprocess.run([sys.executable, "-I", "-S", "-c", ORT_PROBE, *map(str, paths),
                              str(models), str(out)] if name == "pinned" else
                             [sys.executable, "-c", ORT_PROBE, "", "", str(models), str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        runs[name] = (run.stdout.split(), dict(np.load(out)))
    assert runs["pinned"][0] == [version, "[]"]
    pinned, tested = runs["pinned"][1], runs["tested"][1]
    assert pinned.keys() == tested.keys()
    for key, want in tested.items():  # every output as the tests' onnxruntime gives it
        scale = max(float(np.abs(want).max()), 1.0)
        np.testing.assert_allclose(pinned[key], want, atol=PROBE_RTOL * scale, err_msg=key)


@needs_bpy45
def test_committed_manifest_passes_blenders_validate() -> None:
    result = build_addon.find_blender_ext(BPY45_PYTHON).run("validate", str(build_addon.ADDON_DIR))
    assert result.returncode == 0, build_addon.cli_output(result)
