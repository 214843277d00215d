"""CuPy's per-matrix solver status for the eig recorder (cuSOLVER's batched Jacobi reports
convergence per matrix; CuPy checks it only under ``cupyx.errstate(linalg=...)``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from eigprec.eig import cupy_solver as _cupy_bridge

__all__ = ["cupy_solver_status"]


def cupy_solver_status(
    sizes: Sequence[int] = (16, 32, 33, 45, 64, 100),
    batch: int = 500,
    seed: int = 0,
    device: str = "cuda",
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
        device: ``"cuda"``; ``"cpu"`` only for tests through a fake CuPy.

    Returns:
        One dict per n.

    Raises:
        RuntimeError: without CUDA or CuPy.
    """

    if not _cupy_bridge.cupy_available() or (device == "cuda" and not torch.cuda.is_available()):
        raise RuntimeError("cupy_solver_status needs a CUDA GPU and CuPy")
    import cupy
    import cupyx

    rows = []
    for n in sizes:
        g = torch.Generator(device=device).manual_seed(seed)
        B = torch.randn(batch, n, n, device=device, generator=g)
        A = ((B + B.mT) / 2).contiguous()
        if device == "cuda":
            torch.cuda.synchronize()
        # The bridge's own call, on torch's stream: the solver the CuPy backend runs, status kept.
        stream = _cupy_bridge._TorchStream(torch.cuda.current_stream().cuda_stream)
        with cupy.cuda.Stream.from_external(stream):
            a = cupy.from_dlpack(A)
            w, v, info = _cupy_bridge._syevj_batched(a, lower=True, vectors=True)
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
