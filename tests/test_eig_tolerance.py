"""The default cluster tolerance of subgradient="mean": calibrated on how rounding splits ties.

Issue 15, correction 4 and issue 24, correction 2: the tolerance must hold the rounding-split
copies of an exact tie together and nothing more. The former defaults (8·eps·n·max|λ|, then
8·eps·√n·max|λ|) merged gaps the solver resolves (3e-5 … 8e-5, then 4e-6 … 9e-6, at n = 100 in
float32), and "mean" returned an element ≈ 0.7 from the gradient at differentiable points.
"""

from __future__ import annotations

import math

import pytest
import torch
from eigprec_book.chapters.clarke.tie_splits import measure_tie_splits

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
    G_mean = torch.autograd.grad(kth_eigvalsh(X, k, subgradient="mean", **kw), X)[0]
    X = A.clone().requires_grad_(True)
    G_vec = torch.autograd.grad(kth_eigvalsh(X, k, method="eigh"), X)[0]
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gaps_below_the_tolerance_are_merged_n100_float32(seed):
    # The other side of the band: a true gap of 1.5e-6 lies below the default tolerance
    # 20·eps ≈ 2.4e-6 (3·eps·√100 ≈ 3.6e-6 before issue 33), so the three eigenvalues form
    # one cluster and "mean" returns their average — a Goldstein ε-subgradient, ≈ 0.8 from
    # the gradient.
    n, k = 100, 50
    A64, _ = spectrum_with_gap(n, k, 1.5e-6, seed)
    assert float(default_cluster_tol(torch.linspace(-1.0, 1.0, n), n)) > 1.5e-6
    G_mean, _ = mean_and_eigenvector_gradients(A64.float(), k)
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    U = Q[:, k - 1 : k + 2]
    torch.testing.assert_close(G_mean.double(), U @ U.T / 3, atol=2e-3, rtol=0)


def test_the_default_is_the_documented_formula_above_every_measured_tie_split():
    w = torch.linspace(-1.0, 1.0, 100)
    assert float(default_cluster_tol(w[:30], 30)) == pytest.approx(3 * EPS32 * math.sqrt(30))
    assert float(default_cluster_tol(w[:4], 4)) == pytest.approx(3 * EPS32 * math.sqrt(16))
    # capped at 20 eps · max|λ| from n = 45 (issue 33, item 4)
    assert float(default_cluster_tol(w, 100)) == pytest.approx(20 * EPS32)
    assert float(default_cluster_tol(torch.linspace(-1.0, 1.0, 5000), 5000)) == pytest.approx(
        20 * EPS32
    )
    assert float(default_cluster_tol(w, 100)) < 4e-6
    # A small version of the calibration (the full one: benchmarks/eig_tie_splits.py): every
    # split of an exact tie is inside the tolerance, in both dtypes and for zero clusters.
    splits = measure_tie_splits((3, 10, 60), (2, 5, "all"), seeds=2, batch=8)
    # ties: n = 3 (2, all), 10 (2, 5, all), 60 (2, 5, all); Gram: n = 3 (2), 10 (2, 5), 60 (2, 5)
    assert len(splits) == 2 * (8 + 5)
    worst = max(max(s.ratios) for s in splits)
    assert 0 < worst < 3, worst
    # the spread of a large tie exceeds the tolerance: why clusters are chains, not balls
    assert max(max(s.spreads) for s in splits if s.multiplicity == s.n) > 2 * worst / 3


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
