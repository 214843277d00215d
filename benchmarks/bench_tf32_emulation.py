"""What ``emulate_tf32`` costs on the CPU, and how much of it any Python dispatch mode costs.

Why: `make test` executes the degeneracy pages twice, and their TF32-emulated runs take a
large part of its time (benchmarks/README.md, "Timing history"). This separates the
emulator's own work (rounding, precision checks) from what torch charges for running Python
at every ATen call, which no emulator built on a ``TorchDispatchMode`` can avoid.

Three arms per workload, interleaved round by round (``time_interleaved``), so that all
three see the same machine load:

- ``highest``: the workload at 'highest', where nothing is emulated;
- ``null mode``: the same inside a dispatch mode that only calls each operator (the floor of
  any dispatch-mode emulator);
- ``emulated``: at 'high' inside ``emulate_tf32()`` (the regression and MLP runs enter it
  themselves, as the chapter does).

Each round gives ``null mode ÷ highest`` and ``emulated ÷ highest``; the table shows their
medians and ranges over the rounds. Workloads: one elementwise op and one 64x64 @ 64x32
product (per-call costs), a 20-step REKLS run of the regression (``training_experiment``)
and an 8-step REKLS run of the MLP page's testbed (``mlp_experiment``, 64x32 first layer).

Run: ``PYTHONPATH=src:bookpkg python benchmarks/bench_tf32_emulation.py [--repeats 7]
[--threads 1]``
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from typing import Any

import torch
from eigprec_book.chapters.degeneracy import mlp as ml
from eigprec_book.chapters.degeneracy import practice as pr
from eigprec_book.chapters.degeneracy import training as tr
from torch.utils._python_dispatch import TorchDispatchMode

from eigprec import emulate_tf32, matmul_precision
from eigprec.timing import perf_counter_clock, time_interleaved

ARMS = ("highest", "null mode", "emulated")


class _CallThrough(TorchDispatchMode):
    """A dispatch mode that runs every operator unchanged."""

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return func(*args, **(kwargs or {}))


def _workloads(gen: torch.Generator, steps: int) -> dict[str, dict[str, Callable[[], object]]]:
    a = torch.randn(64, 64, generator=gen)
    b = torch.randn(64, 32, generator=gen)

    def repeated(fn: Callable[[], object], times: int = 200) -> Callable[[], None]:
        def run() -> None:
            for _ in range(times):
                fn()

        return run

    def regression(prec: str) -> Callable[[], object]:
        setting = tr.Setting("REKLS", prec)
        return lambda: tr.training_experiment([setting], seeds=(0,), steps=steps, spike_step=None)

    problem = ml.TeacherStudent(32, 64, 8, spread=1e6)

    def mlp(prec: str) -> Callable[[], object]:
        arm = pr.Arm("REKLS", prec)
        half = max(1, steps // 5)
        return lambda: ml.mlp_experiment(
            [arm], seeds=(0,), steps=2 * half, spike_step=half, problem=problem, eval_size=256
        )

    def arms(plain: Callable[[], object], emulated: Callable[[], object], own: bool) -> dict:
        def at_highest() -> None:
            with matmul_precision("highest"):
                plain()

        def null_mode() -> None:
            with matmul_precision("highest"), _CallThrough():
                plain()

        def at_high() -> None:
            with matmul_precision("high"):
                if own:  # the experiment enters emulate_tf32 itself
                    emulated()
                else:
                    with emulate_tf32():
                        emulated()

        return {"highest": at_highest, "null mode": null_mode, "emulated": at_high}

    add, product = repeated(lambda: a.add(a)), repeated(lambda: a @ b)
    return {
        "elementwise add x200": arms(add, add, own=False),
        "64x64 @ 64x32 x200": arms(product, product, own=False),
        f"REKLS regression, {steps} steps": arms(regression("highest"), regression("high"), True),
        f"REKLS MLP, {2 * max(1, steps // 5)} steps": arms(mlp("highest"), mlp("high"), True),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Time every workload in its three arms, interleaved; print the per-round ratios.

    Returns:
        workload name -> ``{"null mode": median ratio, "emulated": median ratio}``, each
        against the 'highest' arm of the same round.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="steps of the regression run")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    workloads = _workloads(torch.Generator().manual_seed(0), args.steps)
    fns = {f"{w} [{arm}]": fn for w, arms in workloads.items() for arm, fn in arms.items()}
    # warmup=1: each candidate's first call (lazy imports, allocator, caches) is not a sample.
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
        f"{args.repeats} interleaved rounds; ratios against 'highest' in the same round"
    )
    ratios: dict[str, dict[str, float]] = {}
    for w in workloads:
        base = t[f"{w} [highest]"]
        line = f"{w:28s} highest {base['seconds'] * 1e3:8.2f} ms"
        ratios[w] = {}
        for arm in ARMS[1:]:
            got = t[f"{w} [{arm}]"]
            per_round = [x / y for x, y in zip(got["samples"], base["samples"], strict=True)]
            ratios[w][arm] = statistics.median(per_round)
            line += (
                f" | {arm} {got['seconds'] * 1e3:8.2f} ms "
                f"x{ratios[w][arm]:4.2f} [{min(per_round):4.2f}-{max(per_round):4.2f}]"
            )
        print(line)
    return ratios


if __name__ == "__main__":
    main()
