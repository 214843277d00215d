"""``python -m eigprec_book.record tf32``: what a real TF32 GPU does, recorded for the book.

Three measurements on one CUDA device of compute capability >= 8.0:

1. *Rounding*: float32 operands of the form ``1 + 2**-11`` (a tie between two TF32
   values) and their neighbours go through a TF32 matmul against an identity, so the
   product shows the operand exactly as the tensor cores rounded it; the result is
   compared with :func:`~eigprec.tf32.round_tf32` under each rounding. The same is done
   for a matrix-vector product, which cuBLAS may run without tensor cores.
   The same probe at precision 'medium' shows whether cuBLAS treats it as TF32.
2. *diag(QᵀLQ)*: the chapter's experiment at precision 'high' (real TF32) and 'highest'.
3. *Throughput*: float32, TF32 and 3xTF32 matmuls at a few sizes, in TFLOP/s.
4. *Coverage*: which float32 operation families (matmul, matrix-vector, convolution, LSTM,
   attention, cdist, the ``eigh`` backward) run in TF32 at 'highest' and at 'high'
   (:func:`~eigprec_book.chapters.tf32.probes.coverage_probe`).

The probes themselves are the chapter's (:mod:`eigprec_book.chapters.tf32.probes`); this module
is the command line around them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from eigprec.runtime import describe_runtime
from eigprec.tf32 import is_tf32_capability
from eigprec_book.chapters.tf32.probes import (
    coverage_probe,
    diag_record,
    rounding_probe,
    throughput,
)
from eigprec_book.record._record import check_top_level, out_problem, write_record

__all__ = ["SCHEMA", "add_arguments", "measure", "refusal", "run", "validate_record"]

SCHEMA = "eigprec.bench.tf32/1"

_KEYS = {
    "schema": str,
    "provenance": dict,
    "rounding": dict,
    "rounding_medium": dict,
    "diag_qtlq": dict,
    "throughput": list,
}
_PROVENANCE_KEYS = ("gpu", "compute_capability", "driver", "torch", "cuda", "date")
_ROUNDING_KEYS = ("values", "first_operand", "second_operand", "matrix_vector", "matches")
_DIAG_KEYS = ("precision", "indices", "true", "fp32", "tf32", "3xtf32")
_THROUGHPUT_KEYS = ("size", "fp32_tflops", "tf32_tflops", "3xtf32_tflops")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the ``tf32`` subparser.
    """
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(v) for v in s.split(",")],
        default=[1024, 2048, 4096, 8192],
        help="comma-separated square matmul sizes for the throughput table",
    )
    parser.add_argument("--repeats", type=int, default=20, help="timed matmuls per size")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")


def validate_record(record: Any) -> None:
    """Check that ``record`` has the structure the chapter reads.

    Args:
        record: a decoded ``tf32`` recording.

    Raises:
        ValueError: naming the first missing or mistyped field.

    Example:
        >>> validate_record({"schema": SCHEMA})
        Traceback (most recent call last):
        ...
        ValueError: tf32 record: missing 'provenance'
    """
    check_top_level(record, "tf32", SCHEMA, _KEYS)
    for section, keys in (
        ("provenance", _PROVENANCE_KEYS),
        ("rounding", _ROUNDING_KEYS),
        ("rounding_medium", _ROUNDING_KEYS),
        ("diag_qtlq", _DIAG_KEYS),
    ):
        for key in keys:
            if key not in record[section]:
                raise ValueError(f"tf32 record: missing {section}.{key}")
    n = len(record["diag_qtlq"]["true"])
    for key in ("fp32", "tf32", "3xtf32"):
        if len(record["diag_qtlq"][key]) != n:
            raise ValueError(f"tf32 record: diag_qtlq.{key} has not {n} entries")
    # Recordings made before the coverage probe existed have none; a present one is checked.
    for key, row in record.get("coverage", {}).items():
        if not all(isinstance(row.get(m), int | float) for m in ("highest", "high")):
            raise ValueError(f"tf32 record: coverage.{key} lacks its 'highest'/'high' errors")
    if not record["throughput"]:
        raise ValueError("tf32 record: throughput is empty")
    for row in record["throughput"]:
        for key in _THROUGHPUT_KEYS:
            if not isinstance(row.get(key), int | float):
                raise ValueError(f"tf32 record: throughput row lacks a number {key!r}")


def measure(sizes: list[int], repeats: int, device: int = 0) -> dict[str, Any]:
    """All three measurements on CUDA device ``device``, as one record.

    Args:
        sizes: matmul sizes for the throughput table.
        repeats: timed products per size and mode.
        device: CUDA device index.

    Returns:
        The record (see :func:`validate_record`).
    """
    dev = torch.device("cuda", device)
    record = {
        "schema": SCHEMA,
        "provenance": describe_runtime().as_record(),
        "rounding": rounding_probe(dev),
        "rounding_medium": rounding_probe(dev, mode="medium"),
        "diag_qtlq": diag_record(dev),
        "throughput": throughput(sizes, repeats, dev),
        "coverage": coverage_probe(dev),
    }
    validate_record(record)
    return record


def refusal(device: int = 0) -> str | None:
    """Why this machine cannot record, or None when it can."""
    if not torch.cuda.is_available():
        return (
            "eigprec_book.record tf32 needs an NVIDIA GPU with compute capability >= 8.0; "
            "torch.cuda.is_available() is False here, so nothing was measured or written."
        )
    if torch.version.cuda is None:
        return "eigprec_book.record tf32 measures NVIDIA TF32; this torch is not a CUDA build."
    cap = torch.cuda.get_device_capability(device)
    if not is_tf32_capability(cap):
        name = torch.cuda.get_device_name(device)
        return (
            f"eigprec_book.record tf32 needs compute capability >= 8.0 (TF32 tensor cores); "
            f"{name} has {cap[0]}.{cap[1]}, so nothing was measured or written."
        )
    return None


def run(args: argparse.Namespace) -> int:
    """Measure and write the record, or refuse with exit status 2.

    Args:
        args: parsed options (``out``, ``sizes``, ``repeats``, ``device``).

    Returns:
        0 when the record was written, 2 when refused.
    """
    if any(n <= 0 for n in args.sizes) or args.repeats <= 0:
        print("eigprec_book.record tf32: --sizes and --repeats must be positive", file=sys.stderr)
        return 2
    problem = out_problem(args.out)
    if problem is not None:
        print(f"eigprec_book.record tf32: {problem}; nothing was measured", file=sys.stderr)
        return 2
    reason = refusal(args.device)
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    record = measure(args.sizes, args.repeats, args.device)
    path = write_record(record, args.out)
    matches = record["rounding"]["matches"]
    print(f"wrote {path}: {record['provenance']['gpu']}, TF32 operand rounding {matches}")
    return 0
