"""How far rounding splits exactly repeated eigenvalues: the calibration of the default
cluster tolerance of ``kth_eigvalsh(..., subgradient="mean")``.

Prints, per case, the largest gap between consecutive computed copies of a tie and the largest
spread max − min of the copies, in units of ``eps · √max(n, 16) · max|λ|`` (max over seeds,
and the smallest seed's maximum); the default tolerance is
``eigprec._eig_tol.CLUSTER_TOL_FACTOR`` of these units.

Run: ``PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/eig_tie_splits.py [--seeds 5]``
"""

from __future__ import annotations

import argparse

from eigprec._eig_tol import CLUSTER_TOL_FACTOR
from eigprec.eig import measure_tie_splits


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args(argv)
    splits = measure_tie_splits(seeds=args.seeds, batch=args.batch)
    print(f"{'kind':5} {'dtype':8} {'m':>3} {'n':>4}  gap: max  min-seed  spread: max")
    for s in splits:
        print(
            f"{s.kind:5} {s.dtype:8} {s.multiplicity:3d} {s.n:4d}  "
            f"{max(s.ratios):8.3f}  {min(s.ratios):8.3f}  {max(s.spreads):11.3f}"
        )
    worst = max(splits, key=lambda s: max(s.ratios))
    print(
        f"largest gap {max(worst.ratios):.3f} eps·√max(n,16)·max|λ| ({worst.kind}, {worst.dtype}, "
        f"m = {worst.multiplicity}, n = {worst.n}); default factor {CLUSTER_TOL_FACTOR:g}"
    )


if __name__ == "__main__":
    main()
