"""The k-th eigenvalue of symmetric matrices with a Clarke subgradient where eigenvalues tie.

λ_k(A) is differentiable wherever it is a simple eigenvalue, with gradient q qᵀ (q its unit
eigenvector). Where r eigenvalues coincide it is not, and every U W Uᵀ with W ⪰ 0, tr W = 1
(U an orthonormal basis of the tied eigenspace) is a Clarke subgradient. The backward below
returns either the solver's q qᵀ (``"eigenvector"``) or the minimum-norm element U Uᵀ / r
(``"mean"``), which does not depend on the basis the solver picked inside the tie.

This file needs only torch: copy it alone into a project, or run it to see an example.

Example:
    >>> import torch
    >>> A = torch.diag(torch.tensor([1.0, 3.0, 3.0], dtype=torch.float64)).requires_grad_()
    >>> kth_eigvalsh(A, -1, subgradient="mean").backward()
    >>> A.grad.diagonal().round(decimals=12).tolist()  # the tied directions share it
    [0.0, 0.5, 0.5]
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["KthEigenvalue", "clarke_factor", "clarke_gradient", "default_tolerance", "kth_eigvalsh"]

#: Eigenvalues closer than ``min(3·√max(n, 16), 20) · eps · max|λ|`` form one cluster.
TOL_FACTOR, TOL_CAP = 3.0, 20.0


def default_tolerance(w: Tensor) -> Tensor:
    """``(...)`` absolute cluster tolerances for eigenvalues ``w`` of shape ``(..., n)``."""
    n = w.shape[-1]
    scale = min(TOL_FACTOR * math.sqrt(max(n, 16)), TOL_CAP) * torch.finfo(w.dtype).eps
    return scale * w.abs().amax(dim=-1)


def cluster_weights(w: Tensor, k: int, tol: Tensor | float) -> Tensor:
    """``(..., n)`` weights: 1/r on the r eigenvalues of λ_k's cluster, 0 elsewhere.

    A cluster is a chain of consecutive (ascending) eigenvalues, each less than ``tol`` above
    the previous one: rounding spreads the copies of a large tie over several times the gap
    between neighbouring copies, so a ball around λ_k would split it. A mask over all
    eigenvalues keeps shapes static and never asks the host how large a cluster is.
    """
    breaks = (w[..., 1:] - w[..., :-1]) > tol
    run = torch.nn.functional.pad(breaks.cumsum(-1), (1, 0))
    inside = run == run[..., k : k + 1]
    return inside.to(w.dtype) / inside.sum(dim=-1, keepdim=True).to(w.dtype)


def clarke_factor(w: Tensor, V: Tensor, k: int, subgradient: str, tol: Any = None) -> Tensor:
    """F with F Fᵀ the chosen element of ∂λ_k: ``(..., n, 1)`` or ``(..., n, n)``.

    Args:
        w: ``(..., n)`` ascending eigenvalues; V: their ``(..., n, n)`` eigenvectors.
        k: index of the eigenvalue (non-negative).
        subgradient: ``"eigenvector"`` (q qᵀ) or ``"mean"`` (U Uᵀ / r).
        tol: cluster tolerance for ``"mean"``, absolute; None: :func:`default_tolerance`.
    """
    if subgradient == "eigenvector":
        return V[..., :, k : k + 1]
    tol = default_tolerance(w)[..., None] if tol is None else tol
    # [show:mean]
    weights = cluster_weights(w, k, tol)  # 1/r inside λ_k's cluster, 0 outside
    return V * weights.sqrt()[..., None, :]  # F Fᵀ = V diag(weights) Vᵀ = U Uᵀ / r
    # [/show:mean]


def clarke_gradient(F: Tensor, grad_lam: Tensor) -> Tensor:
    """``grad_lam · F Fᵀ`` per batch entry: the backward of λ_k for the element F Fᵀ."""
    # A batch entry whose incoming gradient is 0 contributes 0, even where its F is NaN (a
    # bad matrix masked out of the loss), or a parameter shared across the batch turns NaN.
    F = torch.where((grad_lam == 0)[..., None, None], F.new_zeros(()), F)
    # [show:backward]
    if F.shape[-1] == 1:
        # (grad · q) qᵀ as a broadcast product: exact, no GEMM that TF32 could round, and
        # one pass over the (..., n, n) result.
        return (F * grad_lam[..., None, None]) * F.mT
    if F.dtype == torch.float32:
        # U Uᵀ / r through a float64 GEMM, which never runs in TF32.
        return (F.double() @ F.double().mT).to(F.dtype) * grad_lam[..., None, None]
    return (F @ F.mT) * grad_lam[..., None, None]
    # [/show:backward]


class KthEigenvalue(torch.autograd.Function):
    """(A, k, subgradient, tol) ↦ λ_k(A), with the Clarke backward of :func:`clarke_gradient`."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, subgradient: str, tol: Any) -> Tensor:
        w, V = torch.linalg.eigh(A)
        ctx.save_for_backward(clarke_factor(w, V, k, subgradient, tol))
        return w[..., k].clone()

    @staticmethod
    def backward(ctx: Any, grad_lam: Tensor) -> tuple[Tensor, None, None, None]:
        (F,) = ctx.saved_tensors
        return clarke_gradient(F, grad_lam), None, None, None


def kth_eigvalsh(
    A: Tensor, k: int, subgradient: str = "eigenvector", cluster_tol: float | None = None
) -> Tensor:
    """The k-th smallest eigenvalue of each symmetric matrix in ``A``, differentiably.

    Args:
        A: ``(..., n, n)`` real symmetric float32/float64 tensor (its lower triangle is read).
        k: index into the ascending eigenvalues; negative counts from the largest.
        subgradient: ``"eigenvector"`` or ``"mean"`` (see the module's docstring).
        cluster_tol: largest gap inside a cluster for ``"mean"``; None: the default.

    Returns:
        ``(...)`` tensor of the k-th eigenvalues.

    Raises:
        ValueError: if ``A`` is not a batch of square matrices, ``k`` is out of range or
            ``subgradient`` is unknown.
    """
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be (..., n, n), got shape {tuple(A.shape)}")
    n = A.shape[-1]
    if not -n <= k < n:
        raise ValueError(f"k={k} is out of range for n={n}")
    if subgradient not in ("eigenvector", "mean"):
        raise ValueError(f"subgradient must be 'eigenvector' or 'mean', got {subgradient!r}")
    return KthEigenvalue.apply(A, k % n, subgradient, cluster_tol)


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    A = (Q * torch.tensor([0.0, 1.0, 2.0, 2.0, 2.0], dtype=torch.float64)) @ Q.T
    for rule in ("eigenvector", "mean"):
        X = A.clone().requires_grad_()
        kth_eigvalsh(X, -1, subgradient=rule).backward()
        print(f"{rule:>11}: gradient norm {X.grad.norm():.3f} (minimum-norm: {1 / 3**0.5:.3f})")
