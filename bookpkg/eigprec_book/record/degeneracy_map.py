"""A CPU recorder: the failure map for REKLS, KL-SOAP and plain SOAP, on the map's cells and
on held-out cells, once per seed set.

Issue 46: every line of the degeneracy chapter's "What to set" box must read a map that has
the optimizer it names, and hold on cells the map does not contain. Each part runs
:func:`~eigprec_book.chapters.degeneracy.failure_map.failure_map_experiment` per optimizer
(and, for the KL optimizers, once more with float64 approximate eigenvalues), on the map's
cells or the held-out ones, with the seeds ``offset … offset + 4``; a chaotic run on another
CPU is a run with other seeds (issue 45), so the record holds two seed sets, each recorded
apart. Per-run rows are kept, so that the page recounts them under its definitions. Record
it again with (one process per part, then merge)::

    OMP_NUM_THREADS=1 python -m eigprec_book.record.degeneracy_map \\
        --cells map --seed-offset 0 --out /tmp/map-0.json
    ...
    python -m eigprec_book.record.degeneracy_map --merge /tmp/*.json \\
        --out book/data/degeneracy_map_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eigprec.runtime import describe_runtime
from eigprec_book.chapters.degeneracy.failure_map import failure_map_experiment
from eigprec_book.record._record import check_top_level, write_record

__all__ = ["CELLS", "KINDS", "METHOD_RUNS", "SCHEMA", "merge_parts", "record_part"]

SCHEMA = "eigprec.degeneracy_map/1"

#: The cells: the map's (the chapter's REKLS map at chapter scale) and held-out ones, each a
#: list of ((m, n), lr) layers with its spike sizes.
CELLS: dict[str, list[tuple[tuple[tuple[int, int], float], tuple[float, ...]]]] = {
    "map": [
        (((128, 64), 0.1), (1000.0, 1e4)),
        (((256, 64), 0.1), (1000.0, 1e4)),
        (((64, 128), 0.1), (1000.0, 1e4)),
        (((128, 64), 0.01), (1000.0, 1e4)),
    ],
    "held-out": [
        (((384, 64), 0.1), (1000.0,)),
        (((512, 64), 0.1), (1000.0,)),
        (((128, 64), 0.03), (1000.0,)),
        (((128, 64), 0.1), (100.0,)),
        (((64, 256), 0.1), (1000.0,)),
    ],
}

#: The kinds of run, each (arms, remedy, clip): the precision arms with the split precision of
#: emerging-optimizers 0.4.0's defaults; float64 approximate eigenvalues at 'high' (an
#: ``eigprec`` option); the layer's gradient clipped at 10× its running mean norm.
KINDS: dict[str, tuple[tuple[str, ...], str, float | None]] = {
    "precision": (("float64", "highest", "high rna", "high rne", "split rna"), "none", None),
    "float64 eigenvalues": (("float64", "high rna"), "float64 eigenvalues", None),
    "clip 10×": (("float64", "highest", "high rna"), "none", 10.0),
}

#: Per optimizer, the kinds of run (plain SOAP has no KL approximate eigenvalues to widen).
METHOD_RUNS: dict[str, tuple[str, ...]] = {
    "REKLS": ("precision", "float64 eigenvalues", "clip 10×"),
    "SOAP": ("precision", "float64 eigenvalues", "clip 10×"),
    "plain SOAP": ("precision", "clip 10×"),
}
WINDOW = 30
_KEYS = {"schema": str, "provenance": dict, "config": dict, "runs": list, "seconds": dict}


def _rows(fm: Any, method: str, cells: str, offset: int, kind: str) -> list[dict[str, Any]]:
    out = []
    for row in fm.rows:
        row = dict(row)
        row["shape"] = list(row["shape"])
        row.update({"method": method, "cells": cells, "remedy": fm.config["remedy"]})
        row.update({"kind": kind, "clip": fm.config["clip"], "seed set": offset})
        out.append(row)
    return out


def record_part(
    cells: str,
    seed_offset: int,
    methods: Sequence[str] = tuple(METHOD_RUNS),
    kinds: Sequence[str] = tuple(KINDS),
    *,
    seeds: int = 5,
    cell_list: list | None = None,
    window: int = WINDOW,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One part of the record: one cell set, one seed set, the given optimizers.

    Args:
        cells: ``"map"`` or ``"held-out"`` (a key of :data:`CELLS`).
        seed_offset: The seeds are ``seed_offset … seed_offset + seeds - 1``.
        methods: Keys of :data:`METHOD_RUNS`.
        kinds: Keys of :data:`KINDS`: each method runs those of its own kinds.
        seeds: Seeds per cell.
        cell_list: Overrides the cells (tests use tiny ones).
        window: Steps after the spike over which the peak is taken.
        progress: Called with a line of text after each run.

    Returns:
        A record: ``schema``, ``provenance`` (``parts``: one entry), ``config``, ``runs``
        (per-run rows with ``"method"``, ``"cells"``, ``"remedy"`` and ``"seed set"``) and
        ``seconds``.

    Raises:
        ValueError: on an unknown cell set or method (before any training).
    """
    if cells not in CELLS:
        raise ValueError(f"cells must be one of {sorted(CELLS)}, got {cells!r}")
    for m in methods:
        if m not in METHOD_RUNS:
            raise ValueError(f"method must be one of {list(METHOD_RUNS)}, got {m!r}")
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"kind must be one of {list(KINDS)}, got {k!r}")
    if isinstance(seed_offset, bool) or not isinstance(seed_offset, int) or seed_offset < 0:
        raise ValueError(f"seed_offset must be an int >= 0, got {seed_offset!r}")
    chosen = CELLS[cells] if cell_list is None else cell_list
    seed_list = tuple(range(seed_offset, seed_offset + seeds))
    runs, seconds = [], {}
    for method in methods:
        for kind in (k for k in METHOD_RUNS[method] if k in kinds):
            arms, remedy, clip = KINDS[kind]
            for layer, spikes in chosen:
                t0 = time.process_time()
                fm = failure_map_experiment(
                    [layer],
                    spike_scales=spikes,
                    arms=arms,
                    seeds=seed_list,
                    method=method,
                    remedy=remedy,
                    clip=clip,
                    window=window,
                    turn_steps=min(5, window + 1),
                    k=min(8, *layer[0]),
                )
                runs += _rows(fm, method, cells, seed_offset, kind)
                key = f"{method} / {kind} / {layer[0][0]}x{layer[0][1]} lr {layer[1]:g}"
                seconds[key] = round(time.process_time() - t0, 1)
                if progress is not None:
                    progress(f"{key}: {seconds[key]:.0f} s")
    info = describe_runtime().as_record()
    info.update(
        {"cells": cells, "seed set": seed_offset, "methods": list(methods), "kinds": list(kinds)}
    )
    return {
        "schema": SCHEMA,
        "provenance": {"parts": [info]},
        "config": {
            "cells": {
                k: [[list(layer[0]), layer[1], list(s)] for layer, s in v] for k, v in CELLS.items()
            },
            "kinds": {k: [list(a), r, c] for k, (a, r, c) in KINDS.items()},
            "methods": {m: list(v) for m, v in METHOD_RUNS.items()},
            "seeds per cell": seeds,
            "window": window,
        },
        "runs": runs,
        "seconds": seconds,
    }


