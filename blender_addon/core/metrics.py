"""Pose metrics (the sliders' quantities), declared by small specs, pure numpy.

A :class:`MetricSpec` names one scalar of a pose:

- ``angle``: the angle in degrees between two vectors, ``degrees(arccos(clip(u.v / (|u||v|),
  -1, 1)))`` (the seed paper's definition). ``u`` is ``a_to - a_from``; ``v`` is either
  ``b_to - b_from`` (``joints = (a_from, a_to, b_from, b_to)``) or a fixed axis
  (``joints = (a_from, a_to)`` and ``axis``). Axes are model-space directions: ``up`` +Y,
  ``down`` -Y, ``forward`` +Z, ``back`` -Z, ``left`` +X, ``right`` -X. An angle with a
  zero-length vector is 0.
- ``distance``: ``|j2 - j1|`` in metres (``joints = (j1, j2)``).
- ``height``: the mean height above the floor ``y = 0`` of one or more joints, in metres.

Specs are written in JSON as::

    {"name": "spine_flexion", "kind": "angle", "a": ["pelvis", "neck"], "b": "up",
     "description": "..."}
    {"name": "feet_distance", "kind": "distance", "joints": ["l_foot", "r_foot"]}
    {"name": "hands_height", "kind": "height", "joints": ["l_hand", "r_hand"]}

where a vector ``[from, to]`` means ``to - from`` and ``"b"`` is another vector or an axis
name. Positions are ``(..., 21, 3)`` (metres, Y up), normally model-space poses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .skeleton import JOINT_INDEX, JOINTS, NUM_JOINTS

AXES: dict[str, tuple[float, float, float]] = {
    "up": (0.0, 1.0, 0.0),
    "down": (0.0, -1.0, 0.0),
    "forward": (0.0, 0.0, 1.0),
    "back": (0.0, 0.0, -1.0),
    "left": (1.0, 0.0, 0.0),
    "right": (-1.0, 0.0, 0.0),
}
KINDS: dict[str, str] = {"angle": "deg", "distance": "m", "height": "m"}  # kind -> unit

_EPS = 1e-12
_JSON_KEYS: dict[str, tuple[set[str], set[str]]] = {  # kind -> (required, optional)
    "angle": ({"name", "kind", "a", "b"}, {"unit", "description"}),
    "distance": ({"name", "kind", "joints"}, {"unit", "description"}),
    "height": ({"name", "kind", "joints"}, {"unit", "description"}),
}


def _known_joints() -> str:
    return ", ".join(JOINTS)


@dataclass(frozen=True)
class MetricSpec:
    """One pose metric; validated on construction (``ValueError`` naming the bad part).

    ``unit`` follows ``kind`` (``deg`` for angles, ``m`` otherwise): left at its default it
    becomes ``m`` for distances and heights; any other mismatch is an error.
    """

    name: str
    kind: str  # "angle" | "distance" | "height"
    joints: tuple  # angle: (a_from, a_to, b_from, b_to) or (a_from, a_to) with axis;
    # distance: (j1, j2); height: (j, ...) averaged
    axis: str | None = None  # for an angle against an axis: a key of AXES
    unit: str = "deg"  # "deg" for angles, "m" for distance/height
    description: str = ""

    def __post_init__(self) -> None:
        where = f"metric spec {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"metric spec {self.name!r}: 'name' must be a non-empty string")
        if self.kind not in KINDS:
            raise ValueError(
                f"{where}: unknown kind {self.kind!r}; known kinds: {', '.join(KINDS)}"
            )
        if isinstance(self.joints, str) or not isinstance(self.joints, (tuple, list)):
            raise ValueError(f"{where}: 'joints' must be a sequence of joint names")
        joints = tuple(self.joints)
        object.__setattr__(self, "joints", joints)
        for j in joints:
            if not isinstance(j, str) or j not in JOINT_INDEX:
                raise ValueError(
                    f"{where}: unknown joint {j!r}; canonical joints are: {_known_joints()}"
                )
        if self.kind == "angle":
            if self.axis is None:
                if len(joints) != 4:
                    raise ValueError(
                        f"{where}: an angle between two vectors needs 4 joints "
                        f"(a_from, a_to, b_from, b_to), got {len(joints)}"
                    )
            else:
                if self.axis not in AXES:
                    raise ValueError(
                        f"{where}: unknown axis {self.axis!r}; known axes: {', '.join(AXES)}"
                    )
                if len(joints) != 2:
                    raise ValueError(
                        f"{where}: an angle against an axis needs 2 joints (a_from, a_to), "
                        f"got {len(joints)}"
                    )
        else:
            if self.axis is not None:
                raise ValueError(f"{where}: 'axis' is only for angles, not {self.kind}")
            if self.kind == "distance" and len(joints) != 2:
                raise ValueError(f"{where}: a distance needs 2 joints, got {len(joints)}")
            if self.kind == "height" and len(joints) < 1:
                raise ValueError(f"{where}: a height needs at least 1 joint")
        expected_unit = KINDS[self.kind]
        if self.unit == "deg" and expected_unit == "m":
            object.__setattr__(self, "unit", "m")  # the default, for a non-angle kind
        elif self.unit != expected_unit:
            raise ValueError(
                f"{where}: unit {self.unit!r} does not fit kind {self.kind!r} "
                f"(expected {expected_unit!r})"
            )
        if not isinstance(self.description, str):
            raise ValueError(f"{where}: 'description' must be a string")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (see the module docstring)."""
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "angle":
            d["a"] = list(self.joints[:2])
            d["b"] = self.axis if self.axis is not None else list(self.joints[2:])
        else:
            d["joints"] = list(self.joints)
        d["unit"] = self.unit
        d["description"] = self.description
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<spec>") -> MetricSpec:
        """Parse the JSON form; errors say ``source`` and the spec's name."""
        if not isinstance(d, dict):
            raise ValueError(f"{source}: a metric spec must be a JSON object, got {d!r}")
        name = d.get("name")
        where = f"{source}: metric spec {name!r}" if name is not None else f"{source}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: missing or empty field 'name'")
        kind = d.get("kind")
        if kind is None:
            raise ValueError(f"{where}: missing field 'kind'")
        if kind not in KINDS:
            raise ValueError(f"{where}: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
        required, optional = _JSON_KEYS[kind]
        missing = sorted(required - d.keys())
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing} for kind {kind!r}")
        extra = sorted(d.keys() - required - optional)
        if extra:
            raise ValueError(
                f"{where}: unknown field(s) {extra}; allowed: {sorted(required | optional)}"
            )

        def vector(field: str) -> list[str]:
            v = d[field]
            if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)):
                raise ValueError(
                    f"{where}: field {field!r} must be [from_joint, to_joint]"
                    + (" or an axis name" if field == "b" else "")
                    + f", got {v!r}"
                )
            return v

        axis = None
        if kind == "angle":
            joints = vector("a")
            if isinstance(d["b"], str):
                axis = d["b"]
            else:
                joints = joints + vector("b")
        else:
            joints = d["joints"]
            if not (isinstance(joints, list) and all(isinstance(x, str) for x in joints)):
                raise ValueError(f"{where}: field 'joints' must be a list of joint names")
        kwargs: dict[str, Any] = {}
        if "unit" in d:
            if d["unit"] != KINDS[kind]:
                raise ValueError(
                    f"{where}: unit {d['unit']!r} does not fit kind {kind!r} "
                    f"(expected {KINDS[kind]!r})"
                )
            kwargs["unit"] = d["unit"]
        if "description" in d:
            kwargs["description"] = d["description"]
        try:
            return cls(name=name, kind=kind, joints=tuple(joints), axis=axis, **kwargs)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


