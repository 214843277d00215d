"""The eig recorder's accuracy-and-time grid: which solver ``backend="auto"`` should use where.

Private helper of :mod:`eigprec_book.record.eig` (issue 33). Per ``(batch, n)`` over n = 8 … 2048
and batch = 1 … 4096 (cheapest shapes first, until the time budget is spent), for random
symmetric float32 batches and k = n // 3, it times (CUDA events, interleaved) and measures
against a float64 reference on the first few matrices:

* ``torch.eigvalsh`` — ``torch.linalg.eigvalsh`` (the value only);
* ``torch.eigh`` — ``torch.linalg.eigh`` of the installed torch (batched ``syevjBatched``
  for n ≤ 32 before torch 2.12, for every n from 2.12, pytorch PR 175403);
* ``cupy.syevjBatched`` — CuPy's batched Jacobi through :mod:`eigprec.eig.cupy_solver`;
* ``syevd.loop`` — ``torch.linalg.eigh`` one matrix at a time (cuSOLVER's ``syevd``);
* ``kth.auto.value`` and ``kth.auto`` — ``kth_eigvalsh(backend="auto")``: its value alone
  (no grad), and the value with the eigenvector its backward pass uses (errors from that
  eigenvector; time from the forward pass of a real training call).

Errors are ‖A‖₂-relative (capped at 1, which also stands for NaN): ``value_error`` =
max |λ_k − λ_k(float64)| / ‖A‖₂; ``residual`` = max ‖A q − λ_k q‖ / ‖A‖₂ for the k-th
eigenvector q (in float64); ``orthogonality`` = max over j of |v_jᵀ q − δ_jk| for solvers that
return every eigenvector v_j, |‖q‖² − 1| for ``kth.auto``. Each row also says which solvers
meet the rule of :func:`eigprec_book.record.eig_rule.acceptable` and whether ``auto``'s choice is
among them.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from eigprec.eig import cupy_solver as _cupy_bridge
from eigprec.eig import kth as eig
from eigprec.eig.ops import factor_op
from eigprec.timing import cuda_event_clock, perf_counter_clock, time_interleaved
from eigprec_book.record import eig_rule as _eig_choice

__all__ = [
    "DRY_RUN",
    "GRID_BATCHES",
    "GRID_SIZES",
    "MAX_ELEMENTS",
    "accuracy",
    "grid_shapes",
    "measure_accuracy_grid",
    "section",
    "solvers",
    "summary",
    "validate_rows",
    "validate_section",
]

GRID_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
GRID_BATCHES = (1, 8, 64, 512, 4096)
#: Largest batch · n² measured (float32: 1 GiB per copy; the solvers hold a few copies).
MAX_ELEMENTS = 2**28
#: Matrices per shape whose errors are measured against float64.
REFERENCE_MATRICES = 4
#: The per-matrix loop is left out above this batch (its Python loop alone would dominate).
LOOP_MAX_BATCH = 512
#: ``python -m eigprec_book.record eig --dry-run``: the recorder's torch parts on the CPU, small.
DRY_RUN: dict[str, Any] = {
    "device": "cpu",
    "sizes": [8, 33],
    "batches": [2],
    "grid": [(1, 8), (3, 16), (2, 40)],
    "thin_grid": [(1, 8), (4, 12)],
    "max_repeats": 1,
    "per_candidate_s": 0.01,
    "budget_s": 60.0,
}
#: Why a shape was not measured when the recorder was stopped (SIGINT) during the grid.
INTERRUPTED = "interrupted (the step's time limit): the shapes before it were kept"
_FIELDS = ("seconds", "value_error", "residual", "orthogonality")

Solved = tuple[Tensor, Tensor | None, Tensor | None]


def grid_shapes(
    sizes: Sequence[int] = GRID_SIZES,
    batches: Sequence[int] = GRID_BATCHES,
    max_elements: int = MAX_ELEMENTS,
) -> list[tuple[int, int]]:
    """``(batch, n)`` pairs with ``batch · n² ≤ max_elements``, cheapest (batch · n³) first.

    Example:
        >>> grid_shapes((8, 16), (1, 2))
        [(1, 8), (2, 8), (1, 16), (2, 16)]
    """
    shapes = [(b, n) for n in sizes for b in batches if b * n * n <= max_elements]
    return sorted(shapes, key=lambda s: (s[0] * s[1] ** 3, s[1], s[0]))


def _auto_training_forward(A: Tensor, k: int) -> None:
    """``kth_eigvalsh``'s forward pass of a training step, as a caller runs it (timed)."""
    with torch.enable_grad():
        eig.kth_eigvalsh(A.detach().requires_grad_(True), k)


