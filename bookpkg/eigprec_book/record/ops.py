"""Record which float32 operators TF32 changes on a CUDA GPU, and from which size (issue 34).

``python -m eigprec_book.record ops --out book/data/ops_gpu.json`` runs, on the GPU,

* **sized probes** first: the families that tiny inputs do not show changing (products,
  batched products, convolutions, solves and inverses, factorisations, vector @ matrix)
  at sizes 16 … 1024 per matrix dimension (channels for convolutions), so the record says
  from which size each starts to change;
* then **every float32 operator of PyTorch's OpInfo database** (``op_db``) on every float32
  sample it gives (issue 50: on its first sample alone ``matmul`` was a dot product of two
  vectors and ``linear`` had a 1-D input), within three bounds: at most :data:`MAX_SAMPLES`
  samples and :data:`OP_SECONDS` seconds per operator, none over :data:`MAX_ELEMENTS`
  elements; each row says how many samples it measured and what it left. Until the time
  budget is spent; the record is written every 20 operators (``"partial": true``), so a
  run stopped early keeps what it measured.

Each call runs under three settings, each twice (the repeatability control), with the same
seed before every call: ``off`` (the matmul and cuDNN TF32 switches both off), ``matmul``
(``torch.backends.cuda.matmul.allow_tf32`` on) and ``cudnn`` (``torch.backends.cudnn.allow_tf32``
on). An output *changes* under a setting when both settings repeat bit for bit and differ
from each other; its size is ‖y − y_off‖/‖y_off‖ over all floating outputs, beside the error
of each setting against the same call in float64. Both switches are restored afterwards.

``--dry-run`` runs a few probes and operators on the CPU (the switches then change nothing):
that is what the unit tests exercise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import types
import unittest
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map

from eigprec.runtime import describe_runtime
from eigprec_book.record._op_compare import ROUNDS, SETTINGS, Call, compare
from eigprec_book.record._record import check_top_level, out_problem, write_record

__all__ = [
    "PROBES",
    "ROUNDS",
    "SCHEMA",
    "SETTINGS",
    "SIZES",
    "add_arguments",
    "compare",
    "op_db_float32",
    "run",
    "sweep",
    "validate_record",
]

# The format's name, from when the recorders were eigprec.bench (records keep it).
SCHEMA = "eigprec.bench.ops/1"
SIZES = (16, 64, 256, 1024)
#: op_db samples measured per operator at most, its seconds, and a sample's largest size
#: (elements over all its tensors): the bounds of the all-sample sweep (issue 50).
MAX_SAMPLES = 24
OP_SECONDS = 1.5
MAX_ELEMENTS = 1 << 16
DRY_MAX_SAMPLES = 3
DRY_SIZES = (8, 16)

# --------------------------------------------------------------------------- sized probes


def _spd(n: int, g: torch.Generator, device: str, dtype: torch.dtype) -> Tensor:
    B = torch.randn(n, n, generator=g, dtype=torch.float64) / math.sqrt(n)
    return (B @ B.mT + torch.eye(n, dtype=torch.float64)).to(device, dtype)


def _probe(name: str, n: int, device: str, dtype: torch.dtype) -> Call:
    """The call of probe ``name`` at size ``n`` (inputs made in float64, then cast)."""
    g = torch.Generator().manual_seed(n)

    def r(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(device, dtype)

    c = max(n // 4, 4)  # channels for the convolutions
    F = torch.nn.functional
    L = torch.linalg
    if name == "mm":
        a, b = r(n, n), r(n, n)
        return lambda: a @ b
    if name == "vecmat":
        v, m = r(n), r(n, n)
        return lambda: v @ m
    if name == "matvec":
        m, v = r(n, n), r(n)
        return lambda: m @ v
    if name == "bmm":
        a, b = r(8, n, n), r(8, n, n)
        return lambda: torch.bmm(a, b)
    if name == "baddbmm":
        s, a, b = r(8, n, n), r(8, n, n), r(8, n, n)
        return lambda: torch.baddbmm(s, a, b)
    if name == "einsum":
        a, b = r(8, n, n), r(8, n, n)
        return lambda: torch.einsum("bij,bjk->bik", a, b)
    if name == "linear":
        x, w = r(64, n), r(n, n)
        return lambda: F.linear(x, w)
    if name == "conv1d":
        x, w = r(4, c, 64), r(c, c, 3)
        return lambda: F.conv1d(x, w, padding=1)
    if name == "conv2d":
        x, w = r(4, c, 16, 16), r(c, c, 3, 3)
        return lambda: F.conv2d(x, w, padding=1)
    if name == "conv3d":
        x, w = r(2, c, 8, 8, 8), r(c, c, 3, 3, 3)
        return lambda: F.conv3d(x, w, padding=1)
    if name == "conv_transpose2d":
        x, w = r(4, c, 16, 16), r(c, c, 3, 3)
        return lambda: F.conv_transpose2d(x, w, padding=1)
    if name == "sdpa":
        q, k, v = r(2, 4, n, 64), r(2, 4, n, 64), r(2, 4, n, 64)
        return lambda: F.scaled_dot_product_attention(q, k, v)
    if name == "lstm":
        x = r(16, 4, c)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(n)
            lstm = torch.nn.LSTM(c, c).to(device, dtype)
        return lambda: lstm(x)[0]
    A = r(n, n) + 2 * math.sqrt(n) * torch.eye(n, device=device, dtype=dtype)  # cond ~ 10
    b = r(n, 4)
    S = _spd(n, g, device, dtype)
    if name == "solve":
        return lambda: L.solve(A, b)
    if name == "inv":
        return lambda: L.inv(A)
    if name == "solve_triangular":
        T = torch.tril(A)
        return lambda: L.solve_triangular(T, b, upper=False)
    if name == "lu_factor":
        return lambda: L.lu_factor(A)
    if name == "lu_solve":
        LU, piv = L.lu_factor(A)
        return lambda: L.lu_solve(LU, piv, b)
    if name == "cholesky":
        return lambda: L.cholesky(S)
    if name == "cholesky_solve":
        C = L.cholesky(S)
        return lambda: torch.cholesky_solve(b, C)
    if name == "qr":
        return lambda: L.qr(A)
    if name == "lstsq":
        tall = r(2 * n, n)
        rhs = r(2 * n, 4)
        return lambda: L.lstsq(tall, rhs).solution
    if name == "eigvalsh":
        return lambda: L.eigvalsh(S)
    if name == "eigh":
        return lambda: L.eigh(S)
    if name == "svdvals":
        return lambda: L.svdvals(A)
    if name == "pinv":
        return lambda: L.pinv(A)
    if name == "det":
        return lambda: L.slogdet(A)
    raise ValueError(f"unknown probe {name!r}")


#: The sized probes, in the order they run.
PROBES = (
    "mm",
    "vecmat",
    "matvec",
    "bmm",
    "baddbmm",
    "einsum",
    "linear",
    "sdpa",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose2d",
    "lstm",
    "solve",
    "inv",
    "solve_triangular",
    "lu_factor",
    "lu_solve",
    "cholesky",
    "cholesky_solve",
    "qr",
    "lstsq",
    "eigvalsh",
    "eigh",
    "svdvals",
    "pinv",
    "det",
)


def _probe_rows(sizes: Sequence[int], device: str, deadline: float) -> list[dict[str, Any]]:
    rows = []
    for name in PROBES:
        row: dict[str, Any] = {"probe": name, "sizes": {}, "starts_at": {}}
        for n in sizes:
            if time.monotonic() > deadline:
                row["sizes"][str(n)] = {"skipped": "time budget spent"}
                continue
            try:
                call = _probe(name, n, device, torch.float32)
                ref = _probe(name, n, device, torch.float64)
                row["sizes"][str(n)] = compare(call, ref, device)
            except Exception as exc:  # recorded, not lost
                row["sizes"][str(n)] = {"failed": f"{type(exc).__name__}: {exc}"[:300]}
        for setting in ("matmul", "cudnn"):
            hits = [int(n) for n, m in row["sizes"].items() if setting in m.get("changed", ())]
            row["starts_at"][setting] = min(hits) if hits else None
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- op_db


def op_db_float32(device: str = "cpu") -> list[Any]:
    """PyTorch's OpInfo entries that support float32 on ``device``.

    torch's test helpers import ``expecttest`` (a package of torch's own CI) for a base class
    this never uses; a stand-in is put in its place where it is missing. They also freeze
    ``torch.backends``' flags on import; that is undone.

    Args:
        device: ``"cpu"`` or ``"cuda"``.

    Returns:
        The ``OpInfo`` objects, in ``op_db``'s order.

    Example:
        >>> len(op_db_float32("cpu")) > 300
        True
    """
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ModuleNotFoundError:
            stand_in = types.ModuleType("expecttest")
            stand_in.TestCase = unittest.TestCase  # type: ignore[attr-defined]
            sys.modules["expecttest"] = stand_in
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db

    if torch.backends.flags_frozen() and not frozen:
        # torch's test helpers call torch.backends.disable_global_flags() when imported, after
        # which every later torch.backends.<x> = ... in the process raises: undo that.
        # (torch.backends is a wrapper module: the flag lives in its functions' globals.)
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return [op for op in op_db if torch.float32 in op.supported_dtypes(kind)]


def _to64(x: Any) -> Any:
    return x.to(torch.float64) if isinstance(x, Tensor) and x.dtype == torch.float32 else x


def _elements(sample: Any) -> int:
    return sum(
        x.numel()
        for x in tree_leaves((sample.input, sample.args, sample.kwargs))
        if isinstance(x, Tensor)
    )


def _shapes(sample: Any) -> list[list[int]]:
    leaves = tree_leaves((sample.input, sample.args))
    return [list(x.shape) for x in leaves if isinstance(x, Tensor)][:4]


def _measure(op: Any, sample: Any, device: str) -> dict[str, Any]:
    args64 = tree_map(_to64, (sample.input, sample.args, sample.kwargs))

    def call() -> Any:
        return op(sample.input, *sample.args, **sample.kwargs)

    def reference() -> Any:
        return op(args64[0], *args64[1], **args64[2])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compare(call, reference, device)


def _worst(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return max(seen) if seen else None


def _op_row(
    op: Any,
    device: str,
    max_samples: int = MAX_SAMPLES,
    op_seconds: float = OP_SECONDS,
    max_elements: int = MAX_ELEMENTS,
) -> dict[str, Any]:
    """One operator over every float32 sample op_db gives it, within the three bounds.

    A sample with more than ``max_elements`` elements is left out; after ``max_samples``
    samples, or once ``op_seconds`` are spent (the first sample is always measured), the
    rest is not generated. The row says how many were measured (``samples``), what was left
    (``samples_left``), and aggregates the measurements: changed under a switch if any sample
    changed (``changed_samples`` counts them, ``first_changed_shapes`` names the first),
    repeatable if every sample repeated, the largest change and error.
    """
    row: dict[str, Any] = {"op": op.full_name}
    if "empty" in op.name:
        return {**row, "skipped": "uninitialised output"}
    start = time.monotonic()
    results: list[tuple[list[list[int]], dict[str, Any]]] = []
    left: dict[str, Any] = {}
    failures: list[str] = []
    try:
        samples = iter(op.sample_inputs(device, torch.float32))
        for sample in samples:
            if _elements(sample) > max_elements:
                left["too_large"] = left.get("too_large", 0) + 1
                continue
            if len(results) >= max_samples:
                left["more"] = True
                break
            if results and time.monotonic() - start > op_seconds:
                left["time"] = True
                break
            try:
                results.append((_shapes(sample), _measure(op, sample, device)))
            except Exception as exc:  # recorded, not lost
                failures.append(f"{type(exc).__name__}: {exc}"[:300])
    except Exception as exc:  # generating the samples failed
        if not results and not failures:
            return {**row, "skipped": f"no sample: {type(exc).__name__}"}
        left["generation_failed"] = f"{type(exc).__name__}"
    if not results:
        if failures:
            return {**row, "failed": failures[0]}
        if left.get("too_large"):
            return {**row, "skipped": f"every sample over {max_elements} elements"}
        return {**row, "skipped": "no sample"}
    measured = [r for _, r in results]
    row["shapes"] = results[0][0]
    row["samples"] = len(results)
    row["repeatable"] = {k: all(r["repeatable"][k] for r in measured) for k in SETTINGS}
    row["change"] = {k: _worst([r["change"][k] for r in measured]) for k in SETTINGS}
    row["error"] = {k: _worst([r["error"][k] for r in measured]) for k in SETTINGS}
    switches = ("matmul", "cudnn")
    row["changed"] = [k for k in switches if any(k in r["changed"] for r in measured)]
    row["changed_samples"] = {k: sum(k in r["changed"] for r in measured) for k in switches}
    first = {k: next((sh for sh, r in results if k in r["changed"]), None) for k in switches}
    if any(first.values()):
        row["first_changed_shapes"] = {k: v for k, v in first.items() if v is not None}
    if failures:
        row["failed_samples"] = len(failures)
    if left:
        row["samples_left"] = left
    return row


def sweep(
    device: str,
    sizes: Sequence[int] = SIZES,
    budget_s: float = 200.0,
    limit: int | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    max_samples: int = MAX_SAMPLES,
    op_seconds: float = OP_SECONDS,
) -> dict[str, Any]:
    """The sized probes, then op_db on every sample, under one time budget.

    Args:
        device: ``"cuda"`` (or ``"cpu"`` for a dry run).
        sizes: matrix dimensions of the probes.
        budget_s: seconds; no new operator is started after it (the rest counted as not
            reached). The probes get at most 40 % of it.
        limit: at most this many op_db operators (None: all).
        progress: called with the partial record after the probes and every 20 operators.
        max_samples: op_db samples measured per operator at most.
        op_seconds: seconds per operator after its first sample.

    Returns:
        ``{"probes", "operators", "not_reached", "bounds", "counts", "seconds"}``.

    Raises:
        ValueError: if ``budget_s`` is not positive or ``sizes`` is empty.
    """
    if not budget_s > 0 or not sizes:
        raise ValueError("sweep: budget_s must be positive and sizes non-empty")
    start = time.monotonic()
    out: dict[str, Any] = {"probes": _probe_rows(sizes, device, start + 0.4 * budget_s)}
    out["operators"], out["not_reached"] = [], []
    out["bounds"] = {
        "max_samples": max_samples,
        "op_seconds": op_seconds,
        "max_elements": MAX_ELEMENTS,
    }
    ops = op_db_float32(device)[:limit]
    for i, op in enumerate(ops):
        if time.monotonic() - start > budget_s:
            out["not_reached"] = [o.full_name for o in ops[i:]]
            break
        out["operators"].append(_op_row(op, device, max_samples, op_seconds))
        if progress is not None and i % 20 == 0:  # (a killed run keeps what it measured)
            progress({**out, "counts": _counts(out), "seconds": time.monotonic() - start})
    out["counts"] = _counts(out)
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def _counts(out: dict[str, Any]) -> dict[str, int]:
    rows = out["operators"]
    measured = [r for r in rows if "repeatable" in r]
    return {
        "operators": len(rows),
        "measured": len(measured),
        "samples": sum(r.get("samples", 1) for r in measured),
        "changed_matmul": sum("matmul" in r["changed"] for r in measured),
        "changed_cudnn": sum("cudnn" in r["changed"] for r in measured),
        "not_repeatable": sum(not all(r["repeatable"].values()) for r in measured),
        "skipped": sum("skipped" in r for r in rows),
        "failed": sum("failed" in r for r in rows),
        "not_reached": len(out["not_reached"]),
    }


# --------------------------------------------------------------------------- the command


def validate_record(record: Any) -> None:
    """Check a record's structure.

    Raises:
        ValueError: naming the first missing or mistyped field.
    """
    check_top_level(
        record,
        "ops",
        SCHEMA,
        {"schema": str, "provenance": dict, "probes": list, "operators": list, "counts": dict},
    )
    for row in record["probes"]:
        if not isinstance(row, dict) or "probe" not in row or "starts_at" not in row:
            raise ValueError(f"ops record: a probe row lacks 'probe' or 'starts_at': {row!r}")
    for row in record["operators"]:
        if not isinstance(row, dict) or "op" not in row:
            raise ValueError(f"ops record: an operator row lacks 'op': {row!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m eigprec_book.record ops``."""
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for the record")
    parser.add_argument("--limit", type=int, default=None, help="at most this many operators")
    parser.add_argument(
        "--max-samples",
        type=int,
        default=MAX_SAMPLES,
        help="op_db samples measured per operator at most (1: the first sample only)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="a small record on the CPU (checks the recorder)"
    )


