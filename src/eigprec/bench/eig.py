"""Record kth_eigvalsh (CuPy backend) against torch.linalg on a CUDA GPU, with provenance.

``python -m eigprec.bench eig --out book/data/eig_gpu.json`` needs only torch and CuPy. It times
the issue's headline case (a batch of 500 random symmetric 100×100 float32 matrices: forward
without grad, and forward+backward), the size sweep the chapter plots, and the stream-race
demonstration, and writes them as JSON with the GPU, compute capability, driver, library
versions and date.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from eigprec.bench import _record
from eigprec.runtime import describe_runtime

__all__ = ["add_arguments", "provenance", "record", "run"]

HEADLINE = {"batch": 500, "n": 100, "k": -1, "dtype": "float32"}
TARGETS = {"forward_speedup": 300.0, "train_speedup": 10.0}


def provenance() -> dict[str, object]:
    """The book's provenance record (:meth:`eigprec.RuntimeInfo.as_record`), CuPy included.

    Returns:
        The JSON-ready provenance of this machine.

    Raises:
        RuntimeError: when CUDA is not available.

    Example:
        >>> provenance()["cupy"]  # doctest: +SKIP
        '13.6.0'
    """
    if not torch.cuda.is_available():
        raise RuntimeError("eigprec.bench eig describes a CUDA device, and none is available")
    return describe_runtime().as_record()


def record(repeats: int = 10, sweep: bool = True) -> dict[str, object]:
    """Measure the headline case, the size sweep and the stream race on CUDA device 0.

    Args:
        repeats: timed rounds per measurement (medians are recorded).
        sweep: also time n ∈ {16, 32, 33, 64, 100} × batch ∈ {100, 500}.

    Returns:
        JSON-ready dict: ``provenance``, ``headline`` (seconds and speed-ups), ``targets``,
        ``sweep`` rows, ``stream_race`` and ``inverse_iteration`` (the stretch: timings and
        gradient error by eigen-gap).

    Raises:
        RuntimeError: without CUDA or CuPy.

    Example:
        >>> rec = record(repeats=3)  # doctest: +SKIP
    """
    from eigprec import _cupy_bridge
    from eigprec.chapters.clarke.speed import (
        inverse_iteration_tradeoff,
        stream_race_demo,
        timing_sweep,
    )

    if not torch.cuda.is_available():
        raise RuntimeError("eigprec.bench eig needs a CUDA GPU; torch sees none")
    if not _cupy_bridge.cupy_available():
        raise RuntimeError("eigprec.bench eig needs CuPy (pip install cupy-cuda12x)")
    head = timing_sweep(
        sizes=(HEADLINE["n"],),
        batches=(HEADLINE["batch"],),
        device="cuda",
        backend="cupy",
        repeats=repeats,
        k=HEADLINE["k"],
    )[0]
    out: dict[str, object] = {
        "provenance": provenance(),
        "headline": {**HEADLINE, **head},
        "targets": TARGETS,
    }
    if sweep:
        out["sweep"] = timing_sweep(
            sizes=(16, 32, 33, 64, 100),
            batches=(100, 500),
            device="cuda",
            backend="cupy",
            repeats=repeats,
        )
    out["stream_race"] = stream_race_demo()
    # Stretch: eigenvalues-only solve + inverse iteration for the backward's eigenvector.
    out["inverse_iteration"] = inverse_iteration_tradeoff(
        batch=HEADLINE["batch"],
        n=HEADLINE["n"],
        k=HEADLINE["n"] // 2,
        device="cuda",
        backend="cupy",
        repeats=repeats,
    )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line options of ``python -m eigprec.bench eig``.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds (median kept)")
    parser.add_argument("--no-sweep", action="store_true", help="headline case only")


def run(args: argparse.Namespace) -> int:
    """Record and write the JSON; refuse clearly without CUDA.

    Args:
        args: parsed options (``out``, ``repeats``, ``no_sweep``).

    Returns:
        0 on success, 2 when no CUDA GPU (or no CuPy) is present.
    """
    if not torch.cuda.is_available():
        print("eigprec.bench eig: no CUDA GPU visible to torch; nothing recorded.")
        return 2
    from eigprec import _cupy_bridge

    if not _cupy_bridge.cupy_available():
        print("eigprec.bench eig: CuPy is not importable (pip install cupy-cuda12x).")
        return 2
    rec = record(repeats=args.repeats, sweep=not args.no_sweep)
    _record.write_record(rec, args.out)
    h = rec["headline"]
    assert isinstance(h, dict)
    print(f"{rec['provenance']['gpu']}: batch {h['batch']} of {h['n']}x{h['n']} float32")
    print(
        f"  forward       torch {h['torch_forward'] * 1e3:9.3f} ms   kth_eigvalsh "
        f"{h['kth_forward'] * 1e3:9.3f} ms   speed-up {h['forward_speedup']:8.1f}x "
        f"(target >= {TARGETS['forward_speedup']:.0f}x)"
    )
    print(
        f"  fwd+backward  torch {h['torch_train'] * 1e3:9.3f} ms   kth_eigvalsh "
        f"{h['kth_train'] * 1e3:9.3f} ms   speed-up {h['train_speedup']:8.1f}x "
        f"(target >= {TARGETS['train_speedup']:.0f}x)"
    )
    inv = rec["inverse_iteration"]
    assert isinstance(inv, dict)
    print(
        f"  stretch: fwd+bwd / fwd alone: exact {inv['train_exact'] / inv['forward']:.1f}x, "
        f"inverse iteration {inv['train_invit'] / inv['forward']:.1f}x (target <= 3x)"
    )
    race = rec["stream_race"]
    assert isinstance(race, dict)
    print(
        f"  stream race: naive wrong {race['naive_wrong']}, bridge wrong {race['bridge_wrong']} "
        f"(of {race['trials']} x {race['batch']})"
    )
    print(f"wrote {args.out}")
    return 0