DEFAULT_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "spine_flexion", "angle", ("pelvis", "neck"), axis="up",
        description="Bend of the trunk: angle between pelvis->neck and straight up (0 = upright)",
    ),
    MetricSpec(
        "shoulders_openness", "angle", ("l_clavicle", "l_upperarm", "r_upperarm", "r_clavicle"),
        description="Angle between the clavicles (left clavicle->shoulder vs right "
        "shoulder->clavicle): 0 = in line, grows with a shrug or hunch",
    ),
    MetricSpec(
        "legs_spread", "angle", ("r_shin", "pelvis", "pelvis", "l_shin"),
        description="Angle r_knee->pelvis vs pelvis->l_knee: 180 = knees together, less = spread",
    ),
    MetricSpec(
        "l_elbow_bend", "angle", ("l_upperarm", "l_forearm", "l_forearm", "l_hand"),
        description="Bend of the left elbow (0 = straight arm)",
    ),
    MetricSpec(
        "r_elbow_bend", "angle", ("r_upperarm", "r_forearm", "r_forearm", "r_hand"),
        description="Bend of the right elbow (0 = straight arm)",
    ),
    MetricSpec(
        "l_knee_bend", "angle", ("l_thigh", "l_shin", "l_shin", "l_foot"),
        description="Bend of the left knee (0 = straight leg)",
    ),
    MetricSpec(
        "r_knee_bend", "angle", ("r_thigh", "r_shin", "r_shin", "r_foot"),
        description="Bend of the right knee (0 = straight leg)",
    ),
    MetricSpec(
        "feet_distance", "distance", ("l_foot", "r_foot"), unit="m",
        description="Distance between the ankles, in metres",
    ),
    MetricSpec(
        "hands_height", "height", ("l_hand", "r_hand"), unit="m",
        description="Mean height of the wrists above the floor, in metres",
    ),
    MetricSpec(
        "head_tilt", "angle", ("neck", "head"), axis="up",
        description="Tilt of the head: angle between neck->head and straight up (0 = upright)",
    ),
)  # fmt: skip


