"""The eig record's ``thin_grid``: issue 49's grid, ``kth_eigvalsh`` against ``torch.linalg``.

The shapes ``benchmarks/bench_eig.py`` measures on the CPU
(:data:`eigprec_book.chapters.clarke.speed.THIN_GRID`), measured on the recording device with
the same code (:func:`eigprec_book.chapters.clarke.speed.thin_path_ratios`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eigprec.timing import cuda_event_clock, perf_counter_clock

__all__ = ["THIN_GRID_CPU", "THIN_TARGET", "section", "validate"]

#: Issue 49's target for every ratio of the thin-path grid.
THIN_TARGET = 1.10
#: The thin-path grid of a CPU record (tests, dry run): small, so that it stays quick.
THIN_GRID_CPU = ((1, 8), (4, 12))


def section(
    shapes: Sequence[tuple[int, int]] | None,
    device: str,
    max_repeats: int,
    per_candidate_s: float,
    start: float,
    budget_s: float,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Issue 49's grid: ``kth_eigvalsh`` against ``torch.linalg`` at the benchmark's shapes."""
    from eigprec_book.chapters.clarke.speed import THIN_GRID, THIN_RATIOS, thin_path_ratios

    if shapes is None:
        shapes = THIN_GRID if device == "cuda" else THIN_GRID_CPU
    rows, skipped = thin_path_ratios(
        tuple(shapes),
        clock=cuda_event_clock if device == "cuda" else perf_counter_clock,
        device=device,
        rounds=max(3, max_repeats),
        min_rounds=min(3, max(1, max_repeats)),
        budget_s=5 * per_candidate_s,
        deadline=start + 0.25 * budget_s,
    )
    ratios = {name: f"{num} ÷ {den}" for name, (num, den) in THIN_RATIOS.items()}
    return {"ratios": ratios, "target": THIN_TARGET, "rows": rows}, skipped


def validate(section: Any) -> None:
    """Check a record's ``thin_grid``: every row carries every ratio, each positive.

    Raises:
        ValueError: naming the first missing or bad field.
    """
    if not isinstance(section, dict) or not isinstance(section.get("rows"), list):
        raise ValueError("eig record: missing 'thin_grid' (with 'rows')")
    for row in section["rows"]:
        where = f"thin grid {row.get('batch')}x{row.get('n')}"
        ratios = row.get("ratios")
        if not isinstance(ratios, dict) or set(ratios) != set(section.get("ratios", {})):
            raise ValueError(f"eig record: {where} lacks its ratios")
        for name, r in ratios.items():
            if not all(isinstance(r.get(q), float) and r[q] > 0 for q in ("median", "lo", "hi")):
                raise ValueError(f"eig record: {where} ratio {name} is not positive")
