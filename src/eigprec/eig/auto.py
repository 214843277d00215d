"""How ``kth_eigvalsh`` chooses its solver per shape: ``method="auto"``, ``backend="auto"``.

Plain ``torch.linalg`` is a candidate on every device (issue 49): where ``auto`` picks it, the
call is ``torch.linalg.eigvalsh`` itself, after one finiteness screen. On the CPU its rival is
LAPACK's subset driver (:func:`cpu_uses_subset`), on CUDA CuPy's batched Jacobi solver, only
where the installed torch loops over a CUDA batch (torch < 2.12; :func:`auto_uses_cupy`).
The rule the CUDA choice is held to (``eigprec_book.record.eig_rule``, checked against the
recorded GPU grids by ``tests/test_eig_auto_choice.py``): at each ``(batch, n)``, a solver
whose error is within 10× of the most accurate solver's and whose time is within 1.2× of
the fastest of those accurate ones. The policies are written out here rather than read from
a file at run time, so that the package needs no recorded data.
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

#: Largest n sent to CuPy's float32/float64 batched Jacobi. float32 Jacobi loses accuracy with
#: n (H200, torch 2.11, CuPy 14.2; book/data/kth_h200_2026-11-26.json, k = n // 3): its k-th
#: value erred by 2.1e-4 · ‖A‖ at 8 × 1024 against 4.4e-8 for torch's per-matrix syevd, which
#: was also faster there (77 against 102 ms); at 64 × 256 it was 12.5× faster than torch with
#: an error 2.1× torch's. Between 256 and 1024 nothing is recorded: torch.
CUPY_MAX_N = 256


def auto_uses_cupy(n: int, batch: int) -> bool:
    """Whether ``backend="auto"`` sends a CUDA batch to CuPy (torch < 2.12, CuPy working).

    Up to n = 32 torch's own ``eigh`` is batched; on the H100 record
    (``book/data/eig_gpu.json``) ``torch.linalg.eigvalsh`` was the faster there at every batch
    (1.00 against 1.09 ms at 2000 × 32), and ``eigh`` + backward within 1.2× of CuPy's.

    Args:
        n: matrix size.
        batch: number of matrices (the product of the leading dimensions).

    Returns:
        True for 32 < n ≤ :data:`CUPY_MAX_N`.

    Example:
        >>> auto_uses_cupy(100, 500), auto_uses_cupy(32, 2000), auto_uses_cupy(1024, 8)
        (True, False, False)
    """
    del batch  # every recorded batch (100 … 2000) chose alike
    return 32 < n <= CUPY_MAX_N


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
