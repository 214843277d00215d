"""Record whether a TF32 GPU rounds complex64 products, and how (issue 50, item 3).

``python -m eigprec_book.record complex64 --out book/data/complex64_gpu.json`` runs, on the
GPU, complex64 ``mm``, ``bmm`` and ``linear`` with the matmul TF32 switch off and on:

* an **operand probe**: a 64 × 64 matrix X whose real and imaginary parts hold values
  such as 1 + 2⁻¹¹ (a tie between two TF32 numbers), multiplied by the identity on either
  side. A kernel that rounds each part of its operands and multiplies them as four real
  products returns X with its parts rounded exactly; the record names which rule does it
  (``fp32``: not rounded; ``rna``, ``rne``, ``rz``), or none (a kernel that forms sums of
  parts first, as the three-product method does);
* **random products** (seeded): the relative change the switch makes, whether each setting
  repeats bit for bit, and how far each emulated rule (both operands' parts rounded, the
  product in complex128) lies from the GPU's result with the switch on.

torch sets the TF32 math mode on the cuBLAS handle its complex GEMMs run on
(``aten/src/ATen/cuda/CublasHandlePool.cpp``), and its test helper ``tf32_on_and_off``
treats complex64 as TF32 on Ampere and later; what cuBLAS then does is measured here.
``--dry-run`` runs the same on the CPU (where the switch changes nothing): what the unit
tests exercise, with :func:`run_product` patched to stand in for a GPU.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
from torch import Tensor

from eigprec.runtime import describe_runtime
from eigprec.tf32.core import round_bits
from eigprec_book.record._op_compare import ROUNDS, switches
from eigprec_book.record._record import check_top_level, write_record

__all__ = [
    "KINDS",
    "PROBE_VALUES",
    "RULES",
    "SCHEMA",
    "add_arguments",
    "emulated",
    "operand_probe",
    "random_products",
    "run",
    "run_product",
    "validate_record",
]

SCHEMA = "eigprec.bench.complex64/1"
#: The products measured.
KINDS = ("mm", "bmm", "linear")
#: Candidate rules for the operands' real and imaginary parts (``fp32``: left as they are).
RULES = ("fp32", "rna", "rne", "rz")
#: Operand values that tell the rules apart: ties (even and odd below), values just above a
#: tie and below the next, a tie carrying to 2, negative ties.
PROBE_VALUES = (
    1 + 2**-11,
    1 + 3 * 2**-11,
    -(1 + 2**-11),
    1 + 2**-11 + 2**-20,
    1 + 2**-12,
    1024.5,
    2 - 2**-12,
    -(1 + 3 * 2**-11),
)
_N = 64  # large enough that the H200 ran real float32 bmm in TF32 (it kept 16 in float32)


def run_product(kind: str, x: Tensor, y: Tensor, tf32: bool) -> Tensor:
    """``kind`` of x and y on their device with the matmul TF32 switch as given; on the CPU.

    ``mm``: x @ y; ``bmm``: the two stacked twice (a batch of 2); ``linear``: F.linear(x, yᵀ),
    the same product through the linear layer's path.
    """
    with switches(tf32, False):
        if kind == "mm":
            out = x @ y
        elif kind == "bmm":
            out = torch.bmm(torch.stack([x, x]), torch.stack([y, y]))[0]
        elif kind == "linear":
            out = torch.nn.functional.linear(x, y.mT.contiguous())
        else:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if out.device.type == "cuda":
            torch.cuda.synchronize()
    return out.cpu()


def _rounded(z: Tensor, rule: str) -> Tensor:
    if rule == "fp32":
        return z
    parts = (round_bits(p.contiguous(), rule) for p in (z.real, z.imag))
    return torch.complex(*parts)


def emulated(kind: str, x: Tensor, y: Tensor, rule: str) -> Tensor:
    """The product with each operand's real and imaginary parts rounded by ``rule``, in
    complex128 (so that only the rounding of the operands differs from exact).

    Example:
        >>> x = torch.full((2, 2), complex(1 + 2**-11, 0), dtype=torch.complex64)
        >>> emulated("mm", x, torch.eye(2, dtype=torch.complex64), "rne")[0, 0].real.item()
        1.0
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    xr, yr = (_rounded(t.cpu(), rule).to(torch.complex128) for t in (x, y))
    return xr @ yr


