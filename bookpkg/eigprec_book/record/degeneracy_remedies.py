"""A CPU recorder: the degeneracy chapter's remedies on the failure map's failing cells.

Issue 37, item 3: every remedy of :data:`~eigprec_book.chapters.degeneracy.training.REMEDIES`
(and a global gradient-norm clip, through :func:`schedule_methods.clipped_spike`) runs on
the cells where plain REKLS fails -- a 128×64 and a 256×64 weight at learning rate 0.1, the
128×64 at 0.01; spikes ×10³ and ×10⁴; ``'highest'`` and ``'high'`` under both TF32 rounding
rules; five seeds -- by
:func:`~eigprec_book.chapters.degeneracy.failure_map.failure_map_experiment`.
The whole set costs about a quarter of an hour of one CPU core, more than the chapter's
budget, so it is *recorded*: the details page reads ``book/data/degeneracy_remedies_cpu.json``
and prints where and when it was made. Record it again with::

    OMP_NUM_THREADS=1 python -m eigprec_book.record.degeneracy_remedies \\
        --out book/data/degeneracy_remedies_cpu.json

(``--remedies`` runs a subset and ``--merge`` joins partial records, so two processes can
share the work; each needs at least one name.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from eigprec.runtime import describe_runtime
from eigprec_book.chapters.degeneracy.failure_map import failure_map_experiment
from eigprec_book.chapters.degeneracy.real_model import TinyLM, lm_experiment
from eigprec_book.chapters.degeneracy.schedule_methods import clipped_spike
from eigprec_book.chapters.degeneracy.training import REMEDIES
from eigprec_book.record._record import check_top_level, finite, out_problem, write_record

__all__ = [
    "CELLS",
    "CLIP",
    "LM_RUNS",
    "SCHEMA",
    "load_lm_record",
    "load_remedy_record",
    "merge_records",
    "record_lm",
    "record_remedies",
]

SCHEMA = "eigprec.degeneracy_remedies/2"
LM_SCHEMA = "eigprec.degeneracy_lm/2"
#: Two seed sets, each recorded apart in effect: a chaotic run on another CPU is a run with
#: other seeds (issue 45), so a sentence read from the record gives the range over both.
SEED_SETS = ((0, 1, 2, 3, 4), (1000, 1001, 1002, 1003, 1004))

#: The small transformer's runs
#: (:func:`~eigprec_book.chapters.degeneracy.real_model.lm_experiment`):
#: learning rate × global clip without a remedy, then each remedy of ``"remedies"`` at the
#: first learning rate, unclipped; a ×10⁴ spike on the embedding, two seed sets, three arms.
#: One learning rate: with the warm-up, a cell of ten seeds took 10-30 minutes of one core on a
#: loaded 2-core machine, and the record was made in two processes (``lrs``/``clips`` and
#: ``remedies`` apart, joined by run).
LM_RUNS: dict[str, Any] = {
    "lrs": (0.01,),
    "clips": (None, 1.0),
    "remedies": ("EMA eigenvalues", "one-sided"),
    "spike": 1e4,
    "spiked": "embed.weight",
    "seeds": SEED_SETS[0] + SEED_SETS[1],
    "arms": ("float64", "highest", "high rna"),
    # A 20-step warm-up lets float64 train before the spike in every seed (without it, the
    # KL start-up stalled some float64 runs near chance: no reference to measure harm by).
    "warmup": 20,
    "spike_step": 50,
    "window": 30,
}

#: The failing cells: ((m, n), lr) layers, spike sizes, arms, seeds and the peak window.
CELLS: dict[str, Any] = {
    "layers": [((128, 64), 0.1), ((256, 64), 0.1), ((128, 64), 0.01)],
    "spike_scales": (1000.0, 1e4),
    "arms": ("float64", "highest", "high rna"),
    "seeds": SEED_SETS[0] + SEED_SETS[1],
    "window": 30,
}

#: The global clip's runs: the layer's share of the squared global norm, and the clip's
#: headroom over the usual global norm (1: the clip sits at the usual norm).
CLIP: dict[str, Any] = {"shares": (1e-4, 1e-2), "headroom": 1.0}


def _cell_rows(fm: Any, spike_of: Callable[[float], float] | None = None) -> list[dict]:
    """The map's per-run rows (the page recounts them), each with its seed set."""
    rows = []
    for row in fm.rows:
        row = dict(row)
        row["shape"] = list(row["shape"])
        row["seed set"] = next(i for i, s in enumerate(SEED_SETS) if row["seed"] in s)
        if spike_of is not None:
            row["passed spike"] = row["spike"]
            row["spike"] = spike_of(row["spike"])
        rows.append(row)
    return rows


