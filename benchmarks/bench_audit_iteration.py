"""Per-iteration cost of ``python -m eigprec.audit`` on a nanoGPT-sized training loop.

Target (issue 48): an audited training iteration takes at most 2x as long as a plain one.

The workload is a small GPT of this file's own (the shapes of nanoGPT's small CPU runs: 4
transformer blocks, ``n_embd`` 128, 4 heads, 64 tokens of context, batches of 8 sequences,
so every linear layer multiplies 512 rows; a vocabulary of 65 characters; bias-free linear
layers, causal ``F.scaled_dot_product_attention``, AdamW with gradient clipping). Run with
``--train`` this file *is* the training script: it prints the milliseconds of each
iteration (forward, backward, clipping, optimizer step).

The benchmark runs that script as a user would, ``python bench_audit_iteration.py --train``
against ``python -m eigprec.audit bench_audit_iteration.py --train`` (the default, which
measures each site's first 8 calls and every 8th after) and against ``--sample 1`` (every
call measured), each a fresh process, in turn within each round and in a rotated order
every round, so that all see the same machine load. Times are CPU time (one thread), which a
busy shared machine disturbs least. Each round gives ratios to the plain run of that round:
of the median iteration and of the mean iteration (the first iterations, which pay
first-call costs, left out). The figure is the mean iteration's ratio of the default audit,
median over the rounds: what a run of this length pays per iteration; the median iteration
shows the cost of an iteration that is only counted, and ``--sample 1`` that of one that is
measured in full.

Run: ``PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_audit_iteration.py
[--rounds 5] [--iterations 30]``
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0
WARMUP = 3  # iterations left out of each run's median (first-call costs)


def _model(vocab: int, context: int, width: int, blocks: int, heads: int):
    import torch
    from torch import nn
    from torch.nn import functional as F

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width, bias=False)
            self.out = nn.Linear(width, width, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (
                z.view(b, t, heads, c // heads).transpose(1, 2)
                for z in self.qkv(x).split(width, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = SelfAttention()
            self.mlp = nn.Sequential(
                nn.Linear(width, 4 * width, bias=False),
                nn.GELU(),
                nn.Linear(4 * width, width, bias=False),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.positions = nn.Embedding(context, width)
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.tokens.weight  # tied, as GPT-2 does

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))

    return TinyGPT()


def train(iterations: int, seed: int = 0) -> list[float]:
    """Train the small GPT on random tokens; the milliseconds of each iteration."""
    import torch

    vocab, context, batch = 65, 64, 8
    torch.manual_seed(seed)
    model = _model(vocab, context, width=128, blocks=4, heads=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    data = torch.randint(0, vocab, (iterations, batch, context + 1))
    times = []
    for it in range(iterations):
        start = time.process_time()
        x, y = data[it, :, :-1], data[it, :, 1:]
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(1e3 * (time.process_time() - start))
    return times


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src if not path else f"{src}{os.pathsep}{path}"}


def _iteration_ms(command: list[str]) -> tuple[float, float]:
    # (median, mean) milliseconds per iteration of one run, its first WARMUP iterations
    # left out.
    done = subprocess.run(command, env=_env(), check=True, capture_output=True, text=True)
    if "eigprec.audit" in command and "TF32 audit of" not in done.stderr:
        raise RuntimeError(f"no audit report from {command}: {done.stderr[-2000:]}")
    times = [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("ms ")]
    return statistics.median(times[WARMUP:]), statistics.mean(times[WARMUP:])


def measure(rounds: int, iterations: int, arms: dict[str, list[str]]) -> dict[str, dict]:
    """Per arm: median and mean ms per iteration, and the ratios to the plain run per round.

    ``arms`` maps a name to the audit's options (``None``: the plain run). The arms run in
    turn within each round, their order rotated every round.
    """
    script = [str(Path(__file__).resolve()), "--train", "--iterations", str(iterations)]
    commands = {
        name: [sys.executable, *script]
        if options is None
        else [sys.executable, "-m", "eigprec.audit", *options, *script]
        for name, options in arms.items()
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    names = list(arms)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(_iteration_ms(commands[name]))
    found = {}
    plain = times[names[0]]
    for name in names:
        found[name] = {
            "median_ms": statistics.median(t[0] for t in times[name]),
            "mean_ms": statistics.median(t[1] for t in times[name]),
            "median_ratios": [t[0] / p[0] for t, p in zip(times[name], plain, strict=True)],
            "mean_ratios": [t[1] / p[1] for t, p in zip(times[name], plain, strict=True)],
        }
    return found


def main(argv: list[str] | None = None) -> float:
    """Run the training script (``--train``) or measure the ratio; returns the median ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="be the training script")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args(argv)
    if args.iterations <= WARMUP:
        parser.error(f"--iterations must exceed {WARMUP}")
    if args.train:
        for ms in train(args.iterations):
            print(f"ms {ms:.3f}")
        return math.nan
    threads = os.environ.get("OMP_NUM_THREADS")
    print(f"CPU, OMP_NUM_THREADS={threads}; {args.rounds} rounds of {args.iterations} iterations")
    arms = {"plain": None, "audited": [], "every call": ["--sample", "1"]}
    found = measure(args.rounds, args.iterations, arms)
    for name, f in found.items():
        if name == "plain":
            print(f"  plain       {f['median_ms']:6.1f} ms median, {f['mean_ms']:6.1f} ms mean")
            continue
        med, mean = f["median_ratios"], f["mean_ratios"]
        print(
            f"  {name:11s} {f['median_ms']:6.1f} ms median, {f['mean_ms']:6.1f} ms mean; "
            f"ratio {statistics.median(med):.2f} [{min(med):.2f}-{max(med):.2f}] median, "
            f"{statistics.median(mean):.2f} [{min(mean):.2f}-{max(mean):.2f}] mean"
        )
    ratio = statistics.median(found["audited"]["mean_ratios"])
    print(f"audited (default --sample 8), mean iteration: {ratio:.2f} (target <= {TARGET_RATIO})")
    return ratio


if __name__ == "__main__":
    main()
