"""How far the eigensolver splits exactly repeated eigenvalues: the calibration of the
default cluster tolerance of ``kth_eigvalsh(..., subgradient="mean")``.

Run by ``benchmarks/eig_tie_splits.py``; the library's tolerance
(:func:`eigprec.eig.tolerance.default_cluster_tol`) states what it found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eigprec.eig.tolerance import CLUSTER_TOL_CAP, CLUSTER_TOL_FACTOR

__all__ = ["CLUSTER_TOL_CAP", "CLUSTER_TOL_FACTOR", "TieSplit", "measure_tie_splits"]


@dataclass(frozen=True)
class TieSplit:
    """How far the solver split the copies of exact ties, for one case.

    Per seed, over the seed's matrices, in units of ``eps(dtype) · √max(n, 16) · max|λ|`` (the
    default tolerance is :data:`CLUSTER_TOL_FACTOR` of these units up to n = 44, and
    ``CLUSTER_TOL_CAP / √n`` of them beyond): ``ratios``, the largest
    gap between consecutive computed copies of the tie (what the tolerance must cover), and
    ``spreads``, the largest max − min of the copies.
    """

    kind: str
    dtype: str
    n: int
    multiplicity: int
    ratios: tuple[float, ...]
    spreads: tuple[float, ...]


def _tie_batch(kind: str, n: int, m: int, dtype: torch.dtype, batch: int, g: torch.Generator):
    if kind == "tie":
        # Q diag(λ) Qᵀ in float64 with λ_k = … = λ_{k+m-1} exactly, then rounded to dtype.
        Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
        lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(batch, 1)
        k = (n - m) // 2
        lam[:, k : k + m] = lam[:, k : k + 1] if m < n else 1.0
        w = torch.linalg.eigvalsh(((Q * lam[:, None, :]) @ Q.mT).to(dtype))
        return w, w[:, k : k + m]
    # Gram matrix B Bᵀ of rank n − m, formed in dtype: eigenvalue 0 with multiplicity m.
    B = torch.randn(batch, n, n - m, generator=g, dtype=dtype)
    w = torch.linalg.eigvalsh(B @ B.mT)
    return w, w[:, :m]


def measure_tie_splits(
    sizes: tuple[int, ...] = (3, 5, 10, 30, 100, 200),
    multiplicities: tuple[int | str, ...] = (2, 5, "half", "all"),
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
    kinds: tuple[str, ...] = ("tie", "gram"),
    seeds: int = 5,
    batch: int = 20,
) -> list[TieSplit]:
    """Measure how far ``torch.linalg.eigvalsh`` splits exactly repeated eigenvalues.

    ``kind="tie"``: ``Q diag(λ) Qᵀ`` built in float64 with ``λ`` evenly spaced in [−1, 1] and
    ``multiplicity`` copies of a middle one (all ``n`` equal to 1 for ``"all"``), rounded to
    ``dtype``; ``kind="gram"``: ``B Bᵀ``
    with ``B`` of shape ``(n, n − multiplicity)`` in ``dtype`` (a zero cluster). Seeded with
    ``torch.Generator().manual_seed(seed)`` for ``seed in range(seeds)``; on the CPU.

    Args:
        sizes: matrix sizes n (each > multiplicity).
        multiplicities: sizes of the tie: ints, ``"half"`` (n // 2) or ``"all"`` (n); a case
            whose multiplicity is not below n (``"all"`` excepted) or is < 2 is skipped.
        dtypes: float32 and/or float64.
        kinds: ``"tie"`` and/or ``"gram"``.
        seeds: seeds per case (each its own batch).
        batch: matrices per seed.

    Returns:
        One :class:`TieSplit` per (kind, dtype, multiplicity, n).

    Raises:
        ValueError: an unknown kind or dtype or multiplicity, seeds or batch < 1.

    Example:
        >>> import torch
        >>> (s,) = measure_tie_splits((20,), ("all",), (torch.float64,), ("tie",), seeds=2, batch=2)
        >>> max(s.ratios) < CLUSTER_TOL_FACTOR
        True
    """
    if any(kd not in ("tie", "gram") for kd in kinds):
        raise ValueError(f"measure_tie_splits: kinds must be 'tie' or 'gram', got {kinds!r}")
    if any(dt not in (torch.float32, torch.float64) for dt in dtypes):
        raise ValueError(f"measure_tie_splits: dtypes must be float32/float64, got {dtypes!r}")
    if any(not isinstance(m, int) and m not in ("half", "all") for m in multiplicities):
        raise ValueError(f"measure_tie_splits: bad multiplicities {multiplicities!r}")
    if seeds < 1 or batch < 1:
        raise ValueError(f"measure_tie_splits: seeds and batch must be >= 1, got {seeds}, {batch}")
    out, seen = [], set()
    for kind in kinds:
        for dtype in dtypes:
            eps = torch.finfo(dtype).eps
            for mult in multiplicities:
                for n in sizes:
                    m = {"half": n // 2, "all": n}.get(mult, mult)  # type: ignore[arg-type]
                    name = str(dtype).removeprefix("torch.")
                    skip = m < 2 or m > n or (m == n and (mult != "all" or kind == "gram"))
                    if skip or (kind, name, n, m) in seen:
                        continue
                    seen.add((kind, name, n, m))
                    ratios, spreads = [], []
                    for seed in range(seeds):
                        g = torch.Generator().manual_seed(seed)
                        w, copies = _tie_batch(kind, n, m, dtype, batch, g)
                        unit = eps * math.sqrt(max(n, 16)) * w.abs().amax(-1).double()
                        copies = copies.double()
                        step = (copies[:, 1:] - copies[:, :-1]).amax(-1)
                        spread = copies.amax(-1) - copies.amin(-1)
                        ratios.append(float((step / unit).max()))
                        spreads.append(float((spread / unit).max()))
                    out.append(TieSplit(kind, name, n, m, tuple(ratios), tuple(spreads)))
    return out
