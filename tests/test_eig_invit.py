"""Tests for eigprec.eig_invit: inverse-iteration gradients match the exact ones given a gap."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.eig import kth_eigvalsh
from eigprec.eig_invit import kth_eigvalsh_inverse_iteration


def _grads(A, k, fn, **kw):
    X = A.clone().requires_grad_(True)
    fn(X, k, **kw).sum().backward()
    return X.grad


def _relative_gap(A, k):
    w = torch.linalg.eigvalsh(A)
    n = w.shape[-1]
    k = k % n
    gaps = []
    if k > 0:
        gaps.append(w[..., k] - w[..., k - 1])
    if k < n - 1:
        gaps.append(w[..., k + 1] - w[..., k])
    return torch.stack(gaps).amin(0) / w.abs().amax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [0, 5, -1])
@pytest.mark.parametrize("lower", [True, False])
def test_gradient_matches_exact_where_gap_allows(dtype, k, lower):
    g = torch.Generator().manual_seed(1)
    B = torch.randn(200, 12, 12, generator=g, dtype=torch.float64)
    A = ((B + B.mT) / 2).to(dtype)
    keep = _relative_gap(A.double(), k) >= 1e-3
    assert keep.sum() > 150
    exact = _grads(A, k, kth_eigvalsh, lower=lower)
    approx = _grads(A, k, kth_eigvalsh_inverse_iteration, lower=lower)
    assert (exact[keep] - approx[keep]).abs().max() <= 1e-5
    torch.testing.assert_close(
        kth_eigvalsh_inverse_iteration(A, k, lower=lower), kth_eigvalsh(A, k, lower=lower)
    )


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 2**31 - 1), k_frac=st.floats(0, 0.999))
def test_property_gradient_is_unit_trace_psd_rank_one(n, seed, k_frac):
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(3, n, n, generator=g, dtype=torch.float64)
    A = (B + B.mT) / 2
    G = _grads(A, int(k_frac * n), kth_eigvalsh_inverse_iteration)
    torch.testing.assert_close(G.diagonal(dim1=-2, dim2=-1).sum(-1), torch.ones(3, dtype=A.dtype))
    assert torch.linalg.matrix_rank(G).max() <= 1


def test_nan_entry_isolated_and_steps_validated():
    g = torch.Generator().manual_seed(0)
    B = torch.randn(3, 5, 5, generator=g, dtype=torch.float64)
    A = (B + B.mT) / 2
    A[1, 2, 0] = float("nan")
    X = A.clone().requires_grad_(True)
    lam = kth_eigvalsh_inverse_iteration(X, 2)
    lam.sum().backward()
    assert torch.isnan(lam[1]) and torch.isnan(X.grad[1]).all()
    assert torch.isfinite(lam[[0, 2]]).all() and torch.isfinite(X.grad[[0, 2]]).all()
    with pytest.raises(ValueError, match="steps"):
        kth_eigvalsh_inverse_iteration(A, 0, steps=0)
    with pytest.raises(IndexError, match="n=5"):
        kth_eigvalsh_inverse_iteration(A, 5)


def test_compiles_without_graph_breaks():
    g = torch.Generator().manual_seed(0)
    B = torch.randn(4, 6, 6, generator=g, dtype=torch.float64)
    A = ((B + B.mT) / 2).requires_grad_(True)
    f = torch.compile(
        lambda X: kth_eigvalsh_inverse_iteration(X, -1).sum(), fullgraph=True, backend="aot_eager"
    )
    f(A).backward()
    torch.testing.assert_close(A.grad, _grads(A.detach(), -1, kth_eigvalsh), atol=1e-8, rtol=0)


def test_exactly_singular_shift_is_handled():
    # Found by hypothesis: here λ_0 + 2·eps·‖A‖_F made a pivot of A − σI exactly zero.
    g = torch.Generator().manual_seed(0)
    B = torch.randn(3, 3, 3, generator=g, dtype=torch.float64)
    A = (B + B.mT) / 2
    G = _grads(A, 0, kth_eigvalsh_inverse_iteration)
    assert torch.isfinite(G).all()
    torch.testing.assert_close(G, _grads(A, 0, kth_eigvalsh), atol=1e-8, rtol=0)
