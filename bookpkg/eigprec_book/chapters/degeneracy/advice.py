"""What to set, read off the failure map and checked on cells the map does not contain.

Issue 46: a line of the degeneracy chapter's "What to set" box is only as general as its
evidence. The map record (``book/data/degeneracy_map_cpu.json``, recorded by
:mod:`eigprec_book.record.degeneracy_map`) holds per-run rows of REKLS, KL-SOAP and plain
SOAP on the map's cells and on held-out cells, for two seed sets. Here each candidate line of
advice is a test over one cell's runs (:data:`LINES`); :func:`validate` applies it to every
cell where its scope applies and says where it held and where it failed. A line goes into the
box only if it held on every cell, map and held-out alike; the others go to the tables with
the cells where they failed.

Harm is each run's own: its peak loss after the spike over its loss just before it
(:data:`~eigprec_book.chapters.degeneracy.failure_map.HARM_JUMP`); runs whose float64
reference did not train before the spike are left out of every count.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eigprec_book.chapters.degeneracy.failure_map import classify

__all__ = [
    "ALL",
    "KL",
    "LINES",
    "MONITORED",
    "SETTINGS",
    "Line",
    "cell_summary",
    "cells",
    "harm_rows",
    "load",
    "monitor_rates",
    "paired_ratio",
    "setting_of",
    "validate",
]

#: A setting of the record as the box names it: (kind of run, arm) -> label.
SETTINGS: dict[tuple[str, str], str] = {
    ("precision", "float64"): "float64",
    ("precision", "highest"): "'highest'",
    ("precision", "high rna"): "'high'",
    ("precision", "high rne"): "'high' (ties to even)",
    ("precision", "split rna"): "'highest'/'high'",
    ("float64 eigenvalues", "high rna"): "'high' + float64 eigenvalues",
    ("float64 eigenvalues", "float64"): "float64 (f64-eigenvalue run)",
    ("clip 10×", "float64"): "float64, clip 10×",
    ("clip 10×", "highest"): "'highest', clip 10×",
    ("clip 10×", "high rna"): "'high', clip 10×",
}

CellKey = tuple[str, str, tuple[int, int], float, float]  # cells, method, shape, lr, spike


def setting_of(row: dict[str, Any]) -> str:
    """The label of a record row's setting (:data:`SETTINGS`).

    Raises:
        KeyError: for a (kind, arm) the box does not name.

    Example:
        >>> setting_of({"kind": "clip 10×", "arm": "high rna"})
        "'high', clip 10×"
    """
    return SETTINGS[(row["kind"], row["arm"])]


#: What tells the map record's runs apart besides (shape, lr, spike, seed).
RECORD_GROUP = ("method", "kind", "cells", "seed set")


def load(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The map record's runs, classified under today's definitions of harm and of a failed
    reference (:func:`~eigprec_book.chapters.degeneracy.failure_map.classify`)."""
    return classify(record["runs"], RECORD_GROUP)


