import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.subspace import (
    cluster_angles,
    davis_kahan_bound,
    eigenvalue_clusters,
    principal_angles,
    subspace_angle,
    top1_angle,
)


def _orthonormal(n: int, k: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64)).Q.to(dtype)


def _rotation(k: int, seed: int) -> torch.Tensor:
    return _orthonormal(k, k, seed + 1000)


# -- known constructions -------------------------------------------------------------------


def test_identical_subspaces_have_zero_angles():
    Q = _orthonormal(10, 4, 0)
    assert torch.allclose(principal_angles(Q, Q), torch.zeros(4, dtype=torch.float64), atol=1e-6)


def test_orthogonal_subspaces_have_right_angles():
    Q = _orthonormal(10, 6, 1)
    angles = principal_angles(Q[:, :3], Q[:, 3:])
    assert torch.allclose(angles, torch.full((3,), 90.0, dtype=torch.float64), atol=1e-9)


@pytest.mark.parametrize("theta", [1e-7, 1e-4, 0.3, math.pi / 4, 1.2, math.pi / 2])
def test_planted_angle_is_recovered(theta):
    e = torch.eye(5, dtype=torch.float64)
    b = math.cos(theta) * e[:, 0] + math.sin(theta) * e[:, 1]
    got = principal_angles(e[:, :1], b[:, None], degrees=False)
    # Small angles to relative accuracy: arccos alone would give ~1e-8 absolute error.
    assert got.item() == pytest.approx(theta, rel=1e-9, abs=1e-15)


def test_two_planted_angles_come_back_sorted():
    e = torch.eye(6, dtype=torch.float64)
    a, b = 0.9, 0.1
    A = e[:, :2]
    B = torch.stack(
        [
            math.cos(a) * e[:, 0] + math.sin(a) * e[:, 2],
            math.cos(b) * e[:, 1] + math.sin(b) * e[:, 3],
        ],
        dim=1,
    )
    got = principal_angles(A, B, degrees=False)
    assert torch.allclose(got, torch.tensor([b, a], dtype=torch.float64), atol=1e-12)


def test_degrees_and_radians_agree():
    A, B = _orthonormal(8, 3, 2), _orthonormal(8, 3, 3)
    assert torch.allclose(
        torch.rad2deg(principal_angles(A, B, degrees=False)), principal_angles(A, B)
    )


def test_different_column_counts_give_min_count_angles():
    Q = _orthonormal(9, 5, 4)
    assert principal_angles(Q[:, :2], Q).shape == (2,)
    assert torch.allclose(
        principal_angles(Q, Q[:, :2]), torch.zeros(2, dtype=torch.float64), atol=1e-6
    )


def test_float32_input_is_measured_in_float64():
    Q = _orthonormal(16, 4, 5, dtype=torch.float32)
    angles = principal_angles(Q, Q)
    assert angles.dtype == torch.float64
    assert angles.max() < 0.01


# -- invariances (hypothesis) --------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n=st.integers(3, 12), k=st.integers(1, 3), seed=st.integers(0, 10_000))
def test_invariant_to_rotation_and_sign_flips_inside_subspace(n, k, seed):
    k = min(k, n - 1)
    A, B = _orthonormal(n, k, seed), _orthonormal(n, k, seed + 1)
    signs = torch.where(
        torch.rand(k, generator=torch.Generator().manual_seed(seed)) < 0.5, -1.0, 1.0
    )
    R = _rotation(k, seed).to(torch.float64)
    base = principal_angles(A, B)
    assert torch.allclose(principal_angles(A * signs, B), base, atol=1e-6)
    assert torch.allclose(principal_angles(A @ R, B @ R.T), base, atol=1e-6)
    assert torch.allclose(
        principal_angles(A, A @ R), torch.zeros(k, dtype=torch.float64), atol=1e-6
    )


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), p=st.integers(1, 4), q=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_range_symmetry_and_cosine_identity(n, p, q, seed):
    p, q = min(p, n), min(q, n)
    A, B = _orthonormal(n, p, seed), _orthonormal(n, q, seed + 7)
    ab = principal_angles(A, B, degrees=False)
    assert bool(((ab >= 0) & (ab <= math.pi / 2 + 1e-12)).all())
    assert torch.allclose(ab, principal_angles(B, A, degrees=False), atol=1e-9)
    # Σ cos² θ_i = ‖AᵀB‖_F², whatever the basis inside either span.
    assert torch.cos(ab).square().sum().item() == pytest.approx(
        torch.linalg.matrix_norm(A.T @ B).square().item(), abs=1e-9
    )


