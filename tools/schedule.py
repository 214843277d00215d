"""How the page runners share a machine: how many at once, threads each, longest first.

``tools/execute_pages.py`` (pages into MyST-NB's cache) and ``tools/colab_check.py`` (the
reader's notebooks, one Colab-like session each) run one notebook per process. Both use
the machine's cores once — ``jobs`` processes of ``cpus // jobs`` threads — and start the
longest notebooks first, by the last run's times in ``_build/execution-seconds.json``,
else by the typical times committed in ``tools/page-seconds.json`` (a fresh clone, CI),
else by file size, so that the longest run does not start last.

Example:
    >>> plan(jobs=0, items=3, cpus=2)
    (2, 1)
    >>> plan(jobs=1, items=3, cpus=4)
    (1, 4)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["TYPICAL_TIMES", "load_times", "longest_first", "page_order", "plan"]

# Seconds each notebook page took in `make test`'s strict build on the 2-core machine,
# for the order alone (a fresh clone has no last run): a page the file lacks is placed by
# its size, and tests/test_schedule.py fails until the file names every page of the toc.
TYPICAL_TIMES = Path(__file__).resolve().with_name("page-seconds.json")


def load_times(path: Path) -> dict[str, float]:
    """The last run's seconds per page, or ``{}`` where there is no readable file.

    A page is named by its file name without suffix (``tf32``): the page the build executes
    (``book/tf32.md``) and the reader's notebook the Colab check runs (``tf32.ipynb``) share
    one entry.

    Args:
        path: the JSON file (``{"tf32": 61.2, ...}``).

    Returns:
        Page name -> seconds.
    """
    try:
        known = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def longest_first(paths: list[Path], known: dict[str, float]) -> list[Path]:
    """``paths`` ordered by the last run's seconds, then by file size, largest first.

    Args:
        paths: notebook files.
        known: page name (the file name without suffix) -> seconds (see :func:`load_times`).

    Returns:
        A new list, the longest first.
    """
    return sorted(paths, key=lambda p: (known.get(p.stem, -1.0), p.stat().st_size), reverse=True)


def page_order(paths: list[Path], last_run: dict[str, float]) -> list[Path]:
    """``paths``, longest first: by the last run's seconds, else by the typical seconds in
    :data:`TYPICAL_TIMES`, else by file size.

    Args:
        paths: notebook files.
        last_run: the last run's seconds per page name (see :func:`load_times`).

    Returns:
        A new list, the longest first.
    """
    return longest_first(paths, {**load_times(TYPICAL_TIMES), **last_run})


def plan(jobs: int, items: int, cpus: int | None = None) -> tuple[int, int]:
    """How many processes at once, and threads each, to use ``cpus`` cores once.

    Args:
        jobs: processes asked for; 0 means one per CPU.
        items: notebooks to run (never more processes than these).
        cpus: cores to use (default: ``os.cpu_count()``).

    Returns:
        ``(processes, threads per process)``, each at least 1.

    Raises:
        ValueError: if ``jobs`` or ``items`` is negative.
    """
    if jobs < 0 or items < 0:
        raise ValueError(f"jobs and items must be >= 0, got jobs={jobs}, items={items}")
    cpus = cpus or os.cpu_count() or 1
    processes = max(1, min(jobs or cpus, items))
    return processes, max(1, cpus // processes)
