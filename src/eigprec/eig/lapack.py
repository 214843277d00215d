"""One eigenpair of each matrix in a CPU batch from LAPACK's subset driver ``?syevr``.

Private helper of :mod:`eigprec.eig` (``method="subset"``). ``?syevr`` with ``range='I'``
reduces the matrix to tridiagonal form, finds the one wanted eigenvalue by bisection and, if
asked, its eigenvector by inverse iteration on the tridiagonal matrix plus one
back-transformation. It skips the work ``torch.linalg.eigvalsh`` spends on the other n − 1
eigenvalues, and the work ``torch.linalg.eigh`` spends on the other n − 1 eigenvectors.
SciPy's LAPACK wrappers call one matrix at a time, so a Python loop runs over the batch; the
loop's cost per matrix is why the driver pays off only from moderate n (see ``eig.py``).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["available", "kth_eigenpair"]


@functools.cache
def available() -> bool:
    """Whether SciPy's LAPACK wrappers import."""
    try:
        import scipy.linalg.lapack  # noqa: F401
    except ImportError:
        return False
    return True


def kth_eigenpair(A: Tensor, k: int, lower: bool, vectors: bool) -> tuple[Tensor, Tensor | None]:
    """λ_k (0-based, ascending) of each CPU matrix, and its unit eigenvector if ``vectors``.

    A batch entry on which LAPACK reports failure (``info != 0``) gets NaN.

    Args:
        A: ``(..., n, n)`` float32/float64 CPU tensor, finite; only one triangle is read.
        k: index in ``[0, n)``.
        lower: read the lower triangle (else the upper).
        vectors: also return the eigenvectors.

    Returns:
        ``(lam, q)``: ``lam`` of shape ``(...)``; ``q`` of shape ``(..., n)`` or None.
    """
    from scipy.linalg import lapack

    n = A.shape[-1]
    batch = A.shape[:-2]
    syevr = lapack.ssyevr if A.dtype == torch.float32 else lapack.dsyevr
    # No copy of the whole batch: SciPy's wrapper copies each matrix into a small column-major
    # buffer that stays in cache (and LAPACK destroys that buffer, never the caller's tensor).
    # Measured against a batch copy read through transposed views, it was no slower.
    mats = A.detach().reshape(-1, n, n).numpy()
    lam = torch.empty(mats.shape[0], dtype=A.dtype)
    q = torch.empty(mats.shape[0], n, dtype=A.dtype) if vectors else None
    lam_np = lam.numpy()
    q_np = q.numpy() if q is not None else None
    uplo_lower = 1 if lower else 0
    jobz = 1 if vectors else 0
    # Positional arguments: compute_v, range, lower, vl, vu, il, iu, abstol, lwork, liwork,
    # overwrite_a. abstol = 0 asks for LAPACK's default bisection tolerance, eps·‖T‖₁: the
    # eigenvalue is then as accurate as the full solver's. lwork/liwork are the documented
    # minima (26n, 10n); a workspace query per matrix would cost as much as it saves.
    for i in range(mats.shape[0]):
        w, z, _, _, info = syevr(
            mats[i], jobz, "I", uplo_lower, 0.0, 1.0, k + 1, k + 1, 0.0, 26 * n, 10 * n, 0
        )
        if info != 0:
            lam_np[i] = float("nan")
            if q_np is not None:
                q_np[i] = float("nan")
            continue
        lam_np[i] = w[0]
        if q_np is not None:
            q_np[i] = z[:, 0]
    return lam.reshape(batch), (q.reshape(*batch, n) if q is not None else None)