def record_remedies(
    remedies: Sequence[str] | None = None,
    *,
    clip: bool = True,
    cells: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the failure map once per remedy (and once under a global clip) on the cells.

    Args:
        remedies: Keys of ``REMEDIES`` (default: all of them, ``"none"`` included).
        clip: Also run the global-clip cells (no remedy; every arm, float64 included, sees
            the spike the clip passes on, so float64 with the same clip is the reference).
        cells: Overrides of :data:`CELLS`, or other keywords of ``failure_map_experiment``
            (tests use tiny cells).
        progress: Called with a line of text after each run.

    Returns:
        The record: ``schema``, ``provenance``, ``config``, ``remedies`` (name → the map's
        per-run rows, each with ``"seed set"``, 0 or 1), ``global clip`` (share → per-run
        rows, ``"spike"`` the original factor and ``"passed spike"`` what the clip let
        through) and ``seconds``.

    Raises:
        ValueError: on an unknown remedy (before any training).
    """
    names = list(REMEDIES) if remedies is None else list(remedies)
    for name in names:
        if name not in REMEDIES:
            raise ValueError(f"remedy must be one of {sorted(REMEDIES)}, got {name!r}")
    cfg = {**CELLS, **(cells or {})}
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "provenance": {
            **describe_runtime().as_record(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "config": {**cfg, "method": "REKLS", "clip": CLIP},
        "remedies": {},
        "global clip": {},
        "seconds": {},
    }
    kw = {key: value for key, value in cfg.items() if key != "layers"}
    for name in names:
        start = time.perf_counter()
        fm = failure_map_experiment(cfg["layers"], **kw, remedy=name)
        record["remedies"][name] = _cell_rows(fm)
        record["seconds"][name] = round(time.perf_counter() - start, 1)
        if progress is not None:
            progress(f"{name}: {record['seconds'][name]} s")
    if clip:
        for share in CLIP["shares"]:
            start = time.perf_counter()
            passed = {clipped_spike(s, share, CLIP["headroom"]): s for s in cfg["spike_scales"]}
            fm = failure_map_experiment(cfg["layers"], **{**kw, "spike_scales": list(passed)})
            record["global clip"][repr(share)] = _cell_rows(fm, passed.__getitem__)
            key = f"global clip, share {share!r}"
            record["seconds"][key] = round(time.perf_counter() - start, 1)
            if progress is not None:
                progress(f"{key}: {record['seconds'][key]} s")
    return record


def merge_records(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Join partial records of the same cells (each remedy and clip share once).

    Raises:
        ValueError: if the parts' configurations differ or a remedy appears twice.

    Example:
        >>> part = {"config": {}, "provenance": {}, "global clip": {}}
        >>> a = {**part, "remedies": {"none": []}, "seconds": {"none": 80.0}}
        >>> b = {**part, "remedies": {"one-sided": []}, "seconds": {"one-sided": 75.0}}
        >>> list(merge_records([a, b])["remedies"])
        ['none', 'one-sided']
    """
    parts = list(parts)
    if not parts:
        raise ValueError("nothing to merge")
    out = json.loads(json.dumps(parts[0]))
    out["provenance"] = {"parts": [p["provenance"] for p in parts]}
    for part in parts[1:]:
        if json.dumps(part["config"], sort_keys=True) != json.dumps(out["config"], sort_keys=True):
            raise ValueError("the parts were run on different cells")
        for key in ("remedies", "global clip", "seconds"):
            for name, value in part[key].items():
                if name in out[key]:
                    raise ValueError(f"{key} {name!r} appears in two parts")
                out[key][name] = value
    return out


def load_remedy_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a record and check its shape.

    Raises:
        ValueError: naming a missing or mistyped field, or a row without its counts.
    """
    record = json.loads(Path(path).read_text())
    check_top_level(
        record,
        "degeneracy remedies",
        SCHEMA,
        {"schema": str, "provenance": dict, "config": dict, "remedies": dict, "global clip": dict},
    )
    for group in ("remedies", "global clip"):
        for name, rows in record[group].items():
            for row in rows:
                for key in ("shape", "lr", "spike", "arm", "seed", "seed set", "before", "peak"):
                    if key not in row:
                        raise ValueError(f"degeneracy remedies record: {group} {name!r}: {key}")
    return record


def record_lm(
    runs: dict[str, Any] | None = None,
    *,
    model: TinyLM | None = None,
    progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run the small transformer over :data:`LM_RUNS` (learning rates × clips, remedies).

    Args:
        runs: Overrides of :data:`LM_RUNS`.
        model: The model's sizes (default :class:`TinyLM`'s).
        progress: Called with a line of text after each (lr, clip).
        **kwargs: Other keywords of ``lm_experiment`` (tests shorten the run).

    Returns:
        ``schema``, ``provenance``, ``config``, ``runs``: a list of ``{"lr", "clip",
        "remedy", "summary", "rows"}``, and ``seconds``.
    """
    cfg = {**LM_RUNS, **(runs or {})}
    for key in ("warmup", "spike_step", "window"):  # tests shorten the run through kwargs
        if key in kwargs:
            cfg[key] = kwargs.pop(key)
    model = TinyLM() if model is None else model
    record: dict[str, Any] = {
        "schema": LM_SCHEMA,
        "provenance": {
            **describe_runtime().as_record(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "config": {**cfg, "model": dataclasses.asdict(model), **kwargs},
        "runs": [],
        "seconds": 0.0,
    }
    begin = time.perf_counter()
    plan = [(lr, clip, "none") for lr in cfg["lrs"] for clip in cfg["clips"]]
    plan += [(cfg["lrs"][0], None, remedy) for remedy in cfg["remedies"]]
    for lr, clip, remedy in plan:
        result = lm_experiment(
            arms=cfg["arms"],
            seeds=cfg["seeds"],
            spiked=cfg["spiked"],
            spike=cfg["spike"],
            clip=clip,
            lr=lr,
            remedy=remedy,
            model=model,
            **{key: cfg[key] for key in ("warmup", "spike_step", "window")},
            **kwargs,
        )
        record["runs"].append(
            {
                "lr": lr,
                "clip": clip,
                "remedy": remedy,
                "summary": result.summary(),
                "rows": result.rows,
            }
        )
        if progress is not None:
            progress(f"lr {lr}, clip {clip}, {remedy}: {time.perf_counter() - begin:.0f} s")
    record["seconds"] = round(time.perf_counter() - begin, 1)
    return record


def load_lm_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a small-transformer record and check its shape.

    Raises:
        ValueError: naming a missing or mistyped field.
    """
    record = json.loads(Path(path).read_text())
    check_top_level(
        record,
        "degeneracy small transformer",
        LM_SCHEMA,
        {"schema": str, "provenance": dict, "config": dict, "runs": list},
    )
    for run in record["runs"]:
        for key in ("lr", "clip", "remedy", "summary", "rows"):
            if key not in run:
                raise ValueError(f"degeneracy small transformer record: a run lacks {key!r}")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: record (a subset of) the remedies, or merge partial records."""
    parser = argparse.ArgumentParser(prog="python -m eigprec_book.record.degeneracy_remedies")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--no-clip", action="store_true", help="skip the global-clip runs")
    # One of the three; "+": an empty list would count as not given and record everything.
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--remedies", nargs="+", help="a subset of the remedies (default: all)")
    what.add_argument("--merge", nargs="+", help="join these partial records instead")
    what.add_argument("--lm", action="store_true", help="record the small transformer instead")
    args = parser.parse_args(argv)
    problem = out_problem(args.out)
    if problem is not None:
        parser.error(f"{problem}; nothing was recorded")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.lm:
        record = record_lm(progress=say)
    elif args.merge is not None:
        record = merge_records(load_remedy_record(p) for p in args.merge)
    else:
        record = record_remedies(args.remedies, clip=not args.no_clip, progress=say)
    write_record(finite(record), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
