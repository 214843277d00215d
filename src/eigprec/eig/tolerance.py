"""The default cluster rule of ``subgradient="mean"``, checked (the formulas: ``core``).

The rule must hold together what rounding does to an *exact* tie — the solver returns the
copies of a repeated eigenvalue split by a few ulps — and keep apart eigenvalues that are
genuinely distinct. Computed eigenvalues cannot do both in float32: ``torch.linalg.eigh``
split exact ties by up to 3.3 eps · max|λ| (n ≥ 50, up to 20 copies; 7 eps at n ≤ 30, 15 eps
for a tie of all 200 eigenvalues) and computed a true gap of 5 eps as 0.37 eps, one of 3 eps
as 0.18 eps (n = 100 and 200, 20 matrices each). The 2 × 2 Rayleigh–Ritz gap of two computed
eigenvectors (:func:`eigprec.eig.core.refined_gaps`, in float64) separates them: at most
0.48 eps for exact ties (n = 8 … 1000, 2 … n copies), within 0.05 eps of the true gap for
gaps of 3 … 18 eps (n = 100 … 1000). So, in float32, the 4 pairs on each side of λ_k link
where their refined gap is below 2 eps · max|λ|; pairs farther out, which only clusters of
more than 4 copies reach, and every pair in float64 (where float64 arithmetic cannot refine
a float64 gap) link where the computed gap is below ``min(3 · √max(n, 16), 20) · eps ·
max|λ|``, above every computed split measured. Measured by ``benchmarks/eig_tie_splits.py``
(``eigprec_book.chapters.clarke.tie_splits``) on one CPU thread.
"""

from __future__ import annotations

import operator

from torch import Tensor

from eigprec.eig.core import REFINED_TOL, TOL_CAP, TOL_FACTOR, WINDOW, default_tolerance

__all__ = [
    "CLUSTER_TOL_CAP",
    "CLUSTER_TOL_FACTOR",
    "CLUSTER_WINDOW",
    "REFINED_CLUSTER_TOL",
    "default_cluster_tol",
]

#: float32, near λ_k: refined gaps below this many eps · max|λ| link.
REFINED_CLUSTER_TOL = REFINED_TOL
#: Pairs refined on each side of λ_k.
CLUSTER_WINDOW = WINDOW
#: Computed gaps (float64; float32 beyond the window) below
#: min(CLUSTER_TOL_FACTOR · √max(n, 16), CLUSTER_TOL_CAP) · eps · max|λ| link.
CLUSTER_TOL_FACTOR, CLUSTER_TOL_CAP = TOL_FACTOR, TOL_CAP


def default_cluster_tol(eigenvalues: Tensor, n: int) -> Tensor:
    """The default tolerance on the gaps next to λ_k for ``subgradient="mean"``, per batch entry.

    float32: ``2 · eps · max|λ|`` (2.4e-7 · max|λ|), compared with refined gaps (the 2 × 2
    Rayleigh–Ritz gap of consecutive eigenvectors, in float64) for the 4 pairs on each side
    of λ_k. float64: ``min(3 · √max(n, 16), 20) · eps · max|λ|``, compared with computed
    gaps, as for float32 pairs farther from λ_k. Measured (module docstring): exact ties
    refined to at most 0.48 eps · max|λ|, true gaps of 3 eps and more to within 0.05 eps of
    themselves, so kept apart.

    The band neither side is certain of, float32: a true gap below 2 eps · max|λ| is merged
    with λ_k, and ``"mean"`` returns U Uᵀ / r over eigenvalues the matrix holds apart — a
    Goldstein subgradient over that spread, not the gradient; a tie refined above 2 eps would
    be split (none measured above 0.48; a Gram matrix's zero cluster, which the float32
    product itself splits, up to 1.05 eps). Beyond 4 copies from λ_k, and in float64, the band
    is that of computed gaps: ties split up to 15 eps · max|λ| (float32, 200 copies), merged
    up to 20 eps. Less accurate solvers (float32 batched Jacobi on a GPU) split more: choose
    ``cluster_tol``/``cluster_rtol`` for them.

    Args:
        eigenvalues: ``(..., n)`` float eigenvalues of each matrix (any order).
        n: the matrix size (``eigenvalues.shape[-1]``).

    Returns:
        ``(...)`` tensor of absolute tolerances (zeros for ``n = 0``, with the batch shape).

    Raises:
        TypeError: ``eigenvalues`` not a floating-point tensor; ``n`` not an int.
        ValueError: ``eigenvalues`` a scalar; ``n`` differing from ``eigenvalues.shape[-1]``.

    Example:
        >>> import torch
        >>> w = torch.tensor([1.0, 1.0, 2.0])
        >>> float(default_cluster_tol(w, 3) / torch.finfo(torch.float32).eps)
        4.0
    """
    if not isinstance(eigenvalues, Tensor) or not eigenvalues.is_floating_point():
        what = eigenvalues.dtype if isinstance(eigenvalues, Tensor) else type(eigenvalues).__name__
        raise TypeError(f"default_cluster_tol: eigenvalues must be a float tensor, got {what}")
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"default_cluster_tol: n must be an int, got {type(n).__name__}")
    n = operator.index(n)
    if eigenvalues.dim() < 1:
        raise ValueError("default_cluster_tol: eigenvalues must have at least 1 dimension")
    if n != eigenvalues.shape[-1]:
        raise ValueError(
            f"default_cluster_tol: n={n} differs from the number of eigenvalues "
            f"{eigenvalues.shape[-1]} (last dimension)"
        )
    if n == 0:
        return eigenvalues.new_zeros(eigenvalues.shape[:-1])
    return default_tolerance(eigenvalues)
