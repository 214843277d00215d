"""How far rounding splits exactly repeated eigenvalues: the calibration of the default
cluster tolerance of ``kth_eigvalsh(..., subgradient="mean")``.

Prints, per case, the largest gap between consecutive computed copies of a tie and the largest
spread max − min of the copies, in units of ``eps · √max(n, 16) · max|λ|`` (max over seeds,
and the smallest seed's maximum), then the largest gap in plain ``eps · max|λ|`` beside the
default tolerance in the same units (``eigprec.eig.tolerance.default_cluster_tol``:
``min(3 √max(n, 16), 20)``).

Run: ``PYTHONPATH=src:bookpkg OMP_NUM_THREADS=1 python benchmarks/eig_tie_splits.py [--seeds 5]``;
large n sparsely, e.g. ``--sizes 1000,2000 --seeds 2 --batch 2 --dtypes float32`` (a float64
eigh at n = 4000 costs 10–20 s per matrix on one thread).
"""

from __future__ import annotations

import argparse
import math

import torch
from eigprec_book.chapters.clarke.tie_splits import measure_tie_splits

from eigprec.eig.tolerance import CLUSTER_TOL_CAP, CLUSTER_TOL_FACTOR


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--sizes", type=_ints, default=(3, 5, 10, 30, 100, 200))
    parser.add_argument("--multiplicities", default="2,5,half,all")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--kinds", default="tie,gram")
    args = parser.parse_args(argv)
    mults = tuple(int(m) if m.isdigit() else m for m in args.multiplicities.split(","))
    dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(","))
    splits = measure_tie_splits(
        args.sizes, mults, dtypes, tuple(args.kinds.split(",")), args.seeds, args.batch
    )
    print(f"{'kind':5} {'dtype':8} {'m':>5} {'n':>5}  gap: max  min-seed  spread: max  "
          "gap/eps  default/eps")  # fmt: skip
    for s in splits:
        root = math.sqrt(max(s.n, 16))
        default = min(CLUSTER_TOL_FACTOR * root, CLUSTER_TOL_CAP)
        print(
            f"{s.kind:5} {s.dtype:8} {s.multiplicity:5d} {s.n:5d}  "
            f"{max(s.ratios):8.3f}  {min(s.ratios):8.3f}  {max(s.spreads):11.3f}  "
            f"{max(s.ratios) * root:7.2f}  {default:11.2f}"
        )
    worst = max(splits, key=lambda s: max(s.ratios) * math.sqrt(max(s.n, 16)))
    print(
        f"largest gap {max(worst.ratios) * math.sqrt(max(worst.n, 16)):.2f} eps·max|λ| "
        f"({worst.kind}, {worst.dtype}, m = {worst.multiplicity}, n = {worst.n}); default "
        f"min({CLUSTER_TOL_FACTOR:g}·√max(n,16), {CLUSTER_TOL_CAP:g}) eps·max|λ|"
    )


if __name__ == "__main__":
    main()
