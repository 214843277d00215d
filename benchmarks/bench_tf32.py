"""Cost of TF32 emulation: emulated vs native float32 matmul on the CPU, side by side.

Target (issue 3): emulated 1024x1024 float32 matmul costs at most 3x the native one.
Run: ``PYTHONPATH=src python benchmarks/bench_tf32.py [--size 1024] [--repeats 15]``.
Native and emulated calls alternate within one run so that both see the same machine load;
the ratio of medians is printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from eigprec.tf32 import emulate_tf32, round_tf32

TARGET_RATIO = 3.0


def _time(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(args.size, args.size, generator=gen)
    b = torch.randn(args.size, args.size, generator=gen)
    native_times, emulated_times = [], []
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # what 'high' selects for cuBLAS
    try:
        for _ in range(3):  # warm-up
            a @ b
        for _ in range(args.repeats):
            native_times += _time(lambda: a @ b, 1)
            with emulate_tf32():
                emulated_times += _time(lambda: a @ b, 1)
        round_times = _time(lambda: round_tf32(a), args.repeats)
    finally:
        torch.backends.cuda.matmul.fp32_precision = "none"
    native = statistics.median(native_times)
    emulated = statistics.median(emulated_times)
    ratio = emulated / native
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, size {args.size}")
    print(f"native float32 matmul   median {native * 1e3:8.2f} ms")
    print(f"emulated TF32 matmul    median {emulated * 1e3:8.2f} ms")
    print(f"round_tf32 of one input median {statistics.median(round_times) * 1e3:8.2f} ms")
    verdict = "meets" if ratio <= TARGET_RATIO else "MISSES"
    print(f"ratio emulated/native = {ratio:.2f} ({verdict} the target <= {TARGET_RATIO})")
    return ratio


if __name__ == "__main__":
    main()
