"""The default cluster tolerance of ``subgradient="mean"``, checked (the formula: ``core``).

The tolerance must hold together what rounding does to
an *exact* tie — the copies of a repeated eigenvalue come out of the solver split by a few
ulps — and must not merge eigenvalues that are genuinely distinct and that the solver
resolves. It is therefore calibrated on the spread of computed copies of exact ties
(``eigprec_book.chapters.clarke.tie_splits``), not on the solver's eigenvalue error in general:
the error of one
eigenvalue against a float64 reference also contains the input's rounding, which moves all
copies of a tie together and does not split them.
"""

from __future__ import annotations

import operator

from torch import Tensor

from eigprec.eig.core import TOL_CAP, TOL_FACTOR, default_tolerance

__all__ = ["CLUSTER_TOL_CAP", "CLUSTER_TOL_FACTOR", "default_cluster_tol"]

# measure_tie_splits() (benchmarks/eig_tie_splits.py), one CPU thread, 5 seeds × 20 matrices
# per case, float32 and float64, exact ties of Q diag(λ) Qᵀ with max|λ| = 1 (multiplicity 2,
# 5, n/2 and n — the last a rotated multiple of I) and zero clusters of Gram matrices B Bᵀ,
# n = 3 … 200: in units of eps · √max(n, 16) · max|λ|, the largest gap between *consecutive*
# computed copies of a tie was 2.0 (n = 5, all five equal, float32), 1.46 from n = 30 up; the
# spread max − min of a tie grows with its multiplicity (up to 5.8 units for n equal copies,
# ≈ 1.25 for 2 and 5 copies at n = 100, the review's figure). So a cluster is a chain of
# consecutive eigenvalues closer than the tolerance (not a ball around λ_k), and a factor of 3
# holds every measured tie together with a margin of 1.5 while keeping gaps float32 resolves
# apart: 3 · eps · √100 = 3.6e-6 · max|λ| at n = 100, below the ≥ 4e-6 gaps the solver
# resolves there (tests/test_eig_tolerance.py). The floor √16: below n ≈ 16 the splits did not
# shrink with n. The former factor 8 (9.5e-6 at n = 100) merged gaps of 4e-6 – 9e-6 that the
# solver resolves, and "mean" then returned an element ≈ 0.7 from the gradient at points where
# λ_k is differentiable.
CLUSTER_TOL_FACTOR = TOL_FACTOR
# Issue 33, item 4: the splits stop growing like √n. In plain eps · max|λ|, the largest gap
# between consecutive copies was 18 (n = 200, multiplicity 200, float32; 100 matrices), and
# beyond: n = 400: 6.9 (2 copies), 6.2 (200), 8.5 (400, float64); n = 1000: 7.2 (5 copies,
# float64), 6.0 (500), 7.5 (1000); n = 2000 (float32, 4 to 12 matrices per case): 1.0 (2),
# 1.9 (5), 13.0 (1000), 10.0 (2000); n = 4000: 5.0 (2000, float32, one matrix). Zero clusters
# of Gram matrices split far less (≤ 1.1). Meanwhile 3 · √n kept growing (95 at n = 1000,
# 134 at 2000) past genuine gaps: the cycle Laplacian's simple λ_max = 4 lies 83 eps · max|λ|
# above its neighbour at n = 1000 and 21 at n = 2000 (29.5 as LAPACK computes it in float32),
# and "mean" averaged 3 and 7 eigenvectors there. Capping the tolerance at 20 eps · max|λ|
# (reached at n = 45) keeps those apart and every measured tie together.
CLUSTER_TOL_CAP = TOL_CAP


def default_cluster_tol(eigenvalues: Tensor, n: int) -> Tensor:
    """Default cluster tolerance for ``subgradient="mean"``, per batch entry.

    ``eps(dtype) · min(3 · √max(n, 16), 20) · max_i |λ_i|``: below n = 45, 1.5 times the
    largest gap between consecutive computed copies of an exactly repeated eigenvalue
    measured for n = 3 … 200; from n = 45, 20 eps · max|λ| (2.4e-6 · max|λ| in float32,
    4.4e-15 in float64), so that genuinely distinct eigenvalues that far apart are never
    merged, however large n (measured by ``eigprec_book.chapters.clarke.tie_splits``).
    ``kth_eigvalsh`` links consecutive eigenvalues closer than this into one cluster.

    Range of validity (torch.linalg.eigvalsh on one CPU thread, float32 and float64): exact
    ties — multiplicities 2, 5, n/2 and n of dense rotated spectra, and zero clusters of Gram
    matrices — formed one cluster for every n measured, 3 … 4000 (n > 200 sparsely: 1 to 12
    matrices per case): their largest consecutive split was 18 eps · max|λ| (n = 200,
    multiplicity 200: a margin of only 1.1 for ties of the whole spectrum), at most 13 for
    multiplicities up to n/2 from n = 400 on. Gaps above the tolerance are kept apart: at
    n = 100 in float32 anything from ≈ 2.4e-6 · max|λ|; the cycle-graph Laplacian's simple
    λ_max up to n ≈ 2000 (its gap (2π/n)² is 20 eps · 4 at n = 2033, float32). Beyond, and
    for solvers less accurate than LAPACK (float32 batched Jacobi on a GPU splits more at
    large n), choose ``cluster_tol``/``cluster_rtol`` for the problem.

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
        >>> w = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
        >>> bool(default_cluster_tol(w, 3) < 1e-14)
        True
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
