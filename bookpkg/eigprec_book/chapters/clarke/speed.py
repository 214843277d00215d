"""Speed of the Clarke chapter's k-th eigenvalue: timing sweeps, the inverse-iteration trade-off
and the CUDA stream race. The GPU recorder (``python -m eigprec_book.record eig``) reuses them.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from eigprec.eig import kth_eigvalsh
from eigprec.timing import perf_counter_clock, time_side_by_side
from eigprec_book.chapters.clarke.experiments import _grad

__all__ = [
    "THIN_GRID",
    "cpu_method_costs",
    "inverse_iteration_tradeoff",
    "recorded_backends",
    "recorded_gpu_summary",
    "stream_race_demo",
    "thin_path_ratios",
    "thread_time_clock",
]

#: (batch, n) of issue 49's targets: kth_eigvalsh no slower than torch.linalg at any of them.
THIN_GRID = ((1, 8), (64, 8), (1, 32), (2000, 45), (500, 100), (64, 256), (8, 1024))
#: Ratios the thin-path grid reports: name → (numerator, denominator).
THIN_RATIOS = {
    "forward": ("kth", "eigvalsh"),
    "train": ("kth+backward", "eigh+backward"),
    "mean": ("mean+backward", "eigh+backward"),
}


def thread_time_clock(fn: Callable[[], object]) -> float:
    """CPU seconds the calling thread spent in one call of ``fn``.

    On a shared machine wall-clock time counts the other processes' turns too; the calling
    thread's CPU time does not. It measures the whole work only when that work runs on the
    calling thread — torch and the BLAS limited to one thread, as
    :func:`cpu_method_costs` does.

    Args:
        fn: zero-argument callable.

    Returns:
        Seconds of the thread's CPU time.

    Example:
        >>> thread_time_clock(lambda: sum(range(1000))) >= 0
        True
    """
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def inverse_iteration_tradeoff(
    batch: int = 500,
    n: int = 100,
    *,
    k: int = -1,
    device: str = "cpu",
    backend: str = "auto",
    dtype: torch.dtype = torch.float32,
    steps: int = 3,
    repeats: int = 3,
    seed: int = 0,
    gap_range: tuple[float, float] = (1e-7, 1e-2),
    gap_edges: tuple[float, ...] = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, math.inf),
    neighbour: str = "above",
) -> dict[str, Any]:
    """Speed and accuracy of the inverse-iteration gradient against the exact one.

    Times forward alone (eigenvalues only), forward+backward with the solver's eigenvectors
    (``kth_eigvalsh``) and forward+backward with inverse iteration
    (``kth_eigvalsh(..., method="inverse_iteration")``), side by side; then bins the
    batch by relative eigen-gap at k, min_j |λ_k − λ_j| / max|λ|, and reports in each bin the
    largest gradient error (max-abs entry, against the float64 solver gradient) of inverse
    iteration (``max_grad_err``) and, for scale, of the solver's own gradient in ``dtype``
    (``max_grad_err_solver``).

    Args:
        batch, n: problem size.
        k: eigenvalue index.
        device: ``"cpu"`` or ``"cuda"``.
        backend: eigenvalue backend.
        dtype: float32 or float64.
        steps: inverse-iteration steps.
        repeats: timed rounds (median); 0 skips the timing (accuracy only).
        seed: generator seed.
        gap_range: the gap between λ_k and its neighbour is drawn log-uniformly from this
            range (the matrices are Q diag(λ) Qᵀ with Haar Q and otherwise evenly spaced λ on
            [−1, 1]); random symmetric matrices would almost never show small gaps.
        gap_edges: bin edges of the relative gap.
        neighbour: ``"above"`` or ``"below"``: the side of λ_k the close neighbour sits on
            (inverse iteration shifts slightly above λ_k, towards a neighbour above).

    Returns:
        dict with ``forward``, ``train_exact``, ``train_invit`` seconds (absent when
        ``repeats=0``), ``bins`` (one dict per
        gap bin: ``lo``, ``hi`` (None for +∞), ``count``, ``max_grad_err``,
        ``max_grad_err_solver``, ``grad_scale`` (median largest entry of the exact gradient);
        None for an empty bin)).

    Example:
        >>> r = inverse_iteration_tradeoff(batch=20, n=8, repeats=1)
        >>> sum(b["count"] for b in r["bins"])
        20
    """
    if neighbour not in ("above", "below"):
        raise ValueError(f"neighbour must be 'above' or 'below', got {neighbour!r}")
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
    kk = k % n
    # Spectrum: evenly spaced on [-1, 1] except that the neighbour above λ_k (below, for the
    # top one) sits at a prescribed gap, log-uniform over gap_range.
    lo_gap, hi_gap = gap_range
    gaps = torch.exp(
        math.log(lo_gap) + (math.log(hi_gap) - math.log(lo_gap)) * torch.rand(batch, generator=g)
    ).double()
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(batch, 1)
    above = (neighbour == "above" and kk + 1 < n) or kk == 0
    nb = kk + 1 if above else kk - 1
    lam[:, nb] = lam[:, kk] + torch.sign(torch.tensor(float(nb - kk))) * gaps
    A64 = (Q * lam[:, None, :]) @ Q.mT
    A64 = (A64 + A64.mT) / 2
    A = A64.to(dtype).to(device)

    def forward() -> None:
        with torch.no_grad():
            kth_eigvalsh(A, k, backend=backend)

    def train_exact() -> None:
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(X, k, backend=backend, method="eigh").sum().backward()

    def train_invit() -> None:
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(
            X, k, backend=backend, method="inverse_iteration", steps=steps
        ).sum().backward()

    t = (
        time_side_by_side(
            {"forward": forward, "train_exact": train_exact, "train_invit": train_invit},
            repeats=repeats,
            device=device,
        )
        if repeats > 0
        else {}
    )
    exact = _grad(A64, k)
    X = A.detach().requires_grad_(True)
    kth_eigvalsh(X, k, backend=backend, method="inverse_iteration", steps=steps).sum().backward()
    assert X.grad is not None
    err = (X.grad.double().cpu() - exact).abs().amax(dim=(-2, -1))
    err_exact = (_grad(A, k, backend=backend).double().cpu() - exact).abs().amax(dim=(-2, -1))
    scale = exact.abs().amax(dim=(-2, -1))
    w = torch.linalg.eigvalsh(A64)
    others = torch.cat([w[:, :kk], w[:, kk + 1 :]], dim=-1)
    rel_gap = (others - w[:, kk : kk + 1]).abs().amin(-1) / w.abs().amax(-1)
    bins = []
    for lo, hi in itertools.pairwise(gap_edges):
        sel = (rel_gap >= lo) & (rel_gap < hi)
        bins.append(
            {
                "lo": lo,
                "hi": hi if math.isfinite(hi) else None,
                "count": int(sel.sum()),
                # None, not NaN, for an empty bin: the recordings are strict JSON
                "max_grad_err": float(err[sel].max()) if sel.any() else None,
                "max_grad_err_solver": float(err_exact[sel].max()) if sel.any() else None,
                # the size of what is being approximated: the exact gradient's largest entry
                "grad_scale": float(scale[sel].median()) if sel.any() else None,
            }
        )
    return {"batch": batch, "n": n, "steps": steps, "device": device, **t, "bins": bins}


def stream_race_demo(
    trials: int = 10, batch: int = 200, n: int = 64, sleep_cycles: int = 20_000_000
) -> dict[str, Any]:
    """Count wrong answers of a naive CuPy hand-off vs the stream-aware bridge (CUDA only).

    The matrices are written by a kernel on a side torch stream that first sleeps on the GPU.
    The naive version hands the tensor to CuPy through ``__cuda_array_interface__`` (which
    carries no stream) and solves on CuPy's own stream: it may read the memory before it has
    been written. ``kth_eigvalsh(backend="cupy")`` runs on torch's current stream and cannot.

    Args:
        trials: repetitions.
        batch, n: problem size.
        sleep_cycles: GPU clock cycles the producing stream idles before writing A.

    Returns:
        dict with ``trials``, ``naive_wrong`` and ``bridge_wrong`` (entries of the batch that
        differ from the reference by more than 1e-3 relative, summed over trials).

    Raises:
        RuntimeError: without CUDA or CuPy.

    Example:
        >>> stream_race_demo(trials=2)  # doctest: +SKIP
    """
    from eigprec.eig import cupy_solver as _cupy_bridge

    if not (torch.cuda.is_available() and _cupy_bridge.cupy_available()):
        raise RuntimeError("stream_race_demo needs a CUDA GPU and CuPy")
    import cupy

    g = torch.Generator(device="cuda").manual_seed(0)
    Bm = torch.randn(batch, n, n, device="cuda", generator=g)
    reference = torch.linalg.eigvalsh(Bm @ Bm.mT)[..., -1]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    naive_wrong = bridge_wrong = 0
    for _ in range(trials):
        for route in ("naive", "bridge"):
            with torch.cuda.stream(side):
                A = torch.zeros(batch, n, n, device="cuda")
                torch.cuda._sleep(sleep_cycles)
                torch.matmul(Bm, Bm.mT, out=A)
                if route == "naive":
                    w = cupy.linalg.eigvalsh(cupy.asarray(A))[..., -1]
                    cupy.cuda.Device().synchronize()
                    got = torch.as_tensor(w.get())
                else:
                    got = kth_eigvalsh(A, -1, backend="cupy").cpu()
            torch.cuda.synchronize()
            wrong = int(((got - reference.cpu()).abs() > 1e-3 * reference.abs().cpu()).sum())
            if route == "naive":
                naive_wrong += wrong
            else:
                bridge_wrong += wrong
    return {
        "trials": trials,
        "batch": batch,
        "n": n,
        "naive_wrong": naive_wrong,
        "bridge_wrong": bridge_wrong,
    }


def cpu_method_costs(
    batch: int = 500,
    n: int = 45,
    *,
    k: int = -1,
    repeats: int = 5,
    seed: int = 0,
    threads: int | None = 1,
) -> dict[str, float]:
    """CPU seconds of ``kth_eigvalsh``'s methods against ``torch.linalg``, side by side.

    The kind of measurement ``benchmarks/bench_eig.py`` makes, at chapter scale: random
    symmetric float32 matrices, interleaved rounds (every candidate once per round). Each call
    is timed with :func:`thread_time_clock` (the calling thread's CPU time: with one thread
    the whole work, and blind to other processes' turns on a shared machine — unless
    ``threads`` is not 1, when it is wall-clock time), and each candidate's time is its
    fastest round (the minimum, not a median).

    Args:
        batch, n: problem size.
        k: eigenvalue index.
        repeats: timed rounds (after one untimed warm-up round).
        seed: generator seed.
        threads: threads during the measurement, for torch and — through threadpoolctl,
            where installed — for the BLAS/LAPACK library SciPy calls in ``method="subset"``
            (None: unchanged). ``torch.set_num_threads`` alone leaves SciPy's OpenBLAS
            multi-threaded, and its threads on tiny per-matrix calls cost more than they save.

    Returns:
        Seconds per call (fastest round; thread CPU time with ``threads=1``): ``eigvalsh``
        (``torch.linalg.eigvalsh``), ``forward`` (``kth_eigvalsh`` without grad,
        ``method="auto"``), ``forward_grad`` (the same call on an input that requires grad, no
        backward: the forward pass of a training step, which also computes the eigenvector the
        backward needs), ``torch_train``
        (``torch.linalg.eigh`` + backward) and ``train_<method>`` (``kth_eigvalsh`` +
        backward) for method ``eigh``, ``subset`` and ``inverse_iteration``, and ``train_mean``
        (``kth_eigvalsh(..., subgradient="mean")`` + backward).

    Example:
        >>> t = cpu_method_costs(batch=4, n=20, repeats=1)
        >>> sorted(t)[:2]
        ['eigvalsh', 'forward']
    """
    g = torch.Generator().manual_seed(seed)
    B = torch.randn(batch, n, n, generator=g)
    A = (B + B.mT) / 2

    def eigvalsh() -> None:
        torch.linalg.eigvalsh(A)[..., k]

    def forward() -> None:
        with torch.no_grad():
            kth_eigvalsh(A, k)

    def forward_grad() -> None:  # a training step's forward: it also finds the eigenvector
        kth_eigvalsh(A.detach().requires_grad_(True), k)

    def torch_train() -> None:
        X = A.detach().requires_grad_(True)
        torch.linalg.eigh(X).eigenvalues[..., k].sum().backward()

    def train(method: str) -> Callable[[], None]:
        def run() -> None:
            X = A.detach().requires_grad_(True)
            kth_eigvalsh(X, k, method=method).sum().backward()  # type: ignore[arg-type]

        return run

    fns = {
        "eigvalsh": eigvalsh,
        "forward": forward,
        "forward_grad": forward_grad,
        "torch_train": torch_train,
    }
    fns.update({f"train_{m}": train(m) for m in ("eigh", "subset", "inverse_iteration")})

    def train_mean() -> None:  # the minimum-norm element: every eigenvector, then U Uᵀ / r
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(X, k, subgradient="mean").sum().backward()

    fns["train_mean"] = train_mean
    previous = torch.get_num_threads()
    limit: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if threads is not None:
        torch.set_num_threads(threads)
        try:
            from threadpoolctl import threadpool_limits

            limit = threadpool_limits(limits=threads)
        except ImportError:
            pass
    try:
        with limit:
            for fn in fns.values():  # warm-up round
                fn()
            # Thread time misses work on other threads: only exact with one thread.
            clock = thread_time_clock if threads == 1 else perf_counter_clock
            best = {name: math.inf for name in fns}
            for _ in range(repeats):
                for name, fn in fns.items():
                    best[name] = min(best[name], clock(fn))
        return best
    finally:
        torch.set_num_threads(previous)


def recorded_gpu_summary(
    record: dict[str, Any] | None, small_n: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    """The headline case of a GPU recording (``python -m eigprec_book.record eig``) and its
    small-n rows, one row per shape and ``kth_eigvalsh`` backend, each against
    ``torch.linalg`` of the recorded torch.

    Args:
        record: a loaded ``eig_gpu`` record, or None.
        small_n: matrix sizes whose rows (every batch) follow the headline's.

    Returns:
        Rows with ``backend``, ``n``, ``batch``, ``torch`` (the recorded torch version),
        ``fwd ×`` (``torch.linalg.eigvalsh`` time ÷ ``kth_eigvalsh`` forward time) and
        ``train ×`` (``torch.linalg.eigh`` + backward ÷ ``kth_eigvalsh`` + backward, subgradient
        ``"eigenvector"``); empty without a record or without its headline configuration.

    Example:
        >>> recorded_gpu_summary(None)
        []
    """
    if not record:
        return []
    head = record.get("headline") or {}
    grid = record.get("grid", [])
    shape = (head.get("n"), head.get("batch"))
    row = next((r for r in grid if (r["n"], r["batch"]) == shape), None)
    if row is None:
        return []
    small = sorted((r for r in grid if r["n"] in small_n and r is not row), key=lambda r: r["n"])
    rows = [row, *small]
    version = record.get("provenance", {}).get("torch", "?")
    return [
        {
            "backend": b,
            "n": r["n"],
            "batch": r["batch"],
            "torch": version,
            "fwd ×": r["forward_speedup"][b],
            "train ×": r["train_speedup"][f"{b}/eigenvector"],
        }
        for r in rows
        for b in r["forward_speedup"]
    ]


def recorded_backends(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per shape of the H200 record (``book/data/kth_h200_2026-11-26.json``): CuPy against torch.

    Args:
        record: the loaded record, or None.

    Returns:
        Rows with ``batch``, ``n``, ``speed-up`` (``torch.linalg.eigvalsh`` time ÷ CuPy's
        ``kth_eigvalsh`` forward time), ``CuPy error`` and ``torch error`` (the k-th value's,
        relative to ‖A‖₂, k = n // 3); empty without a record.

    Example:
        >>> recorded_backends(None)
        []
    """
    if not record:
        return []
    rows = []
    for key, r in record["results"].items():
        if not key.startswith("b"):
            continue
        batch, n = (int(part[1:]) for part in key.split("_"))
        rows.append(
            {
                "batch": batch,
                "n": n,
                "speed-up": r["torch_eigvalsh_s"] / r["cupy_fwd_s"],
                "CuPy error": r["cupy_maxrelerr"],
                "torch error": r["torch_maxrelerr"],
            }
        )
    return rows


