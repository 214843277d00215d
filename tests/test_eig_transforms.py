"""Parity of kth_eigvalsh with torch.linalg.eigvalsh under torch's transforms (issue 24, new-3).

At simple eigenvalues, in float64: double backward (the Hessian term
Σ_{j≠k} 2 (q_jᵀ E q_k)² / (λ_k − λ_j)), ``torch.func.grad``, ``vmap(grad)`` (per-sample
gradients), ``jvp`` (⟨q qᵀ, E⟩), ``jacrev`` and ``hessian`` agree with torch to 1e-10. The raw
custom op used to drop the tangent (a zero ``jvp``) and refuse the rest.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from eigprec.eig import kth_eigvalsh

METHODS = ("eigh", "subset", "inverse_iteration")
TOL = {"atol": 1e-10, "rtol": 1e-10}


def sample(n=6, seed=0, batch=()):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(*batch, n, n, generator=g, dtype=torch.float64)
    E = torch.randn(*batch, n, n, generator=g, dtype=torch.float64)
    return X, E


def ours(k, **kw):
    return lambda X: kth_eigvalsh(X + X.mT, k, **kw)


def theirs(k):
    return lambda X: torch.linalg.eigvalsh(X + X.mT)[..., k]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [0, 2, -1])
@pytest.mark.parametrize("seed", range(3))
def test_double_backward_matches_eigh(method, k, seed):
    X, E = sample(seed=seed)
    hvps = []
    for f in (ours(k, method=method), theirs(k)):
        Xr = X.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(Xr) ** 2, Xr, create_graph=True)
        (h,) = torch.autograd.grad((g * E).sum(), Xr)
        hvps.append(h)
    torch.testing.assert_close(hvps[0], hvps[1], **TOL)


def test_hessian_term_is_the_textbook_formula():
    # d²/dt² λ_k(S + tE) = Σ_{j≠k} 2 (q_jᵀ E q_k)² / (λ_k − λ_j), E symmetric.
    X, E = sample(n=7, seed=5)
    S, E = X + X.mT, E + E.mT
    k = 3
    w, V = torch.linalg.eigh(S)
    c = V.mT @ E @ V[:, k]
    others = torch.arange(7) != k
    expected = (2 * c[others] ** 2 / (w[k] - w[others])).sum()
    Sr = S.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(kth_eigvalsh(Sr, k), Sr, create_graph=True)
    (h,) = torch.autograd.grad((g * E).sum(), Sr)
    torch.testing.assert_close((h * E).sum(), expected, **TOL)


@pytest.mark.parametrize("method", METHODS)
def test_func_grad_vmap_grad_jacrev_hessian_match_eigh(method):
    X, _ = sample(seed=1)
    Xs, _ = sample(seed=2, batch=(5,))
    f, t = ours(-1, method=method), theirs(-1)
    torch.testing.assert_close(torch.func.grad(f)(X), torch.func.grad(t)(X), **TOL)
    # per-sample gradients
    per_sample = torch.func.vmap(torch.func.grad(f))(Xs)
    torch.testing.assert_close(per_sample, torch.func.vmap(torch.func.grad(t))(Xs), **TOL)
    torch.testing.assert_close(torch.func.jacrev(f)(X), torch.func.jacrev(t)(X), **TOL)
    torch.testing.assert_close(torch.func.hessian(f)(X), torch.func.hessian(t)(X), **TOL)
    # grad of grad (reverse over reverse)
    gg = torch.func.grad(lambda Y: (torch.func.grad(f)(Y) ** 2).sum())(X)
    gt = torch.func.grad(lambda Y: (torch.func.grad(t)(Y) ** 2).sum())(X)
    torch.testing.assert_close(gg, gt, **TOL)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", ["eigenvector", "mean"])
def test_jvp_is_the_directional_derivative(method, mode):
    if mode == "mean" and method != "eigh":
        pytest.skip('"mean" needs method="eigh"')
    X, E = sample(seed=3, batch=(4,))
    f, t = ours(2, method=method, subgradient=mode), theirs(2)
    val, tan = torch.func.jvp(f, (X,), (E,))
    val_t, tan_t = torch.func.jvp(t, (X,), (E,))
    torch.testing.assert_close(val, val_t, **TOL)
    torch.testing.assert_close(tan, tan_t, **TOL)
    assert float(tan.abs().min()) > 1e-3  # not the zero tangent the raw op returned
    # the same through torch.autograd.forward_ad, and jacfwd
    with fwAD.dual_level():
        out = f(fwAD.make_dual(X, E))
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent, tan_t, **TOL)
    torch.testing.assert_close(torch.func.jacfwd(f)(X[0]), torch.func.jacfwd(t)(X[0]), **TOL)


def test_at_a_tie_mean_mode_differentiates_the_cluster_average():
    # The documented choice at a tie: the backward returns G = U Uᵀ / r, the gradient of the
    # cluster's average eigenvalue, and its derivative is that average's (smooth) second
    # derivative; jvp returns ⟨G, E⟩. Checked against the average of torch's eigenvalues of
    # a matrix whose r = 2 copies are tied.
    g = torch.Generator().manual_seed(7)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    S = (Q * torch.tensor([-1.0, 0.5, 0.5, 2.0, 3.0], dtype=torch.float64)) @ Q.T
    E = torch.randn(5, 5, generator=g, dtype=torch.float64)
    E = E + E.mT
    Sr = S.clone().requires_grad_(True)
    (gk,) = torch.autograd.grad(kth_eigvalsh(Sr, 1, subgradient="mean"), Sr, create_graph=True)
    (hk,) = torch.autograd.grad((gk * E).sum(), Sr)

    def average(M):
        w = torch.linalg.eigvalsh(M)
        return (w[1] + w[2]) / 2

    # the cluster average is smooth: its Hessian along E by central differences of the
    # gradient (torch.linalg.eigh's own double backward is infinite at the tie)
    h = 1e-5
    ga = [torch.func.grad(average)(S + s * h * E) for s in (1, -1)]
    fd = (ga[0] - ga[1]) / (2 * h)
    torch.testing.assert_close(hk, (fd + fd.mT) / 2, atol=1e-6, rtol=0)
    _, tan = torch.func.jvp(lambda M: kth_eigvalsh(M, 1, subgradient="mean"), (S,), (E,))
    _, tan_avg = torch.func.jvp(average, (S,), (E,))
    torch.testing.assert_close(tan, tan_avg, **TOL)


def test_at_a_tie_eigenvector_mode_second_derivative_blows_up_like_eigh():
    # The other documented choice: "eigenvector" differentiates q qᵀ, whose derivative has
    # 1 / (λ_k − λ_j) for the tied j — huge or infinite, like torch.linalg.eigh's.
    g = torch.Generator().manual_seed(1)
    Q, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    S = (Q * torch.tensor([0.0, 1.0, 1.0, 2.0], dtype=torch.float64)) @ Q.T
    E = torch.randn(4, 4, generator=g, dtype=torch.float64)
    E = E + E.mT
    for f in (lambda M: kth_eigvalsh(M, 1, method="eigh"), lambda M: torch.linalg.eigh(M)[0][1]):
        Sr = S.clone().requires_grad_(True)
        (gk,) = torch.autograd.grad(f(Sr), Sr, create_graph=True)
        (h,) = torch.autograd.grad((gk * E).sum(), Sr)
        assert not torch.isfinite(h).all() or float(h.abs().max()) > 1e8


def test_compile_dynamic_fullgraph_with_k_as_an_argument():
    # Issue 24: _validate read hasattr(SymInt, "__index__") (False) and refused k.
    torch._dynamo.reset()

    @torch.compile(dynamic=True, fullgraph=True, backend="eager")
    def f(X, k):
        return kth_eigvalsh(X, k, method="eigh")

    X, _ = sample(n=5, seed=4, batch=(3,))
    S = X + X.mT
    for k in (1, 3):
        torch.testing.assert_close(f(S, k), torch.linalg.eigvalsh(S)[..., k], **TOL)


def test_compile_fullgraph_mean_mode_with_default_and_relative_tolerance():
    # The op's float argument encodes the default tolerance as NaN and a relative one as a
    # negative number: both must survive tracing, forward and backward.
    torch._dynamo.reset()
    X, _ = sample(n=5, seed=6, batch=(3,))
    for kw in ({}, {"cluster_rtol": 1e-3}):

        @torch.compile(fullgraph=True, backend="eager")
        def f(Y, kw=kw):
            return kth_eigvalsh(Y + Y.mT, 2, subgradient="mean", **kw).sum()

        Xc = X.clone().requires_grad_(True)
        f(Xc).backward()
        Xe = X.clone().requires_grad_(True)
        kth_eigvalsh(Xe + Xe.mT, 2, subgradient="mean", **kw).sum().backward()
        torch.testing.assert_close(Xc.grad, Xe.grad, **TOL)
