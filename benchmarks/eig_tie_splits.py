"""How far rounding splits exactly repeated eigenvalues, and how far the solver moves true gaps:
the calibration of the default cluster rule of ``kth_eigvalsh(..., subgradient="mean")``.

Prints, per case, the largest gap between consecutive copies of an exact tie as
``torch.linalg.eigh`` computes them and, in float32, refined (2 × 2 Rayleigh–Ritz in float64),
in units of ``eps · max|λ|`` (max over seeds); then, for true float32 gaps of a few eps, the
smallest gap computed and refined. The rule (``eigprec.eig.tolerance``): refined gaps below
2 eps link near λ_k in float32; computed gaps below ``min(3 √max(n, 16), 20)`` eps elsewhere.

Run: ``PYTHONPATH=src:bookpkg OMP_NUM_THREADS=1 python benchmarks/eig_tie_splits.py``;
large n sparsely, e.g. ``--sizes 400,1000 --seeds 2 --batch 2 --dtypes float32``.
"""

from __future__ import annotations

import argparse
import math

import torch
from eigprec_book.chapters.clarke.tie_splits import measure_planted_gaps, measure_tie_splits

from eigprec.eig.tolerance import CLUSTER_TOL_CAP, CLUSTER_TOL_FACTOR, REFINED_CLUSTER_TOL


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--sizes", type=_ints, default=(8, 16, 30, 50, 100, 200))
    parser.add_argument("--multiplicities", default="2,5,20,half,all")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--kinds", default="tie,gram")
    parser.add_argument("--planted-sizes", type=_ints, default=(100, 200))
    parser.add_argument("--planted", default="3,5,10,18", help="true gaps, eps · max|λ|")
    args = parser.parse_args(argv)
    mults = tuple(int(m) if m.isdigit() else m for m in args.multiplicities.split(","))
    dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(","))
    splits = measure_tie_splits(
        args.sizes, mults, dtypes, tuple(args.kinds.split(",")), args.seeds, args.batch
    )
    print(f"{'kind':5} {'dtype':8} {'m':>5} {'n':>5}  computed  refined  spread  plain tol")
    for s in splits:
        plain = min(CLUSTER_TOL_FACTOR * math.sqrt(max(s.n, 16)), CLUSTER_TOL_CAP)
        refined = f"{max(s.refined):7.2f}" if s.refined else "      -"
        print(
            f"{s.kind:5} {s.dtype:8} {s.multiplicity:5d} {s.n:5d}  {max(s.gaps):8.2f}  "
            f"{refined}  {max(s.spreads):6.2f}  {plain:9.2f}"
        )
    refined = [max(s.refined) for s in splits if s.refined]
    if refined:
        print(f"largest refined split of a float32 tie: {max(refined):.2f} eps·max|λ| "
              f"(refined tolerance {REFINED_CLUSTER_TOL:g})")  # fmt: skip
    if args.planted:
        gaps = tuple(float(g) for g in args.planted.split(","))
        print("true float32 gap (eps·max|λ|): smallest computed, smallest refined")
        for p in measure_planted_gaps(args.planted_sizes, gaps, matrices=args.batch):
            print(f"  n={p.n:5d} gap {p.gap:5.1f}: {p.computed:6.2f}  {p.refined:6.2f}")


if __name__ == "__main__":
    main()
