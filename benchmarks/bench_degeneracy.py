"""CPU benchmark: what the degeneracy chapter's heaviest cell costs, shared and unshared.

The core page's training experiment and clipping study (issue 20's budget: every
degeneracy page within 240 s on a 2-core CPU, all of them together aiming at 180 s) run
the same regression with 18 settings and 20 arms. :func:`training_and_practice` runs the
unclipped settings once for both studies and forks the clipped arms at the spike; this
benchmark times it against the two experiments run apart with nothing shared, for one
seed (the chapter runs five; the cost is linear in seeds), and checks the curves agree.

Target: the shared run costs at most 0.85 × the unshared one (thread CPU time, one
torch thread, so other processes on a shared machine do not count).

Run: ``PYTHONPATH=src:bookpkg OMP_NUM_THREADS=1 python benchmarks/bench_degeneracy.py [--seeds 1]``
"""

from __future__ import annotations

import argparse
import time

import torch
from eigprec_book.chapters.degeneracy import practice as pr
from eigprec_book.chapters.degeneracy import training as tr
from eigprec_book.chapters.degeneracy.scale import experiment_kwargs

TARGET = 0.85


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds per setting")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = tuple(range(args.seeds))
    settings = experiment_kwargs("training", full=False)["settings"]
    arms = pr.chapter_arms()

    t0 = time.thread_time()
    train, prac = pr.training_and_practice(settings, arms, seeds=seeds, steps=100)
    shared = time.thread_time() - t0

    t0 = time.thread_time()
    ref_t = tr.training_experiment(settings, seeds=seeds, steps=100)
    ref_p = pr.practice_experiment(arms, seeds=seeds, steps=100, share_prefix=False)
    apart = time.thread_time() - t0

    same = all(torch.equal(train.losses[k], v) for k, v in ref_t.losses.items()) and all(
        torch.equal(prac.losses[k], v) for k, v in ref_p.losses.items()
    )
    ratio = shared / apart
    print(f"{len(settings)} settings + {len(arms)} arms, {len(seeds)} seed(s), 100 steps")
    print(f"shared  {shared:7.1f} s CPU")
    print(f"apart   {apart:7.1f} s CPU")
    print(f"ratio   {ratio:7.2f}  (target <= {TARGET}) {'ok' if ratio <= TARGET else 'MISSED'}")
    print(f"curves identical: {same}")


if __name__ == "__main__":
    main()
