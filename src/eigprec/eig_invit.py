"""Experimental: λ_k with its gradient from batched shifted inverse iteration.

``kth_eigvalsh`` with gradient asks the solver for *all* eigenvectors and keeps one. On a GPU
the eigenvector pass is what makes forward+backward tens of times slower than eigenvalues
alone. Here the eigenvalues come from the eigenvalue-only solver and the one eigenvector the
backward pass needs from a few steps of inverse iteration with the shift just beside λ_k:
one batched LU factorisation (``check_errors=False``: no host synchronisation) and
``steps`` triangular solves.

Trade-off: inverse iteration converges at rate |λ_k − σ| / min_{j≠k} |λ_j − σ| per step, so the
eigenvector — and the gradient — is accurate only where λ_k is separated from its neighbours
by much more than the shift offset (a few ulps of ‖A‖). At (near-)ties it returns *some* unit
vector of the (near-)eigenspace — still a Clarke subgradient at an exact tie, but not the
``"mean"`` element. ``tests/test_eig_invit.py`` checks the gradient against the exact one to
1e-5 where the relative gap is at least 1e-3.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from eigprec.eig import kth_eigvalsh

__all__ = ["kth_eigvalsh_inverse_iteration"]


def _symmetric_from_triangle(A: Tensor, lower: bool) -> Tensor:
    T = A.tril() if lower else A.triu()
    return T + T.mT - torch.diag_embed(T.diagonal(dim1=-2, dim2=-1))


def kth_eigvalsh_inverse_iteration(
    A: Tensor, k: int, *, lower: bool = True, backend: str = "auto", steps: int = 3
) -> Tensor:
    """λ_k of each matrix, differentiable, with the eigenvector from inverse iteration.

    The value is ``kth_eigvalsh(A, k)`` (eigenvalues only). The gradient is q qᵀ · grad with q
    from ``steps`` steps of inverse iteration on A − σI, σ = λ_k + 2·eps·‖A‖_F, attached
    by a small autograd function whose value is λ̂ and whose gradient is q qᵀ (an Inf in the
    triangle that is not read leaves both finite).

    Args:
        A: ``(..., n, n)`` real symmetric float32/float64 tensor (one triangle read).
        k: eigenvalue index, negative allowed.
        lower: read the lower triangle (else the upper).
        backend: eigenvalue backend, as for :func:`eigprec.kth_eigvalsh`.
        steps: inverse-iteration steps (≥ 1).

    Returns:
        ``(...)`` tensor of k-th eigenvalues (NaN for entries holding NaN/Inf).

    Raises:
        ValueError: ``steps < 1``, and everything :func:`eigprec.kth_eigvalsh` raises.

    Example:
        >>> A = torch.diag(torch.tensor([1.0, 2.0, 4.0])).requires_grad_(True)
        >>> kth_eigvalsh_inverse_iteration(A, -1).backward()
        >>> A.grad.diagonal().round(decimals=6)
        tensor([0., 0., 1.])
    """
    if steps < 1:
        raise ValueError(f"kth_eigvalsh_inverse_iteration: steps must be >= 1, got {steps}")
    lam = kth_eigvalsh(A.detach(), k, lower=lower, backend=backend)  # validates A and k
    if not (torch.is_grad_enabled() and A.requires_grad):
        return lam
    with torch.no_grad():
        S = _symmetric_from_triangle(A.detach(), lower)
        n = S.shape[-1]
        eps = torch.finfo(S.dtype).eps
        # ‖A‖_F ≥ ‖A‖₂ bounds the eigenvalues' rounding error (a few eps·‖A‖₂) from above: a
        # shift that far beside λ_k keeps A − σI from being exactly singular in floating point
        # while the eigenvector of λ_k still gains a factor ~gap / (eps·‖A‖_F) per solve.
        scale = torch.linalg.matrix_norm(S).clamp_min(torch.finfo(S.dtype).tiny)
        sigma = lam + 2 * eps * scale
        M = S - sigma[..., None, None] * torch.eye(n, dtype=S.dtype, device=S.device)
        # A fixed, generic start vector: not orthogonal to any particular eigenvector.
        x = torch.linspace(1.0, 2.0, n, dtype=S.dtype, device=S.device).sqrt()
        x = x.expand(*S.shape[:-1]).unsqueeze(-1)
        LU, pivots, _ = torch.linalg.lu_factor_ex(M, check_errors=False)
        # The shift can still land so that a pivot is exactly zero; as LAPACK's inverse
        # iteration (xSTEIN) does, replace pivots below eps·‖A‖ by ±eps·‖A‖ — on the device,
        # with no host check — and factor once for all steps.
        d = LU.diagonal(dim1=-2, dim2=-1)
        floor = (eps * scale)[..., None].expand_as(d)
        d.copy_(torch.where(d.abs() < floor, torch.where(d < 0, -floor, floor), d))
        for _ in range(steps):
            x = torch.linalg.lu_solve(LU, pivots, x)
            x = x / torch.linalg.vector_norm(x, dim=-2, keepdim=True)
        q = x.squeeze(-1)
    G = q[..., :, None] * q[..., None, :]
    return _WithGradient.apply(lam, A, G)


class _WithGradient(torch.autograd.Function):
    # Value λ, gradient G·(incoming) with respect to A. (The obvious λ + Σ G·(A − A.detach())
    # has value NaN when the unread triangle holds an inf: inf − inf.)
    @staticmethod
    def forward(ctx: Any, lam: Tensor, A: Tensor, G: Tensor) -> Tensor:
        ctx.save_for_backward(G)
        return lam.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        (G,) = ctx.saved_tensors
        return grad, G * grad[..., None, None], None
