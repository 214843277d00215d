"""Zero-copy hand-off of batched symmetric eigenproblems from torch to CuPy.

Private helper of :mod:`eigprec.eig`. Nothing here imports CuPy at module import time: the
package must import on machines without CUDA, and CuPy's import is slow even where it works.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["cupy_available", "eigh", "eigvalsh"]


@functools.cache
def cupy_available() -> bool:
    """Whether CuPy imports *and* sees a CUDA device.

    Returns:
        True when ``import cupy`` succeeds and CuPy reports at least one device.

    Example:
        >>> isinstance(cupy_available(), bool)
        True
    """
    try:
        import cupy
    except Exception:  # ImportError, but also a CuPy build that cannot load libcuda
        return False
    try:
        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


def _solve(A: Tensor, lower: bool, vectors: bool) -> tuple[Tensor, Tensor | None]:
    import cupy

    uplo = "L" if lower else "U"
    device = A.device.index if A.device.index is not None else torch.cuda.current_device()
    # CuPy must queue its kernels on the stream torch is using *now*. On any other stream the
    # solver could read A before torch has finished writing it, and torch could recycle A's
    # memory (its caching allocator is stream-ordered) while CuPy still reads it. Sharing the
    # stream makes both orderings hold without a single host synchronisation.
    stream = torch.cuda.current_stream(device)
    a_in = A.contiguous()
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream.cuda_stream):
        # from_dlpack passes CuPy's current stream (== torch's) to __dlpack__, so torch
        # inserts no cross-stream wait either.
        a = cupy.from_dlpack(a_in)
        if vectors:
            w, v = cupy.linalg.eigh(a, UPLO=uplo)
        else:
            w, v = cupy.linalg.eigvalsh(a, UPLO=uplo), None
        w_t = torch.from_dlpack(w)
        v_t = torch.from_dlpack(v) if v is not None else None
    return w_t, v_t


def eigvalsh(A: Tensor, lower: bool) -> Tensor:
    """Ascending eigenvalues of a batch of symmetric CUDA matrices, computed by CuPy.

    Args:
        A: ``(..., n, n)`` float32/float64 CUDA tensor; only one triangle is read.
        lower: read the lower triangle (else the upper).

    Returns:
        ``(..., n)`` tensor on ``A``'s device, sharing memory with CuPy's result.

    Raises:
        ModuleNotFoundError: when CuPy is not installed.

    Example:
        >>> w = eigvalsh(torch.eye(3, device="cuda"), True)  # doctest: +SKIP
    """
    return _solve(A, lower, vectors=False)[0]


def eigh(A: Tensor, lower: bool) -> tuple[Tensor, Tensor]:
    """Ascending eigenvalues and orthonormal eigenvectors (columns), computed by CuPy.

    Args:
        A: ``(..., n, n)`` float32/float64 CUDA tensor; only one triangle is read.
        lower: read the lower triangle (else the upper).

    Returns:
        ``(w, V)`` with ``w`` of shape ``(..., n)`` and ``V`` of shape ``(..., n, n)``.

    Raises:
        ModuleNotFoundError: when CuPy is not installed.

    Example:
        >>> w, V = eigh(torch.eye(3, device="cuda"), True)  # doctest: +SKIP
    """
    w, v = _solve(A, lower, vectors=True)
    assert v is not None
    return w, v
