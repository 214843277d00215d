"""CPU benchmark: kth_eigvalsh (torch backend) vs torch.linalg, measured side by side.

Batch of 2000 random symmetric 45×45 float32 matrices, k = -1. Targets (issue 4):
forward without grad within 10 % of ``torch.linalg.eigvalsh``; forward+backward within 20 % of
``torch.linalg.eigh`` + backward. Ratios are kth_eigvalsh time ÷ torch time (lower is better).

Run: ``PYTHONPATH=src python benchmarks/bench_eig.py [--repeats 7]``
"""

from __future__ import annotations

import argparse

import torch

from eigprec.eig import kth_eigvalsh
from eigprec.timing import time_side_by_side


def main() -> None:
    """Time both pairs in interleaved rounds and print the ratios against their targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--n", type=int, default=45)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch intra-op threads (0: torch's default). One thread is far less sensitive "
        "to other processes on a shared machine, whose OpenMP barriers can stall for seconds.",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    B = torch.randn(args.batch, args.n, args.n, generator=g)
    A = (B + B.mT) / 2
    k = -1

    def torch_forward() -> None:
        with torch.no_grad():
            torch.linalg.eigvalsh(A)[..., k]

    def kth_forward() -> None:
        with torch.no_grad():
            kth_eigvalsh(A, k, backend="torch")

    def torch_train() -> None:
        X = A.detach().requires_grad_(True)
        torch.linalg.eigh(X).eigenvalues[..., k].sum().backward()

    def kth_train() -> None:
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(X, k, backend="torch").sum().backward()

    t = time_side_by_side(
        {
            "torch_forward": torch_forward,
            "kth_forward": kth_forward,
            "torch_train": torch_train,
            "kth_train": kth_train,
        },
        repeats=args.repeats,
        warmup=1,
    )
    fwd, train = t["kth_forward"] / t["torch_forward"], t["kth_train"] / t["torch_train"]
    print(
        f"CPU ({torch.get_num_threads()} threads), batch {args.batch} of {args.n}x{args.n} "
        f"float32, median of {args.repeats} interleaved rounds, torch {torch.__version__}"
    )
    print(
        f"forward (no grad): torch.linalg.eigvalsh {t['torch_forward'] * 1e3:8.2f} ms  "
        f"kth_eigvalsh {t['kth_forward'] * 1e3:8.2f} ms  ratio {fwd:.3f} (target <= 1.10)"
    )
    print(
        f"forward+backward:  torch.linalg.eigh     {t['torch_train'] * 1e3:8.2f} ms  "
        f"kth_eigvalsh {t['kth_train'] * 1e3:8.2f} ms  ratio {train:.3f} (target <= 1.20)"
    )


if __name__ == "__main__":
    main()