def cells(rows: Iterable[dict[str, Any]]) -> dict[CellKey, dict[str, list[dict[str, Any]]]]:
    """Rows grouped by cell, then by setting label (every seed set together).

    Returns:
        ``{(cells, method, (m, n), lr, spike): {setting: [rows]}}``, in first-seen order.
    """
    out: dict[CellKey, dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        key = (row["cells"], row["method"], tuple(row["shape"]), row["lr"], row["spike"])
        out.setdefault(key, {}).setdefault(setting_of(row), []).append(row)
    return out


def _valid(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r["reference failed"]]


def cell_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One setting's runs in one cell: seeds whose reference trained, harmed, the medians.

    Returns:
        ``{"runs", "reference failed", "harmed", "peak median", "jump median", "jump max"}``
        (medians NaN where no run is left).

    Example:
        >>> row = {"reference failed": False, "harmed": True, "peak": 8.0, "jump": 4.0}
        >>> cell_summary([row, {**row, "reference failed": True}])["harmed"]
        1
    """
    valid = _valid(rows)
    nan = float("nan")
    return {
        "runs": len(valid),
        "reference failed": len(rows) - len(valid),
        "harmed": sum(r["harmed"] for r in valid),
        "peak median": statistics.median(r["peak"] for r in valid) if valid else nan,
        "jump median": statistics.median(r["jump"] for r in valid) if valid else nan,
        "jump max": max((r["jump"] for r in valid), default=nan),
    }


def paired_ratio(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> list[float]:
    """``peak_a / peak_b`` for the runs of two settings with the same seed (same gradients),
    left out where either reference failed."""
    by_seed = {(r["seed set"], r["seed"]): r for r in _valid(b)}
    return [
        r["peak"] / by_seed[(r["seed set"], r["seed"])]["peak"]
        for r in _valid(a)
        if (r["seed set"], r["seed"]) in by_seed
    ]


@dataclass(frozen=True)
class Line:
    """A candidate line of the box: the settings it compares, and the test of one cell.

    Attributes:
        name: the line, in the box's words.
        methods: the optimizers it speaks about.
        needs: the settings a cell must hold for the line to apply there.
        holds: ``holds(settings)`` -> whether the line held on one cell (``settings``: the
            cell's rows by setting label).
        evidence: ``evidence(settings)`` -> the number the tables print for the cell.
        label: a few words for a table's narrow column.
    """

    name: str
    methods: tuple[str, ...]
    needs: tuple[str, ...]
    holds: Callable[[dict[str, list[dict[str, Any]]]], bool]
    evidence: Callable[[dict[str, list[dict[str, Any]]]], float]
    label: str


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _no_harm(*labels: str) -> Callable[[dict[str, list[dict[str, Any]]]], bool]:
    return lambda s: all(cell_summary(s[label])["harmed"] == 0 for label in labels)


def _worst_jump(*labels: str) -> Callable[[dict[str, list[dict[str, Any]]]], float]:
    return lambda s: max(cell_summary(s[label])["jump max"] for label in labels)


def _ratio_at_most(a: str, b: str, bound: float) -> Callable[..., bool]:
    return lambda s: _median(paired_ratio(s[a], s[b])) <= bound


def _ratio(a: str, b: str) -> Callable[[dict[str, list[dict[str, Any]]]], float]:
    return lambda s: _median(paired_ratio(s[a], s[b]))


#: The KL-Shampoo optimizers of the map, and all three optimizers.
KL = ("REKLS", "SOAP")
ALL = ("REKLS", "SOAP", "plain SOAP")
#: Two settings within this factor of each other (median paired peak ratio) count as the
#: same: a seed's chaotic peak moves by more than that with the arithmetic alone.
NOISE = 1.1

#: The candidate lines, each tested cell by cell.
LINES: tuple[Line, ...] = (
    Line(
        "clip the layer's gradient at 10× its running mean norm: no run harmed",
        ALL,
        ("float64, clip 10×", "'highest', clip 10×", "'high', clip 10×"),
        _no_harm("float64, clip 10×", "'highest', clip 10×", "'high', clip 10×"),
        _worst_jump("float64, clip 10×", "'highest', clip 10×", "'high', clip 10×"),
        label="clip 10×",
    ),
    Line(
        "factor updates at 'highest', not 'high': median peak at most 1.1× 'high''s",
        ALL,
        ("'highest'", "'high'"),
        _ratio_at_most("'highest'", "'high'", NOISE),
        _ratio("'highest'", "'high'"),
        label="'highest' over 'high'",
    ),
    Line(
        "'high' + float64 eigenvalues: median peak below 'highest''s",
        KL,
        ("'high' + float64 eigenvalues", "'highest'"),
        _ratio_at_most("'high' + float64 eigenvalues", "'highest'", 1.0),
        _ratio("'high' + float64 eigenvalues", "'highest'"),
        label="'high' + float64 eigenvalues",
    ),
    Line(
        "'highest'/'high' (0.4.0's defaults): median peak at most 1.1× 'highest''s",
        KL,
        ("'highest'/'high'", "'highest'"),
        _ratio_at_most("'highest'/'high'", "'highest'", NOISE),
        _ratio("'highest'/'high'", "'highest'"),
        label="split precisions",
    ),
    Line(
        "float32 is no cure: unclipped, 'highest' harmed in some run",
        ALL,
        ("'highest'",),
        lambda s: cell_summary(s["'highest'"])["harmed"] > 0,
        lambda s: float(cell_summary(s["'highest'"])["harmed"]),
        label="float32 no cure",
    ),
)


def validate(rows: Iterable[dict[str, Any]], lines: Sequence[Line] = LINES) -> list[dict[str, Any]]:
    """Each line tested on every cell where it applies (map and held-out cells apart).

    A cell is skipped for a line when its optimizer is not among the line's, a setting the
    line needs is missing, or no run of a needed setting is left once failed references are
    taken out.

    Returns:
        One dict per line: ``"line"``, ``"label"``, ``"held"`` (``{"map": [keys],
        "held-out": [...]}``), ``"failed"`` (likewise), ``"evidence"`` (``{key: number}``) and
        ``"in box"`` (it held on every cell, of both kinds, where it applied, and applied
        somewhere held-out).

    Example:
        >>> row = {"cells": "map", "method": "REKLS", "shape": [8, 4], "lr": 0.1,
        ...        "spike": 1e3, "seed set": 0, "seed": 0, "reference failed": False,
        ...        "harmed": False, "peak": 1.0, "jump": 1.0, "kind": "precision"}
        >>> rows = [{**row, "arm": "highest"}, {**row, "arm": "high rna", "peak": 2.0}]
        >>> [v["held"]["map"] for v in validate(rows, LINES[1:2])]
        [[('map', 'REKLS', (8, 4), 0.1, 1000.0)]]
    """
    grouped = cells(rows)
    out = []
    for line in lines:
        held: dict[str, list[CellKey]] = {"map": [], "held-out": []}
        failed: dict[str, list[CellKey]] = {"map": [], "held-out": []}
        evidence: dict[CellKey, float] = {}
        for key, settings in grouped.items():
            if key[1] not in line.methods or any(n not in settings for n in line.needs):
                continue
            if any(not _valid(settings[n]) for n in line.needs):
                continue
            evidence[key] = line.evidence(settings)
            (held if line.holds(settings) else failed)[key[0]].append(key)
        out.append(
            {
                "line": line.name,
                "label": line.label,
                "held": held,
                "failed": failed,
                "evidence": evidence,
                "in box": not failed["map"] and not failed["held-out"] and bool(held["held-out"]),
            }
        )
    return out


def harm_rows(rows: Iterable[dict[str, Any]], settings: Sequence[str]) -> list[dict[str, Any]]:
    """A table row per (cell, method): harmed runs of each setting, over the seeds whose
    reference trained, every seed set together, and the runs left out.

    Returns:
        Dicts with ``"cells"``, ``"method"``, ``"layer"`` (``"128×64, lr 0.1, ×1000"``),
        ``"runs"`` (per setting, the runs counted), ``"harmed"`` (per setting), and
        ``"reference failed"`` (runs left out, the largest over the settings).
    """
    out = []
    for key, by_setting in cells(rows).items():
        present = [s for s in settings if s in by_setting]
        if not present:
            continue
        summary = {s: cell_summary(by_setting[s]) for s in present}
        (m, n), lr, spike = key[2], key[3], key[4]
        out.append(
            {
                "cells": key[0],
                "method": key[1],
                "layer": f"{m}×{n}, lr {lr:g}, ×{spike:g}",
                "runs": {s: summary[s]["runs"] for s in present},
                "harmed": {s: summary[s]["harmed"] for s in present},
                "reference failed": max(summary[s]["reference failed"] for s in present),
            }
        )
    return out


#: The float32 settings whose runs the monitor is scored on.
MONITORED = ("'highest'", "'high'", "'high' (ties to even)", "'highest'/'high'")


def monitor_rates(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (cell, method): how :class:`eigprec.SOAPMonitor` did on the float32 runs.

    A run counts as flagged when the monitor flagged it before the spike, at it or later in
    the window; harmed as in :func:`cell_summary`. Runs whose reference failed are left out.

    Returns:
        Dicts with ``"cells"``, ``"method"``, ``"layer"``, ``"runs"``, ``"harmed"``,
        ``"missed"`` (harmed, never flagged), ``"false alarms"`` (flagged, not harmed) and
        ``"flag before"`` (flagged before the spike).
    """
    out = []
    for key, by_setting in cells(rows).items():
        runs = [r for s in MONITORED for r in _valid(by_setting.get(s, []))]
        if not runs:
            continue
        flagged = [r["flagged"] or r["flag before"] > 0 for r in runs]
        (m, n), lr, spike = key[2], key[3], key[4]
        out.append(
            {
                "cells": key[0],
                "method": key[1],
                "layer": f"{m}×{n}, lr {lr:g}, ×{spike:g}",
                "runs": len(runs),
                "harmed": sum(r["harmed"] for r in runs),
                "missed": sum(r["harmed"] and not f for r, f in zip(runs, flagged, strict=True)),
                "false alarms": sum(
                    f and not r["harmed"] for r, f in zip(runs, flagged, strict=True)
                ),
                "flag before": sum(r["flag before"] > 0 for r in runs),
            }
        )
    return out
