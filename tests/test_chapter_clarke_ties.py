"""eigprec_book.chapters.clarke.ties: the minibatch counterexample, the directional element and
λ_max minimisation that reaches ties."""

import math

import pytest
import torch
from eigprec_book.chapters.clarke import ties


def test_minibatch_counterexample_values():
    r = ties.minibatch_counterexample()
    # L(θ) = 2 relu(θ)² + 2: C¹ with L'(0) = 0, which both one-sided differences approach
    assert r["loss_at_0"] == 2.0
    assert abs(r["fd_right"]) < 1e-5 and r["fd_left"] == 0.0
    # the solver's coordinate eigenvectors make autograd add 2·(0 − 1)·0 + 2·(0 + 1)·1 = 2
    assert r["eigvalsh"] == 2.0 and r["eigenvector"] == 2.0
    assert r["mean"] == 0.0  # each term's mean element is 1/2: (−2 + 2)/2
    assert r["directional_plus"] == 0.0 and r["directional_minus"] == 0.0


def test_directional_grad_picks_the_branch_along_the_direction():
    def f(th):
        z = torch.zeros_like(th)
        return torch.diag(torch.stack([th, z]))[None]

    t = torch.zeros((), dtype=torch.float64)
    up = ties.directional_lambda_max_grad(f, t, lambda lam: lam.sum(), torch.ones(()))
    down = ties.directional_lambda_max_grad(f, t, lambda lam: lam.sum(), -torch.ones(()))
    assert float(up) == 1.0 and float(down) == 0.0  # relu'(0+) = 1, relu'(0−) = 0
    with pytest.raises(ValueError, match="shaped like theta"):
        ties.directional_lambda_max_grad(f, t, lambda lam: lam.sum(), torch.ones(2))


def test_directional_grad_equals_the_gradient_at_a_simple_eigenvalue():
    A0, As = ties.affine_family(n=5, params=3, seeds=(1,))
    x = torch.randn(3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def mats(th):
        return A0 + torch.einsum("i,sijk->sjk", th, As)

    d = torch.ones(3, dtype=torch.float64)
    got = ties.directional_lambda_max_grad(mats, x, lambda lam: (lam**2).sum(), d)
    xr = x.clone().requires_grad_(True)
    (torch.linalg.eigvalsh(mats(xr))[..., -1] ** 2).sum().backward()
    torch.testing.assert_close(got, xr.grad, rtol=0, atol=1e-12)


def test_minimisation_is_attracted_to_a_double_top_eigenvalue():
    A0, As = ties.affine_family(n=10, params=8, seeds=(0, 1, 2))
    r = ties.minimise_lambda_max(A0, As, steps=300)
    w = r["eigenvalues"]
    gap0, gap = w[0, :, -1] - w[0, :, -2], w[-1, :, -1] - w[-1, :, -2]
    assert (gap < gap0 / 50).all() and (gap < 5e-3).all()
    assert (r["final"] < w[0, :, -1] - 0.1).all()
    assert r["seconds"] > 0


def test_minimise_refuses_bad_modes():
    A0, As = ties.affine_family(n=4, params=2)
    with pytest.raises(ValueError, match="mode"):
        ties.minimise_lambda_max(A0, As, mode="median")
    with pytest.raises(ValueError, match="cluster_tol"):
        ties.minimise_lambda_max(A0, As, mode="smoothed", cluster_tol=1e-2)


def test_tie_training_comparison_rows():
    rows = ties.tie_training_comparison(seeds=(0, 1), n=8, params=5, steps=60)
    assert len(rows) == 8
    for seed in (0, 1):
        mine = [r for r in rows if r["seed"] == seed]
        assert min(r["excess"] for r in mine) == 0.0
        assert all(r["excess"] >= 0 and math.isfinite(r["final"]) for r in mine)
        by = {r["variant"]: r for r in mine}
        # at no iterate were two eigenvalues within the default tolerance: same trajectory
        assert by["eigenvector"]["final"] == by["mean"]["final"]
