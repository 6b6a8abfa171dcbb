"""Build the installable Blender extension zip(s) into ``dist/``.

``python build_addon.py`` packs ``blender_addon/`` (the extension root) with the default
models from ``models/`` under the zip's ``models/`` folder. Zips are written to a temp
file and renamed, so a failed build never leaves a half-written archive.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
import zipfile
from pathlib import Path

from blender_addon.core.fileio import atomic_open

ROOT = Path(__file__).resolve().parent
ADDON_DIR = ROOT / "blender_addon"
MODELS_DIR = ROOT / "models"
MANIFEST = ADDON_DIR / "blender_manifest.toml"
EXCLUDE_PARTS = {"__pycache__", ".pytest_cache"}
EXCLUDE_SUFFIXES = {".pyc", ".pyo"}


def addon_files() -> list[tuple[Path, str]]:
    """(file on disk, path inside the zip) for the add-on and its default models."""
    def wanted(p: Path) -> bool:
        return p.is_file() and not EXCLUDE_PARTS & set(p.parts) and p.suffix not in EXCLUDE_SUFFIXES

    files = [(p, p.relative_to(ADDON_DIR).as_posix()) for p in sorted(ADDON_DIR.rglob("*"))
             if wanted(p)]
    files += [(p, "models/" + p.relative_to(MODELS_DIR).as_posix())
              for p in sorted(MODELS_DIR.rglob("*")) if wanted(p)]
    return files


def build(out_dir: Path) -> Path:
    manifest = tomllib.loads(MANIFEST.read_text())
    target = out_dir / f"{manifest['id']}-{manifest['version']}.zip"
    with atomic_open(target) as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in addon_files():
            zf.write(path, arcname)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder")
    args = parser.parse_args(argv)
    target = build(args.out)
    print(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
