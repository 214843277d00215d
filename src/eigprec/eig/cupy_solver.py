"""Hand-off of batched symmetric eigenproblems from torch to CuPy's cuSOLVER bindings.

Private helper of :mod:`eigprec.eig`. Nothing here imports CuPy at module import time: the
package must import on machines without CUDA, and CuPy's import is slow even where it works.

The solver is cuSOLVER's batched Jacobi (``?syevjBatched``, what ``cupy.linalg.eigh`` uses for
batched input), called through CuPy's bindings so that its per-matrix status stays on the
device: a matrix on which it fails comes back as NaN, like a NaN input, with no host sync.
Failure is the solver's status or, since cuSOLVER did not always set it (see
``unconverged``), eigenvalues whose squares miss the matrix's squared Frobenius norm by more
than converged Jacobi's accuracy allows, taken on the matrix scaled to unit largest entry.
The DLPack exchange in both directions shares memory; the solver overwrites its input, so it
gets one copy of the batch.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["cupy_available", "cupy_package", "eigh", "eigvalsh", "install_hint"]


def cupy_package(torch_cuda: str | None = None) -> str:
    """The CuPy wheel whose CUDA major matches torch's CUDA build.

    Args:
        torch_cuda: a CUDA version such as ``"13.0"`` (default: ``torch.version.cuda``).

    Returns:
        ``"cupy-cuda13x"`` for CUDA 13, ``"cupy-cuda12x"`` for CUDA 12, and so on; the
        CUDA 13 package where torch has no CUDA build (the one the recording machines use).

    Example:
        >>> cupy_package("13.0"), cupy_package("12.8")
        ('cupy-cuda13x', 'cupy-cuda12x')
    """
    version = torch.version.cuda if torch_cuda is None else torch_cuda
    major = str(version).split(".")[0] if version else "13"
    return f"cupy-cuda{major if major.isdigit() else '13'}x"


def install_hint(torch_cuda: str | None = None) -> str:
    """How to install the CuPy that matches torch's CUDA major (for error messages).

    Args:
        torch_cuda: as for :func:`cupy_package`.

    Returns:
        A ``pip install`` line naming the package.

    Example:
        >>> install_hint("13.0")
        'pip install "cupy-cuda13x[ctk]>=14"'
    """
    return f'pip install "{cupy_package(torch_cuda)}[ctk]>=14"'


class _TorchStream:
    """torch's stream handle behind the CUDA stream protocol that CuPy 14 reads.

    ``cupy.cuda.Stream.from_external`` takes an object with ``__cuda_stream__`` (CuPy 14
    deprecates ``ExternalStream``, one warning per call); torch's own stream class has the
    protocol only in recent releases, so the handle is wrapped here.
    """

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


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


def _syevj_batched(a, lower: bool, vectors: bool, max_sweeps: int | None = None):
    """cuSOLVER's batched Jacobi solver on a C-contiguous ``(b, n, n)`` CuPy array.

    Called directly rather than through ``cupy.linalg.eigh``, which allocates the per-matrix
    status array itself and reads it only under ``cupyx.errstate(linalg=...)`` (a host
    synchronisation): without that, a matrix on which Jacobi did not converge came back as
    plausible numbers. Here the status stays on the device and is returned.

    Returns:
        ``(w, v, info)``: eigenvalues ``(b, n)``; the overwritten input holding eigenvectors
        (as rows, see below) or None; int32 status ``(b,)``, 0 where the solver succeeded.
    """
    import cupy
    from cupy.cuda import device as cupy_device
    from cupy_backends.cuda.libs import cublas, cusolver

    batch, n, _ = a.shape
    # cuSOLVER reads column-major storage. A C-ordered symmetric matrix read column-major is
    # its transpose: the same matrix, with the lower and upper triangles swapped. On return the
    # column-major eigenvector matrix V sits in C order as Vᵀ (eigenvectors as rows).
    uplo = cublas.CUBLAS_FILL_MODE_UPPER if lower else cublas.CUBLAS_FILL_MODE_LOWER
    jobz = cusolver.CUSOLVER_EIG_MODE_VECTOR if vectors else cusolver.CUSOLVER_EIG_MODE_NOVECTOR
    single = a.dtype == cupy.float32
    size_fn = cusolver.ssyevjBatched_bufferSize if single else cusolver.dsyevjBatched_bufferSize
    solve_fn = cusolver.ssyevjBatched if single else cusolver.dsyevjBatched
    v = a.copy()  # the solver overwrites its input
    w = cupy.empty((batch, n), dtype=a.dtype)
    info = cupy.zeros((batch,), dtype=cupy.int32)
    if batch == 0:
        return w, (v if vectors else None), info
    handle = cupy_device.get_cusolver_handle()  # CuPy binds it to the current stream per call
    params = cusolver.createSyevjInfo()
    try:
        # Ascending order set explicitly, as torch does: the default is documented, not promised
        # by the bindings, and kth_eigvalsh indexes the k-th value.
        cusolver.xsyevjSetSortEig(params, 1)
        if max_sweeps is not None:  # tests only: force non-convergence
            cusolver.xsyevjSetMaxSweeps(params, max_sweeps)
        lwork = size_fn(handle, jobz, uplo, n, v.data.ptr, n, w.data.ptr, params, batch)
        work = cupy.empty((lwork,), dtype=a.dtype)
        solve_fn(
            handle, jobz, uplo, n, v.data.ptr, n, w.data.ptr, work.data.ptr, lwork,
            info.data.ptr, params, batch,
        )  # fmt: skip
    finally:
        cusolver.destroySyevjInfo(params)
    return w, (v if vectors else None), info


#: Bound of ``unconverged``, in ulps of A's dtype: Σ λ_i² may miss ‖A‖_F² by
#: ``_FRO_N · n + _FRO_ULPS`` ulps of ‖A‖_F². Measured on an H200 (CuPy 14.2, 27 November
#: 2026; tests/data/cupy_convergence_h200.json, random, Gram, graded and shifted batches,
#: n = 16 … 1024): converged syevjBatched missed by at most 2.9 n ulps up to n = 128 and by
#: 9.4–18.3 n ulps from n = 256 (float32 and float64 alike, the same in every matrix: a
#: systematic shrink of its eigenvalues), where 32 n + 64 allows 32.25 n; stopped after one
#: sweep it missed by at least 46.6 n ulps (float32, n = 16, shifted; 10⁴ n ulps and more for
#: random and Gram, 10¹⁰ and more in float64), where the bound allows 36 n. One sweep leaves
#: some graded matrices (1 … 1e-6) within rounding of converged: 12 of 256 passed at n = 16,
#: none from n = 32. cuSOLVER's own status
#: was 0 on every stopped solve below n = 256 and nonzero from n = 256: the check is what
#: sees them below. LAPACK's eigenvalues missed by at most 11.5 ulps. A trace test
#: (Σ λ_i = tr A within 3 n + 32 ulps of max|λ|) and a Frobenius bound of 4 √n + 32 ulps
#: stood here until that record: they marked every converged float32 CuPy solve from
#: n = 32 on failed (the H200 accuracy grid of the same day).
_FRO_N, _FRO_ULPS = 32.0, 64.0


def unconverged(a: Tensor, w: Tensor, lower: bool) -> Tensor:
    """Per matrix, whether ``w`` cannot be the eigenvalues of ``a``'s read triangle (no sync).

    cuSOLVER documents ``info = n + 1`` for a matrix on which Jacobi did not converge, but on
    an H100 (CUDA 13, CuPy 14.2; n = 40, one sweep allowed) it reported 0 and returned the
    unconverged diagonal. Orthogonal similarity keeps the Frobenius norm, so the true
    eigenvalues have ``Σ w_i² = ‖A‖_F²``; an unconverged diagonal misses it by the
    off-diagonal mass left, and a matrix is marked failed where the miss exceeds what
    converged Jacobi's own accuracy allows (``_FRO_N``, ``_FRO_ULPS``, set from a GPU record).

    Scale-free: it runs on ``A / max|a_ij|`` and ``w / max|a_ij|`` in float64, so no entry
    is squared at its own scale (squares of valid float32 entries of 1e-22, or float64 ones
    of 1e-160, underflowed to 0 and the matrix was marked failed) and none overflows; float64
    keeps the sums' own rounding far below the bound. A zero matrix passes with ``w = 0``.
    This is a convergence test, not an accuracy test: eigenvalues of a nearby matrix pass, and
    so do float32 Jacobi's at large n (6.4e-4 · max|λ| at n = 1024), which is why
    ``backend="auto"`` does not send shapes where Jacobi is inaccurate to CuPy.
    """
    n = a.shape[-1]
    read = torch.ones(n, n, dtype=torch.bool, device=a.device)
    read = read.tril(-1) if lower else read.triu(1)
    diag = a.diagonal(dim1=-2, dim2=-1)
    off = torch.where(read, a, 0)
    scale = torch.maximum(off.abs().amax((-2, -1)), diag.abs().amax(-1)).double()
    scale = torch.where(scale > 0, scale, torch.ones((), dtype=scale.dtype, device=a.device))
    off = off.double() / scale[..., None, None]
    diag = diag.double() / scale[..., None]
    ws = w.double() / scale[..., None]
    eps = torch.finfo(a.dtype).eps
    fro2 = 2 * off.square().sum((-2, -1)) + diag.square().sum(-1)
    fro_miss = (fro2 - ws.square().sum(-1)).abs()
    return fro_miss > (_FRO_N * n + _FRO_ULPS) * eps * fro2


def mark_failures(
    w: Tensor, v: Tensor | None, info: Tensor, unconverged: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """NaN for every batch entry whose solver status is nonzero (or ``unconverged``), on the
    device (no sync)."""
    failed = info != 0
    if unconverged is not None:
        failed = failed | unconverged
    nan = torch.full((), float("nan"), dtype=w.dtype, device=w.device)
    w = torch.where(failed[:, None], nan, w)
    if v is not None:
        v = torch.where(failed[:, None, None], nan, v)
    return w, v


def solve(
    A: Tensor, lower: bool, vectors: bool, max_sweeps: int | None = None
) -> tuple[Tensor, Tensor | None]:
    import cupy

    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        # CuPy binds its cuSOLVER handle to the stream with cusolverDnSetStream, which fails
        # during CUDA-graph capture, and the solver's workspace is allocated outside the graph.
        raise RuntimeError(
            'kth_eigvalsh: backend="cupy" cannot run while a CUDA graph is being captured '
            '(cuSOLVER\'s stream binding is not capturable); use backend="torch" inside '
            "torch.cuda.graph / torch.compile(mode='reduce-overhead')"
        )
    *batch_shape, n, _ = A.shape
    device = A.device.index if A.device.index is not None else torch.cuda.current_device()
    # CuPy must queue its kernels on the stream torch is using *now*. On any other stream the
    # solver could read A before torch has finished writing it, and torch could recycle A's
    # memory (its caching allocator is stream-ordered) while CuPy still reads it. Sharing the
    # stream makes both orderings hold without a single host synchronisation.
    # [show:handoff]
    stream = torch.cuda.current_stream(device)
    # detach: DLPack refuses tensors that require grad, and inside kth_eigvalsh's custom op the
    # input still has the flag (contiguous() may return it unchanged); the op has its backward.
    a_in = A.detach().reshape(-1, n, n).contiguous()
    with cupy.cuda.Device(device):
        on_torch_stream = cupy.cuda.Stream.from_external(_TorchStream(stream.cuda_stream))
    with cupy.cuda.Device(device), on_torch_stream:
        # from_dlpack passes CuPy's current stream (== torch's) to __dlpack__, so torch
        # inserts no cross-stream wait either.
        w, v, info = _syevj_batched(cupy.from_dlpack(a_in), lower, vectors, max_sweeps)
        w_t = torch.from_dlpack(w)
        v_t = torch.from_dlpack(v).mT if v is not None else None
        info_t = torch.from_dlpack(info)
    w_t, v_t = mark_failures(w_t, v_t, info_t, unconverged(a_in, w_t, lower))
    # [/show:handoff]
    w_t = w_t.reshape(*batch_shape, n)
    return w_t, (v_t.reshape(*batch_shape, n, n) if v_t is not None else None)


def eigvalsh(A: Tensor, lower: bool) -> Tensor:
    """Ascending eigenvalues of a batch of symmetric CUDA matrices, computed by CuPy.

    Args:
        A: ``(..., n, n)`` float32/float64 CUDA tensor; only one triangle is read.
        lower: read the lower triangle (else the upper).

    Returns:
        ``(..., n)`` tensor on ``A``'s device, NaN for matrices the solver failed on.

    Raises:
        ModuleNotFoundError: when CuPy is not installed.
        RuntimeError: while a CUDA graph is being captured.

    Example:
        >>> w = eigvalsh(torch.eye(3, device="cuda"), True)  # doctest: +SKIP
    """
    return solve(A, lower, vectors=False)[0]


def eigh(A: Tensor, lower: bool) -> tuple[Tensor, Tensor]:
    """Ascending eigenvalues and orthonormal eigenvectors (columns), computed by CuPy.

    Args:
        A: ``(..., n, n)`` float32/float64 CUDA tensor; only one triangle is read.
        lower: read the lower triangle (else the upper).

    Returns:
        ``(w, V)`` with ``w`` of shape ``(..., n)`` and ``V`` of shape ``(..., n, n)``, NaN
        for matrices the solver failed on.

    Raises:
        ModuleNotFoundError: when CuPy is not installed.
        RuntimeError: while a CUDA graph is being captured.

    Example:
        >>> w, V = eigh(torch.eye(3, device="cuda"), True)  # doctest: +SKIP
    """
    w, v = solve(A, lower, vectors=True)
    assert v is not None
    return w, v
