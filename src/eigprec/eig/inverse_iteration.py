"""The eigenvector of a known eigenvalue by batched shifted inverse iteration.

Private helper of :mod:`eigprec.eig` (``method="inverse_iteration"``). The shift comes
from the eigenvalue-only solver; the one eigenvector the backward pass needs comes from one
batched LU factorisation of A − σI (``check_errors=False``: no host synchronisation) and
``steps`` triangular solves, with σ just beside λ_k. The value returned is that vector's
Rayleigh quotient in float64: torch's float32 eigenvalue-only solver errs by up to
1.6e-6 · max|λ| at n = 300, the quotient by 1.4e-7, like ``eigh``'s values
(``tests/test_eig_invit.py``).

Inverse iteration converges at rate |λ_k − σ| / min_{j≠k} |λ_j − σ| per step, so the
eigenvector is accurate only where λ_k is separated from its neighbours by much more than
the shift offset (a few ulps of ‖A‖); at (near-)ties it returns *some* unit vector of the
(near-)eigenspace — a Clarke subgradient at an exact tie, but not the ``"mean"`` element.
"""

from __future__ import annotations

import torch
from torch import Tensor

from eigprec.eig.core import symmetric_lower

__all__ = ["eigenpair"]


def eigenpair(A: Tensor, lam: Tensor, lower: bool, steps: int) -> tuple[Tensor, Tensor]:
    """Eigenpairs of finite matrices ``A`` near the approximate eigenvalues ``lam``.

    Args:
        A: ``(..., n, n)`` finite float tensor; only one triangle is read.
        lam: ``(...)`` the approximate eigenvalue of each matrix whose eigenvector is wanted.
        lower: read the lower triangle (else the upper).
        steps: inverse-iteration steps (≥ 1).

    Returns:
        ``(value, vector)``: ``(...)`` Rayleigh quotients (computed in float64, returned in
        ``A``'s dtype) of the ``(..., n)`` unit vectors.
    """
    S = symmetric_lower(A if lower else A.mT)
    n = S.shape[-1]
    eps = torch.finfo(S.dtype).eps
    # Work on A / max|a_ij|: scaling changes no eigenvector, and it keeps the shift and the
    # pivot floor below far from underflow. (Unscaled, a zero matrix or one of norm 1e-20 in
    # float32 gave a shift of a denormal or zero, and the solves overflowed to inf/inf = NaN.)
    # A zero matrix keeps scale 1: every unit vector is then an eigenvector.
    amax = S.abs().amax(dim=(-2, -1))
    amax = torch.where(amax > 0, amax, torch.ones((), dtype=S.dtype, device=S.device))
    S = S / amax[..., None, None]
    mu = lam / amax
    # ‖S‖_F ≥ ‖S‖₂ bounds the eigenvalues' rounding error (a few eps·‖S‖₂) from above: a shift
    # that far beside μ keeps S − σI from being exactly singular in floating point while the
    # wanted eigenvector still gains a factor ~gap / (eps·‖S‖_F) per solve.
    fro = torch.linalg.matrix_norm(S)
    sigma = mu + 2 * eps * fro
    M = S - sigma[..., None, None] * torch.eye(n, dtype=S.dtype, device=S.device)
    # A fixed, generic start vector: not orthogonal to any particular eigenvector.
    x = torch.linspace(1.0, 2.0, n, dtype=S.dtype, device=S.device).sqrt()
    x = x.expand(*S.shape[:-1]).unsqueeze(-1)
    LU, pivots, _ = torch.linalg.lu_factor_ex(M, check_errors=False)
    # The shift can still make a pivot exactly zero; as LAPACK's inverse iteration (xSTEIN)
    # does, replace pivots below eps·‖S‖ by ±eps·‖S‖ — on the device, with no host check.
    d = LU.diagonal(dim1=-2, dim2=-1)
    floor = (eps * fro.clamp_min(1.0))[..., None].expand_as(d)
    d.copy_(torch.where(d.abs() < floor, torch.where(d < 0, -floor, floor), d))
    for _ in range(steps):
        x = torch.linalg.lu_solve(LU, pivots, x)
        x = x / torch.linalg.vector_norm(x, dim=-2, keepdim=True)
    # The quotient in float64 (MPS has none: float32 there); A's float32 rounding of the
    # products would cost what the eigenvalue-only solver costs.
    wide = torch.float64 if S.device.type != "mps" else S.dtype
    xw = x.to(wide)
    value = (xw.mT @ (S.to(wide) @ xw))[..., 0, 0] / xw.square().sum(dim=(-2, -1))
    return (value * amax.to(wide)).to(S.dtype), x.squeeze(-1)
