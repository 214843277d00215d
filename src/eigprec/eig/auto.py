"""How ``kth_eigvalsh(backend="auto")`` chooses its solver per shape.

The rule it is held to (``eigprec_book.record.eig_rule``, checked against recorded GPU grids
by ``tests/test_eig_auto_choice.py``): at each ``(batch, n)``, ``auto`` must use a solver
whose error is within 10× of the most accurate solver's and whose time is within 1.2× of the
fastest of those accurate ones. The policy that meets it (:func:`auto_uses_cupy`) is written
out here rather than read from a file at run time, so that the package needs no recorded
data.
"""

from __future__ import annotations

__all__ = [
    "CUPY_MAX_N",
    "SUBSET_MAX_BATCH_VALUE",
    "SUBSET_MIN_ENTRIES_GRAD",
    "SUBSET_MIN_N_GRAD",
    "SUBSET_MIN_N_VALUE",
    "auto_uses_cupy",
    "cpu_uses_subset",
]

#: CPU, value alone: the subset driver from this n on, or for batches of at most
#: :data:`SUBSET_MAX_BATCH_VALUE` matrices (:func:`cpu_uses_subset`).
SUBSET_MIN_N_VALUE, SUBSET_MAX_BATCH_VALUE = 24, 4
#: CPU, value and eigenvector: the subset driver from this n on, once batch · n² reaches
#: :data:`SUBSET_MIN_ENTRIES_GRAD`.
SUBSET_MIN_N_GRAD, SUBSET_MIN_ENTRIES_GRAD = 16, 4096

#: Largest n sent to CuPy's float32/float64 batched Jacobi. float32 Jacobi loses accuracy
#: about linearly in n (H200, CuPy 14.2: 8.4e-6 · max|λ| at n = 45, 1.6e-4 at 256, 6.4e-4 at
#: 1024; the k-th value 2.1e-4 at 8 × 1024 against 4.4e-8 from torch's per-matrix syevd, which
#: was also faster there: 77 against 104 ms); at 64 × 256 it was 12× faster than torch with a
#: k-th value error 2.1× torch's. Between 256 and 1024 nothing is recorded yet: torch.
CUPY_MAX_N = 256
#: From this batch, CuPy from n = 17: at 2000 × 32 kth via CuPy took 1.09 ms, via torch 1.42
#: ms (H100, torch 2.11); at 500 × 32 and 100 × 32 torch was faster (1.07×, 1.2×).
_CUPY_MIN_BATCH_SMALL_N = 1000


def auto_uses_cupy(n: int, batch: int) -> bool:
    """Whether ``backend="auto"`` sends a CUDA batch to CuPy (torch < 2.12, CuPy working).

    Args:
        n: matrix size.
        batch: number of matrices (the product of the leading dimensions).

    Returns:
        True for 32 < n ≤ :data:`CUPY_MAX_N`, and for 16 < n ≤ 32 from 1,000 matrices on
        (where torch's own batched solver, used up to n = 32, was slower on the H100 record).

    Example:
        >>> auto_uses_cupy(100, 500), auto_uses_cupy(16, 2000), auto_uses_cupy(1024, 8)
        (True, False, False)
    """
    if n > CUPY_MAX_N:
        return False
    return n > 32 or (n > 16 and batch >= _CUPY_MIN_BATCH_SMALL_N)


def cpu_uses_subset(n: int, batch: int, grad: bool) -> bool:
    """Whether ``method="auto"`` runs LAPACK's subset driver on a CPU batch (else torch).

    The subset driver finds one eigenpair per matrix but is called matrix by matrix from
    Python; torch's solver finds all of them in one call. Measured side by side (one thread,
    thread CPU time, interleaved; ``benchmarks/bench_eig.py --sweep``), the subset driver was
    the faster for the value alone from n = 24, or for up to 4 matrices at any n, and for the
    value and its eigenvector from n = 16 once the batch held batch · n² ≥ 4096 entries.

    Args:
        n: matrix size.
        batch: number of matrices.
        grad: whether the eigenvector for a gradient is wanted too.

    Returns:
        True where the subset driver measured faster than torch's own solver.

    Example:
        >>> cpu_uses_subset(8, 1, grad=False), cpu_uses_subset(8, 64, grad=False)
        (True, False)
        >>> cpu_uses_subset(32, 1, grad=True), cpu_uses_subset(45, 2000, grad=True)
        (False, True)
    """
    if grad:
        return n >= SUBSET_MIN_N_GRAD and batch * n * n >= SUBSET_MIN_ENTRIES_GRAD
    return n >= SUBSET_MIN_N_VALUE or batch <= SUBSET_MAX_BATCH_VALUE
