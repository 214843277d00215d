"""Record kth_eigvalsh against torch.linalg on a CUDA GPU, with provenance.

``python -m eigprec_book.record eig --out book/data/eig_gpu.json`` first records issue 49's
grid, ``kth_eigvalsh`` against ``torch.linalg`` at the shapes ``benchmarks/bench_eig.py``
measures on the CPU (``thin_grid``, :mod:`._eig_thin`). Then it times, for random symmetric
float32 batches (n ∈ {16, 32, 33, 45, 64, 100} × batch ∈ {100, 500, 2000}), with CUDA events:

* ``torch.linalg.eigvalsh`` (forward) and ``torch.linalg.eigh`` + backward;
* ``kth_eigvalsh`` on each backend (CuPy where it works, torch): forward, and forward +
  backward with both subgradients (``"eigenvector"``, ``"mean"``) and with the
  inverse-iteration variant;

then the stream-race demonstration, the inverse-iteration accuracy by eigen-gap, and CuPy's
per-matrix solver status (cuSOLVER's ``syevjBatched`` info array: converged or not, for each
matrix, which CuPy does not check by default). The installed torch, CUDA and CuPy versions
are written with the figures. Without CuPy the torch parts are recorded and the rest is
listed under ``skipped``; a section that fails is recorded as its error, not lost.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from eigprec.eig import kth_eigvalsh
from eigprec.runtime import describe_runtime
from eigprec.timing import cuda_event_clock, perf_counter_clock, time_interleaved
from eigprec_book.record import _eig_grid, _eig_report, _eig_thin, _record
from eigprec_book.record._cupy_status import cupy_solver_status
from eigprec_book.record._eig_probes import cupy_smoke, torch_eigh_batching
from eigprec_book.record._record import check_top_level

__all__ = [
    "BATCHES",
    "HEADLINE",
    "SCHEMA",
    "SIZES",
    "add_arguments",
    "candidates",
    "cupy_smoke",
    "cupy_solver_status",
    "inverse_iteration",
    "measure_grid",
    "provenance",
    "record",
    "run",
    "torch_eigh_batching",
    "validate_record",
]

SCHEMA = "eigprec.bench.eig/5"
#: Schemas validate_record reads: 3 (no accuracy grid; the H100 record of November 2026), 4
#: (no thin-path grid) and 5.
SCHEMAS = ("eigprec.bench.eig/3", "eigprec.bench.eig/4", SCHEMA)

SIZES = (16, 32, 33, 45, 64, 100)
BATCHES = (100, 500, 2000)
HEADLINE = {"batch": 500, "n": 100, "k": -1, "dtype": "float32"}
TARGETS = {"forward_speedup": 300.0, "train_speedup": 10.0, "train_over_forward": 3.0}
SUBGRADIENTS = ("eigenvector", "mean")


def inverse_iteration(A: Tensor, k: int, backend: str) -> Tensor:
    """λ_k with the gradient from inverse iteration: the one place that names the variant.

    Uses ``kth_eigvalsh(..., method="inverse_iteration")``.

    Args:
        A: ``(..., n, n)`` symmetric batch.
        k: eigenvalue index.
        backend: ``"torch"`` or ``"cupy"``.

    Returns:
        ``(...)`` k-th eigenvalues, differentiable.

    Example:
        >>> A = torch.diag(torch.tensor([1.0, 3.0])).requires_grad_(True)
        >>> inverse_iteration(A, -1, "torch").backward()
        >>> A.grad.diagonal().round(decimals=6)
        tensor([0., 1.])
    """
    return kth_eigvalsh(A, k, backend=backend, method="inverse_iteration")


def candidates(A: Tensor, k: int, backends: Sequence[str]) -> dict[str, Callable[[], None]]:
    """The timed calls for one batch: torch.linalg's two and four per ``kth_eigvalsh`` backend.

    Names: ``torch.eigvalsh``, ``torch.eigh+backward``, ``kth[b]``,
    ``kth[b]+backward[eigenvector]``, ``kth[b]+backward[mean]``, ``invit[b]+backward``.

    Args:
        A: the batch (on the device being measured).
        k: eigenvalue index.
        backends: ``kth_eigvalsh`` backends to include.

    Returns:
        name → zero-argument callable.

    Example:
        >>> sorted(candidates(torch.eye(3)[None], -1, ["torch"]))[:2]
        ['invit[torch]+backward', 'kth[torch]']
    """

    def torch_forward() -> None:
        with torch.no_grad():
            torch.linalg.eigvalsh(A)[..., k]

    def torch_train() -> None:
        X = A.detach().requires_grad_(True)
        torch.linalg.eigh(X).eigenvalues[..., k].sum().backward()

    out: dict[str, Callable[[], None]] = {
        "torch.eigvalsh": torch_forward,
        "torch.eigh+backward": torch_train,
    }
    for b in backends:

        def forward(b: str = b) -> None:
            with torch.no_grad():
                kth_eigvalsh(A, k, backend=b)  # type: ignore[arg-type]

        def train(b: str = b, sub: str = "eigenvector") -> None:
            X = A.detach().requires_grad_(True)
            kth_eigvalsh(X, k, backend=b, subgradient=sub).sum().backward()  # type: ignore[arg-type]

        def invit(b: str = b) -> None:
            X = A.detach().requires_grad_(True)
            inverse_iteration(X, k, b).sum().backward()

        out[f"kth[{b}]"] = forward
        for sub in SUBGRADIENTS:
            out[f"kth[{b}]+backward[{sub}]"] = lambda b=b, sub=sub: train(b, sub)
        out[f"invit[{b}]+backward"] = invit
    return out


def _derived(seconds: dict[str, float], backends: Sequence[str]) -> dict[str, dict[str, float]]:
    fwd, train = seconds["torch.eigvalsh"], seconds["torch.eigh+backward"]
    speed_fwd, speed_train, ratio = {}, {}, {}
    for b in backends:
        kf = seconds[f"kth[{b}]"]
        speed_fwd[b] = fwd / kf
        for sub in SUBGRADIENTS:
            t = seconds[f"kth[{b}]+backward[{sub}]"]
            speed_train[f"{b}/{sub}"] = train / t
            ratio[f"{b}/{sub}"] = t / kf
        ratio[f"{b}/inverse_iteration"] = seconds[f"invit[{b}]+backward"] / kf
    return {"forward_speedup": speed_fwd, "train_speedup": speed_train, "train_over_forward": ratio}


def measure_grid(
    configs: Sequence[tuple[int, int]],
    backends: Sequence[str],
    *,
    device: str = "cuda",
    k: int = -1,
    seed: int = 0,
    max_repeats: int = 10,
    budget_s: float = 1.0,
    deadline: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Time every candidate for each ``(n, batch)`` in ``configs``, in that order.

    Args:
        configs: ``(n, batch)`` pairs; the most wanted first.
        backends: ``kth_eigvalsh`` backends.
        device: ``"cuda"`` (CUDA events) or ``"cpu"`` (wall clock; for tests).
        k: eigenvalue index.
        seed: generator seed of the random symmetric batches.
        max_repeats: most timed calls per candidate.
        budget_s: timed seconds per candidate.
        deadline: ``time.monotonic()`` value after which no new configuration starts.

    Returns:
        ``(rows, skipped)``: one row per measured configuration (``n``, ``batch``,
        ``seconds`` and ``repeats`` per candidate, ``forward_speedup``, ``train_speedup``,
        ``train_over_forward``), and the configurations left out for time.
    """
    clock = cuda_event_clock if device == "cuda" else perf_counter_clock
    rows, skipped = [], []
    spent: dict[int, tuple[int, float]] = {}  # n -> (batch, wall seconds) of the last one
    for n, batch in configs:
        # A configuration is expected to cost what the same n cost at another batch, scaled
        # by the batch (looping solvers are linear in it): one that would overrun is left out
        # before it starts, since a GPU session cannot afford to be cut off mid-record.
        guess = spent[n][1] * batch / spent[n][0] if n in spent else 0.0
        if deadline is not None and time.monotonic() + guess > deadline:
            why = "time budget spent" if guess == 0 else f"would not fit (about {guess:.0f} s)"
            skipped.append({"what": f"n={n}, batch={batch}", "why": why})
            continue
        t0 = time.monotonic()
        g = torch.Generator().manual_seed(seed)
        B = torch.randn(batch, n, n, generator=g, dtype=torch.float32)
        A = ((B + B.mT) / 2).to(device)
        t = time_interleaved(
            candidates(A, k, backends), clock=clock, max_repeats=max_repeats, budget_s=budget_s
        )
        seconds = {name: v["seconds"] for name, v in t.items()}
        rows.append(
            {
                "n": n,
                "batch": batch,
                "seconds": seconds,
                "repeats": {name: int(v["repeats"]) for name, v in t.items()},
                **_derived(seconds, backends),
            }
        )
        del A, B
        if device == "cuda":
            torch.cuda.empty_cache()
        spent[n] = (batch, time.monotonic() - t0)
    return rows, skipped


