"""One eigenpair of each matrix in a CPU batch from LAPACK's subset driver ``?syevr``.

Private helper of :mod:`eigprec.eig` (``method="subset"``). ``?syevr`` with ``range='I'``
reduces the matrix to tridiagonal form, finds the one wanted eigenvalue by bisection and, if
asked, its eigenvector by inverse iteration on the tridiagonal matrix plus one
back-transformation. It skips the work ``torch.linalg.eigvalsh`` spends on the other n − 1
eigenvalues, and the work ``torch.linalg.eigh`` spends on the other n − 1 eigenvectors.
SciPy's LAPACK wrappers call one matrix at a time, so a Python loop runs over the batch; the
loop's cost per matrix is why the driver pays off only from moderate n or small batches
(:func:`eigprec.eig.auto.cpu_uses_subset`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

__all__ = ["all_finite", "available", "kth_eigenpair", "solve"]


@functools.cache
def available() -> bool:
    """Whether SciPy's LAPACK wrappers import."""
    try:
        import scipy.linalg.lapack  # noqa: F401
    except ImportError:
        return False
    return True


_scipy_lapack = None


def _syevr(dtype: np.dtype):
    """SciPy's ``ssyevr``/``dsyevr``, looked up on each call (the module imported once)."""
    global _scipy_lapack
    if _scipy_lapack is None:
        from scipy.linalg import lapack

        _scipy_lapack = lapack
    return _scipy_lapack.ssyevr if dtype == np.float32 else _scipy_lapack.dsyevr


def kth_eigenpair(
    A: Tensor, k: int, lower: bool, vectors: bool, *, screen: bool = False
) -> tuple[Tensor, Tensor | None] | None:
    """λ_k (0-based, ascending) of each CPU matrix, and its unit eigenvector if ``vectors``.

    A batch entry on which LAPACK reports failure (``info != 0``) gets NaN.

    Args:
        A: ``(..., n, n)`` float32/float64 CPU tensor, finite unless ``screen``; only one
            triangle is read.
        k: index in ``[0, n)``.
        lower: read the lower triangle (else the upper).
        vectors: also return the eigenvectors.
        screen: first check the batch in NumPy and return None, computing nothing, where an
            entry is NaN or Inf: the caller then masks the bad entries.

    Returns:
        ``(lam, q)``: ``lam`` of shape ``(...)``; ``q`` of shape ``(..., n)`` or None; or None
        where ``screen`` found a NaN or Inf.
    """
    # A view, no copy: SciPy's wrapper copies each matrix into a small column-major buffer
    # that stays in cache (and LAPACK destroys that buffer, never the caller's tensor).
    # Measured against a batch copy read through transposed views, it was no slower.
    a = A.data.numpy()
    if screen and not all_finite(a):
        return None
    return solve(a, k, lower, vectors)


def all_finite(a: np.ndarray) -> bool:
    """Whether every entry of ``a`` is finite.

    Beside SciPy's LAPACK calls a NumPy check costs less than a torch operator (at 1 × 8 × 8 on
    one loaded CPU thread, issue 49). Not a sum: NumPy warns when a reduction meets a NaN.
    """
    return bool(np.isfinite(a).all())


def solve(a: np.ndarray, k: int, lower: bool, vectors: bool) -> tuple[Tensor, Tensor | None]:
    """:func:`kth_eigenpair` on a finite ``(..., n, n)`` NumPy array, no screen."""
    n = a.shape[-1]
    batch = a.shape[:-2]
    syevr = _syevr(a.dtype)
    uplo_lower = 1 if lower else 0
    # Positional arguments: compute_v, range, lower, vl, vu, il, iu, abstol, lwork, liwork,
    # overwrite_a. abstol = 0 asks for LAPACK's default bisection tolerance, eps·‖T‖₁: the
    # eigenvalue is then as accurate as the full solver's. lwork/liwork are the documented
    # minima (26n, 10n); a workspace query per matrix would cost as much as it saves.
    lwork, liwork = 26 * n, 10 * n
    if not vectors and a.size == n * n:  # one value: no buffers, no loop (issue 49, 1 × 8)
        w, _, _, _, info = syevr(
            a.reshape(n, n), 0, "I", uplo_lower, 0.0, 1.0, k + 1, k + 1, 0.0, lwork, liwork, 0
        )
        lam1 = w[:1] if info == 0 else np.full(1, np.nan, dtype=a.dtype)
        return torch.from_numpy(lam1.reshape(batch)), None
    mats = a.reshape(-1, n, n)
    lam_np = np.empty(mats.shape[0], dtype=mats.dtype)
    q_np = np.empty((mats.shape[0], n), dtype=mats.dtype) if vectors else None
    jobz = 1 if vectors else 0
    for i in range(mats.shape[0]):
        w, z, _, _, info = syevr(
            mats[i], jobz, "I", uplo_lower, 0.0, 1.0, k + 1, k + 1, 0.0, lwork, liwork, 0
        )
        if info != 0:
            lam_np[i] = np.nan
            if q_np is not None:
                q_np[i] = np.nan
            continue
        lam_np[i] = w[0]
        if q_np is not None:
            q_np[i] = z[:, 0]
    lam = torch.from_numpy(lam_np.reshape(batch))
    return lam, (torch.from_numpy(q_np.reshape(*batch, n)) if q_np is not None else None)
