"""Cost of ``python -m eigprec.audit``: run time against a plain run, and the audit's memory.

Target (issue 36): auditing an unmodified training script takes at most 3x as long as running
it, end to end. Three measurements:

* **overhead**: ``python tests/data/mnist_example.py ARGS`` (PyTorch's MNIST example on random
  images) against ``python -m eigprec.audit tests/data/mnist_example.py ARGS``, each a fresh
  process (interpreter start and imports included: what a user waits for). The two alternate
  within each round, their order swapped every round; each round gives one ratio, audited ÷
  plain, so that a slow spell of a shared machine cancels out; the median is reported. A run
  this short is mostly interpreter start, imports and data, so the script's training steps
  are also timed alone, in this process (CPU time), as a long run would see them;
* **memory over 10,000 steps**: a one-layer training loop (one forward product per optimizer
  step) under ``tf32_audit``; what eigprec's own files hold (tracemalloc) at the audit's bound
  of 4,096 remembered forward calls and after 10,000 steps, and the bytes per step between;
* **peak cost of one product**: the rise of the peak RSS (reset before each product, Linux's
  ``/proc/self/clear_refs``) when one 1024x1024 float32 product runs plain and audited, in
  three rounds of a fresh process (the first audited call also pays first-call costs).

Run: ``PYTHONPATH=src python benchmarks/bench_audit_cli.py [--rounds 5] [--steps 10000]``
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "mnist_example.py"
# 320 random images in batches of 32: 10 optimizer steps, then 200 test images.
EXAMPLE_ARGS = ["--epochs", "1", "--train-size", "320", "--test-size", "200"]
EXAMPLE_ARGS += ["--batch-size", "32", "--test-batch-size", "100", "--log-interval", "100"]
TARGET_RATIO = 3.0

_PEAK_CHILD = """
import torch
from eigprec.audit import tf32_audit

def peak_mib():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) / 1024

def reset_peak():  # Linux: the peak RSS restarts from the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

g = torch.Generator().manual_seed(0)
a, b = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
for _ in range(2):
    c = a @ b
del c
for _ in range(3):
    reset_peak(); start = peak_mib(); c = a @ b; plain = peak_mib() - start; del c
    reset_peak(); start = peak_mib()
    with tf32_audit():
        c = a @ b
    print(plain, peak_mib() - start); del c
