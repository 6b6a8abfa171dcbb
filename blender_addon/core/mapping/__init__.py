"""Source skeleton -> the 21 canonical joints: presets, auto-detection and JSON maps.

A source skeleton is a BVH file's joints or a Blender armature's bones, given as names and
parent indices (a joint's position is its bone's head). Named presets cover the common
families by name alone, since real rigs (Rigify's DEF bones especially) are not always
parented in a strict chain. Anything else goes through a name + structure heuristic;
a JSON file can pin some joints and let the rest be detected. Toes are optional: a leg
that ends at the foot gets a synthesized toe, placed by :func:`apply_mapping`.

One idea per module: :mod:`.types` (the joint map, its error, the limits), :mod:`.presets`
(each rig family's names), :mod:`.names` (reading a bone's name), :mod:`.detect` (a preset
that fits, or each joint found), :mod:`.files` (the JSON file), :mod:`.apply` (the
source's frames as the canonical joints).

(Names imported ``as`` themselves are internals the tests and the bpy layer's
partial mapping read.)
"""

from __future__ import annotations

from .apply import MIN_BONE_SHARE, apply_mapping, check_lengths
from .detect import _auto as _auto
from .detect import _Detector as _Detector
from .detect import _Tree as _Tree
from .detect import detect_mapping, resolve_mapping
from .files import load_mapping_json, save_mapping_json
from .names import _describe as _describe
from .presets import CONTROL_PRESETS, PRESETS
from .types import (
    CLOSE_CUTOFF,
    CLOSE_MATCHES,
    MIN_END_SITE_LENGTH,
    PREFIX_MAX_WORDS,
    PREFIX_MIN_COUNT,
    PREFIX_SHARE,
    TOE_PITCH_DEG,
    TOES,
    JointMap,
    MappingError,
)

__all__ = [
    "CLOSE_CUTOFF",
    "CLOSE_MATCHES",
    "CONTROL_PRESETS",
    "MIN_BONE_SHARE",
    "MIN_END_SITE_LENGTH",
    "PREFIX_MAX_WORDS",
    "PREFIX_MIN_COUNT",
    "PREFIX_SHARE",
    "PRESETS",
    "TOES",
    "TOE_PITCH_DEG",
    "JointMap",
    "MappingError",
    "apply_mapping",
    "check_lengths",
    "detect_mapping",
    "load_mapping_json",
    "resolve_mapping",
    "save_mapping_json",
]
