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

__all__ = [
    "KthEigenvalue",
    "clarke_factor",
    "clarke_gradient",
    "cluster_breaks",
    "cluster_weights",
    "default_tolerance",
    "kth_eigvalsh",
    "refined_gaps",
    "symmetric_lower",
    "tolerance_scale",
]

#: float32, the WINDOW pairs on each side of k: refined gaps under REFINED_TOL·eps·max|λ| too.
REFINED_TOL, WINDOW = 2.0, 4
#: Computed gaps under min(3·√max(n, 16), 20)·eps·max|λ| link (the only test far from k, and
#: in float64).
TOL_FACTOR, TOL_CAP = 3.0, 20.0


def default_tolerance(w: Tensor, refined: bool = True) -> Tensor:
    """``(...)`` tolerances for eigenvalues ``w`` ``(..., n)``: on refined gaps (float32) next to
    λ_k, or on computed gaps (float64, or ``refined=False``)."""
    return tolerance_scale(w, refined and w.dtype == torch.float32) * w.abs().amax(dim=-1)


def tolerance_scale(w: Tensor, refined: bool) -> float:
    """The tolerance in units of max|λ| for eigenvalues ``w``: refined or computed gaps."""
    if refined:
        return REFINED_TOL * torch.finfo(w.dtype).eps
    return min(TOL_FACTOR * math.sqrt(max(w.shape[-1], 16)), TOL_CAP) * torch.finfo(w.dtype).eps


def refined_gaps(A: Tensor, V: Tensor) -> Tensor:
    """``(..., m - 1)`` gaps of each consecutive pair of columns of ``V`` ``(..., n, m)``, refined.

    The eigenvalue gap of the 2 × 2 Rayleigh–Ritz problem on the pair's span, in float64, with
    the pair's Gram matrix (float32 eigenvectors are orthonormal only to ≈ √n eps), for the
    symmetric matrix whose lower triangle is ``A``'s. A solver's computed eigenvalues err by
    several eps·‖A‖: they split an exact tie, or shrink a true gap of 5 eps to 0.4 eps. The
    span of two eigenvectors is far more accurate: the Ritz gap of a tie measured ≲ 0.5 eps,
    that of a 5-eps gap 4.96 eps (``tests/test_eig_tolerance.py``).
    """
    X = V.double()
    AX = symmetric_lower(A.double()) @ X
    d, g = (X * AX).sum(-2), (X * X).sum(-2)
    b, h = (X[..., :-1] * AX[..., 1:]).sum(-2), (X[..., :-1] * X[..., 1:]).sum(-2)
    d1, d2, g1, g2 = d[..., :-1], d[..., 1:], g[..., :-1], g[..., 1:]
    mu = (d1 / g1 + d2 / g2) / 2  # shifted, so that the quadratic's terms are of the gap's size
    d1, d2, b = d1 - mu * g1, d2 - mu * g2, b - mu * h
    det = g1 * g2 - h * h
    lin = d1 * g2 + d2 * g1 - 2 * b * h
    return torch.sqrt((lin * lin - 4 * det * (d1 * d2 - b * b)).clamp_min(0)) / det


def cluster_breaks(w: Tensor, V: Tensor, k: int, A: Tensor | None, tol: Any = None) -> Tensor:
    """``(..., n - 1)`` bools: where consecutive eigenvalues ``w`` belong to different clusters.

    With ``tol`` (absolute): where the computed gap exceeds it. By default: where the computed
    gap exceeds the plain tolerance (TOL_FACTOR, TOL_CAP), above every computed split of an
    exact tie measured; in float32, with ``A`` (its lower triangle), the
    :data:`WINDOW` pairs on each side of k also break where the refined gap
    (:func:`refined_gaps`) exceeds :data:`REFINED_TOL`, which keeps true gaps of 3 eps apart.
    """
    gaps = w[..., 1:] - w[..., :-1]
    if tol is not None:
        return gaps > tol
    top = w.abs().amax(dim=-1, keepdim=True)
    breaks = gaps > tolerance_scale(w, False) * top
    lo, hi = max(k - WINDOW, 0), min(k + WINDOW + 1, w.shape[-1])
    near = breaks[..., lo : hi - 1]
    if A is None or w.dtype != torch.float32 or (A.device.type == "cpu" and bool(near.all())):
        return breaks  # (on the CPU, where every pair near k is apart anyway, refine nothing)
    near = near | (refined_gaps(A, V[..., lo:hi]) > (tolerance_scale(w, True) * top).double())
    return torch.cat([breaks[..., :lo], near, breaks[..., hi - 1 :]], dim=-1)