def run(args: argparse.Namespace) -> int:
    """Measure and write the record, or refuse with exit status 2.

    Args:
        args: parsed options (``out``, ``budget``, ``limit``, ``dry_run``; optionally
            ``max_samples`` and ``op_seconds``, the per-operator bounds of :func:`sweep`).

    Returns:
        0 when written, 2 when refused (no CUDA GPU, a non-positive budget or limit).
    """
    max_samples = getattr(args, "max_samples", MAX_SAMPLES)
    op_seconds = getattr(args, "op_seconds", OP_SECONDS)
    if not args.budget > 0 or (args.limit is not None and args.limit < 1) or max_samples < 1:
        print(
            "eigprec_book.record ops: --budget, --limit and --max-samples must be positive",
            file=sys.stderr,
        )
        return 2
    problem = out_problem(args.out)
    if problem is not None:
        print(f"eigprec_book.record ops: {problem}; nothing was measured", file=sys.stderr)
        return 2
    dry = bool(getattr(args, "dry_run", False))
    if not dry and not torch.cuda.is_available():
        print(
            "eigprec_book.record ops measures a CUDA GPU's TF32 switches; "
            "torch.cuda.is_available() "
            "is False here, so nothing was measured or written (--dry-run runs on the CPU).",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if dry else "cuda"
    limit = min(args.limit or 20, 20) if dry else args.limit
    head = {"schema": SCHEMA, "provenance": describe_runtime().as_record(), "dry_run": dry}

    def partial(body: dict[str, Any]) -> None:
        write_record({**head, **body, "partial": True}, args.out)

    if dry:
        max_samples = min(max_samples, DRY_MAX_SAMPLES)
    sizes = DRY_SIZES if dry else SIZES
    body = sweep(
        device, sizes, args.budget, limit, partial, max_samples=max_samples, op_seconds=op_seconds
    )
    record = {**head, **body, "partial": False}
    validate_record(record)
    path = write_record(record, args.out)
    c = record["counts"]
    print(
        f"wrote {path}: {c['measured']} operators measured, {c['changed_matmul']} changed by "
        f"the matmul switch, {c['changed_cudnn']} by cuDNN's; {c['not_reached']} not reached"
    )
    return 0