def _thin_candidates(A: torch.Tensor, k: int) -> dict[str, Callable[[], None]]:
    def eigvalsh() -> None:
        torch.linalg.eigvalsh(A)[..., k]

    def kth() -> None:
        kth_eigvalsh(A, k)

    def eigh_backward() -> None:
        X = A.detach().requires_grad_(True)
        torch.linalg.eigh(X).eigenvalues[..., k].sum().backward()

    def train(**kw: Any) -> Callable[[], None]:
        def run() -> None:
            X = A.detach().requires_grad_(True)
            kth_eigvalsh(X, k, **kw).sum().backward()

        return run

    return {
        "eigvalsh": eigvalsh,
        "kth": kth,
        "eigh+backward": eigh_backward,
        "kth+backward": train(),
        "mean+backward": train(subgradient="mean"),
    }


def _repeated(fn: Callable[[], None], reps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(reps):
            fn()

    return run


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")  # within the data's range
    return q[1], q[0], q[2]


def thin_path_ratios(
    grid: tuple[tuple[int, int], ...] = THIN_GRID,
    *,
    clock: Callable[[Callable[[], object]], float] = thread_time_clock,
    device: str = "cpu",
    rounds: int = 15,
    min_rounds: int = 3,
    unit_s: float = 0.005,
    budget_s: float = 60.0,
    k: int = -1,
    seed: int = 0,
    deadline: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """``kth_eigvalsh`` against ``torch.linalg`` per (batch, n), measured side by side.

    At each shape, random symmetric float32 matrices; five candidates — ``torch.linalg.eigvalsh``
    and ``kth_eigvalsh`` (values, no gradient), ``torch.linalg.eigh`` + backward and
    ``kth_eigvalsh`` + backward with each subgradient — timed in rounds, each round every
    candidate once in a shuffled order. A call shorter than ``unit_s`` is repeated within one
    timing so that the clock's resolution and per-call noise matter less. The ratios
    (:data:`THIN_RATIOS`) are medians over rounds of the two candidates' times in the same
    round, with their quartiles: a slow spell of a shared machine cancels out.

    Args:
        grid: ``(batch, n)`` shapes, measured in this order.
        clock: how one timing is taken (:func:`thread_time_clock`: one CPU thread;
            ``eigprec.timing.cuda_event_clock`` on a GPU).
        device: where the matrices live.
        rounds: most rounds per shape.
        min_rounds: rounds per shape even past its share of ``budget_s``.
        unit_s: shortest timing; faster calls are repeated within one.
        budget_s: seconds per shape after which no new round starts (past ``min_rounds``).
        k: eigenvalue index.
        seed: seed of the matrices and of the shuffles.
        deadline: ``time.monotonic()`` after which no new shape starts.

    Returns:
        ``(rows, skipped)``: per shape ``batch``, ``n``, ``rounds``, ``calls`` per timing,
        ``seconds`` (median per call, per candidate) and, per ratio name, ``{"median",
        "lo", "hi"}``; and the shapes left out for time.

    Example:
        >>> rows, _ = thin_path_ratios(((2, 6),), rounds=2, min_rounds=1, unit_s=1e-4)
        >>> sorted(rows[0]["ratios"])
        ['forward', 'mean', 'train']
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for batch, n in grid:
        if deadline is not None and time.monotonic() > deadline:
            skipped.append({"what": f"thin-path grid {batch}x{n}", "why": "time budget spent"})
            continue
        g = torch.Generator().manual_seed(seed)
        B = torch.randn(batch, n, n, generator=g)
        A = ((B + B.mT) / 2).to(device)
        fns = _thin_candidates(A, k)
        calls = {}
        for name, fn in fns.items():  # warm-up, which also sizes the repeats
            fn()
            calls[name] = max(1, math.ceil(unit_s / max(clock(fn), 1e-9)))
        reps = max(calls.values())

        timed = {name: _repeated(fn, reps) for name, fn in fns.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        start = time.monotonic()
        while len(samples["kth"]) < rounds:
            if len(samples["kth"]) >= min_rounds and time.monotonic() - start > budget_s:
                break
            order = list(timed)
            rng.shuffle(order)
            for name in order:
                samples[name].append(clock(timed[name]) / reps)
        ratios = {}
        for label, (num, den) in THIN_RATIOS.items():
            per_round = [a / b for a, b in zip(samples[num], samples[den], strict=True)]
            mid, lo, hi = _quartiles(per_round)
            ratios[label] = {"median": mid, "lo": lo, "hi": hi}
        rows.append(
            {
                "batch": batch,
                "n": n,
                "rounds": len(samples["kth"]),
                "calls": reps,
                "seconds": {name: statistics.median(v) for name, v in samples.items()},
                "ratios": ratios,
            }
        )
        del A, B, fns, timed
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows, skipped
