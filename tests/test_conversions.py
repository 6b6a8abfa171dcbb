"""Blender's rotation channels <-> quaternions (core.conversions): each conversion against
its inverse and against plain matrix products (tests/blender checks them against
mathutils too)."""

from __future__ import annotations

import numpy as np
import pytest

from blender_addon.core.conversions import (
    AXIS_ANGLE,
    EULER_ORDERS,
    QUATERNION,
    axis_angle_to_quat,
    euler_to_matrix,
    euler_to_quat,
    from_quats,
    orthonormal,
    quat_to_axis_angle,
    quat_to_euler,
    quats_to_eulers,
    to_quats,
)
from blender_addon.core.rotations import quat_normalize, quat_to_matrix

ANGLE_TOL = 1e-9


def _random_quats(rng: np.random.Generator, n: int) -> np.ndarray:
    return quat_normalize(rng.normal(size=(n, 4)))


def _same_rotation(a: np.ndarray, b: np.ndarray, tol: float = ANGLE_TOL) -> bool:
    dots = np.abs(np.sum(quat_normalize(a) * quat_normalize(b), axis=-1))
    return bool(np.all(1.0 - dots < tol))


def _axis_matrix(axis: int, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    u, v = (axis + 1) % 3, (axis + 2) % 3
    m = np.eye(3)
    m[u, u] = m[v, v] = c
    m[v, u], m[u, v] = s, -s
    return m


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_euler_order_turns_about_the_first_axis_first(order: str) -> None:
    rng = np.random.default_rng(0)
    for angles in rng.uniform(-np.pi, np.pi, (10, 3)):
        want = np.eye(3)
        for c in order:  # each later turn is applied on the left
            axis = "XYZ".index(c)
            want = _axis_matrix(axis, angles[axis]) @ want
        assert np.allclose(quat_to_matrix(euler_to_quat(angles, order)), want, atol=1e-12)
        assert np.allclose(euler_to_matrix(angles, order), want, atol=1e-12)


def test_euler_to_matrix_reads_bvh_channels_reversed() -> None:
    """BVH's ``Zrotation Xrotation Yrotation`` (R = Rz @ Rx @ Ry, the reader's convention) is
    Blender's order 'YXZ' with the angles in (x, y, z) slots; both layouts agree."""
    a = np.deg2rad([30.0, -50.0, 70.0])  # z, x, y: a BVH line's order
    (cz, cx, cy), (sz, sx, sy) = np.cos(a), np.sin(a)
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    xyz = a[[1, 2, 0]]
    np.testing.assert_allclose(euler_to_matrix(xyz, "YXZ"), rz @ rx @ ry, atol=1e-15)
    # Right-handed elementary rotations: +90 degrees about X takes +Y to +Z, etc.
    for axis, v, want in ((0, [0, 1, 0], [0, 0, 1]), (1, [0, 0, 1], [1, 0, 0]),
                          (2, [1, 0, 0], [0, 1, 0])):  # fmt: skip
        quarter = np.zeros(3)
        quarter[axis] = np.pi / 2
        np.testing.assert_allclose(euler_to_matrix(quarter, "XYZ") @ v, want, atol=1e-15)
    many = np.random.default_rng(9).uniform(-np.pi, np.pi, (5, 7, 3))
    m = euler_to_matrix(many, "ZXY")
    assert m.shape == (5, 7, 3, 3)
    first = euler_to_matrix(np.moveaxis(many, -1, 0), "ZXY", components_first=True)
    np.testing.assert_allclose(first, np.moveaxis(m, (-2, -1), (0, 1)), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(
        euler_to_quat(np.moveaxis(many, -1, 0), "ZXY", components_first=True),
        np.moveaxis(euler_to_quat(many, "ZXY"), -1, 0),
    )
    with pytest.raises(ValueError, match="order"):
        euler_to_matrix(xyz, "ZX")
    with pytest.raises(ValueError, match=r"\(3, \.\.\.\)"):
        euler_to_matrix(many, "ZXY", components_first=True)


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_quat_to_euler_round_trip(order: str) -> None:
    rng = np.random.default_rng(1)
    q = _random_quats(rng, 200)
    e = quat_to_euler(q, order)
    assert e.shape == (200, 3)
    assert _same_rotation(euler_to_quat(e, order), q)
    assert np.all(np.abs(e) <= np.pi + 1e-12)


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_gimbal_lock_round_trip(order: str) -> None:
    """The middle angle at +-90 degrees: the first and last axes line up."""
    rng = np.random.default_rng(2)
    middle = "XYZ".index(order[1])
    angles = rng.uniform(-np.pi, np.pi, (20, 3))
    angles[:10, middle] = 0.5 * np.pi
    angles[10:, middle] = -0.5 * np.pi
    q = euler_to_quat(angles, order)
    assert _same_rotation(euler_to_quat(quat_to_euler(q, order), order), q, tol=1e-9)


@pytest.mark.parametrize("order", EULER_ORDERS)
def test_compatible_euler_stays_near_the_reference(order: str) -> None:
    rng = np.random.default_rng(3)
    q = _random_quats(rng, 200)
    compat = rng.uniform(-12.0, 12.0, (200, 3))
    e = quat_to_euler(q, order, compat)
    assert _same_rotation(euler_to_quat(e, order), q)
    assert np.all(np.abs(e - compat) <= np.pi + 1e-9)
    # Whole turns alone move nothing: the reference's own angles come back.
    assert np.allclose(quat_to_euler(euler_to_quat(compat, order), order, compat), compat,
                       atol=1e-9)


def test_single_values_and_broadcast_reference() -> None:
    q = euler_to_quat(np.array([0.1, -0.2, 0.3]), "ZXY")
    assert q.shape == (4,)
    assert np.allclose(quat_to_euler(q, "ZXY", np.zeros(3)), [0.1, -0.2, 0.3])
    many = np.repeat(q[None], 5, axis=0)
    assert quat_to_euler(many, "ZXY", np.zeros(3)).shape == (5, 3)
    with pytest.raises(ValueError, match="Euler order"):
        quat_to_euler(q, "XXY")


@pytest.mark.parametrize("order", ["XYZ", "ZYX"])
def test_euler_keys_stay_continuous_over_turns(order: str) -> None:
    """A bone spinning three times: its Euler keys keep counting instead of wrapping."""
    t = np.linspace(0.0, 6.0 * np.pi, 400)
    angles = np.stack([0.3 * np.sin(t), t, 0.2 * np.cos(t)], axis=1)
    q = euler_to_quat(angles, order)
    e = quats_to_eulers(q[:, None], order, np.zeros((1, 3)))[:, 0]
    assert _same_rotation(euler_to_quat(e, order), q)
    assert np.abs(np.diff(e, axis=0)).max() < 0.1  # no jump between frames
    assert e[-1, 1] > 5.0 * np.pi  # the turns add up
    # The chain is frame-by-frame conversion with the previous frame as the reference.
    prev = np.zeros(3)
    for t_i in range(0, 400, 37):
        prev = quat_to_euler(q[t_i], order, e[t_i - 1] if t_i else prev)
        assert np.allclose(prev, e[t_i], atol=1e-12)


def test_axis_angle_round_trip_and_special_cases() -> None:
    rng = np.random.default_rng(4)
    q = _random_quats(rng, 100)
    aa = quat_to_axis_angle(q)
    assert np.allclose(np.linalg.norm(aa[:, 1:], axis=1), 1.0)
    assert np.all((aa[:, 0] >= 0.0) & (aa[:, 0] <= 2.0 * np.pi))
    assert _same_rotation(axis_angle_to_quat(aa), q)
    assert np.allclose(quat_to_axis_angle(np.array([1.0, 0.0, 0.0, 0.0])), [0, 0, 1, 0])
    assert np.allclose(axis_angle_to_quat(np.array([1.3, 0.0, 0.0, 0.0])), [1, 0, 0, 0])
    assert _same_rotation(axis_angle_to_quat(np.array([0.8, 0.0, 0.0, 5.0])),
                          np.array([np.cos(0.4), 0.0, 0.0, np.sin(0.4)]))


MODES = (QUATERNION, "XYZ", "ZXY", AXIS_ANGLE, "YZX", QUATERNION)


def test_channels_round_trip_by_mode() -> None:
    rng = np.random.default_rng(5)
    n = len(MODES)
    rot = _random_quats(rng, n)
    eulers = rng.uniform(-7.0, 7.0, (n, 3))
    channels = from_quats(MODES, rot, eulers)
    assert {name: sorted(bones) for name, (bones, _values) in channels.items()} == {
        "quaternion": [0, 5], "euler": [1, 2, 4], "axis_angle": [3]}
    q_ch = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    e_ch = eulers.copy()
    aa_ch = np.tile([0.0, 0.0, 1.0, 0.0], (n, 1))
    for name, target in (("quaternion", q_ch), ("euler", e_ch), ("axis_angle", aa_ch)):
        bones, values = channels[name]
        target[bones] = values
    assert _same_rotation(to_quats(MODES, q_ch, e_ch, aa_ch), rot)
    euler_bones = channels["euler"][0]
    assert np.all(np.abs(e_ch[euler_bones] - eulers[euler_bones]) <= np.pi + 1e-9)
    # Frames lead in to_quats.
    frames = to_quats(MODES, np.stack([q_ch] * 3), np.stack([e_ch] * 3), np.stack([aa_ch] * 3))
    assert frames.shape == (3, n, 4) and _same_rotation(frames[2], rot)


def test_orthonormal_drops_scale_and_mirrors() -> None:
    rng = np.random.default_rng(6)
    r = quat_to_matrix(_random_quats(rng, 10))
    scaled = r * np.array([0.01, 2.0, 3.0])
    assert np.allclose(orthonormal(scaled), r, atol=1e-12)
    assert np.allclose(orthonormal(scaled[0]), r[0], atol=1e-12)
    mirrored = orthonormal(r @ np.diag([1.0, 1.0, -1.0]))
    assert np.allclose(np.linalg.det(mirrored), 1.0)
    assert np.allclose(mirrored @ np.swapaxes(mirrored, -1, -2), np.eye(3), atol=1e-12)