def merge_parts(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One record from parts (their runs and provenance concatenated).

    Raises:
        ValueError: on no parts, another schema, or two parts that ran the same method on
            the same cells with the same seed set.
    """
    if not parts:
        raise ValueError("nothing to merge: give at least one part")
    seen: set[tuple[str, str, int, str]] = set()
    out = {
        "schema": SCHEMA,
        "provenance": {"parts": []},
        "config": parts[0]["config"],
        "runs": [],
        "seconds": {},
    }
    for part in parts:
        check_top_level(part, "degeneracy map", SCHEMA, _KEYS)
        for info in part["provenance"]["parts"]:
            # (The first part recorded ran before clipping was a kind: its two kinds.)
            kinds = info.get("kinds", ["precision", "float64 eigenvalues"])
            for method in info["methods"]:
                for kind in (k for k in METHOD_RUNS[method] if k in kinds):
                    key = (method, info["cells"], info["seed set"], kind)
                    if key in seen:
                        raise ValueError(f"two parts ran {key}: merge each part once")
                    seen.add(key)
            out["provenance"]["parts"].append({**info, "kinds": kinds})
        for row in part["runs"]:
            if "kind" not in row:
                row = {**row, "clip": None}
                row["kind"] = "precision" if row["remedy"] == "none" else row["remedy"]
            out["runs"].append(row)
        offsets = {info["seed set"] for info in part["provenance"]["parts"]}
        tag = "/".join(str(o) for o in sorted(offsets))
        out["seconds"].update({f"{k} (seeds from {tag})": v for k, v in part["seconds"].items()})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eigprec_book.record.degeneracy_map", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cells", choices=sorted(CELLS), default="map")
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=list(METHOD_RUNS))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS))
    parser.add_argument("--merge", nargs="+", type=Path, help="merge these parts instead")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; name a file")
    if args.merge is not None:
        import json

        record = merge_parts([json.loads(p.read_text()) for p in args.merge])
    else:
        record = record_part(
            args.cells,
            args.seed_offset,
            args.methods,
            args.kinds,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    write_record(record, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