def provenance(device: str = "cuda") -> dict[str, Any]:
    """The book's provenance record (:meth:`eigprec.RuntimeInfo.as_record`).

    Args:
        device: ``"cuda"``; ``"cpu"`` describes the CPU (for tests of the record layout).

    Returns:
        The JSON-ready provenance, CuPy's version included (None without CuPy).

    Raises:
        RuntimeError: when ``device="cuda"`` and CUDA is not available.

    Example:
        >>> provenance("cpu")["device"]
        'cpu'
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("eigprec_book.record eig describes a CUDA device, and none is available")
    return {**describe_runtime().as_record(), "device": device}


def _guarded(name: str, fn: Callable[[], Any], skipped: list[dict[str, str]]) -> Any:
    """Run one optional section; on failure keep its error (the rest of the record stays)."""
    try:
        return fn()
    except Exception as exc:
        skipped.append({"what": name, "why": f"failed: {type(exc).__name__}: {exc}"})
        return None


def _configs(sizes: Sequence[int], batches: Sequence[int]) -> list[tuple[int, int]]:
    head = (HEADLINE["n"], HEADLINE["batch"])
    rest = [(n, b) for b in sorted(batches) for n in sorted(sizes) if (n, b) != head]
    return ([head] if head[0] in sizes and head[1] in batches else []) + rest


def record(
    *,
    device: str = "cuda",
    sizes: Sequence[int] = SIZES,
    batches: Sequence[int] = BATCHES,
    max_repeats: int = 10,
    budget_s: float = 240.0,
    per_candidate_s: float = 1.0,
    grid: Sequence[tuple[int, int]] | None = None,
    thin_grid: Sequence[tuple[int, int]] | None = None,
    _cupy_on_cpu: bool = False,
) -> dict[str, Any]:
    """Measure the grid, the stream race, the inverse-iteration trade-off and CuPy's status.

    A small CuPy solve runs first (:func:`cupy_smoke`); where it fails the record says
    ``"skipped: <reason>"`` for CuPy and goes on with torch alone.

    Args:
        device: ``"cuda"``; ``"cpu"`` runs the torch parts on the CPU (record-layout tests).
        sizes: matrix sizes n.
        batches: batch sizes.
        max_repeats: most timed calls per candidate.
        budget_s: seconds for the whole record: the grid gets all but a reserve for the
            sections after it; configurations beyond it are listed as skipped.
        per_candidate_s: timed seconds per candidate and configuration.
        grid: ``(batch, n)`` shapes of the accuracy grid (default
            :func:`eigprec_book.record._eig_grid.grid_shapes`: n = 8 … 2048, batch = 1 … 4096);
            it gets the budget left after the timing grid, less a reserve for the rest.
        thin_grid: ``(batch, n)`` shapes of issue 49's grid (:mod:`._eig_thin`); it runs
            first, within a quarter of the budget.
        _cupy_on_cpu: tests only: take the CuPy branches on the CPU (a fake CuPy).

    Returns:
        The record (see :func:`validate_record`).

    Example:
        >>> rec = record()  # doctest: +SKIP
    """
    from eigprec.eig import cupy_solver as _cupy_bridge

    start = time.monotonic()
    skipped: list[dict[str, str]] = []
    cupy_ok = _cupy_bridge.cupy_available() and (device == "cuda" or _cupy_on_cpu)
    smoke = cupy_smoke(device) if cupy_ok else f"no CuPy on {device}"
    if cupy_ok and smoke is not None:
        cupy_ok = False
        smoke = f"the smoke call failed: {smoke}"
    backends = ["cupy", "torch"] if cupy_ok else ["torch"]
    if not cupy_ok:
        skipped.append({"what": "kth_eigvalsh backend cupy", "why": f"skipped: {smoke}"})
    args = (thin_grid, device, max_repeats, per_candidate_s, start, budget_s)
    thin, later = _eig_thin.section(*args)
    skipped += later
    rows, later = measure_grid(
        _configs(sizes, batches),
        backends,
        device=device,
        k=HEADLINE["k"],
        max_repeats=max_repeats,
        budget_s=per_candidate_s,
        deadline=start + 0.55 * budget_s,
    )
    skipped += later
    accuracy, later = _eig_grid.section(
        grid,
        cupy_ok,
        device=device,
        max_repeats=max_repeats,
        per_candidate_s=per_candidate_s,
        deadline=start + max(budget_s - 40.0, 0.8 * budget_s),
    )
    skipped += later
    main = backends[0]
    sweep = [
        {
            "n": r["n"],
            "batch": r["batch"],
            "device": device,
            "backend": main,
            "torch_forward": r["seconds"]["torch.eigvalsh"],
            "kth_forward": r["seconds"][f"kth[{main}]"],
            "torch_train": r["seconds"]["torch.eigh+backward"],
            "kth_train": r["seconds"][f"kth[{main}]+backward[eigenvector]"],
            "forward_speedup": r["forward_speedup"][main],
            "train_speedup": r["train_speedup"][f"{main}/eigenvector"],
        }
        for r in sorted(rows, key=lambda r: (r["batch"], r["n"]))
    ]
    head = next(
        (s for s in sweep if (s["n"], s["batch"]) == (HEADLINE["n"], HEADLINE["batch"])), None
    )
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "provenance": provenance(device),
        "torch_eigh": torch_eigh_batching(),
        "cupy_smoke": "ok" if cupy_ok else f"skipped: {smoke}",
        "settings": {
            "dtype": "float32",
            "k": HEADLINE["k"],
            "sizes": list(sizes),
            "batches": list(batches),
            "backends": backends,
            "timer": "cuda events" if device == "cuda" else "perf_counter",
            "warmup": 1,
            "max_repeats": max_repeats,
            "per_candidate_s": per_candidate_s,
            "inverse_iteration": "kth_eigvalsh(method='inverse_iteration')",
        },
        "headline": None if head is None else {**HEADLINE, **head},
        "targets": TARGETS,
        "grid": rows,
        "sweep": sweep,
        "thin_grid": thin,
        "accuracy_grid": accuracy,
    }
    stopped = any(s["why"] == _eig_grid.INTERRUPTED for s in skipped)
    if stopped:  # the time limit's SIGINT came during the grid: write what was measured
        out["stream_race"] = out["cupy_solver_status"] = out["inverse_iteration"] = None
        skipped.append(
            {"what": "stream race, solver status, inverse iteration", "why": "interrupted"}
        )
        out["skipped"] = skipped
        out["seconds"] = round(time.monotonic() - start, 1)
        validate_record(out)
        return out
    if cupy_ok:
        from eigprec_book.chapters.clarke.speed import stream_race_demo

        out["stream_race"] = _guarded("stream race", stream_race_demo, skipped)
        out["cupy_solver_status"] = _guarded(
            "cupy solver status", lambda: cupy_solver_status(sizes, device=device), skipped
        )
    else:
        out["stream_race"] = out["cupy_solver_status"] = None
        skipped.append({"what": "stream race, cupy solver status", "why": f"no CuPy on {device}"})

    def tradeoff() -> dict[str, Any]:
        from eigprec_book.chapters.clarke.speed import inverse_iteration_tradeoff

        return inverse_iteration_tradeoff(
            batch=HEADLINE["batch"],
            n=HEADLINE["n"],
            k=HEADLINE["n"] // 2,
            device=device,
            backend=main,
            repeats=max_repeats,
        )

    out["inverse_iteration"] = _guarded("inverse iteration trade-off", tradeoff, skipped)
    out["skipped"] = skipped
    out["seconds"] = round(time.monotonic() - start, 1)
    validate_record(out)
    return out


_TOP = {
    "schema": str,
    "provenance": dict,
    "torch_eigh": dict,
    "cupy_smoke": str,
    "settings": dict,
    "targets": dict,
    "grid": list,
    "sweep": list,
    "skipped": list,
}
_PROVENANCE = ("gpu", "torch", "cuda", "cupy", "date", "device")
_SWEEP = ("n", "batch", "torch_forward", "kth_forward", "torch_train", "kth_train")


def validate_record(record: Any) -> None:
    """Check that ``record`` has the structure the Clarke chapter reads.

    Args:
        record: a decoded ``eig`` recording.

    Raises:
        ValueError: naming the first missing or wrong field.

    Example:
        >>> validate_record({"schema": SCHEMA})
        Traceback (most recent call last):
        ...
        ValueError: eig record: missing 'provenance'
    """
    known = isinstance(record, dict) and record.get("schema") in SCHEMAS
    check_top_level(record, "eig", record["schema"] if known else SCHEMA, _TOP)
    _eig_grid.validate_section(record, SCHEMAS[1:])
    if record["schema"] == SCHEMA:
        _eig_thin.validate(record.get("thin_grid"))
    if record["torch_eigh"].get("torch") != record["provenance"].get("torch"):
        raise ValueError("eig record: torch_eigh.torch differs from provenance.torch")
    for key in _PROVENANCE:
        if key not in record["provenance"]:
            raise ValueError(f"eig record: missing provenance.{key}")
    backends = record["settings"].get("backends")
    if not backends:
        raise ValueError("eig record: settings.backends is empty")
    for row in record["grid"]:
        want = set(candidates(torch.empty(0, 1, 1), -1, backends))
        if set(row.get("seconds", {})) != want:
            raise ValueError(f"eig record: grid row n={row.get('n')} lacks candidates")
        for name, t in row["seconds"].items():
            if not (isinstance(t, float) and math.isfinite(t) and t > 0):
                raise ValueError(f"eig record: grid time {name} = {t!r} is not a positive number")
    for row in record["sweep"]:
        for key in _SWEEP:
            if key not in row:
                raise ValueError(f"eig record: sweep row lacks {key!r}")
    for item in record["skipped"]:
        if not (isinstance(item, dict) and item.get("what") and item.get("why")):
            raise ValueError("eig record: every skipped entry needs 'what' and 'why'")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``python -m eigprec_book.record eig``.

    Args:
        parser: the subcommand's parser.
    """

    def ints(text: str) -> list[int]:
        values = [int(v) for v in text.split(",")]
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
        return values

    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=10, help="most timed calls per candidate")
    parser.add_argument("--sizes", type=ints, default=list(SIZES), help="comma-separated n")
    parser.add_argument("--batches", type=ints, default=list(BATCHES), help="comma-separated")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for the record")
    parser.add_argument("--no-sweep", action="store_true", help="headline case only")
    parser.add_argument(
        "--dry-run", action="store_true", help="a small record on the CPU (checks the recorder)"
    )


