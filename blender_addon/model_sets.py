"""The model sets the user can pick, and the loaded ones.

Shipped sets live in the extension's ``models/`` folder: the default set in the folder
itself, further sets in its sub-folders (``models/cmu-bandai/``); more come from the
folder set in the preferences. A set's ``manifest.json`` may carry
``"about": {"name", "data", "licence", "commercial_use", "credit"}``: the picker shows
the name and licence in one line, the panel which data the set learned from.

The scene keeps its choice as a string (``scene.npe.model_path``): "" for the default
set, ``shipped:<sub-folder>`` for another shipped set (the extension's folder moves when
it is updated), or a folder path. Loaded sets are cached per folder and thread count;
nothing on disk is looked at between a choice and the next Reload Models.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import bpy

from . import preferences
from .core.models import MANIFEST_NAME, ModelError, ModelSet, default_models_dir, read_manifest
from .errors import EditError

DEFAULT_SET = "DEFAULT"  # the enum identifier of the default shipped set
SHIPPED_PREFIX = "shipped:"  # model_path of another shipped set: this + its sub-folder
SHORT_LICENCE = 32  # characters: a longer licence text stays out of the picker's line
SUMMARY_WIDTH = 44  # characters per line of the panel's summary (labels do not wrap)
DETAILS = re.compile(r"[:;]")  # the data's name ends before its details

_LOADED: dict[tuple[str, int], ModelSet] = {}
_CHOSEN: dict[tuple[str, int], ModelSet] = {}  # (stored choice, threads) -> a loaded set
# Blender keeps pointers into enum items' strings: every list handed out stays alive here.
_ENUM_ITEMS: dict[tuple, list[tuple[str, str, str, int]]] = {}
_SCANS: dict[tuple, list[Path]] = {}
_ABOUT: dict[tuple, About] = {}
_SUMMARIES: dict[tuple, list[str]] = {}


@dataclass(frozen=True)
class About:
    """What a set says about itself (its manifest's ``about``; empty fields when absent)."""

    name: str
    data: str
    licence: str
    commercial_use: bool | None
    credit: str

    def licence_line(self) -> str:
        """One line for the picker: the licence (when it is a short name such as "CC
        BY-NC 4.0"; the tooltip and the summary carry a longer text) and whether
        commercial use is allowed."""
        use = {True: "commercial use allowed", False: "non-commercial use only",
               None: "licence terms in its README"}[self.commercial_use]
        short = self.licence and len(self.licence) <= SHORT_LICENCE
        return f"{self.licence}, {use}" if short else use


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0


def _sets_in(folder: Path | None) -> list[Path]:
    """The folder itself if it holds a manifest, else its sub-folders that do (cached
    until the folder changes)."""
    if folder is None:
        return []
    key = (str(folder), _mtime(folder))
    if key not in _SCANS:
        if (folder / MANIFEST_NAME).is_file():
            found = [folder]
        else:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir())
            except OSError:
                subs = []
            found = [p for p in subs if (p / MANIFEST_NAME).is_file()]
        _SCANS[key] = found
    return _SCANS[key]


def _shipped_subsets() -> list[Path]:
    """Shipped sets beside the default one: sub-folders of ``models/`` with a manifest."""
    root = default_models_dir()
    key = ("shipped", str(root), _mtime(root))
    if key not in _SCANS:
        try:
            subs = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:
            subs = []
        _SCANS[key] = [p for p in subs if (p / MANIFEST_NAME).is_file()]
    return _SCANS[key]


def about(folder: Path) -> About:
    """The set's ``about`` block, read once per manifest version; a set without one is
    named after its folder ("Shipped" for the default set)."""
    path = folder / MANIFEST_NAME
    key = (str(path), _mtime(path))
    if key not in _ABOUT:
        try:
            raw = read_manifest(folder).get("about")
        except ModelError:
            raw = None
        raw = raw if isinstance(raw, dict) else {}
        cu = raw.get("commercial_use")
        fallback = "Shipped" if folder == default_models_dir() else folder.name
        _ABOUT[key] = About(str(raw.get("name") or fallback), str(raw.get("data") or ""),
                            str(raw.get("licence") or ""), cu if isinstance(cu, bool) else None,
                            str(raw.get("credit") or ""))
    return _ABOUT[key]


def _item(identifier: str, folder: Path) -> tuple[str, str, str]:
    a = about(folder)
    tip = " ".join(part for part in (f"Trained on {a.data}." if a.data else "",
                                     f"Licence: {a.licence}." if a.licence else "",
                                     a.credit, f"({folder})") if part)
    return identifier, f"{a.name} · {a.licence_line()}", tip