def cluster_weights(
    w: Tensor, V: Tensor, k: int, A: Tensor | None = None, tol: Any = None
) -> Tensor:
    """``(..., n)`` weights: 1/r on the r eigenvalues of λ_k's cluster, 0 elsewhere.

    A cluster is a chain of consecutive eigenvalues (:func:`cluster_breaks`): rounding spreads
    the copies of a large tie over several times the gap between neighbouring copies, so a
    ball around λ_k would split it. A mask keeps shapes static.
    """
    run = torch.nn.functional.pad(cluster_breaks(w, V, k, A, tol).cumsum(-1), (1, 0))
    inside = run == run[..., k : k + 1]
    return inside.to(w.dtype) / inside.sum(dim=-1, keepdim=True).to(w.dtype)


def clarke_factor(
    w: Tensor, V: Tensor, k: int, subgradient: str, tol: Any = None, A: Tensor | None = None
) -> Tensor:
    """F with F Fᵀ the chosen element of ∂λ_k: ``(..., n, 1)`` or ``(..., n, n)``.

    Args:
        w: ``(..., n)`` ascending eigenvalues; V: their ``(..., n, n)`` eigenvectors.
        k: index of the eigenvalue (non-negative).
        subgradient: ``"eigenvector"`` (q qᵀ) or ``"mean"`` (U Uᵀ / r).
        tol: cluster tolerance for ``"mean"``, absolute; None: the default rule
            (:func:`cluster_breaks`).
        A: the matrix (lower triangle), for the default rule's refined gaps.
    """
    if subgradient == "eigenvector":
        return V[..., :, k : k + 1]
    # [show:mean]
    weights = cluster_weights(w, V, k, A, tol)  # 1/r inside λ_k's cluster, 0 outside
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
    if F.dtype == torch.float32 and not _ieee_float32_product(F):
        # U Uᵀ / r through a float64 GEMM, which never runs in TF32.
        return (F.double() @ F.double().mT).to(F.dtype) * grad_lam[..., None, None]
    return (F @ F.mT) * grad_lam[..., None, None]
    # [/show:backward]


def _ieee_float32_product(F: Tensor) -> bool:
    """Whether a float32 product of ``F`` runs in IEEE float32: on the CPU at "highest".

    Elsewhere, or at a lower matmul precision (oneDNN may then use bf16/TF32 on the CPU), the
    float64 GEMM costs more but is exact enough: on the CPU it cost "mean" 1.14-1.35× eigh's
    backward (issue 49).
    """
    if F.device.type != "cpu" or torch.get_float32_matmul_precision() != "highest":
        return False
    onednn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return getattr(onednn, "fp32_precision", "none") in ("none", "ieee")


def symmetric_lower(A: Tensor) -> Tensor:
    """The symmetric matrix whose lower triangle is ``A``'s (the one ``eigh`` reads).

    The strict triangle and the diagonal apart: T + Tᵀ − diag(T) would double the diagonal on
    the way and overflow near the dtype's largest value (inf − inf = NaN).
    """
    L = A.tril(-1)
    return L + L.mT + torch.diag_embed(A.diagonal(dim1=-2, dim2=-1))


class KthEigenvalue(torch.autograd.Function):
    """(A, k, subgradient, tol) ↦ λ_k(A), with the Clarke backward of :func:`clarke_gradient`."""

    @staticmethod
    def forward(ctx: Any, A: Tensor, k: int, subgradient: str, tol: Any) -> Tensor:
        w, V = torch.linalg.eigh(A)
        ctx.save_for_backward(clarke_factor(w, V, k, subgradient, tol, A))
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
        cluster_tol: largest gap inside a cluster for ``"mean"``; None: the default rule.

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
