"""Experiments of the chapter "Eigenbasis degeneracy", as functions returning data.

Two experiments:

* :func:`eigvec_rotation_experiment` — how far an eigenvector and an eigenspace turn under
  a symmetric perturbation E, against ‖E‖/gap, beside the Davis–Kahan bound.
* :func:`~eigprec_book.chapters.degeneracy.spike.spike_experiment` (in
  :mod:`eigprec_book.chapters.degeneracy.spike`) — one SOAP/REKLS run with a gradient spike.

Plots live in :mod:`eigprec_book.chapters.degeneracy.plots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from eigprec._args import check_int
from eigprec.subspace import cluster_angles, davis_kahan_bound, subspace_angle, top1_angle

__all__ = [
    "RotationResult",
    "eigvec_rotation_experiment",
    "repeated_eigenvalue_demo",
]


# -- 1. rotation against ‖E‖/gap ----------------------------------------------------------


@dataclass(frozen=True)
class RotationResult:
    """Eigenvector and eigenspace rotations under random perturbations.

    Attributes:
        ratios: ``(r,)`` values of ‖E‖₂/gap, where gap = λ₁ − λ₂ is the small gap.
        top1: ``(r, trials)`` angle (degrees) of the top eigenvector.
        cluster: ``(r, trials)`` largest principal angle (degrees) of the top-2 eigenspace.
        top1_bound: ``(r,)`` Davis–Kahan bound for the top eigenvector (gap λ₁ − λ₂).
        cluster_bound: ``(r,)`` Davis–Kahan bound for the top-2 eigenspace (gap λ₂ − λ₃).
        gap: The small gap λ₁ − λ₂.
        cluster_gap: The gap λ₂ − λ₃ that isolates the top-2 eigenspace.

    Example:
        >>> r = eigvec_rotation_experiment(n=6, ratios=[0.1, 1.0], trials=3)
        >>> (r.top1.shape, r.gap, r.cluster_gap)
        (torch.Size([2, 3]), 0.001, 0.5)
    """

    ratios: torch.Tensor
    top1: torch.Tensor
    cluster: torch.Tensor
    top1_bound: torch.Tensor
    cluster_bound: torch.Tensor
    gap: float
    cluster_gap: float


def eigvec_rotation_experiment(
    n: int = 32,
    gap: float = 1e-3,
    cluster_gap: float = 0.5,
    ratios: Sequence[float] | None = None,
    trials: int = 8,
    seed: int = 0,
) -> RotationResult:
    """Rotate the eigenvectors of a matrix with a small and a large gap by random E.

    A = V diag(1, 1 − gap, 1 − gap − cluster_gap, … down to 0) Vᵀ in float64, V a random
    orthogonal matrix. E is a random symmetric matrix scaled to ‖E‖₂ = ratio · gap. The top
    eigenvector is only as stable as the small gap allows; the top-2 eigenspace is isolated
    by ``cluster_gap`` and barely moves for the same E.

    Args:
        n: Matrix size, ≥ 3.
        gap: λ₁ − λ₂ > 0.
        cluster_gap: λ₂ − λ₃ > 0, with ``gap + cluster_gap < 1``.
        ratios: Values of ‖E‖₂/gap; default 25 points log-spaced in [1e-3, 1e2].
        trials: Random perturbations per ratio, ≥ 1.
        seed: Seed of the ``torch.Generator`` for V and E.

    Returns:
        A :class:`RotationResult`.

    Raises:
        ValueError: on a size or gap out of range, or non-positive ratios.

    Example:
        >>> r = eigvec_rotation_experiment(n=8, ratios=[0.01, 10.0], trials=2)
        >>> bool((r.top1 <= r.top1_bound[:, None] + 1e-9).all())
        True
    """
    n, trials, seed = (check_int(k, v) for k, v in (("n", n), ("trials", trials), ("seed", seed)))
    if n < 3:
        raise ValueError(f"n must be ≥ 3, got {n}")
    if not (gap > 0 and cluster_gap > 0 and gap + cluster_gap < 1):
        raise ValueError(
            f"need gap > 0, cluster_gap > 0 and gap + cluster_gap < 1; got {gap}, {cluster_gap}"
        )
    if trials < 1:
        raise ValueError(f"trials must be ≥ 1, got {trials}")
    r = (
        torch.logspace(-3, 2, 25, dtype=torch.float64)
        if ratios is None
        else torch.tensor(ratios, dtype=torch.float64)
    )
    if (
        r.dim() != 1
        or r.numel() == 0
        or not bool((r > 0).all())
        or not bool(torch.isfinite(r).all())
    ):
        raise ValueError("ratios must be a non-empty sequence of positive finite numbers")
    gen = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    tail = torch.linspace(1 - gap - cluster_gap, 0.0, n - 2, dtype=torch.float64)
    lam = torch.cat([torch.tensor([1.0, 1.0 - gap], dtype=torch.float64), tail])
    A = (V * lam) @ V.T
    top1 = torch.empty(r.numel(), trials, dtype=torch.float64)
    cluster = torch.empty_like(top1)
    for i, ratio in enumerate(r.tolist()):
        for j in range(trials):
            E = torch.randn(n, n, generator=gen, dtype=torch.float64)
            E = E + E.T
            E *= ratio * gap / torch.linalg.matrix_norm(E, ord=2)
            W = torch.linalg.eigh(A + E).eigenvectors.flip(-1)
            top1[i, j] = top1_angle(V[:, 0], W[:, 0])
            cluster[i, j] = subspace_angle(V, W, k=2)
    bound1 = torch.tensor([davis_kahan_bound(x * gap, gap) for x in r.tolist()])
    bound2 = torch.tensor([davis_kahan_bound(x * gap, cluster_gap) for x in r.tolist()])
    return RotationResult(r, top1, cluster, bound1, bound2, gap, cluster_gap)


def repeated_eigenvalue_demo(
    n: int = 6, perturbation: float = 1e-10, rel_gap: float = 1e-3, seed: int = 0
) -> dict[str, Any]:
    """Two eigenbases of (almost) the same matrix with a repeated top eigenvalue.

    A = V diag(2, 2, 1, …, 1/(n−2)) Vᵀ in float64 and A + E with a random symmetric E of
    spectral norm ``perturbation``. ``eigh`` returns some basis of the repeated eigenspace;
    the tiny E decides which, so the top eigenvectors differ by an arbitrary angle while the
    eigenspace itself (and every well-separated eigenvector) agrees to rounding.

    Args:
        n: Matrix size, ≥ 3.
        perturbation: ‖E‖₂, > 0.
        rel_gap: Relative gap for :func:`eigprec.cluster_angles`.
        seed: Seed of the ``torch.Generator``.

    Returns:
        ``{"eigenvalues", "top1_angle", "clusters"}``: A's eigenvalues (descending), the
        angle between the two top eigenvectors (degrees) and the per-cluster comparison.

    Example:
        >>> d = repeated_eigenvalue_demo()
        >>> max(c.angle for c in d["clusters"]) < 1e-3
        True
    """
    if n < 3 or not perturbation > 0:
        raise ValueError(f"need n ≥ 3 and perturbation > 0, got {n}, {perturbation}")
    gen = torch.Generator().manual_seed(seed)
    V = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64)).Q
    lam = torch.tensor([2.0, 2.0] + [1.0 / k for k in range(1, n - 1)], dtype=torch.float64)
    A = (V * lam) @ V.T
    E = torch.randn(n, n, generator=gen, dtype=torch.float64)
    E = E + E.T
    E *= perturbation / torch.linalg.matrix_norm(E, ord=2)
    W1 = torch.linalg.eigh(A).eigenvectors.flip(-1)
    W2 = torch.linalg.eigh(A + E).eigenvectors.flip(-1)
    return {
        "eigenvalues": lam,
        "top1_angle": top1_angle(W1[:, 0], W2[:, 0]),
        "clusters": cluster_angles(W1, W2, lam, rel_gap=rel_gap),
    }