def _as_positions(positions: np.ndarray) -> np.ndarray:
    p = np.asarray(positions, dtype=np.float64)
    if p.ndim < 2 or p.shape[-2:] != (NUM_JOINTS, 3):
        raise ValueError(f"positions must have shape (..., {NUM_JOINTS}, 3), got {p.shape}")
    return p


_TORCH_COS_LIMIT = 1.0 - 1e-7  # arccos' slope is infinite at +-1: keep gradients finite


def metric_formula(p: Any, spec: MetricSpec, xp: Any = np) -> Any:
    """The metric of poses ``p`` (..., 21, 3) in array library ``xp`` (numpy, or torch for
    training losses): one formula for the add-on's sliders and for training."""
    idx = [JOINT_INDEX[j] for j in spec.joints]
    if spec.kind == "angle":
        u = p[..., idx[1], :] - p[..., idx[0], :]
        if spec.axis is not None:
            v = xp.asarray(AXES[spec.axis], dtype=p.dtype)
            v = v if xp is np else v.to(p.device)
        else:
            v = p[..., idx[3], :] - p[..., idx[2], :]
        denom = xp.sqrt((u * u).sum(-1) * (v * v).sum(-1))
        ok = denom > _EPS
        cos = xp.where(ok, (u * v).sum(-1) / xp.where(ok, denom, 1.0), 1.0)
        limit = 1.0 if xp is np else _TORCH_COS_LIMIT
        return xp.arccos(xp.clip(cos, -limit, limit)) * (180.0 / np.pi)
    if spec.kind == "distance":
        d = p[..., idx[1], :] - p[..., idx[0], :]
        return xp.sqrt((d * d).sum(-1))
    if spec.kind == "height":
        return p[..., idx, 1].mean(-1)
    raise ValueError(f"metric spec {spec.name!r}: unknown kind {spec.kind!r}")  # unreachable


def _evaluate(p: np.ndarray, spec: MetricSpec) -> np.ndarray:
    return metric_formula(p, spec, np)


def evaluate_metric(positions: np.ndarray, spec: MetricSpec) -> np.ndarray:
    """One metric of poses ``(..., 21, 3)``: shape ``(...)``, float64."""
    return _evaluate(_as_positions(positions), spec)


def evaluate_metrics(
    positions: np.ndarray, specs: Sequence[MetricSpec] = DEFAULT_METRICS
) -> np.ndarray:
    """All ``specs`` of poses ``(..., 21, 3)``: ``(..., M)`` float64, one vectorized pass each."""
    p = _as_positions(positions)
    if len(specs) == 0:
        return np.zeros((*p.shape[:-2], 0))
    return np.stack([_evaluate(p, s) for s in specs], axis=-1)


def metric_by_name(name: str, specs: Sequence[MetricSpec] = DEFAULT_METRICS) -> MetricSpec:
    """The spec called ``name``; ``KeyError`` listing the known names otherwise."""
    for s in specs:
        if s.name == name:
            return s
    raise KeyError(f"unknown metric {name!r}; known metrics: {', '.join(s.name for s in specs)}")


def load_metric_specs(path: str | Path) -> list[MetricSpec]:
    """Read a JSON file holding a list of spec objects; errors name the file and the spec."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of metric specs, got {type(data).__name__}")
    specs: list[MetricSpec] = []
    seen: set[str] = set()
    for i, d in enumerate(data):
        spec = MetricSpec.from_dict(d, source=f"{path} [spec {i}]")
        if spec.name in seen:
            raise ValueError(f"{path} [spec {i}]: duplicate metric name {spec.name!r}")
        seen.add(spec.name)
        specs.append(spec)
    return specs
