"""``method="inverse_iteration"`` at the top of the float range (issue 33, item 5).

The symmetric matrix was formed as T + Tᵀ − diag(T), which doubles the diagonal before
subtracting it: an entry above half of float32's largest value overflowed to inf, and the
gradient came back NaN while the value was finite.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.eig import kth_eigvalsh

F32_MAX = torch.finfo(torch.float32).max


def _grad(A: torch.Tensor, k: int, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    X = A.clone().requires_grad_(True)
    lam = kth_eigvalsh(X, k, **kw)
    lam.sum().backward()
    assert X.grad is not None
    return lam.detach(), X.grad


def test_diagonal_near_float32_max_gives_the_eigenvector():
    A = torch.diag(torch.tensor([3e38, -3e38, 1.5e38]))
    for method in ("inverse_iteration", "eigh", "subset"):
        lam, G = _grad(A, 2, method=method)
        assert float(lam) == float(torch.tensor(3e38)), method
        e1 = torch.zeros(3, 3)
        e1[0, 0] = 1.0
        torch.testing.assert_close(G, e1, msg=method)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    top=st.floats(0.05, 1.0),
    k_frac=st.floats(0, 0.999),
    lower=st.booleans(),
)
def test_gradient_finite_wherever_the_value_is(n, seed, top, k_frac, lower):
    # Entries scaled up to float32's largest value; the eigenvalues then reach up to n times
    # it and may overflow (an infinite value is the solver's answer, not checked here).
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(2, n, n, generator=g, dtype=torch.float64)
    S = B + B.mT
    S = S / S.abs().amax((-2, -1), keepdim=True) * (top * F32_MAX)
    A = S.float()
    k = int(k_frac * n)
    lam, G = _grad(A, k, method="inverse_iteration", lower=lower)
    finite = torch.isfinite(lam)
    assert torch.isfinite(G[finite]).all()
    # Where the value is finite and λ_k well separated, G is the eigenvector's q qᵀ.
    w, V = torch.linalg.eigh(S / F32_MAX)
    gap = torch.full((2,), float("inf"), dtype=torch.float64)
    if n > 1:
        d = (w[:, 1:] - w[:, :-1]).abs()
        left = d[:, k - 1] if k > 0 else gap
        right = d[:, k] if k < n - 1 else gap
        gap = torch.minimum(left, right) / w.abs().amax(-1)
    q = V[..., k]
    want = (q[..., :, None] * q[..., None, :]).float()
    keep = finite & (gap > 1e-2)
    torch.testing.assert_close(G[keep], want[keep], atol=1e-4, rtol=0)


def test_values_come_from_the_solver_of_the_vectors_with_or_without_a_gradient():
    # Issue 49, item 5: inverse iteration and no-grad method="eigh" took their values from
    # torch's eigenvalue-only solver (float32, n = 300 below: 1.7e-6 · max|λ| at k = n - 6,
    # against 1.4e-7 for eigh's). Now eigh's values are eigh's, and inverse iteration's are
    # its vector's Rayleigh quotient (float64); neither changes with requires_grad.
    g = torch.Generator().manual_seed(300)
    B = torch.randn(3, 300, 300, generator=g)
    A = (B + B.mT) / 2
    w64 = torch.linalg.eigvalsh(A.double())
    top = w64.abs().amax(-1)
    k = -6

    def error(lam: torch.Tensor) -> float:
        return float(((lam.double() - w64[..., k]).abs() / top).max())

    only = error(torch.linalg.eigvalsh(A)[..., k])
    for method in ("eigh", "inverse_iteration"):
        with torch.no_grad():
            value = kth_eigvalsh(A, k, method=method)
        X = A.clone().requires_grad_(True)
        with_grad = kth_eigvalsh(X, k, method=method).detach()
        torch.testing.assert_close(value, with_grad, rtol=0, atol=0)
        assert error(value) < only / 4, (method, error(value), only)
