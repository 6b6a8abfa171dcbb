"""A mapping's JSON file: loaded and saved."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..fileio import write_json
from ..skeleton import JOINT_INDEX, JOINTS
from .types import JointMap, MappingError

_SAVED_EXTRAS = ("source", "synthesized")  # informative keys save_mapping_json adds


def load_mapping_json(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read ``{"joints": {canonical: source}}`` (a bare mapping is accepted too); may be partial."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MappingError(f"{path}: cannot read mapping JSON: {exc}") from exc
    if isinstance(data, dict) and "joints" not in data:  # bare {canonical: source}
        data = {"joints": {k: v for k, v in data.items() if k not in _SAVED_EXTRAS}}
    joints = data.get("joints") if isinstance(data, dict) else None
    if not isinstance(joints, dict):
        raise MappingError(f'{path}: expected an object {{"joints": {{canonical: source}}}}')
    unknown = [k for k in joints if k not in JOINT_INDEX]
    if unknown:
        raise MappingError(
            f"{path}: unknown canonical joint(s) {unknown}; canonical joints are: "
            f"{', '.join(JOINTS)}"
        )
    bad = [k for k, v in joints.items() if not isinstance(v, str) or not v]
    if bad:
        raise MappingError(f"{path}: source joint names must be non-empty strings: {bad}")
    return dict(joints)


def save_mapping_json(path: str | os.PathLike[str], joint_map: JointMap) -> None:
    """Write the mapping (loadable as an override) atomically: temp file, then os.replace."""
    write_json(path, {
        "source": joint_map.source, "joints": joint_map.joints,
        "synthesized": joint_map.synthesized,
    })  # fmt: skip
