"""A trained model set: ``manifest.json`` plus ONNX files, run with onnxruntime.

Sessions are created once per model set. Loading checks everything a bad or foreign model
folder could get wrong — manifest version, skeleton, every module's file, inputs and
shapes — and reports the file at fault. Only JSON and ONNX are read: nothing is unpickled.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import skeleton
from .metrics import MetricSpec

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
ROLES = ("encoder", "decoder", "ik_universal", "ik_group", "metric", "ik_universal_fused",
         "decoder_jacobian")
DEFAULT_THREADS = 1
BOUND_MAX_BATCH = 2  # batches up to this run through pre-bound buffers (a pose; edit + recon)
# The manifest's top-level keys that must be present, with their JSON type.
MANIFEST_TYPES: dict[str, tuple[type, str]] = {
    "skeleton": (dict, "object"), "latent_size": (int, "integer"), "modules": (list, "list"),
}

# Input and output names and shapes of each role; "B" is the dynamic batch axis, "L" the
# latent size, "G" the number of joints of an effector group. ``ik_universal_fused`` (optional
# in a set) is encoder -> universal solver -> decoder in one graph, for the common edit:
# one session call instead of three. It also decodes the input's own latent (the
# reconstruction D(E(x)) that keep_details needs) and returns the edited latent.
# ``decoder_jacobian`` (optional) decodes latents and gives the decoder's exact Jacobian
# along the K latent directions the refinement moves in, ``(B, 63, K)`` with the pose
# flattened joint-major, and those directions, ``(K, L)`` orthonormal rows: the
# refinement's Gauss-Newton steps need it. A graph made before the directions has only the
# first two outputs, along every latent axis (K = L).
_POSE_SHAPE = ("B", skeleton.NUM_JOINTS, 3)
_JOINTS_SHAPE = ("B", skeleton.NUM_JOINTS)
ROLE_INPUTS: dict[str, tuple[tuple[str, tuple[str | int, ...]], ...]] = {
    "encoder": (("pose", ("B", skeleton.NUM_JOINTS, 3)),),
    "decoder": (("latent", ("B", "L")),),
    "ik_universal": (("latent", ("B", "L")), ("mask", ("B", skeleton.NUM_JOINTS)),
                     ("targets", ("B", skeleton.NUM_JOINTS, 3)),
                     ("weights", ("B", skeleton.NUM_JOINTS))),
    "ik_group": (("latent", ("B", "L")), ("targets", ("B", "G", 3))),
    "metric": (("latent", ("B", "L")), ("value", ("B", 1))),
    "ik_universal_fused": (("pose", ("B", skeleton.NUM_JOINTS, 3)),
                           ("mask", ("B", skeleton.NUM_JOINTS)),
                           ("targets", ("B", skeleton.NUM_JOINTS, 3)),
                           ("weights", ("B", skeleton.NUM_JOINTS))),
    "decoder_jacobian": (("latent", ("B", "L")),),
}
ROLE_OUTPUTS: dict[str, tuple[tuple[str, tuple[str | int, ...]], ...]] = {
    "encoder": (("latent", ("B", "L")),),
    "decoder": (("pose", ("B", skeleton.NUM_JOINTS, 3)),),
    "ik_universal": (("edited_latent", ("B", "L")),),
    "ik_group": (("edited_latent", ("B", "L")),),
    "metric": (("edited_latent", ("B", "L")),),
    "ik_universal_fused": (("edited_pose", ("B", skeleton.NUM_JOINTS, 3)),
                           ("reconstruction", ("B", skeleton.NUM_JOINTS, 3)),
                           ("edited_latent", ("B", "L"))),
    "decoder_jacobian": (("pose", ("B", skeleton.NUM_JOINTS, 3)),
                         ("jacobian", ("B", skeleton.NUM_JOINTS * 3, "K")),
                         ("basis", ("K", "L"))),
}
# Tensor types other than float32, by role and name (none now: every graph is float32).
ROLE_DTYPES: dict[str, dict[str, str]] = {}
_ONNX_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64",
                "tensor(int64)": "int64"}
# Trailing outputs a graph of the role may lack (older exports): role -> how many.
OPTIONAL_OUTPUTS = {"decoder_jacobian": 1}
# Roles a set must have exactly one of; every other role is optional.
REQUIRED_ROLES = ("encoder", "decoder")


class ModelError(ValueError):
    """A model folder that is missing, corrupt, of an unknown version or another skeleton."""


@dataclass
class _Bound:
    """Buffers bound to a session once, for one set of input shapes."""
    binding: Any
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    session: Any  # the session made for their batch size (see Module._sized_session)


@dataclass
class Module:
    name: str
    role: str
    file: str
    joints: tuple[str, ...] = ()  # ik_group: the group's joints, in target order
    metric: MetricSpec | None = None
    value_range: tuple[float, float] | None = None
    session: Any = field(default=None, repr=False)
    # The file and threads the session was made from: a bound batch size gets a session of
    # its own (see _sized_session). None: the bound path runs on ``session``.
    path: Path | None = field(default=None, repr=False)
    threads: int = field(default=DEFAULT_THREADS, repr=False)
    # The session's input and output names, read once (asking costs a call per run).
    input_names: tuple[str, ...] = field(default=(), init=False, repr=False)
    output_names: tuple[str, ...] = field(default=(), init=False, repr=False)
    input_dtypes: tuple[np.dtype, ...] = field(default=(), init=False, repr=False)
    _bound: dict[tuple[tuple[int, ...], ...], _Bound] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)

    def __post_init__(self) -> None:
        if self.session is not None:
            self.input_names = tuple(i.name for i in self.session.get_inputs())
            self.input_dtypes = tuple(np.dtype(_ONNX_DTYPES.get(i.type, "float32"))
                                      for i in self.session.get_inputs())
            self.output_names = tuple(o.name for o in self.session.get_outputs())

    def run(self, *inputs: np.ndarray) -> np.ndarray:
        """The module's (first) output for inputs in the role's order (run as the graph's
        types: float32 but for :data:`ROLE_DTYPES`)."""
        return self.run_all(*inputs)[0]

    def run_all(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Every output, in the role's order, as new arrays (float32 unless
        :data:`ROLE_DTYPES` says otherwise).

        Small batches (the add-on's single pose) run through buffers bound to the session
        once: that skips most of onnxruntime's per-call Python overhead, and copying into
        them is the cast to the graph's types. Another thread running the module at the
        same time takes the plain path.
        """
        if not 0 < len(inputs[0]) <= BOUND_MAX_BATCH or not self._lock.acquire(blocking=False):
            return self._run(inputs)
        try:
            key = tuple(a.shape for a in inputs)
            bound = self._bound.get(key)
            if bound is None:
                outputs = self._run(inputs)
                self._bound[key] = self._bind(inputs, outputs)
                return outputs
            for buf, a in zip(bound.inputs, inputs, strict=True):
                np.copyto(buf, a, casting="same_kind")
            bound.session.run_with_iobinding(bound.binding)
            return [out.copy() for out in bound.outputs]
        finally:
            self._lock.release()

    def _run(self, inputs: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        feeds = {name: np.ascontiguousarray(a, dtype=dtype) for name, a, dtype
                 in zip(self.input_names, inputs, self.input_dtypes, strict=True)}
        return self.session.run(None, feeds)

    def _sized_session(self, batch: int) -> Any:
        """A session of the module's file with its batch axis fixed to ``batch``: onnxruntime
        then folds the graph's shape arithmetic away when it loads it (the refinement
        graph: 441 nodes a run -> 379, a single pose's call 1.19x faster, the same outputs
        to the bit; ad hoc ``.dev/ort_static.py``). The module's own session where the
        graph names no batch axis."""
        axis = self.session.get_inputs()[0].shape[0]
        if self.path is None or not isinstance(axis, str):
            return self.session
        return _session(self.path, self.threads, {axis: batch})

    def _bind(self, inputs: tuple[np.ndarray, ...], outputs: list[np.ndarray]) -> _Bound:
        """Buffers shaped like these inputs and outputs, bound to a session made for their
        batch size."""
        session = self._sized_session(len(inputs[0]))
        binding = session.io_binding()
        ins = [np.empty(np.shape(a), dtype=dtype)
               for a, dtype in zip(inputs, self.input_dtypes, strict=True)]
        outs = [np.empty(o.shape, dtype=o.dtype) for o in outputs]
        for name, buf in zip(self.input_names, ins, strict=True):
            binding.bind_input(name, "cpu", 0, buf.dtype.type, buf.shape, buf.ctypes.data)
        for name, buf in zip(self.output_names, outs, strict=True):
            binding.bind_output(name, "cpu", 0, buf.dtype.type, buf.shape, buf.ctypes.data)
        return _Bound(binding, ins, outs, session)


def default_models_dir() -> Path:
    """The shipped set: ``models/`` beside ``core/`` in the extension, or at the repo root."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "models", here.parent.parent / "models"):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    return here.parent / "models"


def _resolve_shape(shape: tuple[str | int, ...], sizes: dict[str, int]) -> list[str | int]:
    return [sizes.get(d, d) if isinstance(d, str) else d for d in shape]


def module_io(role: str, latent: int, group: int = 0, rank: int | None = None
              ) -> dict[str, list[dict[str, Any]]]:
    """The manifest's ``inputs``/``outputs`` entries for a module of ``role`` (``rank``: the
    Jacobian graph's number of latent directions, K)."""
    sizes = {"L": latent, "G": group, "K": latent if rank is None else rank}
    return {
        key: [{"name": n, "shape": _resolve_shape(s, sizes),
               "dtype": ROLE_DTYPES.get(role, {}).get(n, "float32")} for n, s in table[role]]
        for key, table in (("inputs", ROLE_INPUTS), ("outputs", ROLE_OUTPUTS))
    }


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """Parse and check ``manifest.json`` (no ONNX loaded)."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ModelError(f"{path}: model manifest not found; pick a folder made by "
                         "`python -m training export`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict):
        raise ModelError(f"{path}: the manifest must be a JSON object")
    version = manifest.get("format_version")
    if version != MANIFEST_VERSION:
        raise ModelError(f"{path}: unknown manifest format_version {version!r} "
                         f"(this add-on reads version {MANIFEST_VERSION})")
    for key, (kind, kind_name) in MANIFEST_TYPES.items():
        if key not in manifest:
            raise ModelError(f"{path}: missing {key!r}")
        if not isinstance(manifest[key], kind) or isinstance(manifest[key], bool):
            raise ModelError(f"{path}: {key!r} must be a JSON {kind_name}")
    if not all(isinstance(m, dict) for m in manifest["modules"]):
        raise ModelError(f"{path}: every entry of 'modules' must be a JSON object")
    joints = tuple(manifest["skeleton"].get("joints", ()))
    if joints != skeleton.JOINTS:
        raise ModelError(f"{path}: skeleton mismatch: the models use joints {list(joints)}, "
                         f"the add-on {list(skeleton.JOINTS)}")
    names = [m.get("name") for m in manifest["modules"]]
    for m in manifest["modules"]:
        if m.get("role") not in ROLES:
            raise ModelError(f"{path}: module {m.get('name')!r} has unknown role "
                             f"{m.get('role')!r} (known: {', '.join(ROLES)})")
        if not m.get("file"):
            raise ModelError(f"{path}: module {m.get('name')!r} names no file")
    for role in REQUIRED_ROLES:
        if sum(m["role"] == role for m in manifest["modules"]) != 1:
            raise ModelError(f"{path}: exactly one {role} module is required")
    if len(set(names)) != len(names):
        raise ModelError(f"{path}: duplicate module names in {names}")
    return manifest


def _session(path: Path, threads: int, fixed: dict[str, int] | None = None) -> Any:
    """A session of ``path``; ``fixed``: named dynamic axes given a size."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for axis, size in (fixed or {}).items():
        opts.add_free_dimension_override_by_name(axis, size)
    try:
        return ort.InferenceSession(str(path), sess_options=opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several private exception types
        raise ModelError(f"{path}: not a loadable ONNX model ({exc})") from exc


def _check_io(module: Module, path: Path, latent: int) -> None:
    group = len(module.joints)
    want = module_io(module.role, latent, group)
    got_in = module.session.get_inputs()
    if [i.name for i in got_in] != [i["name"] for i in want["inputs"]]:
        raise ModelError(f"{path}: inputs {[i.name for i in got_in]} do not match role "
                         f"{module.role!r} {[i['name'] for i in want['inputs']]}")
    for got, exp in zip(got_in, want["inputs"], strict=True):
        fixed = [d for d, e in zip(got.shape[1:], exp["shape"][1:], strict=False)
                 if isinstance(d, int) and d != e]
        if len(got.shape) != len(exp["shape"]) or fixed:
            raise ModelError(f"{path}: input {got.name!r} has shape {got.shape}, expected "
                             f"{exp['shape']}")
        if _ONNX_DTYPES.get(got.type) != exp["dtype"]:
            raise ModelError(f"{path}: input {got.name!r} is {got.type}, expected "
                             f"{exp['dtype']}")
    got_out = [o.name for o in module.session.get_outputs()]
    names = [o["name"] for o in want["outputs"]]
    least = len(names) - OPTIONAL_OUTPUTS.get(module.role, 0)
    if got_out != names[:max(least, len(got_out))]:  # the engine reads them by position
        raise ModelError(f"{path}: outputs {got_out} do not match role {module.role!r} "
                         f"{[o['name'] for o in want['outputs']]}")


class ModelSet:
    """Every module of a model folder, loaded once, with typed calls."""

    def __init__(self, folder: str | Path | None = None, threads: int = DEFAULT_THREADS):
        self.folder = Path(folder) if folder is not None else default_models_dir()
        self.manifest = read_manifest(self.folder)
        self.latent_size = int(self.manifest["latent_size"])
        self.modules: dict[str, Module] = {}
        for m in self.manifest["modules"]:
            path = self.folder / m["file"]
            if not path.is_file():
                raise ModelError(f"{path}: model file listed in {MANIFEST_NAME} is missing")
            # Metric specs and group joints come from the (hand-editable) manifest.
            where = f"{self.folder / MANIFEST_NAME}: module {m['name']!r}"
            try:
                spec = MetricSpec.from_dict(m["metric"], source=where) if m.get("metric") \
                    else None
            except ValueError as exc:
                raise ModelError(str(exc)) from exc
            try:
                skeleton.joint_indices(list(m.get("joints", ())))
            except KeyError as exc:
                raise ModelError(f"{where}: {exc.args[0]}") from exc
            module = Module(m["name"], m["role"], m["file"], tuple(m.get("joints", ())), spec,
                            tuple(m["range"]) if m.get("range") else None,
                            _session(path, threads), path, threads)
            _check_io(module, path, self.latent_size)
            self.modules[module.name] = module
        self.encoder = self._one("encoder")
        self.decoder = self._one("decoder")

    def _one(self, role: str) -> Module:
        return next(m for m in self.modules.values() if m.role == role)

    def by_role(self, role: str) -> list[Module]:
        return list(self._roles.get(role, ()))

    @functools.cached_property
    def _roles(self) -> dict[str, tuple[Module, ...]]:
        """The modules of each role, in the manifest's order (a solve asks a few times)."""
        roles: dict[str, tuple[Module, ...]] = {}
        for m in self.modules.values():
            roles[m.role] = (*roles.get(m.role, ()), m)
        return roles

    @property
    def metrics(self) -> dict[str, Module]:
        return {m.metric.name: m for m in self.by_role("metric") if m.metric is not None}

    @property
    def groups(self) -> dict[str, Module]:
        return {m.name.removeprefix("ik_"): m for m in self.by_role("ik_group")}

    @functools.cached_property
    def jacobian_basis(self) -> np.ndarray:
        """(K, L) orthonormal latent directions the refinement moves along: the Jacobian
        graph's, or every latent axis."""
        graph = next(iter(self.by_role("decoder_jacobian")), None)
        if graph is None or len(graph.output_names) < len(ROLE_OUTPUTS["decoder_jacobian"]):
            return np.eye(self.latent_size)
        zero = np.zeros((1, self.latent_size), dtype=np.float32)
        return graph.run_all(zero)[2].astype(np.float64)

    def encode(self, poses: np.ndarray) -> np.ndarray:
        return self.encoder.run(poses)

    def decode(self, latent: np.ndarray) -> np.ndarray:
        return self.decoder.run(latent)
