"""What ``python -m eigprec_book.record eig`` prints after writing its record."""

from __future__ import annotations

from typing import Any

from eigprec_book.record import _eig_grid

__all__ = ["report"]


def report(rec: dict[str, Any], headline: dict[str, Any]) -> None:
    """Print the headline shape's speed-ups, the race, the grid's summary and what was skipped.

    Args:
        rec: an eig record.
        headline: the shape printed (``n``, ``batch``).
    """
    p = rec["provenance"]
    print(f"{p['gpu']}: torch {p['torch']} (CUDA {p['cuda']}), CuPy {p['cupy']}")
    print(f"  {rec['torch_eigh']['note']}")
    print(f"  CuPy smoke call: {rec['cupy_smoke']}")
    for row in rec["grid"]:
        if (row["n"], row["batch"]) != (headline["n"], headline["batch"]):
            continue
        print(f"  batch {row['batch']} of {row['n']}x{row['n']} float32:")
        for b, x in row["forward_speedup"].items():
            print(f"    forward speed-up vs torch.linalg.eigvalsh [{b}]: {x:9.1f}x")
        for key, x in row["train_speedup"].items():
            print(f"    fwd+bwd speed-up vs eigh+backward [{key}]: {x:9.1f}x")
        for key, x in row["train_over_forward"].items():
            print(f"    fwd+bwd / fwd [{key}]: {x:6.2f}x (target <= 3x)")
    race = rec.get("stream_race")
    if race:
        print(f"  stream race: naive wrong {race['naive_wrong']}, bridge wrong "
              f"{race['bridge_wrong']} (of {race['trials']} x {race['batch']})")  # fmt: skip
    for s in rec.get("cupy_solver_status") or []:
        print(f"  syevjBatched n={s['n']}: {s['not_converged']} of {s['batch']} not converged")
    thin = rec.get("thin_grid")
    if thin:
        print(f"  thin-path grid ({', '.join(thin['ratios'].values())}; target <= "
              f"{thin['target']:.2f}):")  # fmt: skip
        for row in thin["rows"]:
            cells = "  ".join(f"{name} {r['median']:.3f}" for name, r in row["ratios"].items())
            print(f"    {row['batch']}x{row['n']}: {cells}")
    print(_eig_grid.summary(rec))
    for item in rec["skipped"]:
        print(f"  skipped {item['what']}: {item['why']}")
