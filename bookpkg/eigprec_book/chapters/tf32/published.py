"""A real GPU's run of the chapter's diag(QᵀLQ) experiment, as published by NVIDIA, and
the emulator's three roundings beside it.

NVIDIA's Emerging-Optimizers documentation (primer page "TF32 Q^T L Q precision loss —
standalone demo", file ``docs/primer/gradient_spike/tf32-eigval-precision-loss.md`` at
commit 23eb7f3d1b4027d477d68bf7bdae6b66db4a1bb7) builds the same L and Q as
:func:`~eigprec_book.chapters.tf32.experiments.build_qtlq_problem` (n = 128, the same spectrum,
Q from the QR factor of ``torch.randn`` with generator seed 0, float64, cast to float32)
and prints ``diag(QᵀLQ)`` at thirteen indices, computed on a CUDA device at
``torch.set_float32_matmul_precision("highest")`` and ``("high")``. The page names no GPU
model, driver or library version. Its printed values (five significant digits) are stored
here as data, with that citation; nothing in this module measures a GPU.
"""

from __future__ import annotations

import math

import torch

from eigprec.tf32 import ROUNDINGS

from .experiments import TABLE_INDICES, build_qtlq_problem, diag_qtlq

__all__ = [
    "PUBLISHED_QTLQ",
    "PUBLISHED_QTLQ_SOURCE",
    "compare_published_qtlq",
    "diag_qtlq_roundings",
]

#: Key of the bibliography entry of the published table.
PUBLISHED_QTLQ_SOURCE = "emergingoptimizers_tf32demo"

#: index -> (float32 'highest', TF32 'high') as printed on the cited page (``%.5g``).
PUBLISHED_QTLQ: dict[int, tuple[float, float]] = {
    0: (2.5e06, 2.4999e06),
    1: (2.45e06, 2.4501e06),
    4: (2.3e06, 2.2999e06),
    20: (2.8069e05, 2.8067e05),
    50: (4368.3, 4366.8),
    80: (67.979, 75.758),
    100: (4.2453, -5.1326),
    115: (0.52618, 16.15),
    120: (0.26051, 4.6133),
    124: (0.15539, -12.385),
    125: (0.13418, -1.5987),
    126: (0.11431, -27.317),
    127: (0.10366, -6.226),
}


def diag_qtlq_roundings(
    roundings: tuple[str, ...] = ROUNDINGS, n: int = 128, seed: int = 0
) -> dict[str, torch.Tensor]:
    """``diag(QᵀLQ)`` of the chapter's problem with TF32 emulated under each rounding.

    Always emulated on the CPU, so that every rounding can be shown even where the page
    runs on a real TF32 GPU.

    Args:
        roundings: emulator roundings to run (see :data:`eigprec.tf32.ROUNDINGS`).
        n: matrix size.
        seed: seed of the generator that draws Q.

    Returns:
        Rounding -> float64 estimates of the ``n`` eigenvalues.

    Raises:
        ValueError: for an unknown rounding (before any work).

    Example:
        >>> est = diag_qtlq_roundings(("rna", "rz"), n=16)
        >>> sorted(est), est["rz"].shape
        (['rna', 'rz'], torch.Size([16]))
    """
    unknown = [r for r in roundings if r not in ROUNDINGS]
    if unknown or not roundings:
        raise ValueError(f"roundings must be a non-empty subset of {ROUNDINGS}, got {roundings}")
    big_l, q, _ = build_qtlq_problem(n=n, seed=seed, device="cpu")
    return {r: diag_qtlq(big_l, q, "tf32", r) for r in roundings}


def _sig5(v: float) -> float:
    return float(f"{v:.5g}")


def compare_published_qtlq(
    estimates: dict[str, torch.Tensor], fp32: torch.Tensor, eigenvalues: torch.Tensor
) -> dict[str, object]:
    """Put the published GPU table beside emulated estimates of the same experiment.

    Args:
        estimates: rounding -> float64 TF32 estimates (:func:`diag_qtlq_roundings`).
        fp32: this machine's float32 ('highest') estimates of the same problem.
        eigenvalues: the true λ (length 128).

    Returns:
        ``rows``: one dict per published index with ``index``, ``true``, ``gpu_fp32``,
        ``gpu_tf32``, ``fp32`` (this machine) and one entry per rounding;
        ``tail_diff``: rounding -> largest ``|emulated - published TF32|`` over the
        published indices whose value is below 100 in magnitude (there five printed
        digits resolve 0.001 or finer); ``fp32_tail_diff``: the same for float32 here
        against the GPU's float32, the size of accumulation-order differences alone;
        ``head_digits``: rounding -> how many of the published TF32 values with magnitude
        100 or more the emulation reproduces to all five printed digits.

    Raises:
        ValueError: if the inputs do not have the published problem's 128 entries.

    Example:
        >>> L, Q, lam = build_qtlq_problem()
        >>> cmp = compare_published_qtlq(diag_qtlq_roundings(("rna",)), diag_qtlq(L, Q), lam)
        >>> len(cmp["rows"])
        13
    """
    if eigenvalues.numel() != 128 or fp32.numel() != 128:
        raise ValueError("the published table is of the n = 128 problem")
    if any(e.numel() != 128 for e in estimates.values()):
        raise ValueError("every estimate must have the published problem's 128 entries")
    rows = []
    tail_diff = dict.fromkeys(estimates, 0.0)
    head_digits = dict.fromkeys(estimates, 0)
    fp32_tail_diff = 0.0
    for i in TABLE_INDICES:
        gpu_fp32, gpu_tf32 = PUBLISHED_QTLQ[i]
        row = {
            "index": float(i),
            "true": float(eigenvalues[i]),
            "gpu_fp32": gpu_fp32,
            "gpu_tf32": gpu_tf32,
            "fp32": float(fp32[i]),
        }
        for r, est in estimates.items():
            v = float(est[i])
            row[r] = v
            if abs(gpu_tf32) < 100:
                tail_diff[r] = max(tail_diff[r], abs(v - gpu_tf32))
            else:
                head_digits[r] += int(math.isclose(_sig5(v), gpu_tf32, rel_tol=1e-9))
        if abs(gpu_fp32) < 100:
            fp32_tail_diff = max(fp32_tail_diff, abs(float(fp32[i]) - gpu_fp32))
        rows.append(row)
    n_head = sum(abs(PUBLISHED_QTLQ[i][1]) >= 100 for i in TABLE_INDICES)
    return {
        "rows": rows,
        "tail_diff": tail_diff,
        "fp32_tail_diff": fp32_tail_diff,
        "head_digits": head_digits,
        "n_head": n_head,
        "n_tail": len(TABLE_INDICES) - n_head,
    }
