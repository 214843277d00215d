"""The one timer of the package: interleaved repeats, median, device-aware clocks.

Chapters, recorders and ``benchmarks/`` all measure with it, so their ratios mean the same.
:func:`time_interleaved` is the mechanism (a clock per call, repeats fitted to a time budget,
so a seconds-long baseline cannot eat a GPU machine's session); :func:`time_side_by_side` is
its fixed-repeat form: the same interleaved rounds, without the sizing call.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from eigprec._args import check_int, check_real

__all__ = ["cuda_event_clock", "perf_counter_clock", "time_interleaved", "time_side_by_side"]


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


def _check_candidates(fns: object) -> None:
    if not isinstance(fns, dict):
        raise TypeError(f"fns must be a dict of name -> callable, got {type(fns).__name__}")
    if not fns:
        raise ValueError("timing needs at least one candidate")
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"candidate {name!r} is not callable: {type(fn).__name__}")


def _timed_rounds(
    fns: dict[str, Callable[[], object]], clock: Clock, repeats: dict[str, int]
) -> dict[str, list[float]]:
    # Round r times every candidate that still has a repeat left, in the same order.
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(max(repeats.values())):
        for name, fn in fns.items():
            if r < repeats[name]:
                samples[name].append(clock(fn))
    return samples


def _cuda_device(device: object) -> bool:
    """Whether ``device`` is a CUDA device; refuses one this machine does not have."""
    if not isinstance(device, str | torch.device):
        raise TypeError(
            f"device must be a str or torch.device, got {type(device).__name__} {device!r}"
        )
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device {device!r} is not a device torch knows: {err}") from None
    if dev.type != "cuda":
        return False
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={str(dev)!r} but CUDA is not available (torch.cuda.is_available() is "
            "False); time on 'cpu'"
        )
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ValueError(f"device={str(dev)!r} but this machine has {count} CUDA device(s)")
    return True


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    clock: Clock,
    warmup: int = 1,
    max_repeats: int = 10,
    budget_s: float = 1.0,
    keep_samples: bool = False,
) -> dict[str, dict]:
    """Median seconds per call of each candidate, in interleaved rounds after a warm-up.

    Args:
        fns: name → zero-argument callable doing one unit of work.
        clock: how one call is timed (:func:`cuda_event_clock` or :func:`perf_counter_clock`).
        warmup: untimed calls of each candidate first (≥ 1: the last one sizes the repeats).
        max_repeats: most timed calls per candidate.
        budget_s: timed seconds each candidate may use; repeats = budget ÷ warm-up time,
            clamped to ``[1, max_repeats]``.
        keep_samples: also return every timed call's seconds, in round order, so that a
            caller can form per-round ratios of candidates timed in the same round (a slow
            spell of a shared machine then cancels out of the ratio).

    Returns:
        name → ``{"seconds": median, "repeats": timed calls}``, plus ``"samples"`` (a list of
        seconds, one per round) when ``keep_samples``.

    Raises:
        TypeError: if ``fns`` is not a dict of callables, ``warmup``/``max_repeats`` not
            ints (bools are not) or ``budget_s`` not a real number.
        ValueError: on no candidates, ``warmup < 1``, ``max_repeats < 1``, ``budget_s <= 0``
            or NaN.

    Example:
        >>> t = time_interleaved({"a": lambda: None}, clock=perf_counter_clock, max_repeats=3)
        >>> t["a"]["repeats"]
        3
    """
    _check_candidates(fns)
    warmup = check_int("warmup", warmup, low=1)
    max_repeats = check_int("max_repeats", max_repeats, low=1)
    budget_s = check_real("budget_s", budget_s, low=0.0, low_open=True, finite=False)
    if not callable(clock):
        raise TypeError(f"clock must be callable, got {type(clock).__name__}")
    repeats: dict[str, int] = {}
    for name, fn in fns.items():
        for _ in range(warmup - 1):
            fn()
        first = max(clock(fn), 1e-9)
        # An unlimited budget means max_repeats: inf // first would be NaN, which min/max
        # silently turn into one repeat.
        fit = max_repeats if math.isinf(budget_s) else budget_s // first
        repeats[name] = int(min(max_repeats, max(1, fit)))
    samples = _timed_rounds(fns, clock, repeats)
    out: dict[str, dict] = {
        name: {"seconds": statistics.median(v), "repeats": len(v)} for name, v in samples.items()
    }
    if keep_samples:
        for name, v in samples.items():
            out[name]["samples"] = v
    return out


def time_side_by_side(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Median seconds of each callable, measured in interleaved rounds.

    Interleaving (a, b, a, b, …) rather than (a, a, …, b, b, …) makes slow drifts of a shared
    machine — other processes, thermal state — hit every candidate alike, so the *ratios* are
    trustworthy even when the absolute times wander.

    Args:
        fns: name → zero-argument callable doing one unit of work.
        repeats: timed rounds (the median is reported).
        warmup: untimed rounds first (kernel loading, allocator warm-up, compilation):
            each candidate is called exactly ``warmup + repeats`` times, the first
            ``warmup`` untimed.
        device: where the work runs (a ``str`` or ``torch.device``); on CUDA each call is
            timed with CUDA events, so the time is the GPU's. Checked before any call.

    Returns:
        name → median seconds per call.

    Raises:
        TypeError: if ``fns`` is not a dict of callables, ``repeats``/``warmup`` are not
            ints (``2.5``, ``True`` and NaN are not) or ``device`` is not a str or
            ``torch.device``.
        ValueError: when ``repeats < 1``, ``warmup < 0``, ``fns`` is empty, ``device`` is
            not a device name, or is a CUDA device this machine does not have (no CUDA, or
            an index beyond the device count).

    Example:
        >>> t = time_side_by_side({"noop": lambda: None}, repeats=3)
        >>> t["noop"] >= 0
        True
    """
    _check_candidates(fns)
    repeats = check_int("repeats", repeats, low=1)
    warmup = check_int("warmup", warmup, low=0)
    clock = cuda_event_clock if _cuda_device(device) else perf_counter_clock
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples = _timed_rounds(fns, clock, dict.fromkeys(fns, repeats))
    return {name: statistics.median(v) for name, v in samples.items()}