"""


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src if not path else f"{src}{os.pathsep}{path}"}


def _seconds(command: list[str]) -> tuple[float, float]:
    # (wall-clock, CPU) seconds of one run; CPU time (user + system of the child) is what a
    # busy shared machine disturbs least.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=_env(), check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if "eigprec.audit" in command and "TF32 audit of" not in done.stderr:
        raise RuntimeError(f"no audit report from {command}: {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def overhead(rounds: int) -> dict[str, tuple[float, float, float, list[float]]]:
    """Per clock ("wall", "cpu"): median plain and audited seconds, median ratio, ratios."""
    plain = [sys.executable, str(EXAMPLE), *EXAMPLE_ARGS]
    audited = [sys.executable, "-m", "eigprec.audit", str(EXAMPLE), *EXAMPLE_ARGS]
    _seconds(plain)  # untimed: file caches, .pyc files
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "audited": []}
    for i in range(rounds):
        order = [("plain", plain), ("audited", audited)]
        for name, command in order if i % 2 == 0 else order[::-1]:
            times[name].append(_seconds(command))
    found = {}
    for j, clock in enumerate(("wall", "cpu")):
        p = [t[j] for t in times["plain"]]
        a = [t[j] for t in times["audited"]]
        ratios = [x / y for x, y in zip(a, p, strict=True)]
        found[clock] = (
            statistics.median(p),
            statistics.median(a),
            statistics.median(ratios),
            ratios,
        )
    return found


def per_step(rounds: int) -> tuple[float, list[float]]:
    """Median and all per-round ratios, audited ÷ plain, of 3 training steps (CPU time).

    The example's own network, optimizer and batch size, without interpreter start, data
    and test pass: what the audit costs a long training run, step after step.
    """
    import torch
    import torch.nn.functional as F

    from eigprec.audit import tf32_audit

    spec = importlib.util.spec_from_file_location("mnist_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.manual_seed(0)
    model = example.Net()
    opt = torch.optim.Adadelta(model.parameters())
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))

    def steps() -> float:
        start = time.process_time()
        for _ in range(3):
            opt.zero_grad()
            F.nll_loss(model(x), y).backward()
            opt.step()
        return time.process_time() - start

    steps()  # untimed: first-call costs
    ratios = []
    for i in range(rounds):
        if i % 2:
            with tf32_audit():
                audited = steps()
            plain = steps()
        else:
            plain = steps()
            with tf32_audit():
                audited = steps()
        ratios.append(audited / plain)
    return statistics.median(ratios), ratios


def memory(steps: int) -> tuple[int, int, int]:
    """Bytes eigprec holds at the bound and after ``steps`` steps, and the bound in steps."""
    import torch

    import eigprec
    from eigprec.audit import mode as _audit_mode
    from eigprec.audit import tf32_audit

    own = [tracemalloc.Filter(True, str(Path(eigprec.__file__).parent / "*"))]

    def held() -> int:
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces(own)
        return sum(s.size for s in snapshot.statistics("filename"))

    bound = _audit_mode.FORWARD_FRAMES_LIMIT
    if steps <= bound:
        raise SystemExit(f"--steps must exceed the audit's bound, {bound}")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(16, 8)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    tracemalloc.start()
    try:
        with tf32_audit():
            for _ in range(bound):
                step()
            at_bound = held()
            for _ in range(steps - bound):
                step()
            at_end = held()
    finally:
        tracemalloc.stop()
    return at_bound, at_end, bound


def peak_per_product() -> list[tuple[float, float]]:
    """MiB by which one 1024x1024 product raises the peak RSS, (plain, audited), 3 rounds.

    A fresh process on Linux; glibc is told to map every block above 64 KiB on its own, so
    that what a product frees goes back to the system and the next round starts level.
    """
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD],
        env={**_env(), "MALLOC_MMAP_THRESHOLD_": "65536"},
        check=True,
        capture_output=True,
        text=True,
    )
    return [tuple(map(float, line.split())) for line in out.stdout.splitlines()]


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Measure and print the three costs.

    Returns:
        What was measured: ``ratio`` and ``cpu_ratio`` (audited ÷ plain, wall-clock and CPU
        time, medians over the rounds), ``step_ratio`` (training steps alone),
        ``bytes_per_step`` past the bound and ``peak_mib``
        (peak RSS rise of one audited 1024x1024 product, last round).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument(
        "--only",
        choices=("overhead", "memory", "peak"),
        help="one measurement (memory measures the eigprec on PYTHONPATH: the same script "
        "measures an older checkout's memory)",
    )
    args = parser.parse_args(argv)
    found: dict[str, float] = {}
    import torch

    print(f"CPU, torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    if args.only in (None, "overhead"):
        print(f"overhead on {EXAMPLE.name} {' '.join(EXAMPLE_ARGS)}, {args.rounds} rounds:")
        times = overhead(args.rounds)
        for clock, (plain_s, audited_s, ratio, ratios) in times.items():
            print(
                f"  {clock:4s} plain {plain_s:6.2f} s, audited {audited_s:6.2f} s, "
                f"ratio {ratio:.2f} [{min(ratios):.2f}-{max(ratios):.2f}] "
                f"(target <= {TARGET_RATIO})"
            )
        found["ratio"], found["cpu_ratio"] = times["wall"][2], times["cpu"][2]
        found["step_ratio"], ratios = per_step(args.rounds)
        print(
            f"  training steps alone (3 per round, CPU time): ratio {found['step_ratio']:.2f} "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        )
    if args.only in (None, "memory"):
        at_bound, at_end, bound = memory(args.steps)
        found["bytes_per_step"] = (at_end - at_bound) / (args.steps - bound)
        print(
            f"memory held by eigprec: {at_bound} B at {bound} steps (the bound), {at_end} B "
            f"at {args.steps} steps: {found['bytes_per_step']:+.2f} B/step past the bound"
        )
    if args.only in (None, "peak"):
        rounds = peak_per_product()
        found["peak_mib"] = rounds[-1][1]
        print(
            "one 1024x1024 product (output 4 MiB), peak RSS rise per round, plain / audited: "
            + ", ".join(f"+{p:.1f} / +{a:.1f} MiB" for p, a in rounds)
        )
    return found


if __name__ == "__main__":
    main()
