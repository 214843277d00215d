"""What ``kth_eigvalsh`` keeps for the backward pass (issue 35, item 12).

The module docstring said it keeps only the k-th eigenvector; eager autograd also keeps A
(by reference, for second derivatives). The saved tensors are counted here with
``saved_tensors_hooks`` and the docstring now says what they are.
"""

from __future__ import annotations

import pytest
import torch

import eigprec.eig
from eigprec.eig import kth_eigvalsh


def _saved(fn) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return seen


@pytest.mark.parametrize(
    ("subgradient", "method", "columns"),
    [
        ("eigenvector", "eigh", 1),
        ("eigenvector", "subset", 1),
        ("eigenvector", "inverse_iteration", 1),
        ("mean", "eigh", 12),
    ],
)
def test_eager_autograd_keeps_a_reference_to_A_and_the_factor(subgradient, method, columns):
    X = torch.randn(5, 12, 12, dtype=torch.float64)
    A = (X + X.mT).requires_grad_(True)
    saved = _saved(lambda: kth_eigvalsh(A, -1, method=method, subgradient=subgradient))
    assert len(saved) == 2
    by_ref, factor = saved
    # A itself, not a copy: no new memory where the caller holds A anyway.
    assert by_ref.untyped_storage().data_ptr() == A.untyped_storage().data_ptr()
    assert factor.shape == (5, 12, columns)
    assert factor.untyped_storage().nbytes() == 5 * 12 * columns * 8
    assert "reference to ``A``" in (eigprec.eig.kth.__doc__ or "")


def test_no_grad_saves_nothing():
    A = torch.randn(3, 6, 6)
    assert _saved(lambda: kth_eigvalsh(A, 0)) == []


def test_a_compiled_graph_keeps_the_eigenvector_alone():
    A = torch.randn(4, 6, 6, requires_grad=True)
    f = torch.compile(lambda X: kth_eigvalsh(X, -1).sum(), fullgraph=True, backend="aot_eager")
    saved = _saved(lambda: f(A))
    assert [tuple(t.shape) for t in saved] == [(4, 6, 1)]
