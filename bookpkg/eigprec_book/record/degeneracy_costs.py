"""A CPU recorder: what the remedies cost where nothing spikes (issue 46 item 4).

Runs :func:`~eigprec_book.chapters.degeneracy.costs.cost_experiment` on a wide layer whose
inputs carry curvature, a tall one whose outputs do, and a wide noisy one, for two seed sets,
and writes the losses at each checkpoint. Record it again with::

    OMP_NUM_THREADS=1 python -m eigprec_book.record.degeneracy_costs \\
        --out book/data/degeneracy_costs_cpu.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eigprec.runtime import describe_runtime
from eigprec_book.chapters.degeneracy.costs import CurvedRegression, cost_experiment
from eigprec_book.record._record import write_record

__all__ = ["PROBLEMS", "SCHEMA", "SEEDS", "record_costs"]

SCHEMA = "eigprec.degeneracy_costs/1"
#: Two seed sets of five.
SEEDS = (0, 1, 2, 3, 4, 1000, 1001, 1002, 1003, 1004)
#: The problems: curvature over 4 decades on the larger side, where one-sided
#: preconditioning drops it; and a noisy wide layer.
PROBLEMS = (
    CurvedRegression((32, 128), "inputs"),
    CurvedRegression((128, 32), "outputs"),
    CurvedRegression((64, 256), "inputs", noise=1.0),
)


def record_costs(
    problems: Sequence[CurvedRegression] = PROBLEMS,
    seeds: Sequence[int] = SEEDS,
    **kwargs: Any,
) -> dict[str, Any]:
    """The record: ``schema``, ``provenance``, ``config``, ``rows`` and ``seconds``.

    Args:
        problems: The problems.
        seeds: The seeds.
        **kwargs: Other keywords of ``cost_experiment`` (tests shorten the run).
    """
    start = time.process_time()
    result = cost_experiment(problems, seeds=seeds, **kwargs)
    return {
        "schema": SCHEMA,
        "provenance": describe_runtime().as_record(),
        "config": result.config,
        "rows": [{**r, "loss": {str(k): v for k, v in r["loss"].items()}} for r in result.rows],
        "seconds": round(time.process_time() - start, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eigprec_book.record.degeneracy_costs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; name a file")
    write_record(record_costs(), args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