def _probe_matrix() -> Tensor:
    values = torch.tensor(PROBE_VALUES, dtype=torch.float32)
    real = values.repeat(_N * _N // len(values) + 1)[: _N * _N].reshape(_N, _N)
    imag = torch.roll(real, 3, dims=1)  # other values in the imaginary part of each entry
    return torch.complex(real, imag)


def operand_probe(device: str, product: Any = None) -> dict[str, Any]:
    """Which rule reproduces the GPU's complex64 operands exactly, per product and side.

    Args:
        device: ``"cuda"`` (``"cpu"`` for a dry run).
        product: the runner (default :func:`run_product`; tests pass a stand-in GPU).

    Returns:
        ``{kind: {"first_operand": [rules], "second_operand": [rules]}}`` with the switch on,
        and under ``"off"`` the same with the switch off (``["fp32"]`` where nothing rounds).
    """
    product = product or run_product
    x = _probe_matrix().to(device)
    eye = torch.eye(_N, dtype=torch.complex64, device=device)
    out: dict[str, Any] = {"values": list(PROBE_VALUES), "n": _N}
    for setting, tf32 in (("on", True), ("off", False)):
        found: dict[str, Any] = {}
        for kind in KINDS:
            got = {
                "first_operand": product(kind, x, eye, tf32),
                "second_operand": product(kind, eye, x, tf32),
            }
            found[kind] = {
                side: [r for r in RULES if torch.equal(g, _rounded(x.cpu(), r))]
                for side, g in got.items()
            }
        out[setting] = found
    return out


def _rel(a: Tensor, b: Tensor) -> float:
    a, b = torch.view_as_real(a.to(torch.complex128)), torch.view_as_real(b.to(torch.complex128))
    return float((a - b).norm() / b.norm())


_SHAPES = {"mm": (256, 256, 256), "bmm": (64, 64, 64), "linear": (64, 256, 256)}


def random_products(device: str, product: Any = None) -> dict[str, Any]:
    """The switch's effect on seeded random complex64 products, and the rule that explains it.

    Args:
        device: ``"cuda"`` (``"cpu"`` for a dry run).
        product: the runner (default :func:`run_product`).

    Returns:
        Per kind: ``shape`` (m, k, n), ``repeatable`` per setting, ``change`` (switch on
        against off, relative), ``changed`` (both repeat and they differ), and ``distance``:
        per rule, the relative distance of its emulation from the result with the switch on,
        with ``best`` the closest rule.
    """
    product = product or run_product
    g = torch.Generator().manual_seed(0)
    rows: dict[str, Any] = {}
    for kind in KINDS:
        m, k, n = _SHAPES[kind]
        x = torch.randn(m, k, dtype=torch.complex64, generator=g).to(device)
        y = torch.randn(k, n, dtype=torch.complex64, generator=g).to(device)
        runs: dict[str, list[Tensor]] = {"off": [], "on": []}
        for _ in range(ROUNDS):
            for setting, tf32 in (("off", False), ("on", True)):
                runs[setting].append(product(kind, x, y, tf32))
        repeatable = {s: all(torch.equal(r[0], v) for v in r[1:]) for s, r in runs.items()}
        on, off = runs["on"][0], runs["off"][0]
        distance = {rule: _rel(on, emulated(kind, x, y, rule)) for rule in RULES}
        rows[kind] = {
            "shape": [m, k, n],
            "repeatable": repeatable,
            "change": _rel(on, off),
            "changed": all(repeatable.values()) and not torch.equal(on, off),
            "distance": distance,
            "best": min(distance, key=distance.get),
        }
    return rows


def validate_record(record: Any) -> None:
    """Check a record's structure.

    Raises:
        ValueError: naming the first missing or mistyped field.
    """
    check_top_level(
        record,
        "complex64",
        SCHEMA,
        {"schema": str, "provenance": dict, "operands": dict, "random": dict},
    )
    for kind in KINDS:
        if kind not in record["random"] or kind not in record["operands"].get("on", {}):
            raise ValueError(f"complex64 record: no measurement of {kind!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m eigprec_book.record complex64``."""
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument(
        "--dry-run", action="store_true", help="the same on the CPU (checks the recorder)"
    )


def run(args: argparse.Namespace) -> int:
    """Measure and write the record, or refuse with exit status 2 where no CUDA GPU is.

    Args:
        args: parsed options (``out``, ``dry_run``).

    Returns:
        0 when written, 2 when refused.
    """
    dry = bool(getattr(args, "dry_run", False))
    if not dry and not torch.cuda.is_available():
        print(
            "eigprec_book.record complex64 measures a CUDA GPU's TF32 switch; "
            "torch.cuda.is_available() is False here, so nothing was measured or written "
            "(--dry-run runs on the CPU).",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if dry else "cuda"
    record = {
        "schema": SCHEMA,
        "provenance": describe_runtime().as_record(),
        "dry_run": dry,
        "operands": operand_probe(device),
        "random": random_products(device),
    }
    validate_record(record)
    path = write_record(record, args.out)
    changed = [k for k, r in record["random"].items() if r["changed"]]
    print(f"wrote {path}: the switch changed {changed or 'no'} complex64 product(s)")
    return 0
