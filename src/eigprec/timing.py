"""The one timer of the package: interleaved repeats, median, device-aware synchronisation.

Chapters, recorders and ``benchmarks/`` all measure with it, so their ratios mean the same.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["time_side_by_side"]


def time_side_by_side(
    fns: dict[str, Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Median wall-clock seconds of each callable, measured in interleaved rounds.

    Interleaving (a, b, a, b, …) rather than (a, a, …, b, b, …) makes slow drifts of a shared
    machine — other processes, thermal state — hit every candidate alike, so the *ratios* are
    trustworthy even when the absolute times wander.

    Args:
        fns: name → zero-argument callable doing one unit of work.
        repeats: timed rounds (the median is reported).
        warmup: untimed rounds first (kernel loading, allocator warm-up, compilation).
        device: where the work runs; on CUDA each call is bracketed by synchronisation so the
            host clock sees the GPU's time.

    Returns:
        name → median seconds per call.

    Raises:
        ValueError: when ``repeats < 1`` or ``fns`` is empty.

    Example:
        >>> t = time_side_by_side({"noop": lambda: None}, repeats=3)
        >>> t["noop"] >= 0
        True
    """
    if repeats < 1 or not fns:
        raise ValueError("time_side_by_side needs repeats >= 1 and at least one callable")
    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in samples.items()}
