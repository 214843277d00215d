"""eigprec.eig.ops.isolated: whether λ_k is a cluster of one in every batch entry.

A batch of more than 128 eigenvalues, or one with a given tolerance, is decided in NumPy (issue
49: the torch operators it replaced cost 61 µs beside a 660-µs eigh + backward at 64 × 8, most
of "mean"'s 1.19×); the decisions must be the ones those operators gave, in the eigenvalues'
own precision.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eigprec.eig.core import tolerance_scale
from eigprec.eig.ops import isolated


def _by_torch_operators(w: torch.Tensor, k: int, cluster_tol: float) -> bool:
    """The rule as the torch operators that the NumPy step replaced computed it (the reference)."""
    n = w.shape[-1]
    if math.isnan(cluster_tol):
        tol = tolerance_scale(w, refined=False) * w.abs().amax(dim=-1, keepdim=True)
    elif cluster_tol < 0:
        tol = -cluster_tol * w.abs().amax(dim=-1, keepdim=True)
    else:
        tol = cluster_tol
    lo, hi = max(k - 1, 0), min(k + 2, n)
    near = w[..., lo:hi]
    return bool((near[..., 1:] - near[..., :-1] > tol).all()) if hi - lo > 1 else True


@st.composite
def spectra(draw):
    """Sorted spectra with gaps of a few eps·max|λ| next to some k: the decision's edge."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    n = draw(st.integers(2, 12))
    batch = draw(st.integers(1, 40))
    k = draw(st.integers(0, n - 1))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(batch, n, generator=g, dtype=torch.float64).sort(dim=-1).values
    eps = torch.finfo(dtype).eps
    units = draw(st.lists(st.floats(0, 40), min_size=1, max_size=3))
    for j, u in enumerate(units):  # plant gaps of u·eps·max|λ| beside k in some rows
        rows = slice(j, None, len(units))
        if k + 1 < n:
            scale = w[rows].abs().amax(dim=-1)
            w[rows, k + 1] = w[rows, k] + u * eps * scale
    w = w.sort(dim=-1).values.to(dtype)
    tol = draw(st.sampled_from([math.nan, 0.0, -5 * eps, -30 * eps, 1e-3]))
    return w, k, tol


@settings(max_examples=300, deadline=None)
@given(spectra())
def test_decisions_past_128_eigenvalues_are_the_torch_operators(case):
    w, k, tol = case
    if w.numel() <= 128:  # the small-batch rule (Python floats) is not this path's
        w = torch.cat([w] * (129 // w.numel() + 1))
    assert isolated(w, k, tol) == _by_torch_operators(w, k, tol)


def test_nan_eigenvalues_are_not_isolated():
    w = torch.linspace(0.0, 1.0, 8).repeat(20, 1)
    w[3, 4] = math.nan
    assert not isolated(w, 4, math.nan)
    assert not isolated(w, 0, math.nan)  # the default tolerance of a row with NaN is NaN
    assert isolated(w, 0, 1e-3)  # a given one is not, and the NaN is not beside λ_0
    assert not isolated(w, 4, 1e-3)


@settings(max_examples=300, deadline=None)
@given(spectra())
def test_small_float64_batches_in_python_floats_decide_as_the_operators(case):
    # Up to 128 eigenvalues the default rule runs on Python floats, max|λ| read at the ends
    # of each sorted row; in float64 that is the operators' own arithmetic, so the same
    # decisions (in float32 the Python floats are the more precise: no claim of equality).
    w, k, _ = case
    w = w.double()
    for rows in (w, w[0]):  # a batch, and one matrix's eigenvalues
        if rows.numel() <= 128:
            assert isolated(rows, k, math.nan) == _by_torch_operators(rows, k, math.nan)