def _auto_factor(A: Tensor, k: int) -> Solved:
    """What ``kth_eigvalsh(A, k, backend="auto")`` computes for its value and gradient."""
    backend = eig._resolve_backend("auto", A)
    method = eig._resolve_method("auto", A, backend, "eigenvector", True)
    lam, F = factor_op(A, k, True, backend, method, "eigenvector", math.nan, 3)
    return lam, F[..., 0], None


def solvers(A: Tensor, k: int, names: Sequence[str]) -> dict[str, Callable[[], Solved]]:
    """The timed calls: each returns ``(λ_k, q_k or None, V or None)`` for the batch ``A``.

    Args:
        A: ``(batch, n, n)`` symmetric batch.
        k: eigenvalue index (non-negative).
        names: which of ``torch.eigvalsh``, ``torch.eigh``, ``cupy.syevjBatched``,
            ``syevd.loop``, ``kth.auto.value`` (``kth_eigvalsh`` without grad), ``kth.auto``
            (the value and the eigenvector its backward uses).

    Returns:
        name → zero-argument callable (run under ``torch.no_grad``).
    """

    def eigvalsh() -> Solved:
        return torch.linalg.eigvalsh(A)[..., k], None, None

    def eigh() -> Solved:
        w, V = torch.linalg.eigh(A)
        return w[..., k], V[..., :, k], V

    def cupy() -> Solved:
        w, V = _cupy_bridge.eigh(A, True)
        return w[..., k], V[..., :, k], V

    def loop() -> Solved:
        pairs = [torch.linalg.eigh(a) for a in A]
        w = torch.stack([p[0] for p in pairs])
        V = torch.stack([p[1] for p in pairs])
        return w[..., k], V[..., :, k], V

    table = {
        "torch.eigvalsh": eigvalsh,
        "torch.eigh": eigh,
        "cupy.syevjBatched": cupy,
        "syevd.loop": loop,
        "kth.auto.value": lambda: (eig.kth_eigvalsh(A, k), None, None),
        "kth.auto": lambda: _auto_factor(A, k),
    }
    return {name: table[name] for name in names}


def accuracy(A: Tensor, k: int, solved: Solved, m: int = REFERENCE_MATRICES) -> dict[str, Any]:
    """‖A‖₂-relative errors of one solver's k-th pair on the first ``m`` matrices.

    Args:
        A: the batch the solver was given.
        k: eigenvalue index.
        solved: the solver's ``(λ_k, q_k, V)``.
        m: matrices compared with the float64 reference.

    Returns:
        ``value_error``, ``residual`` and ``orthogonality`` (None where not defined).

    Example:
        >>> A = torch.diag(torch.tensor([1.0, 2.0, 4.0]))[None]
        >>> accuracy(A, 2, solvers(A, 2, ["torch.eigh"])["torch.eigh"]())["value_error"]
        0.0
    """
    lam, q, V = solved
    A64 = A[:m].double()

    def capped(x: Tensor) -> float:
        # A wrong or failed (NaN) answer counts as a 100 % error: JSON has no NaN, and the
        # rule must exclude the solver.
        v = float(x.max()) if x.numel() else 0.0
        return v if math.isfinite(v) and v < 1.0 else 1.0

    w64 = torch.linalg.eigvalsh(A64)
    norm = w64.abs().amax(-1).clamp_min(torch.finfo(torch.float64).tiny)
    out: dict[str, Any] = {
        "value_error": capped((lam[:m].double() - w64[..., k]).abs() / norm),
        "residual": None,
        "orthogonality": None,
    }
    if q is not None:
        q64 = q[:m].double()
        r = A64 @ q64[..., None] - lam[:m].double()[..., None, None] * q64[..., None]
        out["residual"] = capped(torch.linalg.vector_norm(r[..., 0], dim=-1) / norm)
        if V is not None:
            overlap = V[:m].double().mT @ q64[..., None]
            overlap[..., k, 0] -= 1.0
            out["orthogonality"] = capped(overlap.abs())
        else:
            out["orthogonality"] = capped((q64.square().sum(-1) - 1).abs())
    return out


