"""How far the eigensolver splits exactly repeated eigenvalues, and how far it moves true gaps:
the calibration of the default cluster rule of ``kth_eigvalsh(..., subgradient="mean")``.

Run by ``benchmarks/eig_tie_splits.py``; the library's rule
(:func:`eigprec.eig.tolerance.default_cluster_tol`) states what it found. Gaps are in units of
``eps(dtype) · max|λ|``, as computed by ``torch.linalg.eigh`` (the decomposition ``"mean"``
uses) and, in float32, refined (:func:`eigprec.eig.core.refined_gaps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eigprec.eig.core import refined_gaps

__all__ = ["PlantedGap", "TieSplit", "measure_planted_gaps", "measure_tie_splits"]


@dataclass(frozen=True)
class TieSplit:
    """How far the solver split the copies of exact ties, for one case.

    Per seed, the largest gap between consecutive copies over the seed's matrices, in units
    of ``eps(dtype) · max|λ|``: ``gaps`` as computed, ``refined`` after refinement (float32;
    empty for float64, whose gaps float64 arithmetic cannot refine), and ``spreads``, the
    largest max − min of the computed copies.
    """

    kind: str
    dtype: str
    n: int
    multiplicity: int
    gaps: tuple[float, ...]
    refined: tuple[float, ...]
    spreads: tuple[float, ...]


@dataclass(frozen=True)
class PlantedGap:
    """A true gap between λ_k and λ_{k+1} of ``gap`` eps · max|λ| (float32), as the solver saw it.

    ``computed`` and ``refined``: the smallest over the matrices, in the same units.
    """

    n: int
    gap: float
    matrices: int
    computed: float
    refined: float


def _spectrum(n: int, batch: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
    return Q, torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(batch, 1)


def _tie_batch(kind: str, n: int, m: int, dtype: torch.dtype, batch: int, g: torch.Generator):
    if kind == "tie":
        # Q diag(λ) Qᵀ in float64 with λ_k = … = λ_{k+m-1} exactly, then rounded to dtype.
        Q, lam = _spectrum(n, batch, g)
        k = (n - m) // 2
        lam[:, k : k + m] = lam[:, k : k + 1] if m < n else 1.0
        return ((Q * lam[:, None, :]) @ Q.mT).to(dtype), k
    # Gram matrix B Bᵀ of rank n − m, formed in dtype: eigenvalue 0 with multiplicity m.
    B = torch.randn(batch, n, n - m, generator=g, dtype=dtype)
    return B @ B.mT, 0


def measure_tie_splits(
    sizes: tuple[int, ...] = (8, 16, 30, 50, 100, 200),
    multiplicities: tuple[int | str, ...] = (2, 5, 20, "half", "all"),
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
    kinds: tuple[str, ...] = ("tie", "gram"),
    seeds: int = 5,
    batch: int = 20,
) -> list[TieSplit]:
    """Measure how far ``torch.linalg.eigh`` splits exactly repeated eigenvalues.

    ``kind="tie"``: ``Q diag(λ) Qᵀ`` built in float64 with ``λ`` evenly spaced in [−1, 1] and
    ``multiplicity`` copies of a middle one (all ``n`` equal to 1 for ``"all"``), rounded to
    ``dtype``; ``kind="gram"``: ``B Bᵀ`` with ``B`` of shape ``(n, n − multiplicity)`` in
    ``dtype`` (a zero cluster, whose copies the float32 product itself already splits).
    Seeded with ``torch.Generator().manual_seed(seed)`` for ``seed in range(seeds)``; on the CPU.

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
        >>> (s,) = measure_tie_splits((20,), ("all",), (torch.float32,), ("tie",), 2, 2)
        >>> max(s.refined) < 1 < max(s.gaps)
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
                    gaps, refined, spreads = [], [], []
                    for seed in range(seeds):
                        g = torch.Generator().manual_seed(seed)
                        A, k = _tie_batch(kind, n, m, dtype, batch, g)
                        w, V = torch.linalg.eigh(A)
                        unit = eps * w.abs().amax(-1, keepdim=True).double()
                        copies = w[:, k : k + m].double()
                        gaps.append(float(((copies[:, 1:] - copies[:, :-1]) / unit).max()))
                        spread = copies.amax(-1) - copies.amin(-1)
                        spreads.append(float((spread / unit[:, 0]).max()))
                        if dtype == torch.float32:
                            r = refined_gaps(A, V[..., k : k + m])
                            refined.append(float((r / unit).max()))
                    out.append(
                        TieSplit(kind, name, n, m, tuple(gaps), tuple(refined), tuple(spreads))
                    )
    return out


def measure_planted_gaps(
    sizes: tuple[int, ...] = (100, 200),
    gaps: tuple[float, ...] = (3.0, 5.0, 10.0, 18.0),
    matrices: int = 20,
    seed: int = 0,
) -> list[PlantedGap]:
    """How ``torch.linalg.eigh`` sees a true float32 gap of a few eps · max|λ|, and refined.

    ``Q diag(λ) Qᵀ`` in float64, λ evenly spaced on [−1, 1] except λ_{k+1} = λ_k + gap · eps
    (k = n // 2), rounded to float32 (which moves the gap by less than 0.1 eps).

    Args:
        sizes: matrix sizes.
        gaps: the true gaps, in eps(float32) · max|λ|.
        matrices: matrices per (n, gap).
        seed: generator seed.

    Returns:
        One :class:`PlantedGap` per (n, gap).

    Example:
        >>> (p,) = measure_planted_gaps((20,), (10.0,), matrices=2)
        >>> abs(p.refined - 10) < 0.5
        True
    """
    eps = torch.finfo(torch.float32).eps
    out = []
    g = torch.Generator().manual_seed(seed)
    for n in sizes:
        k = n // 2
        for gap in gaps:
            Q, lam = _spectrum(n, matrices, g)
            lam[:, k + 1] = lam[:, k] + gap * eps
            A = ((Q * lam[:, None, :]) @ Q.mT).float()
            w, V = torch.linalg.eigh(A)
            unit = eps * w.abs().amax(-1).double()
            computed = (w[:, k + 1] - w[:, k]).double() / unit
            refined = refined_gaps(A, V[..., k : k + 2])[:, 0] / unit
            out.append(PlantedGap(n, gap, matrices, float(computed.min()), float(refined.min())))
    return out