# -- top-1 angle -----------------------------------------------------------------------------


def test_top1_angle_ignores_sign_and_scale():
    a = torch.tensor([1.0, 2.0, -1.0])
    assert top1_angle(a, -3.0 * a) == pytest.approx(0.0, abs=1e-6)
    assert top1_angle(torch.tensor([1.0, 0.0]), torch.tensor([0.0, -2.0])) == pytest.approx(90.0)
    assert top1_angle(
        torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]), degrees=False
    ) == pytest.approx(math.pi / 4)


def test_top1_angle_uses_first_columns_and_resolves_tiny_angles():
    theta = 1e-9
    A = torch.eye(3, dtype=torch.float64)
    B = A.clone()
    B[:, 0] = torch.tensor([math.cos(theta), math.sin(theta), 0.0], dtype=torch.float64)
    assert top1_angle(A, B, degrees=False) == pytest.approx(theta, rel=1e-6)


# -- clusters and the gap-aware comparison --------------------------------------------------


def test_eigenvalue_clusters_split_at_relative_gap():
    lam = torch.tensor([10.0, 9.99, 5.0, 1.0, 0.999])
    assert eigenvalue_clusters(lam, 0.01) == [(0, 2), (2, 3), (3, 5)]
    assert eigenvalue_clusters(lam.flip(0), 0.01) == [(0, 2), (2, 3), (3, 5)]
    assert eigenvalue_clusters(lam, 0.9) == [(0, 5)]


def test_cluster_angles_see_through_rotations_inside_degenerate_cluster():
    Q = _orthonormal(6, 6, 9)
    lam = torch.tensor([3.0, 3.0 - 1e-9, 2.0, 1.0, 0.5, 0.0], dtype=torch.float64)
    c, s = math.cos(1.0), math.sin(1.0)
    turn = torch.eye(6, dtype=torch.float64)
    turn[:2, :2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    Q2 = Q @ turn  # a different, equally valid eigenbasis of the same matrix
    assert top1_angle(Q, Q2) == pytest.approx(math.degrees(1.0), rel=1e-9)
    clusters = cluster_angles(Q, Q2, lam, rel_gap=0.01)
    assert [(x.start, x.stop) for x in clusters] == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert max(x.angle for x in clusters) < 1e-5
    assert clusters[0].gap == pytest.approx(1.0 - 1e-9)
    assert clusters[-1].eigenvalues == (0.0, 0.0)


def test_cluster_angles_report_a_real_rotation():
    Q = torch.eye(4, dtype=torch.float64)
    c, s = math.cos(0.2), math.sin(0.2)
    Q2 = Q.clone()
    Q2[:, [0, 2]] = torch.tensor([[c, -s], [0, 0], [s, c], [0, 0]], dtype=torch.float64)
    clusters = cluster_angles(Q, Q2, torch.tensor([4.0, 3.0, 2.0, 1.0]), rel_gap=0.1)
    assert clusters[0].angle == pytest.approx(math.degrees(0.2))
    assert clusters[1].angle == pytest.approx(0.0, abs=1e-6)


# -- Davis–Kahan -----------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), log_ratio=st.floats(-4, 1), n=st.integers(3, 10))
def test_davis_kahan_bound_holds(seed, log_ratio, n):
    g = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64)).Q
    lam = torch.linspace(1.0, 0.0, n, dtype=torch.float64)
    lam[0] = 2.0  # gap 1 between the top eigenvector and the rest
    E = torch.randn(n, n, generator=g, dtype=torch.float64)
    E = E + E.T
    E *= 10**log_ratio / torch.linalg.matrix_norm(E, ord=2)
    W = torch.linalg.eigh((V * lam) @ V.T + E).eigenvectors[:, -1]
    assert top1_angle(V[:, 0], W) <= davis_kahan_bound(10**log_ratio, 1.0) + 1e-7


def test_davis_kahan_bound_values():
    assert davis_kahan_bound(0.0, 1.0) == 0.0
    assert davis_kahan_bound(0.1, 1.1, degrees=False) == pytest.approx(math.asin(0.1))
    assert davis_kahan_bound(0.6, 1.0) == 90.0  # ratio 1.5 > 1: no information
    assert davis_kahan_bound(2.0, 1.0) == 90.0


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("A", "B", "error", "match"),
    [
        ([[1.0]], torch.eye(1), TypeError, "torch.Tensor"),
        (torch.eye(3, dtype=torch.int64), torch.eye(3), TypeError, "floating-point"),
        (torch.eye(3), torch.eye(4), ValueError, "same number of rows"),
        (torch.ones(3, 2), torch.eye(3), ValueError, "orthonormal"),
        (torch.full((3, 1), math.nan), torch.eye(3), ValueError, "NaN"),
        (torch.zeros(2, 2, 2), torch.eye(2), ValueError, "vector or a matrix"),
        (torch.eye(2, 3), torch.eye(2), ValueError, "more columns than rows"),
    ],
)
def test_principal_angles_bad_input(A, B, error, match):
    with pytest.raises(error, match=match):
        principal_angles(A, B)