def _auto_solver(A: Tensor) -> dict[str, str]:
    backend = eig._resolve_backend("auto", A)
    method = eig._resolve_method("auto", A, backend, "eigenvector", True)
    return {"backend": backend, "method": method, "solver": _eig_choice.SOLVER_OF_BACKEND[backend]}


def measure_accuracy_grid(
    shapes: Sequence[tuple[int, int]],
    names: Sequence[str],
    *,
    device: str = "cuda",
    seed: int = 0,
    max_repeats: int = 5,
    budget_s: float = 0.5,
    deadline: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Time and measure every solver at each ``(batch, n)``, in the order given.

    Args:
        shapes: ``(batch, n)`` pairs (see :func:`grid_shapes`).
        names: solvers (see :func:`solvers`); ``syevd.loop`` is left out above
            :data:`LOOP_MAX_BATCH` matrices.
        device: ``"cuda"`` (CUDA events) or ``"cpu"`` (wall clock: the dry run).
        seed: generator seed.
        max_repeats: most timed calls per solver.
        budget_s: timed seconds per solver and shape.
        deadline: ``time.monotonic()`` after which no new shape starts.

    Returns:
        ``(rows, skipped)``: per shape ``n``, ``batch``, ``k``, ``dtype``, ``solvers``
        (name → ``seconds``, ``value_error``, ``residual``, ``orthogonality``), ``auto``
        (backend, method, solver), ``acceptable`` (per phase) and ``auto_meets_rule`` (per
        phase: ``kth.auto.value`` for the forward, ``kth.auto`` for training); and
        the shapes left out, with why.
    """
    clock = cuda_event_clock if device == "cuda" else perf_counter_clock
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for i, (batch, n) in enumerate(shapes):
        if deadline is not None and time.monotonic() > deadline:
            skipped.append({"what": f"accuracy grid batch={batch}, n={n}", "why": "budget spent"})
            continue
        try:
            row = _measure_shape(batch, n, names, device, seed, clock, max_repeats, budget_s)
        except KeyboardInterrupt:  # the harness's time limit: keep the shapes measured
            for b2, n2 in shapes[i:]:
                what = f"accuracy grid batch={b2}, n={n2}"
                skipped.append({"what": what, "why": INTERRUPTED})
            break
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows, skipped


def _measure_shape(
    batch: int,
    n: int,
    names: Sequence[str],
    device: str,
    seed: int,
    clock: Callable[[Callable[[], None]], float],
    max_repeats: int,
    budget_s: float,
) -> dict[str, Any]:
    """One row of :func:`measure_accuracy_grid`."""
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(batch, n, n, generator=g, dtype=torch.float32)
    A = ((B + B.mT) / 2).to(device)
    del B
    k = n // 3
    here = [s for s in names if s != "syevd.loop" or batch <= LOOP_MAX_BATCH]
    calls = solvers(A, k, here)
    with torch.no_grad():
        measured = {name: accuracy(A, k, fn()) for name, fn in calls.items()}

        def timed(fn: Callable[[], Solved]) -> Callable[[], None]:
            def call() -> None:
                fn()

            return call

        timing = {name: timed(fn) for name, fn in calls.items()}
        if "kth.auto" in timing:  # its errors from the factor; its time from the real call
            timing["kth.auto"] = functools.partial(_auto_training_forward, A, k)
        t = time_interleaved(
            timing,
            clock=clock,
            max_repeats=max_repeats,
            budget_s=budget_s,
        )
    entries = {name: {"seconds": float(t[name]["seconds"]), **measured[name]} for name in here}
    # auto is the policy under test, not a candidate of the rule.
    candidates = {k2: v for k2, v in entries.items() if not k2.startswith("kth.auto")}
    row: dict[str, Any] = {"n": n, "batch": batch, "k": k, "dtype": "float32"}
    row["solvers"] = entries
    row["auto"] = _auto_solver(A)
    rule_row = {"n": n, "batch": batch, "solvers": candidates}
    row["acceptable"] = {
        phase: _eig_choice.acceptable(rule_row, phase) for phase in ("forward", "train")
    }
    row["auto_meets_rule"] = {
        phase: _eig_choice.meets_rule(rule_row, entries[name], phase)
        for phase, name in (("forward", "kth.auto.value"), ("train", "kth.auto"))
        if name in entries
    }
    del A, calls
    return row


def validate_rows(rows: Any) -> None:
    """Check the accuracy grid's rows: every solver has a positive time and finite errors.

    Raises:
        ValueError: naming the first bad row or field.

    Example:
        >>> validate_rows([])
    """
    if not isinstance(rows, list):
        raise ValueError("eig record: accuracy_grid.rows should be a list")
    for row in rows:
        where = f"accuracy grid batch={row.get('batch')}, n={row.get('n')}"
        for key in ("n", "batch", "k", "solvers", "auto", "acceptable", "auto_meets_rule"):
            if key not in row:
                raise ValueError(f"eig record: {where} lacks {key!r}")
        for name, entry in row["solvers"].items():
            for field in _FIELDS:
                if field not in entry:
                    raise ValueError(f"eig record: {where}, {name} lacks {field!r}")
            t = entry["seconds"]
            if not (isinstance(t, float) and math.isfinite(t) and t > 0):
                raise ValueError(f"eig record: {where}, {name} time {t!r} is not positive")
            for field in _FIELDS[1:]:
                v = entry[field]
                if v is not None and not (isinstance(v, float) and v >= 0):
                    raise ValueError(f"eig record: {where}, {name} {field} = {v!r}")


def section(
    grid: Sequence[tuple[int, int]] | None,
    cupy_ok: bool,
    *,
    device: str,
    max_repeats: int,
    per_candidate_s: float,
    deadline: float,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The record's ``accuracy_grid`` section and what it left out.

    Args:
        grid: ``(batch, n)`` shapes (default: :func:`grid_shapes` on CUDA, the dry run's
            three small shapes on the CPU).
        cupy_ok: whether CuPy's solver is measured.
        device: ``"cuda"`` or ``"cpu"``.
        max_repeats: most timed calls per solver (half of it is used).
        per_candidate_s: the timing grid's seconds per candidate (half of it is used).
        deadline: ``time.monotonic()`` after which no new shape starts.

    Returns:
        ``({"solvers", "dtype", "k", "rule", "rows"}, skipped)``.
    """
    names = ["torch.eigvalsh", "torch.eigh", "syevd.loop", "kth.auto.value", "kth.auto"]
    names[2:2] = ["cupy.syevjBatched"] if cupy_ok else []
    if grid is None:  # the full grid on a GPU; a CPU record (tests, dry run) stays small
        grid = grid_shapes() if device == "cuda" else DRY_RUN["grid"]
    rows, skipped = measure_accuracy_grid(
        grid,
        names,
        device=device,
        max_repeats=max(1, max_repeats // 2),
        budget_s=per_candidate_s / 2,
        deadline=deadline,
    )
    rule = (
        f"error within {_eig_choice.ERROR_FACTOR:g}x of the most accurate, time within "
        f"{_eig_choice.TIME_FACTOR:g}x of the fastest of those"
    )
    out = {"solvers": names, "dtype": "float32", "k": "n // 3", "rule": rule, "rows": rows}
    return out, skipped


def validate_section(record: dict[str, Any], schemas: Sequence[str]) -> None:
    """Check a record's ``accuracy_grid`` where its schema has one (``schemas``; not /3).

    Raises:
        ValueError: a missing section or a bad row (see :func:`validate_rows`).
    """
    if record["schema"] not in schemas:
        return
    if not isinstance(record.get("accuracy_grid"), dict):
        raise ValueError("eig record: missing 'accuracy_grid'")
    validate_rows(record["accuracy_grid"].get("rows"))


def summary(record: dict[str, Any]) -> str:
    """One line on the accuracy grid: how many shapes, and where ``auto`` missed the rule.

    Example:
        >>> summary({"accuracy_grid": {"rows": []}})
        '  accuracy grid: 0 shapes; auto outside the rule at none'
    """
    rows = (record.get("accuracy_grid") or {}).get("rows", [])
    misses = [(r["batch"], r["n"]) for r in rows if not all(r["auto_meets_rule"].values())]
    return f"  accuracy grid: {len(rows)} shapes; auto outside the rule at {misses or 'none'}"