def folder_of(chosen: str) -> Path:
    """The folder a stored choice stands for ("" is the default shipped set)."""
    if not chosen or chosen == DEFAULT_SET:
        return default_models_dir()
    if chosen.startswith(SHIPPED_PREFIX):
        return default_models_dir() / chosen[len(SHIPPED_PREFIX):]
    return Path(chosen)


def items(context: bpy.types.Context | None, chosen: str = ""
          ) -> list[tuple[str, str, str, int]]:
    """Enum items: the shipped sets, the sets in the preferences' folder, and the chosen
    one when it is not among them (moved or deleted: listed as missing, so the choice is
    shown and reported rather than silently replaced)."""
    found = [_item(DEFAULT_SET, default_models_dir())]
    found += [_item(SHIPPED_PREFIX + p.name, p) for p in _shipped_subsets()]
    found += [_item(str(p), p) for p in _sets_in(preferences.extra_model_folder(context))]
    if chosen and all(item[0] != chosen for item in found):
        path = folder_of(chosen)
        if (path / MANIFEST_NAME).is_file():
            found.append(_item(chosen, path))
        else:
            found.append((chosen, f"{path.name} (missing)", f"{chosen}: no model set there "
                          "any more (moved or deleted?): pick another one"))
    numbered = [(*item, i) for i, item in enumerate(found)]
    return _ENUM_ITEMS.setdefault(tuple(numbered), numbered)


def index_of(chosen: str) -> int:
    """The enum value of the stored choice."""
    for identifier, _name, _description, value in items(None, chosen):
        if identifier == (chosen or DEFAULT_SET):
            return value
    return 0


def choice_of(value: int, chosen: str) -> str:
    """The string stored for an enum value ("" for the default shipped set)."""
    listed = items(None, chosen)
    identifier = listed[value][0] if 0 <= value < len(listed) else DEFAULT_SET
    return "" if identifier == DEFAULT_SET else identifier


def folder(scene: bpy.types.Scene) -> Path:
    """The scene's model set folder."""
    return folder_of(scene.npe.model_path)


def forget() -> None:
    """Drop loaded sets and what was read of the folders (Reload Models)."""
    _LOADED.clear()
    _CHOSEN.clear()
    _SCANS.clear()
    _ABOUT.clear()
    _SUMMARIES.clear()


def load(scene: bpy.types.Scene) -> ModelSet:
    """The scene's model set, loaded once per folder and thread count (a thread count
    changed in the preferences loads it again). Once loaded, a dictionary lookup by the
    stored choice: live updates call this and must not touch the disk."""
    threads = preferences.threads()
    chosen = (scene.npe.model_path, threads)
    models = _CHOSEN.get(chosen)
    if models is not None:
        return models
    where = folder(scene)
    key = (str(where), threads)
    models = _LOADED.get(key)
    if models is None:
        if not where.is_dir():
            raise EditError(f"Cannot load the models: the model set {where} is missing "
                            "(moved or deleted?). Restore it, or pick another model set in "
                            "the Neural Pose panel")
        try:
            models = ModelSet(where, threads=key[1])
        except ModelError as exc:
            raise EditError(f"Cannot load the models: {exc}. Pick another model set in the "
                            "Neural Pose panel or fix the folder") from exc
        except OSError as exc:
            raise EditError(f"Cannot read the models in {where}: {exc}") from exc
        for old in [k for k in _LOADED if k[0] == key[0]]:  # another thread count
            del _LOADED[old]
        _LOADED[key] = models
    _CHOSEN.clear()
    _CHOSEN[chosen] = models
    return models


def summary(scene: bpy.types.Scene) -> list[str]:
    """A few lines about the chosen set for the panel: name, training data, licence,
    skeleton, metrics (from its manifest, cached per manifest version)."""
    where = folder(scene)
    path = where / MANIFEST_NAME
    key = (str(path), _mtime(path))
    if key not in _SUMMARIES:
        _SUMMARIES[key] = _summary(where)
    return _SUMMARIES[key]


def _summary(where: Path) -> list[str]:
    try:
        manifest = read_manifest(where)
    except ModelError as exc:
        return [f"Error: {exc}"]
    a = about(where)
    sk = manifest.get("skeleton", {})
    data = a.data or Path(str(manifest.get("training", {}).get("data") or "unknown data")).name
    data = DETAILS.split(data, maxsplit=1)[0].strip()  # the name; the tooltip has it all
    return [
        f"Models: {a.name}",
        *textwrap.wrap(f"Trained on: {data}", SUMMARY_WIDTH, subsequent_indent="  "),
        *textwrap.wrap(f"Licence: {a.licence_line()}", SUMMARY_WIDTH,
                       subsequent_indent="  "),
        f"Skeleton: {len(sk.get('joints', ()))} joints, {sk.get('units', 'm')}, "
        f"{sk.get('up', '+Y')} up",
        f"Metrics: {len(manifest.get('metrics', ()))}",
    ]
