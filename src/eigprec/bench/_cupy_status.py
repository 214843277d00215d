"""CuPy's per-matrix solver status for the eig recorder (cuSOLVER's batched Jacobi reports
convergence per matrix; CuPy checks it only under ``cupyx.errstate(linalg=...)``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["cupy_solver_status"]


def _solve_status(a: Any, n: int, batch: int) -> tuple[Any, Any, Any]:
    """cuSOLVER syevjBatched on a CuPy batch; returns (w, v, info) with the info array."""
    import cupy
    from cupy.cuda import device as cupy_device
    from cupy_backends.cuda.libs import cublas, cusolver

    single = a.dtype == cupy.float32
    size_fn = cusolver.ssyevjBatched_bufferSize if single else cusolver.dsyevjBatched_bufferSize
    solve = cusolver.ssyevjBatched if single else cusolver.dsyevjBatched
    v = a.copy()  # symmetric: row-major storage is the column-major matrix cuSOLVER expects
    w = cupy.empty((batch, n), dtype=a.dtype)
    info = cupy.empty((batch,), dtype=cupy.int32)
    handle = cupy_device.get_cusolver_handle()
    jobz, uplo = cusolver.CUSOLVER_EIG_MODE_VECTOR, cublas.CUBLAS_FILL_MODE_LOWER
    params = cusolver.createSyevjInfo()
    try:
        lwork = size_fn(handle, jobz, uplo, n, v.data.ptr, n, w.data.ptr, params, batch)
        work = cupy.empty(lwork, dtype=a.dtype)
        solve(
            handle, jobz, uplo, n, v.data.ptr, n, w.data.ptr, work.data.ptr, lwork,
            info.data.ptr, params, batch,
        )  # fmt: skip
    finally:
        cusolver.destroySyevjInfo(params)
    return w, v, info


def cupy_solver_status(
    sizes: Sequence[int] = (16, 32, 33, 45, 64, 100), batch: int = 500, seed: int = 0
) -> list[dict[str, Any]]:
    """Per-matrix convergence of the batched solver CuPy uses, and whether CuPy reports it.

    For each n: a float32 batch of random symmetric matrices through cuSOLVER's
    ``syevjBatched`` (what ``cupy.linalg.eigh`` calls for a batch), its ``info`` array read
    back (0: converged; k > 0: not converged), the largest residual ‖AV − VΛ‖_F/‖A‖_F and
    eigenvalue error against float64, CuPy's default ``linalg`` error mode, and whether
    ``cupy.linalg.eigh`` raises under ``cupyx.errstate(linalg="raise")``.

    Args:
        sizes: matrix sizes.
        batch: matrices per size.
        seed: torch generator seed.

    Returns:
        One dict per n.

    Raises:
        RuntimeError: without CUDA or CuPy.
    """
    from eigprec import _cupy_bridge

    if not (torch.cuda.is_available() and _cupy_bridge.cupy_available()):
        raise RuntimeError("cupy_solver_status needs a CUDA GPU and CuPy")
    import cupy
    import cupyx

    rows = []
    for n in sizes:
        g = torch.Generator(device="cuda").manual_seed(seed)
        B = torch.randn(batch, n, n, device="cuda", generator=g)
        A = ((B + B.mT) / 2).contiguous()
        torch.cuda.synchronize()
        a = cupy.from_dlpack(A)
        w, v, info = _solve_status(a, n, batch)
        cupy.cuda.Device().synchronize()
        info_t = torch.from_dlpack(info).cpu()
        W = torch.from_dlpack(w).double()
        V = torch.from_dlpack(v).double().mT  # columns are eigenvectors
        A64 = A.double()
        res = torch.linalg.matrix_norm(A64 @ V - V * W[:, None, :]) / torch.linalg.matrix_norm(A64)
        ref = torch.linalg.eigvalsh(A64)
        err = (W.sort(dim=-1).values - ref).abs().amax(-1) / ref.abs().amax(-1)
        try:
            with cupyx.errstate(linalg="raise"):
                cupy.linalg.eigh(a)
                cupy.cuda.Device().synchronize()
            raised = None
        except Exception as exc:  # LinAlgError where an info entry is non-zero
            raised = f"{type(exc).__name__}: {exc}"
        rows.append(
            {
                "n": n,
                "batch": batch,
                "routine": "syevjBatched",
                "converged": int((info_t == 0).sum()),
                "not_converged": int((info_t > 0).sum()),
                "bad_argument": int((info_t < 0).sum()),
                "info_values": sorted({int(x) for x in info_t.tolist()}),
                "max_residual": float(res.max()),
                "max_eigenvalue_rel_error": float(err.max()),
                "cupy_default_linalg_mode": cupyx.geterr().get("linalg"),
                "raises_under_errstate": raised,
            }
        )
    return rows
