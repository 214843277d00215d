"""Cost of TF32 emulation: emulated vs native float32 matmul on the CPU, side by side.

Target (issue 3): emulated 1024x1024 float32 matmul costs at most 3x the native one.
Run: ``PYTHONPATH=src python benchmarks/bench_tf32.py [--size 1024] [--repeats 15]``.
Native and emulated calls alternate within one run so that both see the same machine load;
the ratio of medians is printed.
"""

from __future__ import annotations

import argparse

import torch

from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32, round_tf32
from eigprec.timing import time_side_by_side

TARGET_RATIO = 3.0


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(args.size, args.size, generator=gen)
    b = torch.randn(args.size, args.size, generator=gen)

    def emulated():
        with emulate_tf32():
            a @ b

    # 'high' as a user would set it; matmul_precision restores whatever was set before.
    with matmul_precision("high"):
        seconds = time_side_by_side(
            {"native": lambda: a @ b, "emulated": emulated, "round": lambda: round_tf32(a)},
            repeats=args.repeats,
            warmup=3,
        )
    native, emulated_s = seconds["native"], seconds["emulated"]
    ratio = emulated_s / native
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, size {args.size}")
    print(f"native float32 matmul   median {native * 1e3:8.2f} ms")
    print(f"emulated TF32 matmul    median {emulated_s * 1e3:8.2f} ms")
    print(f"round_tf32 of one input median {seconds['round'] * 1e3:8.2f} ms")
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print(f"ratio emulated/native = {ratio:.2f} ({verdict} the target <= {TARGET_RATIO})")
    return ratio


if __name__ == "__main__":
    main()
