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
]

#: float32, the WINDOW pairs on each side of k: refined gaps under REFINED_TOL·eps·max|λ| link.
REFINED_TOL, WINDOW = 2.0, 4
#: Elsewhere (float64, far from k): computed gaps under min(3·√max(n, 16), 20)·eps·max|λ|.
TOL_FACTOR, TOL_CAP = 3.0, 20.0


def default_tolerance(w: Tensor) -> Tensor:
    """``(...)`` tolerances on the gaps next to λ_k for eigenvalues ``w`` of shape ``(..., n)``.

    Refined float32 gaps: REFINED_TOL; float64, whose gaps float64 cannot refine: the plain one.
    """
    return _scale(w, w.dtype == torch.float32) * w.abs().amax(dim=-1)


def _scale(w: Tensor, refined: bool) -> float:
    if refined:
        return REFINED_TOL * torch.finfo(w.dtype).eps
    return min(TOL_FACTOR * math.sqrt(max(w.shape[-1], 16)), TOL_CAP) * torch.finfo(w.dtype).eps


def refined_gaps(S: Tensor, V: Tensor) -> Tensor:
    """``(..., m - 1)`` gaps of each consecutive pair of columns of ``V`` ``(..., n, m)``, refined.

    The eigenvalue gap of the 2 × 2 Rayleigh–Ritz problem on the pair's span, in float64, with
    the pair's Gram matrix (float32 eigenvectors are orthonormal only to ≈ √n eps). A solver's
    computed eigenvalues err by several eps·‖A‖ and split an exact tie or shrink a true gap of
    5 eps to 0.2 eps; the span of two eigenvectors is far more accurate, so the Ritz gap of a
    tie is ≲ 0.35 eps and that of a 5-eps gap 4.96 eps (``tests/test_eig_tolerance.py``).
    ``S``: the full symmetric matrix.
    """
    X = V.double()
    AX = S.double() @ X
    d, g = (X * AX).sum(-2), (X * X).sum(-2)
    b, h = (X[..., :-1] * AX[..., 1:]).sum(-2), (X[..., :-1] * X[..., 1:]).sum(-2)
    d1, d2, g1, g2 = d[..., :-1], d[..., 1:], g[..., :-1], g[..., 1:]
    mu = (d1 / g1 + d2 / g2) / 2  # shifted, so that the quadratic's terms are of the gap's size
    d1, d2, b = d1 - mu * g1, d2 - mu * g2, b - mu * h
    det = g1 * g2 - h * h
    lin = d1 * g2 + d2 * g1 - 2 * b * h
    return torch.sqrt((lin * lin - 4 * det * (d1 * d2 - b * b)).clamp_min(0)) / det


def cluster_breaks(w: Tensor, V: Tensor, k: int, S: Tensor | None, tol: Any = None) -> Tensor:
    """``(..., n - 1)`` bools: where consecutive eigenvalues ``w`` belong to different clusters.

    With ``tol`` (absolute): where the computed gap exceeds it. By default, in float32 with the
    symmetric matrix ``S``, the :data:`WINDOW` pairs on each side of k compare refined gaps
    (:func:`refined_gaps`) with :data:`REFINED_TOL`; other pairs, and float64, compare computed
    gaps with the plain tolerance, which measured ties of many copies need (issue 49).
    """
    gaps = w[..., 1:] - w[..., :-1]
    if tol is not None:
        return gaps > tol
    top = w.abs().amax(dim=-1, keepdim=True)
    breaks = gaps > _scale(w, False) * top
    if S is None or w.dtype != torch.float32:
        return breaks
    lo, hi = max(k - WINDOW, 0), min(k + WINDOW + 1, w.shape[-1])
    near = refined_gaps(S, V[..., lo:hi]) > (_scale(w, True) * top).double()
    return torch.cat([breaks[..., :lo], near, breaks[..., hi - 1 :]], dim=-1)


def cluster_weights(
    w: Tensor, V: Tensor, k: int, S: Tensor | None = None, tol: Any = None
) -> Tensor:
    """``(..., n)`` weights: 1/r on the r eigenvalues of λ_k's cluster, 0 elsewhere.

    A cluster is a chain of consecutive eigenvalues (:func:`cluster_breaks`): rounding spreads
    the copies of a large tie over several times the gap between neighbouring copies, so a
    ball around λ_k would split it. A mask keeps shapes static and asks the host nothing.
    """
    run = torch.nn.functional.pad(cluster_breaks(w, V, k, S, tol).cumsum(-1), (1, 0))
    inside = run == run[..., k : k + 1]
    return inside.to(w.dtype) / inside.sum(dim=-1, keepdim=True).to(w.dtype)


def clarke_factor(
    w: Tensor, V: Tensor, k: int, subgradient: str, tol: Any = None, S: Tensor | None = None
) -> Tensor:
    """F with F Fᵀ the chosen element of ∂λ_k: ``(..., n, 1)`` or ``(..., n, n)``.

    Args:
        w: ``(..., n)`` ascending eigenvalues; V: their ``(..., n, n)`` eigenvectors.
        k: index of the eigenvalue (non-negative).
        subgradient: ``"eigenvector"`` (q qᵀ) or ``"mean"`` (U Uᵀ / r).
        tol: cluster tolerance for ``"mean"``, absolute; None: the default rule
            (:func:`cluster_breaks`).
        S: the symmetric matrix, for the default rule's refined gaps (None: computed gaps).
    """
    if subgradient == "eigenvector":
        return V[..., :, k : k + 1]
    # [show:mean]
    weights = cluster_weights(w, V, k, S, tol)  # 1/r inside λ_k's cluster, 0 outside
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
        S = symmetric_lower(A) if subgradient == "mean" and tol is None else None
        ctx.save_for_backward(clarke_factor(w, V, k, subgradient, tol, S))
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