def test_other_bad_input():
    with pytest.raises(ValueError, match="zero vector"):
        top1_angle(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="same length"):
        top1_angle(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="sorted"):
        eigenvalue_clusters(torch.tensor([1.0, 3.0, 2.0]), 0.1)
    with pytest.raises(ValueError, match="rel_gap"):
        eigenvalue_clusters(torch.tensor([1.0, 0.0]), 0.0)
    with pytest.raises(ValueError, match="NaN"):
        eigenvalue_clusters(torch.tensor([math.nan, 0.0]), 0.1)
    with pytest.raises(ValueError, match="agree"):
        cluster_angles(torch.eye(3), torch.eye(3), torch.tensor([1.0, 0.0]), 0.1)
    with pytest.raises(ValueError, match="k must be"):
        subspace_angle(torch.eye(3), torch.eye(3), 0)
    with pytest.raises(ValueError, match="fewer than k"):
        subspace_angle(torch.eye(3)[:, :2], torch.eye(3), 3)
    with pytest.raises(ValueError, match="gap"):
        davis_kahan_bound(0.1, 0.0)
    with pytest.raises(ValueError, match="≥ 0"):
        davis_kahan_bound(-0.1, 1.0)
    with pytest.raises(ValueError, match="finite"):
        davis_kahan_bound(math.nan, 1.0)


def test_docstring_examples():
    import doctest

    import eigprec.subspace

    assert doctest.testmod(eigprec.subspace).failed == 0


# -- reliability (issue 12) --------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.0, 5e-324, 1e-300])
def test_a_zero_scale_spectrum_is_one_cluster(scale):
    lam = torch.full((5,), scale, dtype=torch.float64)
    assert eigenvalue_clusters(lam, 0.01) == [(0, 5)]
    # Exactly equal eigenvalues are never split, whatever rel_gap · scale rounds to.
    assert eigenvalue_clusters(torch.tensor([1.0, 1.0, 0.0, 0.0]), 1e-320) == [(0, 2), (2, 4)]
    Q = _orthonormal(5, 5, 3)
    clusters = cluster_angles(Q, Q @ _rotation(5, 3), lam, rel_gap=0.01)
    assert len(clusters) == 1 and clusters[0].gap == math.inf
    assert clusters[0].angle == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_directions_give_zero_angle(dtype):
    # Columns orthonormal only to the rounding of their dtype: the slack is not an angle.
    Q = _orthonormal(40, 6, 11).to(dtype)
    assert principal_angles(Q, Q).abs().max().item() < 1e-12
    assert subspace_angle(Q, Q, 6) < 1e-12
    flipped = Q * torch.tensor([1.0, -1, 1, -1, 1, -1], dtype=dtype)
    assert principal_angles(Q, flipped).abs().max().item() < 1e-12


def test_columns_far_from_orthonormal_for_their_dtype_are_refused():
    Q = _orthonormal(10, 3, 12)
    with pytest.raises(ValueError, match="orthonormal"):
        principal_angles(Q * (1 + 1e-3), Q)  # was accepted up to 1e-3 before
    Q32 = Q.to(torch.float32)
    with pytest.raises(ValueError, match="orthonormal"):
        principal_angles(Q32 * (1 + 1e-3), Q32)
    principal_angles(Q32 * (1 + 1e-6), Q32)  # a few float32 ulps are rounding, not misuse


def test_orthonormal_slack_is_not_reported_as_an_angle():
    # Same spans inside each cluster (columns swapped and negated): exactly 0, although the
    # float32 columns are orthonormal only to about 1e-7.
    Q32 = _orthonormal(30, 4, 13, dtype=torch.float32)
    same = Q32[:, [1, 0, 2, 3]] * torch.tensor([-1.0, 1.0, 1.0, -1.0])
    c = cluster_angles(Q32, same, torch.tensor([4.0, 4.0, 2.0, 1.0]), rel_gap=0.1)
    assert [x.angle for x in c] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


