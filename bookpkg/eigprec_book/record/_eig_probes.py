"""What the recording machine's torch and CuPy do, asked before the eig record's grid.

Kept apart from :mod:`eigprec_book.record.eig` (which re-exports both functions) so that
the recorder stays a readable size.
"""

from __future__ import annotations

from typing import Any

import torch

from eigprec.eig import kth_eigvalsh

__all__ = ["TORCH_BATCHES_EVERY_N", "cupy_smoke", "torch_eigh_batching"]

#: From this torch release, ``torch.linalg.eigh`` on CUDA reaches cuSOLVER's batched solver
#: for every n (pytorch PR 175403; before, only for n <= 32: pytorch issue 175585).
TORCH_BATCHES_EVERY_N = (2, 12)


def torch_eigh_batching(version: str | None = None) -> dict[str, Any]:
    """What the installed torch's batched ``eigh`` does on CUDA, for the record and its reader.

    Args:
        version: a torch version string (default: the installed ``torch.__version__``).

    Returns:
        ``{"torch", "batched_every_n", "note"}``: the version, whether ``eigh`` on a CUDA
        batch reaches cuSOLVER's batched solver for every n (torch >= 2.12) or loops over the
        batch for n > 32, and a sentence saying so.

    Example:
        >>> torch_eigh_batching("2.11.0+cu130")["batched_every_n"]
        False
        >>> torch_eigh_batching("2.13.0")["batched_every_n"]
        True
    """
    version = torch.__version__ if version is None else version
    every_n = torch.torch_version.TorchVersion(version) >= TORCH_BATCHES_EVERY_N
    if every_n:
        note = (
            f"torch {version} batches eigh on CUDA for every n (from 2.12): "
            "CuPy's batched Jacobi is timed against an already batched torch"
        )
    else:
        note = (
            f"torch {version} loops eigh over a CUDA batch for n > 32 (before 2.12): "
            "that is where CuPy's batched Jacobi is expected to help"
        )
    return {"torch": version, "batched_every_n": bool(every_n), "note": note}


def cupy_smoke(device: str = "cuda", n: int = 8, batch: int = 4) -> str | None:
    """One small CuPy solve, checked against torch, before the timing grid relies on CuPy.

    Args:
        device: the device the grid runs on.
        n: matrix size.
        batch: matrices.

    Returns:
        None when ``kth_eigvalsh(backend="cupy")`` worked and agreed with torch, else the
        reason it cannot be used (the grid then runs on torch alone).

    Example:
        >>> cupy_smoke("cpu") is not None  # CuPy needs a CUDA tensor
        True
    """
    try:
        g = torch.Generator().manual_seed(1)
        B = torch.randn(batch, n, n, generator=g, dtype=torch.float32)
        A = ((B + B.mT) / 2).to(device)
        got = kth_eigvalsh(A, -1, backend="cupy")
        want = torch.linalg.eigvalsh(A)[..., -1]
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
            err = float((got - want).abs().max())
            return f"kth_eigvalsh(backend='cupy') differs from torch by {err:.3g}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
