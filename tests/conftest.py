"""Shared fixtures: where the real mocap lives (skipped with a message when absent), and a
tiny synthetic dataset with a tiny trained and exported model set, made once per session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

# One math thread per process (set before anything imports torch): on a small machine,
# torch's thread pool fighting other processes (or the two DDP ranks) makes the tiny
# training runs many times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
BANDAI_DIR = REPO.parent / "shared" / "data" / "bandai-namco"
BANDAI_SMALL_ARCHIVE = BANDAI_DIR / "bandai-namco-dataset-1.tar.xz"


@pytest.fixture(params=["numpy", "native"])
def kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on the numpy code and again on the compiled kernels; the kernels' run is
    skipped where they are not built, and fails where NPE_REQUIRE_NATIVE=1 (scripts/test.sh,
    after building them) says they must be."""
    from blender_addon.core import native

    if request.param == "numpy":
        with native.switched_off():
            yield "numpy"
        return
    require_kernels()
    yield "native"


def require_kernels() -> None:
    """Skip where the compiled kernels are not built; fail where NPE_REQUIRE_NATIVE=1 says
    they must be."""
    from blender_addon.core import native

    if native.kernels() is None:
        kernels_missing("compiled kernels not built or refused")


def kernels_missing(what: str) -> None:
    """Skip the test, or fail it where NPE_REQUIRE_NATIVE=1 (scripts/test.sh, after building
    them) says the kernels must be there."""
    from blender_addon.core import native

    message = (f"{what} (python3 scripts/build_native.py --platform host): "
               f"{native.library_path()}")
    if os.environ.get("NPE_REQUIRE_NATIVE") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def numpy_only() -> Iterator[None]:
    """The compiled kernels switched off (a test of what they replace, such as the
    refinement graphs)."""
    from blender_addon.core import native

    with native.switched_off():
        yield


@pytest.fixture
def with_kernels() -> None:
    """A test comparing the compiled kernels with numpy: they must be there."""
    require_kernels()


@pytest.fixture(scope="session")
def bandai_dir() -> Path:
    """The Bandai Namco archives folder; skips the test when ../shared is not beside the repo."""
    if not BANDAI_SMALL_ARCHIVE.is_file():
        pytest.skip(f"real mocap not found at {BANDAI_DIR} (needs ../shared beside the repo)")
    return BANDAI_DIR


@pytest.fixture(scope="session")
def bandai_small_archive(bandai_dir: Path) -> Path:
    """Dataset 1 (174 clips, 7 MB): small enough to stream in a test."""
    return BANDAI_SMALL_ARCHIVE


TINY_CLIPS = 8
TINY_FRAMES = 60
TINY_TRAIN_ARGS = ("--epochs", "1", "--steps-per-epoch", "3", "--batch-size", "64",
                   "--no-progress")


@dataclass(frozen=True)
class TinySet:
    """A synthetic dataset, the train-all output trained on it and its export."""
    data: Path  # the .npz
    runs: Path  # train-all --out
    models: Path  # export --out
    torchscript: Path  # export --torchscript
    train_argv: tuple[str, ...]  # the train-all command line given to the CLI


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 synthetic clips of 60 frames, prepared into a dataset (6 train, 1 val, 1 test clips)."""
    from tests.synth import synthetic_bvh
    from training.data.dataset import prepare

    folder = tmp_path_factory.mktemp("tiny_bvh")
    for i in range(TINY_CLIPS):
        (folder / f"clip_{i}.bvh").write_text(synthetic_bvh(frames=TINY_FRAMES, seed=i))
    out = tmp_path_factory.mktemp("tiny_data") / "poses.npz"
    prepare([str(folder)], out, workers=1, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_set(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> TinySet:
    """``train-all`` (1 epoch of 3 steps per network) then ``export``, through the CLI."""
    import torch

    from training.cli import main

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny_set")
    runs, models, ts = root / "runs", root / "models", root / "torchscript"
    argv = ("train-all", "--data", str(tiny_data), "--out", str(runs), *TINY_TRAIN_ARGS)
    assert main(list(argv)) == 0
    assert main(["export", "--runs", str(runs), "--out", str(models), "--data", str(tiny_data),
                 "--torchscript", str(ts)]) == 0
    return TinySet(tiny_data, runs, models, ts, argv)


@pytest.fixture(scope="session")
def shipped_models():
    """The default model set in models/ (NPE_TEST_MODELS overrides the folder)."""
    from blender_addon.core.models import MANIFEST_NAME, ModelSet, default_models_dir

    folder = Path(os.environ.get("NPE_TEST_MODELS", default_models_dir()))
    if not (folder / MANIFEST_NAME).is_file():
        pytest.skip(f"no trained model set at {folder} (python -m training train-all + export)")
    return ModelSet(folder)


@pytest.fixture(scope="session")
def synthetic_clip() -> np.ndarray:
    """A 90-frame clip of canonical joints in Bandai proportions (rig space, metres)."""
    from tests.synth import synthetic_bvh
    from training.data.dataset import canonical_clip

    return canonical_clip("synthetic.bvh", synthetic_bvh(frames=90, seed=3))[0]


MANIFOLD_FRAMES = 90
MANIFOLD_LATENT_SCALE = 0.5  # about the latent spread of real poses


@pytest.fixture(scope="session")
def manifold_clip(shipped_models) -> np.ndarray:
    """A 90-frame clip the models know: decoded along a smooth latent path around the mean
    pose, bones at canonical lengths, walking forward and turning (rig space, metres)."""
    from blender_addon.core.normalize import rotate_y, set_bone_lengths
    from blender_addon.core.skeleton import BONE_LENGTHS

    mean = np.asarray(shipped_models.manifest["normalization"]["mean"], np.float32)
    z0 = shipped_models.encode(mean.reshape(1, 21, 3))[0]
    rng = np.random.default_rng(7)
    t = np.linspace(0.0, 1.0, MANIFOLD_FRAMES)[:, None]
    a, b = rng.normal(0.0, MANIFOLD_LATENT_SCALE, (2, z0.size))
    z = z0 + a * np.sin(2 * np.pi * t) + b * np.sin(np.pi * t)
    poses = set_bone_lengths(shipped_models.decode(z.astype(np.float32)), BONE_LENGTHS)
    travel = np.concatenate([t, np.zeros_like(t), 2.0 * t], axis=1)[:, None, :]
    return rotate_y(poses, 0.8 * t[:, 0]) + travel
