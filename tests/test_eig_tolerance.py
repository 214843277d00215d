"""The default cluster rule of subgradient="mean": calibrated on how rounding splits ties.

Issue 15, correction 4, issue 24, correction 2 and issue 49, item 2: the rule must hold the
rounding-split copies of an exact tie together and nothing more. The former defaults
(8·eps·n·max|λ|, 8·eps·√n·max|λ|, then min(3·√max(n, 16), 20)·eps·max|λ| on computed gaps)
merged gaps the matrix holds apart (3e-5 … 8e-5, 4e-6 … 9e-6, then 5 … 18 eps at n = 100 and
200 in float32), and "mean" returned an element ≈ 0.7 from the gradient at differentiable
points. Near λ_k the float32 rule now compares refined gaps (2 × 2 Rayleigh–Ritz in float64).
"""

from __future__ import annotations

import math

import pytest
import torch
from eigprec_book.chapters.clarke.tie_splits import measure_planted_gaps, measure_tie_splits

from eigprec.eig import default_cluster_tol, kth_eigvalsh

EPS32 = torch.finfo(torch.float32).eps


def spectrum_with_gap(n, k, gap, seed):
    """float64 Q diag(λ) Qᵀ with max|λ| = 1 and the neighbours of λ_k exactly ``gap`` away."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    lam[k - 1], lam[k + 1] = lam[k] - gap, lam[k] + gap
    return (Q * lam) @ Q.T, Q[:, k]


def mean_and_eigenvector_gradients(A, k, **kw):
    X = A.clone().requires_grad_(True)
    G_mean = torch.autograd.grad(kth_eigvalsh(X, k, subgradient="mean", **kw).sum(), X)[0]
    X = A.clone().requires_grad_(True)
    G_vec = torch.autograd.grad(kth_eigvalsh(X, k, method="eigh").sum(), X)[0]
    return G_mean, G_vec


@pytest.mark.parametrize("gap", [4e-6, 6e-6, 8e-6, 1e-5, 3e-5, 8e-5])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_mean_does_not_fire_at_resolved_gaps_n100_float32(gap, seed):
    n, k = 100, 50
    A64, q = spectrum_with_gap(n, k, gap, seed)
    G_mean, G_vec = mean_and_eigenvector_gradients(A64.float(), k)
    # "mean" used a cluster of one: exactly the eigenvector element ...
    torch.testing.assert_close(G_mean, G_vec, atol=0, rtol=0)
    # ... which is near the true gradient q qᵀ of the float64 matrix (float32 rounding of the
    # input moves the eigenvector by ≈ eps·‖A‖/gap; 0.7–0.8 is the error when "mean" fires).
    true = (q[:, None] * q[None, :]).float()
    assert float(torch.linalg.matrix_norm(G_mean - true)) < 0.2


@pytest.mark.parametrize("n", [3, 5, 8])
@pytest.mark.parametrize("seed", range(5))
def test_small_whole_spectrum_ties_are_one_cluster(n, seed):
    # Below n ≈ 16 the splits do not shrink with n: the √max(n, 16) floor of the default.
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    R, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    A = R @ ((Q * torch.ones(n, dtype=torch.float64)) @ Q.T) @ R.T
    (G,) = torch.autograd.grad(kth_eigvalsh(A.requires_grad_(True), 0, subgradient="mean"), A)
    torch.testing.assert_close(G, torch.eye(n, dtype=torch.float64) / n, atol=1e-10, rtol=0)


def planted_batch(n, gap_eps, matrices, seed):
    """float32 Q diag(λ) Qᵀ, max|λ| = 1, λ_{k+1} = λ_k + gap_eps · eps (k = n // 2); and Q."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(matrices, n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(matrices, 1)
    k = n // 2
    lam[:, k + 1] = lam[:, k] + gap_eps * EPS32
    return ((Q * lam[:, None, :]) @ Q.mT).float(), Q


@pytest.mark.parametrize("n", [100, 200])
@pytest.mark.parametrize("gap_eps", [5, 10, 18])
def test_planted_gaps_of_5_10_18_eps_are_kept_apart_float32(n, gap_eps):
    # Issue 49, item 2: the former default (20 eps · max|λ| on computed gaps) merged every such
    # pair, and "mean" returned an element ≈ 0.7 from the gradient. torch.linalg.eigh computes
    # a true gap of 5 eps as 0.2 eps; the refined gap near λ_k is within 0.05 eps of the truth.
    A, Q = planted_batch(n, gap_eps, 20, seed=gap_eps)
    k = n // 2
    G_mean, G_vec = mean_and_eigenvector_gradients(A, k)
    torch.testing.assert_close(G_mean, G_vec, atol=0, rtol=0)  # a cluster of one, every time
    # ... and the former default, on the computed gaps, merged them all:
    X = A.clone().requires_grad_(True)
    (G_former,) = torch.autograd.grad(
        kth_eigvalsh(X, k, subgradient="mean", cluster_rtol=20 * EPS32).sum(), X
    )
    U = Q[:, :, k : k + 2]
    assert float((G_former.double() - U @ U.mT / 2).abs().amax()) < 0.05


@pytest.mark.parametrize("n", [100, 200])
def test_true_gaps_below_the_refined_tolerance_are_merged_float32(n):
    # The other side of the band: a true gap of 1 eps · max|λ| is below the refined tolerance
    # of 2 eps, so "mean" averages the pair — a Goldstein subgradient, not the gradient.
    A, Q = planted_batch(n, 1.0, 10, seed=3)
    k = n // 2
    G_mean, _ = mean_and_eigenvector_gradients(A, k)
    U = Q[:, :, k : k + 2]
    torch.testing.assert_close(G_mean.double(), U @ U.mT / 2, atol=2e-3, rtol=0)


@pytest.mark.parametrize(("n", "matrices"), [(100, 4), (400, 2), (1000, 1)])
@pytest.mark.parametrize("m", [2, 5, 20])
def test_exact_ties_of_2_to_20_copies_are_merged_up_to_n1000_float32(n, matrices, m):
    g = torch.Generator().manual_seed(n + m)
    Q, _ = torch.linalg.qr(torch.randn(matrices, n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(matrices, 1)
    k = n // 3
    lam[:, k : k + m] = lam[:, k : k + 1]
    A = ((Q * lam[:, None, :]) @ Q.mT).float().requires_grad_(True)
    (G,) = torch.autograd.grad(kth_eigvalsh(A, k + m // 2, subgradient="mean").sum(), A)
    U = Q[:, :, k : k + m]
    torch.testing.assert_close(G.double(), U @ U.mT / m, atol=2e-3, rtol=0)


def test_the_default_is_the_documented_rule_and_the_calibration_holds():
    w = torch.linspace(-1.0, 1.0, 100)
    assert float(default_cluster_tol(w, 100)) == pytest.approx(2 * EPS32)
    eps64 = torch.finfo(torch.float64).eps
    w64 = torch.linspace(-2.0, 2.0, 30, dtype=torch.float64)
    assert float(default_cluster_tol(w64, 30)) == pytest.approx(2 * 3 * eps64 * math.sqrt(30))
    assert float(default_cluster_tol(w64[:4], 4)) == pytest.approx(2 * 3 * eps64 * 4)
    assert float(default_cluster_tol(w64.repeat(2), 60)) == pytest.approx(2 * 20 * eps64)
    # A small version of the calibration (benchmarks/eig_tie_splits.py): exact ties refine to
    # well under the refined tolerance, while their computed splits reach it (why they are
    # refined); true gaps refine to within 0.1 eps of themselves.
    ties = measure_tie_splits((8, 30, 60), (2, 5, "all"), (torch.float32,), ("tie",), 2, 6)
    assert max(max(s.refined) for s in ties) < 1.0
    assert max(max(s.gaps) for s in ties) > 2.0
    for p in measure_planted_gaps((60,), (3.0, 5.0), matrices=6):
        assert abs(p.refined - p.gap) < 0.1, p
    # the spread of a large tie exceeds its largest gap: why clusters are chains, not balls
    whole = [s for s in ties if s.multiplicity == s.n]
    assert max(max(s.spreads) for s in whole) > max(max(s.gaps) for s in whole)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m", [2, 3, 5, 50, 100])
def test_exact_ties_still_form_one_cluster_n100(dtype, m):
    # Copies of an exactly repeated eigenvalue, rounded to dtype: "mean" must average all m
    # (m = 100: a rotated identity, whose copies spread over ≈ 5 eps·√n — a ball of the
    # default radius around λ_k split it).
    g = torch.Generator().manual_seed(4 + m)
    n = 100
    k = 40 if m < 50 else 0
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    lam[k : k + m] = lam[k] if m < n else 1.0
    A = ((Q * lam) @ Q.T).to(dtype).requires_grad_(True)
    for j in (k, k + m - 1):
        (G,) = torch.autograd.grad(kth_eigvalsh(A, j, subgradient="mean"), A)
        U = Q[:, k : k + m]
        atol = 2e-3 if dtype == torch.float32 else 1e-10
        torch.testing.assert_close(G.double(), U @ U.T / m, atol=atol, rtol=0)


def test_zero_cluster_of_a_gram_matrix_is_one_cluster():
    g = torch.Generator().manual_seed(3)
    B = torch.randn(4, 60, 55, generator=g)
    A = (B @ B.mT).requires_grad_(True)
    (G,) = torch.autograd.grad(kth_eigvalsh(A, 0, subgradient="mean").sum(), A)
    # U Uᵀ / 5 for the null space of Bᵀ: trace 1, rank 5, eigenvalues 1/5.
    ev = torch.linalg.eigvalsh(G.double())
    torch.testing.assert_close(
        ev[:, -5:], torch.full((4, 5), 0.2, dtype=torch.float64), atol=1e-4, rtol=0
    )
    assert float(ev[:, :-5].abs().max()) < 1e-4


def test_measure_tie_splits_refuses_bad_arguments():
    with pytest.raises(ValueError, match="kinds"):
        measure_tie_splits(kinds=("x",))
    with pytest.raises(ValueError, match="multiplicities"):
        measure_tie_splits(sizes=(5,), multiplicities=("x",))
    with pytest.raises(ValueError, match="dtypes"):
        measure_tie_splits(dtypes=(torch.float16,))


def test_relative_tolerance_scales_with_each_matrix():
    # cluster_rtol = ε: the tolerance is ε · max|λ| per batch entry, so one value serves a
    # batch whose matrices differ in scale; an absolute tolerance cannot.
    g = torch.Generator().manual_seed(2)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    lam = torch.tensor([-1.0, 0.3, 0.3 + 1e-4, 0.6, 1.0], dtype=torch.float64)
    S = (Q * lam) @ Q.T
    A = torch.stack([S, 1e6 * S]).requires_grad_(True)
    (G,) = torch.autograd.grad(kth_eigvalsh(A, 1, subgradient="mean", cluster_rtol=1e-3).sum(), A)
    U = Q[:, 1:3]
    for i in range(2):  # both entries merge the 1e-4 · max|λ| gap
        torch.testing.assert_close(G[i], U @ U.T / 2, atol=1e-8, rtol=0)
    (G_abs,) = torch.autograd.grad(
        kth_eigvalsh(A, 1, subgradient="mean", cluster_tol=1e-3).sum(), A
    )
    q = Q[:, 1:2]
    torch.testing.assert_close(G_abs[1], q @ q.T, atol=1e-8, rtol=0)  # 1e-3 ≪ 1e6 · 1e-4
    # the same as the absolute tolerance ε · max|λ| for one matrix
    (G1,) = torch.autograd.grad(kth_eigvalsh(A[1], 1, subgradient="mean", cluster_rtol=2e-5), A)
    (G2,) = torch.autograd.grad(kth_eigvalsh(A[1], 1, subgradient="mean", cluster_tol=20.0), A)
    torch.testing.assert_close(G1, G2, atol=0, rtol=0)


def test_relative_tolerance_is_checked_like_the_absolute_one():
    A = torch.eye(3, dtype=torch.float64).requires_grad_(True)
    with pytest.raises(ValueError, match="not both"):
        kth_eigvalsh(A, 0, subgradient="mean", cluster_tol=1e-3, cluster_rtol=1e-3)
    with pytest.raises(ValueError, match="cluster_rtol must be finite"):
        kth_eigvalsh(A, 0, subgradient="mean", cluster_rtol=-1.0)
    with pytest.raises(TypeError, match="cluster_rtol must be a float"):
        kth_eigvalsh(A, 0, subgradient="mean", cluster_rtol="1e-3")
    with pytest.raises(ValueError, match='cluster_rtol is only used with subgradient="mean"'):
        kth_eigvalsh(A, 0, cluster_rtol=1e-3)


def _cycle_laplacian(n: int, dtype: torch.dtype) -> torch.Tensor:
    eye = torch.eye(n, dtype=dtype)
    return 2 * eye - eye.roll(1, 0) - eye.roll(-1, 0)


@pytest.mark.parametrize("n", [1000, 2000])
def test_cycle_laplacian_top_eigenvalue_stays_simple_float32(n):
    # Issue 33, item 4: λ_max = 4 of the cycle graph (n even) is simple, its neighbour a double
    # eigenvalue 2 + 2 cos(2π/n), (2π/n)² below: 3.95e-5 at n = 1000, 9.87e-6 at n = 2000 —
    # 83 and 21 eps · max|λ|. The default 3 · eps · √n · max|λ| (4.5e-5, 6.4e-5) averaged 3 and
    # 7 eigenvectors there (gradient 0.82 and 0.93 away). The top eigenvector is exactly
    # (−1)^i / √n.
    L = _cycle_laplacian(n, torch.float32).requires_grad_(True)
    lam = kth_eigvalsh(L, -1, subgradient="mean")
    (G,) = torch.autograd.grad(lam, L)
    v = torch.tensor([(-1.0) ** i for i in range(n)], dtype=torch.float64) / math.sqrt(n)
    err = float(torch.linalg.matrix_norm(G.double() - v[:, None] * v[None, :]))
    assert err < 0.05, err
    assert float(lam) == pytest.approx(4.0, abs=1e-5)


def test_large_ties_still_form_one_cluster_float32():
    # A tie of multiplicity n / 2 at n = 400 (consecutive copies measured up to 6.9 eps apart
    # for n = 400, 13 eps at n = 2000): "mean" averages all of them.
    n, m, k = 400, 200, 100
    g = torch.Generator().manual_seed(7)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    lam[k : k + m] = lam[k]
    A = ((Q * lam) @ Q.T).float().requires_grad_(True)
    (G,) = torch.autograd.grad(kth_eigvalsh(A, k + m // 2, subgradient="mean"), A)
    U = Q[:, k : k + m]
    torch.testing.assert_close(G.double(), U @ U.T / m, atol=2e-3, rtol=0)
