"""GPU probes of the TF32 chapter: which rounding a GPU's TF32 uses, and its throughput.

The chapter calls them live where a TF32 GPU executes the page; the recorder
(``python -m eigprec.bench tf32``) calls the same functions and writes their results to
``book/data/`` for builds without one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from eigprec.chapters.tf32.experiments import TABLE_INDICES, diag_qtlq_experiment
from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, matmul_3xtf32, round_tf32
from eigprec.timing import time_side_by_side

__all__ = ["PROBE_VALUES", "diag_record", "rounding_probe", "throughput"]

#: Operands whose TF32 images tell the roundings apart (ties, neighbours of ties).
PROBE_VALUES = (
    1 + 2**-11,  # tie: rna -> 1 + 2**-10, rne -> 1, rz -> 1
    1 + 3 * 2**-11,  # tie with odd kept part: rna, rne -> 1 + 2**-9, rz -> 1 + 2**-10
    -(1 + 2**-11),  # sign symmetry of the tie
    1 + 2**-11 + 2**-20,  # just above the tie: nearest -> up, rz -> down
    1 + 2**-12,  # below the tie: every rounding -> 1
    1024.5,  # pytorch issue 53635
    2 - 2**-12,  # tie that carries into the next binade under rna/rne
)


def _matches(observed: torch.Tensor, values: torch.Tensor) -> list[str]:
    candidates = {"fp32": values, **{r: round_tf32(values, r) for r in ROUNDINGS}}
    return [name for name, ref in candidates.items() if torch.equal(observed, ref)]


def rounding_probe(device: torch.device | str, n: int = 128, mode: str = "high") -> dict[str, Any]:
    """Which rounding the device's TF32 matmul applies to its operands.

    Args:
        device: a CUDA device with TF32.
        n: size of the probing matrices (large enough for tensor-core kernels).
        mode: the float32 matmul precision to probe (``'high'``; ``'medium'`` checks
            that cuBLAS treats it as TF32 too).

    Returns:
        ``{"values", "first_operand", "second_operand", "matrix_vector", "matches"}``:
        the probe values, what each product returned for them, and for each of the
        three products the names among ``fp32``/``rna``/``rne``/``rz`` it agrees with.
    """
    values = torch.tensor(PROBE_VALUES, dtype=torch.float32)
    k = len(values)
    eye = torch.eye(n, device=device)
    first = torch.zeros(n, n, device=device)
    first[:k, 0] = values.to(device)
    second = torch.zeros(n, n, device=device)
    second[0, :k] = values.to(device)
    with matmul_precision(mode):
        out_first = (first @ eye)[:k, 0].cpu()
        out_second = (eye @ second)[0, :k].cpu()
        out_mv = (first @ eye[:, 0]).cpu()[:k]
    return {
        "values": values.tolist(),
        "first_operand": out_first.tolist(),
        "second_operand": out_second.tolist(),
        "matrix_vector": out_mv.tolist(),
        "matches": {
            "first_operand": _matches(out_first, values),
            "second_operand": _matches(out_second, values),
            "matrix_vector": _matches(out_mv, values),
        },
    }


def diag_record(device: torch.device | str) -> dict[str, Any]:
    """The chapter's diag(QᵀLQ) experiment on ``device``, all 128 entries.

    Args:
        device: where the matmuls run (real TF32 at 'high' on a capable GPU).

    Returns:
        ``{"precision": "high", "tf32_real", "indices", "true", <method>: [...]}``.
    """
    res = diag_qtlq_experiment(device=device, methods=("fp32", "tf32", "3xtf32"))
    out: dict[str, Any] = {
        "precision": "high",
        "tf32_real": res.tf32_real,
        "indices": list(TABLE_INDICES),
        "true": res.eigenvalues.tolist(),
    }
    out.update({m: v.tolist() for m, v in res.estimates.items()})
    return out


#: Products per timed call: one precision switch is amortised over this many products.
_BURST = 10


def _products(mode: str, product: Callable[..., torch.Tensor], a: torch.Tensor, b: torch.Tensor):
    with matmul_precision(mode):
        for _ in range(_BURST):
            out = product(a, b)
    return out


def throughput(sizes: list[int], repeats: int, device: torch.device | str) -> list[dict[str, Any]]:
    """Square float32 matmul speed as float32, TF32 and 3xTF32, in TFLOP/s (2n³ per product).

    Args:
        sizes: matrix sizes.
        repeats: timed products per size and mode.
        device: a CUDA device.

    Returns:
        One dict per size: ``size``, ``fp32_tflops``, ``tf32_tflops``, ``3xtf32_tflops``.
    """
    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        a = torch.randn(n, n, generator=gen).to(device)
        b = torch.randn(n, n, generator=gen).to(device)
        flop = 2.0 * n**3
        seconds = time_side_by_side(
            {
                "fp32": lambda a=a, b=b: _products("highest", torch.matmul, a, b),
                "tf32": lambda a=a, b=b: _products("high", torch.matmul, a, b),
                "3xtf32": lambda a=a, b=b: _products("high", matmul_3xtf32, a, b),
            },
            repeats=repeats,
            warmup=1,
            device=device,
        )
        t_fp32, t_tf32, t_3x = (seconds[k] / _BURST for k in ("fp32", "tf32", "3xtf32"))
        rows.append(
            {
                "size": n,
                "fp32_tflops": flop / t_fp32 / 1e12,
                "tf32_tflops": flop / t_tf32 / 1e12,
                "3xtf32_tflops": flop / t_3x / 1e12,
            }
        )
        del a, b
    return rows
