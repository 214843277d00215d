"""The default cluster tolerance of subgradient="mean": backed by the solver's measured error.

Issue 15, correction 4: the former default 8·eps·n·max|λ| was ≈ 9.5e-5·max|λ| at n = 100 in
float32, so "mean" averaged eigenvectors across true gaps of 3e-5 … 8e-5, where λ_k is
differentiable, and returned an element ≈ 0.7 away from the gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

from eigprec.eig import default_cluster_tol, kth_eigvalsh

EPS32 = torch.finfo(torch.float32).eps


def spectrum_with_gap(n, k, gap, seed):
    """float64 Q diag(λ) Qᵀ with max|λ| = 1 and the neighbours of λ_k exactly ``gap`` away."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    lam[k - 1], lam[k + 1] = lam[k] - gap, lam[k] + gap
    return (Q * lam) @ Q.T, Q[:, k]


@pytest.mark.parametrize("gap", [3e-5, 5e-5, 8e-5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_does_not_fire_at_resolved_gaps_n100_float32(gap, seed):
    n, k = 100, 50
    A64, q = spectrum_with_gap(n, k, gap, seed)
    A = A64.float()
    G_mean = torch.autograd.grad(kth_eigvalsh(A.requires_grad_(True), k, subgradient="mean"), A)[0]
    A = A.detach()
    G_vec = torch.autograd.grad(kth_eigvalsh(A.requires_grad_(True), k, method="eigh"), A)[0]
    # "mean" used a cluster of one: exactly the eigenvector element.
    torch.testing.assert_close(G_mean, G_vec, atol=0, rtol=0)
    # ... which is near the true gradient q qᵀ of the float64 matrix (float32 rounding of the
    # input moves the eigenvector by ≈ eps·‖A‖/gap; 0.7 was the error when "mean" fired).
    true = (q[:, None] * q[None, :]).float()
    assert float(torch.linalg.matrix_norm(G_mean - true)) < 0.1


def test_default_tolerance_is_above_the_measured_solver_error_and_below_those_gaps():
    # The solver's own eigenvalue error on float32 input (reference: the same float32 matrix
    # in float64) must stay inside the default tolerance, or an exact tie would be split.
    g = torch.Generator().manual_seed(0)
    for n in (10, 30, 100):
        B = torch.randn(100, n, n, generator=g, dtype=torch.float64)
        A = ((B + B.mT) / 2).float()
        w32 = torch.linalg.eigvalsh(A).double()
        ref = torch.linalg.eigvalsh(A.double())
        err = (w32 - ref).abs().amax(-1)
        tol = default_cluster_tol(w32.float(), n).double()
        assert bool((err < tol).all()), n
        # and the tolerance is the documented √n scaling, a few times the error
        assert float((tol / err).min()) > 1.5
    w = torch.linspace(-1.0, 1.0, 100)
    assert float(default_cluster_tol(w, 100)) == pytest.approx(8 * EPS32 * math.sqrt(100))
    assert float(default_cluster_tol(w, 100)) < 3e-5 / 2


def test_exact_ties_still_form_one_cluster_n100_float32():
    # Copies of an exactly repeated eigenvalue (multiplicity 3), rounded to float32: "mean"
    # must average all three (its trace of U Uᵀ/r over the cluster is 1, rank 3).
    g = torch.Generator().manual_seed(4)
    n, k = 100, 40
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
    lam[k : k + 3] = lam[k]
    A = ((Q * lam) @ Q.T).float().requires_grad_(True)
    (G,) = torch.autograd.grad(kth_eigvalsh(A, k + 1, subgradient="mean"), A)
    U = Q[:, k : k + 3]
    torch.testing.assert_close(G.double(), U @ U.T / 3, atol=2e-3, rtol=0)