@pytest.mark.parametrize("shape", [(1, 3), (1, 5)])
def test_top1_angle_refuses_one_row_matrices(shape):
    a = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="one row"):
        top1_angle(a, a.flip(-1))
    assert top1_angle(torch.tensor([[2.0]]), torch.tensor([[-3.0]])) == 0.0  # (1, 1) is a line


@pytest.mark.parametrize(
    ("A", "error", "match"),
    [
        ([[1.0, 0.0], [0.0, 1.0]], TypeError, "torch.Tensor"),
        (torch.ones(2, 2, 2), ValueError, "vector or a matrix"),
    ],
)
def test_subspace_angle_bad_input_is_named(A, error, match):
    with pytest.raises(error, match=match):
        subspace_angle(A, torch.eye(2), 1)


def test_subspace_angle_takes_a_vector_as_one_column():
    e = torch.eye(3, dtype=torch.float64)
    assert subspace_angle(e[:, 0], e[:, :2], 1) == 0.0
    with pytest.raises(ValueError, match="fewer than k"):
        subspace_angle(e[:, 0], e, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda: principal_angles(torch.eye(2), torch.eye(2), degrees="no"),
        lambda: subspace_angle(torch.eye(2), torch.eye(2), 1, degrees="no"),
        lambda: top1_angle(torch.ones(2), torch.ones(2), degrees=1),
        lambda: cluster_angles(torch.eye(2), torch.eye(2), torch.tensor([2.0, 1.0]), 0.1, None),
        lambda: davis_kahan_bound(0.1, 1.0, degrees="False"),
    ],
)
def test_degrees_must_be_a_bool(call):
    with pytest.raises(TypeError, match="degrees"):
        call()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: eigenvalue_clusters(torch.tensor([1.0, 0.0]), True), "rel_gap"),
        (lambda: eigenvalue_clusters(torch.tensor([1.0, 0.0]), "0.1"), "rel_gap"),
        (lambda: subspace_angle(torch.eye(2), torch.eye(2), True), "k"),
        (lambda: subspace_angle(torch.eye(2), torch.eye(2), 1.0), "k"),
        (lambda: davis_kahan_bound(True, 1.0), "perturbation_norm"),
        (lambda: davis_kahan_bound(0.1, True), "gap"),
        (lambda: davis_kahan_bound(torch.tensor(0.1), 1.0), "perturbation_norm"),
    ],
)
def test_non_numbers_raise_type_error(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_numpy_scalars_are_numbers():
    np = pytest.importorskip("numpy")
    lam = torch.tensor([10.0, 9.99, 5.0])
    assert eigenvalue_clusters(lam, np.float32(0.01)) == eigenvalue_clusters(lam, 0.01)
    Q = _orthonormal(5, 3, 1)
    assert subspace_angle(Q, Q, np.int64(2)) == subspace_angle(Q, Q, 2)
    assert davis_kahan_bound(np.float64(0.1), np.float32(1.1)) == davis_kahan_bound(
        0.1, float(np.float32(1.1))
    )
    assert cluster_angles(Q, Q, lam, np.float64(0.01)) == cluster_angles(Q, Q, lam, 0.01)


@pytest.mark.parametrize("scale", [1e300, 8e307, 1e-310, 5e-324])
def test_top1_angle_of_huge_and_subnormal_vectors(scale):
    # Found by tests/test_api_properties.py: ‖a‖ overflowed to inf (reporting 90°) or
    # underflowed to 0 (refusing a non-zero vector as a "zero vector").
    a = torch.tensor([1.0, 0.0], dtype=torch.float64) * scale
    b = torch.tensor([1.0, 1.0], dtype=torch.float64) * scale
    assert top1_angle(a, b) == pytest.approx(45.0, rel=1e-12)
    assert top1_angle(a, torch.tensor([3.0, 0.0])) == 0.0


def test_a_float64_copy_of_a_float32_basis_is_accepted_and_its_slack_is_no_angle():
    # Optimizers keep float32 bases; a reader compares float64 copies of them. Their
    # float32-level defect is rounding, not geometry: accepted, and re-orthonormalised away.
    g = torch.Generator().manual_seed(0)
    Q32 = torch.linalg.qr(torch.randn(64, 64, generator=g)).Q
    Q = Q32.double()
    assert (Q.T @ Q - torch.eye(64, dtype=torch.float64)).abs().max() > 1e-9
    assert principal_angles(Q[:, :8], Q[:, :8]).max() < 1e-6
    with pytest.raises(ValueError, match="orthonormal"):
        principal_angles(Q[:, :8] * 1.001, Q[:, :8])
