"""What ``kth_eigvalsh`` keeps for the backward pass (issue 35, item 12; issue 49, item 5).

The general path saves the factor F (the k-th eigenvector, or the weighted eigenbasis for
``"mean"``) for the backward pass and keeps a reference to A for second derivatives outside
``save_for_backward``, whose version check failed a first-order backward after an in-place
edit of A; ``torch.linalg.eigvalsh`` survives such an edit, and so does ``kth_eigvalsh`` now.
The thin path (``method="auto"`` on torch's own solver) keeps what ``torch.linalg.eigvalsh``
keeps. The saved tensors are counted with ``saved_tensors_hooks``.
"""

from __future__ import annotations

import pytest
import torch

from eigprec.eig import kth_eigvalsh

CASES = [
    ("eigenvector", "eigh", 1),
    ("eigenvector", "subset", 1),
    ("eigenvector", "inverse_iteration", 1),
    ("mean", "eigh", 1),  # eager, CPU: the cluster's columns alone (λ_k is simple here)
]


def _saved(fn) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return seen


def _symmetric(seed: int = 0, batch: int = 5, n: int = 12) -> torch.Tensor:
    X = torch.randn(batch, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return X + X.mT


@pytest.mark.parametrize(("subgradient", "method", "columns"), CASES)
def test_the_general_path_saves_the_factor_alone(subgradient, method, columns):
    A = _symmetric().requires_grad_(True)
    saved = _saved(lambda: kth_eigvalsh(A, -1, method=method, subgradient=subgradient))
    (factor,) = saved
    assert factor.shape == (5, 12, columns)
    assert factor.untyped_storage().nbytes() == 5 * 12 * columns * 8


def test_the_thin_path_saves_what_eigvalsh_saves():
    A = _symmetric(batch=2, n=6).requires_grad_(True)  # small: method="auto" runs torch
    ours = [tuple(t.shape) for t in _saved(lambda: kth_eigvalsh(A, -1))]
    theirs = [tuple(t.shape) for t in _saved(lambda: torch.linalg.eigvalsh(A)[..., -1])]
    assert ours == theirs


@pytest.mark.parametrize(("subgradient", "method", "columns"), [*CASES, ("eigenvector", "auto", 1)])
@pytest.mark.parametrize("n", [6, 40])
def test_first_derivatives_survive_an_in_place_edit_of_A(subgradient, method, columns, n):
    # Issue 49, item 5 (issue 6 of the review): A = W + Wᵀ; lam = kth(A); A.mul_(2);
    # lam.backward() raised "modified by an inplace operation", which eigvalsh does not.
    W = _symmetric(seed=1, n=n).requires_grad_(True)
    A = W + W.mT
    lam = kth_eigvalsh(A, -1, method=method, subgradient=subgradient)
    A.mul_(2)
    lam.sum().backward()
    # the gradient is that of the matrix as it was, not as it became
    W2 = W.detach().clone().requires_grad_(True)
    kth_eigvalsh(W2 + W2.mT, -1, method=method, subgradient=subgradient).sum().backward()
    torch.testing.assert_close(W.grad, W2.grad)


def test_second_derivatives_after_an_in_place_edit_are_refused_clearly():
    A = _symmetric(batch=2, n=20).requires_grad_(True)
    B = A * 1.0
    lam = kth_eigvalsh(B, -1, method="eigh")
    B.mul_(2)
    with pytest.raises(RuntimeError, match="modified in place after the call"):
        torch.autograd.grad(lam.sum(), A, create_graph=True)


def test_no_grad_saves_nothing():
    A = torch.randn(3, 6, 6)
    assert _saved(lambda: kth_eigvalsh(A, 0)) == []


def test_a_compiled_graph_keeps_the_eigenvector_alone():
    A = torch.randn(4, 6, 6, requires_grad=True)
    f = torch.compile(lambda X: kth_eigvalsh(X, -1).sum(), fullgraph=True, backend="aot_eager")
    saved = _saved(lambda: f(A))
    assert [tuple(t.shape) for t in saved] == [(4, 6, 1)]
