"""Timing for the GPU recorders: CUDA events, warm-up, repeats fitted to a time budget.

A candidate that takes seconds per call (``torch.linalg.eigh`` looping over 2000 matrices)
and one that takes microseconds are measured in the same interleaved rounds; each gets as
many timed calls as fit in its share of the budget (at least one, at most ``max_repeats``),
so a slow baseline cannot eat a GPU machine's whole session.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["cuda_event_clock", "perf_counter_clock", "time_interleaved"]

Clock = Callable[[Callable[[], object]], float]


def cuda_event_clock(fn: Callable[[], object]) -> float:
    """Seconds of one call of ``fn`` between two CUDA events on the current stream.

    The events bracket the call on the stream, so the time is the GPU's, including any idle
    time while the host was still launching; the stop event is waited for before reading.

    Example:
        >>> cuda_event_clock(lambda: None)  # doctest: +SKIP
        1.2e-05
    """
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


def perf_counter_clock(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of ``fn`` (CPU work; used where there is no CUDA).

    Example:
        >>> perf_counter_clock(lambda: None) >= 0
        True
    """
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    clock: Clock,
    warmup: int = 1,
    max_repeats: int = 10,
    budget_s: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Median seconds per call of each candidate, in interleaved rounds after a warm-up.

    Args:
        fns: name → zero-argument callable doing one unit of work.
        clock: how one call is timed (:func:`cuda_event_clock` or :func:`perf_counter_clock`).
        warmup: untimed calls of each candidate first (≥ 1: the last one sizes the repeats).
        max_repeats: most timed calls per candidate.
        budget_s: timed seconds each candidate may use; repeats = budget ÷ warm-up time,
            clamped to ``[1, max_repeats]``.

    Returns:
        name → ``{"seconds": median, "repeats": timed calls}``.

    Raises:
        ValueError: on no candidates, ``warmup < 1``, ``max_repeats < 1`` or ``budget_s <= 0``.

    Example:
        >>> t = time_interleaved({"a": lambda: None}, clock=perf_counter_clock, max_repeats=3)
        >>> t["a"]["repeats"]
        3
    """
    if not fns:
        raise ValueError("time_interleaved needs at least one candidate")
    if warmup < 1 or max_repeats < 1 or not budget_s > 0:
        raise ValueError(
            f"need warmup >= 1, max_repeats >= 1 and budget_s > 0; got {warmup}, "
            f"{max_repeats}, {budget_s}"
        )
    repeats: dict[str, int] = {}
    for name, fn in fns.items():
        for _ in range(warmup - 1):
            fn()
        first = max(clock(fn), 1e-9)
        repeats[name] = int(min(max_repeats, max(1, budget_s // first)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(max(repeats.values())):
        for name, fn in fns.items():
            if r < repeats[name]:
                samples[name].append(clock(fn))
    return {
        name: {"seconds": statistics.median(v), "repeats": len(v)} for name, v in samples.items()
    }
