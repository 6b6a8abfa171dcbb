"""The level-by-level solver and FK against the per-bone reference
(``core.solver_reference``, the readable specification), and the quaternion helpers against
first-principles versions, on random rigs, mappings, poses, targets and orientations: the
same numbers (1e-9)."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core import quaternions as quaternion_module
from blender_addon.core import solver as solver_module
from blender_addon.core.quaternions import (
    best_rotation,
    matrix_to_quat,
    quat_multiply,
    quat_normalize,
    quat_to_matrix,
)
from blender_addon.core.rig import CHUNK, Rig, forward_kinematics
from blender_addon.core.skeleton import JOINT_INDEX, NUM_JOINTS
from blender_addon.core.solver import RotationSolver, positions_to_rotations
from blender_addon.core.solver_reference import (
    forward_kinematics_per_bone,
    positions_to_rotations_per_bone,
)
from tests.test_rotations import canonical_rig, production_rig, random_pose, random_quats

# Every test here runs twice: on the numpy solver and FK, and on the compiled kernels.
pytestmark = pytest.mark.usefixtures("kernel")
J = JOINT_INDEX
TOL = 1e-9
_EPS = 1e-12


# ------------------------------------------- the helpers from first principles


def _ref_quat_to_matrix(q):
    """R(q) column by column: the vector part of q e_i q* / |q|^2 (the identity for |q|
    below 1e-12, like the module)."""
    q = np.asarray(q, dtype=np.float64)
    n2 = np.sum(q * q, axis=-1)[..., None]
    conj = q * [1.0, -1.0, -1.0, -1.0]
    cols = []
    for e in np.eye(3):
        v = np.broadcast_to(np.concatenate([[0.0], e]), q.shape)
        cols.append(quat_multiply(quat_multiply(q, v), conj)[..., 1:] / np.maximum(n2, _EPS))
    m = np.stack(cols, axis=-1)
    return np.where(n2[..., None] > _EPS * _EPS, m, np.eye(3))


def _ref_matrix_to_quat(m):
    m = np.asarray(m, dtype=np.float64)
    m00, m01, m02 = m[..., 0, 0], m[..., 0, 1], m[..., 0, 2]
    m10, m11, m12 = m[..., 1, 0], m[..., 1, 1], m[..., 1, 2]
    m20, m21, m22 = m[..., 2, 0], m[..., 2, 1], m[..., 2, 2]
    k = np.stack([
        np.stack([1.0 + m00 + m11 + m22, m21 - m12, m02 - m20, m10 - m01], axis=-1),
        np.stack([m21 - m12, 1.0 + m00 - m11 - m22, m01 + m10, m02 + m20], axis=-1),
        np.stack([m02 - m20, m01 + m10, 1.0 - m00 + m11 - m22, m12 + m21], axis=-1),
        np.stack([m10 - m01, m02 + m20, m12 + m21, 1.0 - m00 - m11 + m22], axis=-1),
    ], axis=-2)  # fmt: skip
    best = np.argmax(np.diagonal(k, axis1=-2, axis2=-1), axis=-1)
    q = np.take_along_axis(k, best[..., None, None], axis=-2)[..., 0, :]
    q = quat_normalize(q)
    return np.where(q[..., :1] < 0.0, -q, q)


def _ref_rotation_from_covariance(h):
    u, _, vt = np.linalg.svd(h)
    v = np.swapaxes(vt, -1, -2)
    ut = np.swapaxes(u, -1, -2)
    d = np.where(np.linalg.det(v @ ut) < 0.0, -1.0, 1.0)
    v = v.copy()
    v[..., :, 2] *= d[..., None]
    return v @ ut


# --------------------------------------------------------------------- random cases


def random_rig(rng: np.random.Generator, num_bones: int) -> Rig:
    """A random tree (chains and branches, several roots now and then), random rest frames."""
    parents = [-1]
    for i in range(1, num_bones):
        if rng.uniform() < 0.05:
            parents.append(-1)
        elif rng.uniform() < 0.6:
            parents.append(i - 1)  # chains, like real rigs
        else:
            parents.append(int(rng.integers(0, i)))
    offsets = rng.normal(scale=0.3, size=(num_bones, 3))
    frames = quat_to_matrix(random_quats(rng, (num_bones,), angle=np.pi))
    return Rig([f"b{i}" for i in range(num_bones)], parents, offsets, frames)


def random_mapping(rng: np.random.Generator, rig: Rig) -> list[int | None]:
    k = int(rng.integers(1, min(NUM_JOINTS, rig.num_bones) + 1))
    bones = rng.choice(rig.num_bones, size=k, replace=False)
    joints = rng.choice(NUM_JOINTS, size=k, replace=False)
    out: list[int | None] = [None] * NUM_JOINTS
    for j, b in zip(joints, bones, strict=True):
        out[int(j)] = int(b)
    return out


def _compare(rig, q, loc, joint_bones, tg, orientations=None):
    got_q, got_loc = positions_to_rotations(rig, q, loc, joint_bones, tg, orientations)
    nb = rig.num_bones
    batch = np.broadcast_shapes(
        q.shape[:-2], np.shape(loc)[:-2] if loc is not None else (), tg.shape[:-2],
        *(np.shape(o)[:-2] for o in (orientations or {}).values()))  # fmt: skip
    n = int(np.prod(batch))
    flat = lambda x, tail: np.broadcast_to(x, (*batch, *tail)).reshape(n, *tail)  # noqa: E731
    ref_q, ref_loc = positions_to_rotations_per_bone(
        rig, flat(q, (nb, 4)), flat(np.zeros((nb, 3)) if loc is None else loc, (nb, 3)),
        joint_bones, flat(tg, (NUM_JOINTS, 3)),
        {j: flat(o, (3, 3)) for j, o in (orientations or {}).items()})  # fmt: skip
    assert got_q.shape == (*batch, nb, 4) and got_loc.shape == (*batch, nb, 3)
    np.testing.assert_allclose(got_q.reshape(n, nb, 4), ref_q, rtol=0, atol=TOL)
    np.testing.assert_allclose(got_loc.reshape(n, nb, 3), ref_loc, rtol=0, atol=TOL)
    return got_q, got_loc


@pytest.mark.parametrize("seed", range(40))
def test_random_rigs_match_the_per_bone_reference(seed):
    rng = np.random.default_rng(seed)
    rig = random_rig(rng, int(rng.integers(1, 60)))
    joint_bones = random_mapping(rng, rig)
    frames = int(rng.choice([1, 3, 20]))
    q = random_quats(rng, (frames, rig.num_bones), angle=np.pi)
    q *= rng.uniform(0.5, 2.0, size=(frames, rig.num_bones, 1))  # not unit: normalized
    loc = rng.normal(scale=0.2, size=(frames, rig.num_bones, 3))
    tg = rng.normal(size=(frames, NUM_JOINTS, 3))
    mapped = [j for j, b in enumerate(joint_bones) if b is not None]
    oriented = rng.choice(mapped, size=int(rng.integers(0, min(3, len(mapped)) + 1)),
                          replace=False)  # fmt: skip
    orientations = {int(j): quat_to_matrix(random_quats(rng, (frames,), angle=np.pi))
                    for j in oriented}  # fmt: skip
    _compare(rig, q, loc, joint_bones, tg)
    _compare(rig, q, loc, joint_bones, tg, orientations)
    _compare(rig, q[0], loc[0], joint_bones, tg[0])  # a single pose
    _compare(rig, q[0], None, joint_bones, tg)  # one start for all frames
    # FK too.
    world_r, world_t = forward_kinematics(rig, q, loc)
    ref_r, ref_t = forward_kinematics_per_bone(rig, q, loc)
    for b in range(rig.num_bones):
        np.testing.assert_allclose(world_r[:, b], ref_r[b], rtol=0, atol=TOL)
        np.testing.assert_allclose(world_t[:, b], ref_t[b], rtol=0, atol=TOL)


@pytest.mark.parametrize("which", ["canonical", "production", "production_cm"])
def test_real_rigs_match_the_per_bone_reference(which):
    rig, joint_bones = {
        "canonical": canonical_rig, "production": lambda: production_rig(1.0),
        "production_cm": lambda: production_rig(0.01),
    }[which]()  # fmt: skip
    q, loc, start_q, start_loc = random_pose(rig, joint_bones, 30, 1.0, seed=21)
    tg = forward_kinematics(rig, q, loc)[1][:, [b if b is not None else 0 for b in joint_bones]]
    rng = np.random.default_rng(22)
    noisy = tg + rng.normal(scale=0.05, size=tg.shape)  # unreachable
    hand = quat_to_matrix(random_quats(rng, (30,), angle=np.pi))
    for targets in (tg, noisy):
        _compare(rig, start_q, start_loc, joint_bones, targets)
        _compare(rig, start_q, start_loc, joint_bones, targets,
                 {J["l_hand"]: hand, J["r_foot"]: hand[0], J["spine"]: hand[::-1]})  # fmt: skip
        for f in (0, 29):
            _compare(rig, start_q[f], start_loc[f], joint_bones, targets[f],
                     {J["chest"]: hand[f]})  # fmt: skip
    # The target pose itself (every bone already aims right: the parallel special case).
    _compare(rig, q, loc, joint_bones, tg)


def test_degenerate_swings_match_the_reference():
    """Antiparallel and parallel aims, a target on a head (a zero goal) and a mapped bone on
    its mapped child's head (a zero vector) take swing_quat's special cases, as before."""
    for gap in (1.0, 0.0):  # b's head on a's when 0
        offsets = np.array([[0, 0, 0], [0, 1, 0], [0, gap, 0], [0, 1, 0], [0, 1, 0]], dtype=float)
        rig = Rig(["root", "a", "b", "c", "d"], [-1, 0, 1, 2, 3], offsets,
                  np.tile(np.eye(3), (5, 1, 1)))  # fmt: skip
        joint_bones: list[int | None] = [0, 1, 2, 3, 4] + [None] * (NUM_JOINTS - 5)
        q = random_quats(np.random.default_rng(24), (5,), angle=0.3)
        heads = forward_kinematics(rig, q)[1]
        tg = np.zeros((NUM_JOINTS, 3))
        tg[:5] = heads
        _compare(rig, q, None, joint_bones, tg)  # every bone aims right: parallel
        tg[3] = heads[2] - (heads[3] - heads[2])  # c's target behind b: antiparallel
        tg[4] = tg[3]  # d's target on c's (new) head: a zero goal
        _compare(rig, q, None, joint_bones, tg)
        # Among ordinary poses (the whole batch then takes the careful path).
        rng = np.random.default_rng(25)
        many = np.repeat(tg[None], 5, axis=0)
        many[1:, :5] += rng.normal(scale=0.3, size=(4, 5, 3))
        _compare(rig, q, None, joint_bones, many)


def test_solver_object_and_cache():
    rig, joint_bones = production_rig(1.0)
    q, loc, start_q, start_loc = random_pose(rig, joint_bones, 4, 1.0, seed=23)
    tg = forward_kinematics(rig, q, loc)[1][:, [b if b is not None else 0 for b in joint_bones]]
    solver = RotationSolver(rig, joint_bones)
    a = solver.solve(start_q, start_loc, tg)
    b = positions_to_rotations(rig, start_q, start_loc, joint_bones, tg)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    # A bool is not a bone index, though True == 1 and hashes alike (bone 1 is cached now).
    bad = [True if b == 1 else b for b in joint_bones]
    with pytest.raises(ValueError, match="bone index"):
        positions_to_rotations(rig, start_q, start_loc, bad, tg)
    # The rig's arrays are read-only: what is cached cannot go stale.
    with pytest.raises(ValueError, match="read-only"):
        rig.rest_offsets[0, 0] = 1.0


def test_quaternion_helpers_match_their_first_versions():
    rng = np.random.default_rng(26)
    q = rng.normal(size=(500, 4)) * rng.uniform(1e-3, 1e3, size=(500, 1))
    q[:3] = [[0.0, 0.0, 0.0, 0.0], [1e-13, 0.0, 0.0, 0.0], [-2.0, 0.0, 0.0, 0.0]]
    few = quaternion_module._FEW  # up to few: outer product and matmul; more: per component
    for some in (q[:few], q):
        np.testing.assert_allclose(quat_to_matrix(some), _ref_quat_to_matrix(some), rtol=0,
                                   atol=1e-15)  # fmt: skip
    first = quat_to_matrix(q[:few].T, components_first=True)  # (4, n) -> (3, 3, n)
    np.testing.assert_allclose(np.moveaxis(first, -1, 0), _ref_quat_to_matrix(q[:few]), rtol=0,
                               atol=1e-15)  # fmt: skip
    assert quat_to_matrix(q[5]).shape == (3, 3) and quat_to_matrix(q[5]).flags.c_contiguous
    m = _ref_quat_to_matrix(q)
    axis = rng.normal(size=(200, 3))
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    angle = np.pi - np.geomspace(1e-15, 1.0, 200)  # near 180 degrees
    near = np.concatenate([np.cos(angle / 2)[:, None], np.sin(angle / 2)[:, None] * axis], 1)
    for mats in (m, _ref_quat_to_matrix(near), m.reshape(50, 10, 3, 3), m[0]):
        np.testing.assert_allclose(matrix_to_quat(mats), _ref_matrix_to_quat(mats), rtol=0,
                                   atol=1e-15)  # fmt: skip
    # Kabsch, reflections included (the mirrored case needs the flipped axis).
    a = rng.normal(size=(100, 4, 3))
    for b in (a @ m[:100], a * [-1.0, 1.0, 1.0], rng.normal(size=(100, 4, 3))):
        h = np.einsum("tni,tnj->tij", a, b)
        np.testing.assert_allclose(best_rotation(a, b), _ref_rotation_from_covariance(h),
                                   rtol=0, atol=1e-12)  # fmt: skip


def test_many_frames_are_solved_in_chunks_alike():
    rig, joint_bones = production_rig(1.0)
    frames = 2 * CHUNK + 17
    q, loc, start_q, start_loc = random_pose(rig, joint_bones, frames, 1.0, seed=27)
    rng = np.random.default_rng(28)
    tg = forward_kinematics(rig, q, loc)[1][:, [b if b is not None else 0 for b in joint_bones]]
    tg += rng.normal(scale=0.02, size=tg.shape)
    hand = quat_to_matrix(random_quats(rng, (frames,), angle=np.pi))
    _compare(rig, start_q, start_loc, joint_bones, tg, {J["l_hand"]: hand})
    world_r, world_t = forward_kinematics(rig, q, loc)
    ref_r, ref_t = forward_kinematics_per_bone(rig, q, loc)
    np.testing.assert_allclose(world_r, np.stack(ref_r, axis=1), rtol=0, atol=TOL)
    np.testing.assert_allclose(world_t, np.stack(ref_t, axis=1), rtol=0, atol=TOL)


def test_the_start_pose_is_remembered_only_while_it_stays(kernel):
    """A drag solves from one pose again and again: what comes from it alone is kept, for
    exactly that pose (compared by value: an array changed in place is a new pose)."""
    if kernel == "native":
        pytest.skip("the numpy solver's cache: the kernel starts afresh each time")
    rig, joint_bones = production_rig(1.0)
    q, loc, start_q, start_loc = random_pose(rig, joint_bones, 3, 1.0, seed=29)
    tg = forward_kinematics(rig, q, loc)[1][:, [b if b is not None else 0 for b in joint_bones]]
    pose_q, pose_loc = start_q[0].copy(), start_loc[0].copy()
    solver = solver_module._solver(rig, joint_bones)
    _compare(rig, pose_q, pose_loc, joint_bones, tg[0])
    kept = solver._last_start
    for f in (1, 2):
        _compare(rig, pose_q, pose_loc, joint_bones, tg[f])
        assert solver._last_start is kept
    pose_q[3] = q[0, 3]
    pose_loc[0] += 0.1
    _compare(rig, pose_q, pose_loc, joint_bones, tg[0])
    assert solver._last_start is not kept
    _compare(rig, pose_q, pose_loc, joint_bones, tg[0], {J["l_hand"]: np.eye(3)})
    _compare(rig, pose_q, pose_loc, joint_bones, tg[1])
