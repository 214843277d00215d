"""The remedy record's runs under the chapter's harm: each run against its own level.

The remedy record (``book/data/degeneracy_remedies_cpu.json``, made by
:mod:`eigprec_book.record.degeneracy_remedies`) keeps per-run losses for two seed sets. Here
they are classified as the failure map classifies its runs
(:func:`~eigprec_book.chapters.degeneracy.failure_map.classify`): a run is harmed when its
peak after the spike exceeds twice its own loss just before it, and a seed whose float64 run
*without a remedy* did not train by the spike is no reference, so its runs are left out.
Under a global clip the reference is float64 under the same clip.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from eigprec_book.chapters.degeneracy.failure_map import classify

__all__ = ["BROKEN", "CLIP_PREFIX", "broken_count", "harm_count", "jump_median", "remedy_runs"]

#: The name a global-clip group gets: this prefix and the layer's share of the norm.
CLIP_PREFIX = "global clip, s = "

#: A run is *broken before the spike* when its loss just before the spike exceeds this
#: multiple of its reference's (float64 without a remedy, same layer and seed): a remedy
#: that fails on its own, which a jump (measured from the run's own level) cannot see.
BROKEN = 2.0


def remedy_runs(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each remedy's (and each global clip share's) runs, classified; float64 rows left out.

    Args:
        record: A remedy record (schema ``eigprec.degeneracy_remedies/2``) with a ``"none"``
            remedy, whose float64 runs are the reference of every remedy.

    Returns:
        Name -> rows with ``"jump"``, ``"harmed"``, ``"reference failed"`` and ``"broken
        before"`` (see :data:`BROKEN`); global clip groups are named ``CLIP_PREFIX + share``.

    Raises:
        KeyError: if the record has no ``"none"`` remedy, or a run has no reference.

    Example:
        >>> f64 = {"shape": [4, 2], "lr": 0.1, "spike": 1e3, "seed": 0, "seed set": 0,
        ...        "arm": "float64", "start": 10.0, "before": 12.0, "peak": 12.0}
        >>> run = {**f64, "arm": "highest", "before": 1.0, "peak": 5.0}
        >>> rec = {"remedies": {"none": [f64, run]}, "global clip": {}}
        >>> [(r["harmed"], r["reference failed"]) for r in remedy_runs(rec)["none"]]
        [(True, True)]
        >>> remedy_runs(rec)["none"][0]["broken before"]
        False
    """
    reference = [r for r in record["remedies"]["none"] if r["arm"] == "float64"]
    groups = {name: (rows, reference) for name, rows in record["remedies"].items()}
    for share, rows in record["global clip"].items():
        own = [r for r in rows if r["arm"] == "float64"]
        groups[f"{CLIP_PREFIX}{float(share):g}"] = (rows, own)
    out = {}
    for name, (rows, ref) in groups.items():
        level = {(tuple(r["shape"]), r["lr"], r["spike"], r["seed"]): r["before"] for r in ref}
        runs = [r for r in rows if r["arm"] != "float64"]
        out[name] = [
            {**r, "broken before": r["before"] > BROKEN * level[_key(r)]}
            for r in classify([*ref, *runs])
            if r["arm"] != "float64"
        ]
    return out


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (tuple(r["shape"]), r["lr"], r["spike"], r["seed"])


def harm_count(
    rows: Sequence[dict[str, Any]], arms: Sequence[str], seed_set: int | None = None
) -> tuple[int, int]:
    """Harmed runs and runs of the given arms whose reference trained (one seed set or all).

    Example:
        >>> rows = [{"arm": "high rna", "harmed": True, "reference failed": False,
        ...          "seed set": 0}]
        >>> harm_count(rows, ["high rna"]), harm_count(rows, ["high rna"], seed_set=1)
        ((1, 1), (0, 0))
    """
    chosen = [
        r
        for r in rows
        if r["arm"] in arms
        and not r["reference failed"]
        and (seed_set is None or r["seed set"] == seed_set)
    ]
    return sum(r["harmed"] for r in chosen), len(chosen)


def broken_count(
    rows: Sequence[dict[str, Any]], arms: Sequence[str], seed_set: int | None = None
) -> tuple[int, int]:
    """Runs broken before the spike (:data:`BROKEN`) and runs, as :func:`harm_count` counts.

    Example:
        >>> rows = [{"arm": "highest", "broken before": True, "reference failed": False,
        ...          "seed set": 0}]
        >>> broken_count(rows, ["highest"])
        (1, 1)
    """
    chosen = [
        r
        for r in rows
        if r["arm"] in arms
        and not r["reference failed"]
        and (seed_set is None or r["seed set"] == seed_set)
    ]
    return sum(r["broken before"] for r in chosen), len(chosen)


def jump_median(rows: Sequence[dict[str, Any]], arms: Sequence[str]) -> float:
    """The median jump of the given arms' runs whose reference trained (NaN if none).

    Example:
        >>> jump_median([{"arm": "highest", "jump": 3.0, "reference failed": False}], ["highest"])
        3.0
    """
    jumps = [r["jump"] for r in rows if r["arm"] in arms and not r["reference failed"]]
    return statistics.median(jumps) if jumps else float("nan")
