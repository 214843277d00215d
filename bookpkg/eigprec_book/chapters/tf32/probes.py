"""GPU probes of the TF32 chapter: which rounding a GPU's TF32 uses, and its throughput.

The chapter calls them live where a TF32 GPU executes the page; the recorder
(``python -m eigprec_book.record tf32``) calls the same functions and writes their results to
``book/data/`` for builds without one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, matmul_3xtf32, round_tf32
from eigprec.timing import time_side_by_side
from eigprec_book.chapters.tf32.experiments import TABLE_INDICES, diag_qtlq_experiment

__all__ = [
    "PROBE_VALUES",
    "TF32_LEVEL",
    "coverage_probe",
    "diag_record",
    "rounding_probe",
    "throughput",
]

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


#: Norm-wise relative error above which a float32 operation counts as having run in TF32:
#: TF32's operand rounding alone costs about 2**-12 (2.4e-4) on random data, float32's
#: arithmetic about 1e-7 to 1e-6 at these sizes.
TF32_LEVEL = 2e-5


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double().cpu(), ref.double().cpu()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def coverage_probe(device: torch.device | str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Which float32 operation families run in TF32 on ``device``, measured.

    Each family of :data:`~eigprec_book.chapters.tf32.coverage.TF32_COVERAGE` with a probe key
    runs on seeded random data at precision ``'highest'`` and at ``'high'`` (cuDNN's own
    switches left at torch's defaults), and its norm-wise relative error against a float64
    run of the same float32 inputs is compared with :data:`TF32_LEVEL`. For the ``eigh``
    backward the question is whether ``'high'`` changes the gradient at all; for ``cdist``
    the run inside a bfloat16 autocast region is measured too.

    Args:
        device: where the operations run.
        seed: seed of the generator that draws the data.

    Returns:
        Probe key -> ``{"highest": err, "high": err, "tf32_at_highest": bool,
        "tf32_at_high": bool}`` (plus ``"autocast_bf16"`` for ``cdist`` and
        ``"changed_by_high"`` for ``eigh_backward``).

    Example:
        >>> cov = coverage_probe("cpu")
        >>> cov["mm"]["tf32_at_highest"]
        False
    """
    dev = torch.device(device)
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dev)

    a, b, x = rnd(256, 256), rnd(256, 256), rnd(256)
    img, ker = rnd(8, 64, 64, 64), rnd(64, 64, 3, 3)
    lstm = torch.nn.LSTM(64, 64, batch_first=True).to(dev)
    seq = rnd(4, 20, 64)
    q, k, v = rnd(2, 4, 128, 64), rnd(2, 4, 128, 64), rnd(2, 4, 128, 64)
    pts, pts2 = rnd(100, 64), rnd(90, 64) + 0.5
    sym = rnd(48, 48)
    sym = sym @ sym.T / 48 + torch.eye(48, device=dev)

    def lstm_run(dtype: torch.dtype) -> torch.Tensor:
        net = lstm if dtype == torch.float32 else _as(lstm, dtype)
        with torch.no_grad():
            return net(seq.to(dtype))[0]

    def eigh_grad(dtype: torch.dtype) -> torch.Tensor:
        s = sym.to(dtype).clone().requires_grad_(True)
        vals, vecs = torch.linalg.eigh(s)
        (vals.pow(2).sum() + vecs[:, -4:].pow(3).sum()).backward()
        return s.grad

    families: dict[str, Callable[[torch.dtype], torch.Tensor]] = {
        "mm": lambda t: a.to(t) @ b.to(t),
        "vecmat": lambda t: x.to(t) @ b.to(t),
        "linear1d": lambda t: torch.nn.functional.linear(x.to(t), b.to(t)),
        "mv": lambda t: a.to(t) @ x.to(t),
        "conv": lambda t: torch.nn.functional.conv2d(img.to(t), ker.to(t)),
        "lstm": lstm_run,
        "sdpa": lambda t: torch.nn.functional.scaled_dot_product_attention(
            q.to(t), k.to(t), v.to(t)
        ),
        "cdist": lambda t: torch.cdist(pts.to(t), pts2.to(t)),
        "eigh_backward": eigh_grad,
    }
    out: dict[str, dict[str, Any]] = {}
    for key, run in families.items():
        ref = run(torch.float64)
        row: dict[str, Any] = {}
        results = {}
        for mode in ("highest", "high"):
            with matmul_precision(mode):
                results[mode] = run(torch.float32)
                row[f"switches_{mode}"] = _switches()
            row[mode] = _rel(results[mode], ref)
            row[f"tf32_at_{mode}"] = row[mode] > TF32_LEVEL
        if key == "eigh_backward":
            row["changed_by_high"] = not torch.equal(results["high"], results["highest"])
        if key == "cdist" and dev.type == "cuda":
            with matmul_precision("high"), torch.autocast("cuda", dtype=torch.bfloat16):
                inside = run(torch.float32)
            row["autocast_bf16"] = _rel(inside, ref)
            row["autocast_dtype"] = str(inside.dtype).removeprefix("torch.")
        out[key] = row
    return out


def _switches() -> dict[str, str]:
    """Torch's TF32 switches as they stand (what decided each measured run)."""
    found = {"cudnn.allow_tf32": str(torch.backends.cudnn.allow_tf32)}
    for name, obj in (
        ("cuda.matmul", torch.backends.cuda.matmul),
        ("cudnn.conv", getattr(torch.backends.cudnn, "conv", None)),
        ("cudnn.rnn", getattr(torch.backends.cudnn, "rnn", None)),
    ):
        if obj is not None and hasattr(obj, "fp32_precision"):
            found[f"{name}.fp32_precision"] = str(obj.fp32_precision)
    return found


def _as(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of ``module`` in ``dtype`` (the float64 reference of a float32 layer)."""
    import copy

    return copy.deepcopy(module).to(dtype)
