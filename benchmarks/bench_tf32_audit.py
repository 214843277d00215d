"""Overhead of ``tf32_audit`` on the CPU: audited vs plain runs of the same code, side by side.

Target (issue 10): code run inside ``tf32_audit()`` takes at most 4x as long as without it.
Workloads: one large product; ``diag(QᵀLQ)`` (n = 512); one training step of an MLP (forward
and backward products); one REKLS optimizer step (small products, where the audit's per-call
cost shows); and, for information, ``diag(QᵀLQ)`` at n = 256 against a float64 reference
(``float64_limit=2**24``; the default limit, 2**18 multiply-adds, leaves it in float32).
Plain and audited runs alternate within one run (``time_interleaved``), so both see the same
machine load. Each round gives one ratio, audited ÷ plain of the two calls timed side by side in
that round (a slow spell of a shared machine then cancels out); the table shows the median
ratio and its range over the rounds, beside the median times. Entering and leaving the audit
is part of each audited call (it is part of what a user pays); the one untimed warm-up round
absorbs first-call costs (lazy imports, allocator) on both sides.

Run: ``PYTHONPATH=src python benchmarks/bench_tf32_audit.py [--repeats 7] [--threads 1]``
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable

import torch

from eigprec.audit import tf32_audit
from eigprec.soap import REKLS
from eigprec.timing import perf_counter_clock, time_interleaved

TARGET_RATIO = 4.0


def _workloads(gen: torch.Generator) -> dict[str, tuple[Callable[[], object], str, int]]:
    a = torch.randn(1024, 1024, generator=gen)
    b = torch.randn(1024, 1024, generator=gen)

    def qtlq(n: int) -> Callable[[], object]:
        q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
        lam = torch.logspace(6, -1, n, dtype=torch.float64)
        big_l, qf = ((q * lam) @ q.T).float(), q.float()
        return lambda: ((qf.T @ big_l) * qf.T).sum(-1)

    mlp = torch.nn.Sequential(
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 10),
    )
    x = torch.randn(256, 512, generator=gen)
    y = torch.randint(0, 10, (256,), generator=gen)

    def mlp_step() -> None:
        mlp.zero_grad()
        torch.nn.functional.cross_entropy(mlp(x), y).backward()

    w = torch.nn.Parameter(torch.randn(128, 64, generator=gen))
    w.grad = torch.randn(128, 64, generator=gen)
    opt = REKLS([w], lr=0.0)  # lr 0: every timed step sees the same parameter
    opt.step()

    default = 2**18
    return {
        "matmul 1024x1024": (lambda: a @ b, "1 product", default),
        "diag(QᵀLQ) n=512": (qtlq(512), "1 product", default),
        "MLP train step": (mlp_step, "batch 256, width 512: 8 products", default),
        "REKLS step 128x64": (opt.step, "18 small products", default),
        "diag(QᵀLQ) n=256 fp64": (qtlq(256), "float64 reference, not targeted", 2**24),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Time each workload plain and audited in interleaved rounds; print the ratios.

    Returns:
        workload name -> median over the rounds of audited ÷ plain.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    workloads = _workloads(torch.Generator().manual_seed(0))
    fns: dict[str, Callable[[], object]] = {}
    for name, (fn, _, limit) in workloads.items():

        def audited(fn: Callable[[], object] = fn, limit: int = limit) -> None:
            with tf32_audit(float64_limit=limit):
                fn()

        fns[name] = fn
        fns[name + " [audited]"] = audited
    for fn in fns.values():  # an untimed round, as time_side_by_side(warmup=1) runs
        fn()
    t = time_interleaved(
        fns,
        clock=perf_counter_clock,
        warmup=1,
        max_repeats=args.repeats,
        budget_s=math.inf,
        keep_samples=True,
    )
    print(
        f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"{args.repeats} interleaved rounds; target audited/plain <= {TARGET_RATIO}"
    )
    ratios = {}
    for name, (_, note, _) in workloads.items():
        plain, audited_t = t[name], t[name + " [audited]"]
        per_round = [a / p for a, p in zip(audited_t["samples"], plain["samples"], strict=True)]
        ratios[name] = statistics.median(per_round)
        print(
            f"{name:22s} plain {plain['seconds'] * 1e3:8.2f} ms  "
            f"audited {audited_t['seconds'] * 1e3:8.2f} ms  ratio {ratios[name]:5.2f} "
            f"[{min(per_round):5.2f}-{max(per_round):5.2f}]  ({note})"
        )
    return ratios


if __name__ == "__main__":
    main()