def refusal() -> str | None:
    """Why this machine cannot record, or None."""
    if not torch.cuda.is_available():
        return "eigprec_book.record eig: no CUDA GPU visible to torch; nothing recorded."
    return None


def run(args: argparse.Namespace) -> int:
    """Record and write the JSON; refuse clearly without CUDA.

    Args:
        args: parsed options (``out``, ``repeats``, ``sizes``, ``batches``, ``budget``,
            ``no_sweep``).

    Returns:
        0 on success, 2 when refused (no CUDA GPU, or a non-positive ``--repeats``/``--budget``).
    """
    if args.repeats < 1 or not args.budget > 0:
        print("eigprec_book.record eig: --repeats and --budget must be positive", file=sys.stderr)
        return 2
    problem = _record.out_problem(args.out)
    if problem is not None:
        print(f"eigprec_book.record eig: {problem}; nothing was measured", file=sys.stderr)
        return 2
    reason = None if getattr(args, "dry_run", False) else refusal()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    sizes, batches = args.sizes, args.batches
    if args.no_sweep:
        sizes, batches = [HEADLINE["n"]], [HEADLINE["batch"]]
    if getattr(args, "dry_run", False):  # the torch parts on the CPU, on small shapes
        rec = record(**_eig_grid.DRY_RUN)  # type: ignore[arg-type]
    else:
        rec = record(sizes=sizes, batches=batches, max_repeats=args.repeats, budget_s=args.budget)
    _record.write_record(_record.finite(rec), args.out)
    report(rec)
    print(f"wrote {args.out}")
    return 0


def report(rec: dict[str, Any]) -> None:
    """Print the headline, the backward costs, the race and what was skipped."""
    _eig_report.report(rec, HEADLINE)
