"""Where training meets ties: the minibatch counterexample to the chain rule, a directional
(Clarke) element of λ_max for shared parameters, and eigenvalue optimisation that is attracted
to multiplicity — the problem on which the chapter compares the subgradient modes with a
smoothed λ_max.

Every function takes explicit parameters and seeds and returns plain data.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from eigprec.eig import kth_eigvalsh

__all__ = [
    "affine_family",
    "directional_lambda_max_grad",
    "minibatch_counterexample",
    "minimise_lambda_max",
    "tie_training_comparison",
]

_MODES = ("eigenvector", "mean", "smoothed")


def _minibatch_matrices(theta: Tensor) -> Tensor:
    z = torch.zeros_like(theta)
    return torch.stack([torch.diag(torch.stack([theta, z])), torch.diag(torch.stack([z, theta]))])


def _minibatch_loss(lam_max: Tensor) -> Tensor:
    return (lam_max[0] - 1) ** 2 + (lam_max[1] + 1) ** 2


def directional_lambda_max_grad(
    matrices: Callable[[Tensor], Tensor],
    theta: Tensor,
    loss: Callable[[Tensor], Tensor],
    direction: Tensor,
    *,
    rel_tol: float = 1e-9,
) -> Tensor:
    """Gradient of ``loss(λ_max(matrices(θ)))`` with each matrix's element chosen along a direction.

    At a tie, the one-sided derivative of λ_max along a symmetric D is λ_max(Uᵀ D U), U an
    orthonormal basis of the top eigenspace. Taking, for every matrix of the batch, the element
    u uᵀ with u = U w and w the top eigenvector of Uᵀ Ḋ U — Ḋ the derivative of that matrix
    along ``direction`` — picks the eigenvalue branch that is active just beyond θ along the
    direction, the same branch for every term of the sum. Where that top eigenvalue of Uᵀ Ḋ U
    is simple, the result is the limit of gradients of the loss along the ray, hence an
    element of its Clarke subdifferential (the first level of lexicographic differentiation;
    ties inside Uᵀ Ḋ U need further directions).

    Args:
        matrices: θ ↦ ``(B, n, n)`` symmetric matrices (differentiable in θ).
        theta: the parameters (a float tensor).
        loss: ``(B,)`` largest eigenvalues ↦ scalar loss (smooth).
        direction: a tensor shaped like ``theta``.
        rel_tol: eigenvalues within ``rel_tol · max(1, |λ_max|)`` of λ_max count as tied.

    Returns:
        The gradient, shaped like ``theta``.

    Raises:
        ValueError: if ``direction`` is not shaped like ``theta``.

    Example:
        >>> t = torch.zeros((), dtype=torch.float64)
        >>> f = lambda th: torch.diag(torch.stack([th, torch.zeros_like(th)]))[None]
        >>> float(directional_lambda_max_grad(f, t, lambda lam: lam.sum(), torch.ones(())))
        1.0
    """
    if direction.shape != theta.shape:
        raise ValueError(f"direction {tuple(direction.shape)} is not shaped like theta")
    theta = theta.detach()
    with torch.no_grad():
        M, dM = torch.func.jvp(matrices, (theta,), (direction.to(theta),))
        w, V = torch.linalg.eigh(M)
    us = []
    for i in range(M.shape[0]):
        top = w[i, -1]
        U = V[i][:, w[i] >= top - rel_tol * max(1.0, float(top.abs()))]
        _, S = torch.linalg.eigh(U.mT @ dM[i] @ U)
        us.append(U @ S[:, -1])
    u = torch.stack(us)
    th = theta.clone().requires_grad_(True)
    lam = torch.einsum("bi,bij,bj->b", u, matrices(th), u)  # = λ_max, with the chosen element
    (grad,) = torch.autograd.grad(loss(lam), th)
    return grad


def minibatch_counterexample(h: float = 1e-6) -> dict[str, float]:
    """L′(0) for the minibatch loss L(θ) = (λ_max(diag(θ, 0)) − 1)² + (λ_max(diag(0, θ)) + 1)².

    L(θ) = 2·relu(θ)² + 2 is C¹ with L′(0) = 0. Each term alone is differentiated correctly by
    either mode (a smooth function of a convex λ_max of an affine matrix), but the sum shares
    θ: autograd adds one element of each term's Clarke set, chosen independently, and the sum
    of the two sets is larger than the Clarke set of the sum.

    Args:
        h: finite-difference step.

    Returns:
        dict with ``eigvalsh`` (autograd through ``torch.linalg.eigvalsh``), ``eigenvector`` and
        ``mean`` (``kth_eigvalsh``'s modes), ``directional_plus`` / ``directional_minus``
        (:func:`directional_lambda_max_grad` along ±1), ``fd_right`` / ``fd_left`` (one-sided
        finite differences, both → L′(0)) and ``loss_at_0``.

    Example:
        >>> r = minibatch_counterexample()
        >>> r["eigenvector"], r["mean"]
        (2.0, 0.0)
    """
    out: dict[str, float] = {}
    routes: dict[str, Callable[[Tensor], Tensor]] = {
        "eigvalsh": lambda M: torch.linalg.eigvalsh(M)[..., -1],
        "eigenvector": lambda M: kth_eigvalsh(M, -1),
        "mean": lambda M: kth_eigvalsh(M, -1, subgradient="mean"),
    }
    for name, lam_max in routes.items():
        t = torch.zeros((), dtype=torch.float64, requires_grad=True)
        _minibatch_loss(lam_max(_minibatch_matrices(t))).backward()
        assert t.grad is not None
        out[name] = float(t.grad)
    zero = torch.zeros((), dtype=torch.float64)
    for name, d in (("directional_plus", 1.0), ("directional_minus", -1.0)):
        g = directional_lambda_max_grad(
            _minibatch_matrices, zero, _minibatch_loss, torch.full((), d, dtype=torch.float64)
        )
        out[name] = float(g)

    def L(t: float) -> float:
        M = _minibatch_matrices(torch.tensor(t, dtype=torch.float64))
        return float(_minibatch_loss(torch.linalg.eigvalsh(M)[..., -1]))

    out["fd_right"] = (L(h) - L(0.0)) / h
    out["fd_left"] = (L(0.0) - L(-h)) / h
    out["loss_at_0"] = L(0.0)
    return out


def affine_family(
    n: int = 10, params: int = 8, seeds: tuple[int, ...] = (0,)
) -> tuple[Tensor, Tensor]:
    """Random affine families A(x) = A₀ + Σᵢ xᵢ Aᵢ of symmetric n × n matrices (float64), one per
    seed.

    Args:
        n: matrix size.
        params: number of parameters m.
        seeds: one family per seed (each its own generator).

    Returns:
        ``(A0, As)`` with shapes ``(S, n, n)`` and ``(S, m, n, n)``, entries of order 1/√n.

    Example:
        >>> A0, As = affine_family(n=4, params=2, seeds=(0, 1))
        >>> tuple(As.shape)
        (2, 2, 4, 4)
    """
    out = []
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        B = torch.randn(params + 1, n, n, generator=g, dtype=torch.float64) / math.sqrt(2 * n)
        out.append(B + B.mT)
    B = torch.stack(out)
    return B[:, 0], B[:, 1:]


def _lambda_max(A: Tensor, mode: str, mu: float, cluster_tol: float | None) -> Tensor:
    if mode == "smoothed":  # Nesterov's smoothing: μ log Σ exp(λ_i / μ) ≥ λ_max
        return mu * torch.logsumexp(torch.linalg.eigvalsh(A) / mu, dim=-1)
    if mode == "mean":
        return kth_eigvalsh(A, -1, subgradient="mean", cluster_tol=cluster_tol)
    return kth_eigvalsh(A, -1)


def minimise_lambda_max(
    A0: Tensor,
    As: Tensor,
    *,
    mode: str = "eigenvector",
    steps: int = 300,
    lr: float = 0.05,
    mu: float = 1e-2,
    cluster_tol: float | None = None,
) -> dict[str, Any]:
    """Minimise λ_max(A₀ + Σ xᵢ Aᵢ) over x from x = 0 with Adam (learning rate decaying as 1/√t),
    for a batch of independent families at once.

    λ_max of an affine family is convex and nonsmooth exactly where its top eigenvalues tie;
    its minimisers often sit on such a tie (Overton 1992; Lewis & Overton 1996), so descent
    is *attracted* to multiplicity rather than kept away from it. Each family has its own x;
    Adam acts entrywise, so the batch is S independent runs.

    Args:
        A0, As: the families (see :func:`affine_family`), shapes ``(S, n, n)``, ``(S, m, n, n)``.
        mode: ``"eigenvector"`` or ``"mean"`` (``kth_eigvalsh``'s subgradients) or
            ``"smoothed"`` (μ · logsumexp(λ/μ) through ``torch.linalg.eigvalsh``).
        steps: optimiser steps.
        lr: initial learning rate.
        mu: smoothing parameter of ``"smoothed"``.
        cluster_tol: ``cluster_tol`` of ``"mean"`` (None: the library's default).

    Returns:
        dict with ``mode``, ``eigenvalues`` (``(steps + 1, S, n)``: the true spectrum at x = 0
        and after each step), ``final`` and ``best`` (``(S,)``: last and smallest λ_max) and
        ``seconds`` (thread CPU time of the optimisation steps, without the tracking).

    Raises:
        ValueError: on an unknown mode.

    Example:
        >>> A0, As = affine_family(n=6, params=2)
        >>> r = minimise_lambda_max(A0, As, steps=20)
        >>> bool(r["final"][0] < r["eigenvalues"][0, 0, -1])
        True
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    if cluster_tol is not None and mode != "mean":
        raise ValueError("cluster_tol applies to mode='mean' only")
    x = torch.zeros(As.shape[:2], dtype=A0.dtype, requires_grad=True)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1 / math.sqrt(t + 1))
    track = [torch.linalg.eigvalsh(A0)]
    seconds = 0.0
    for _ in range(steps):
        t0 = time.thread_time()
        opt.zero_grad()
        _lambda_max(
            A0 + torch.einsum("si,sijk->sjk", x, As), mode, mu, cluster_tol
        ).sum().backward()
        opt.step()
        sched.step()
        seconds += time.thread_time() - t0
        with torch.no_grad():
            track.append(torch.linalg.eigvalsh(A0 + torch.einsum("si,sijk->sjk", x, As)))
    w = torch.stack(track)
    return {
        "mode": mode,
        "eigenvalues": w,
        "final": w[-1, :, -1],
        "best": w[1:, :, -1].amin(0),
        "seconds": seconds,
    }


def tie_training_comparison(
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    *,
    n: int = 10,
    params: int = 8,
    steps: int = 300,
    lr: float = 0.05,
    mu: float = 1e-2,
    goldstein_tol: float = 1e-2,
) -> list[dict[str, Any]]:
    """Four ways to train λ_max of random affine families, where training reaches ties.

    The variants: ``kth_eigvalsh`` with ``"eigenvector"``, with ``"mean"`` at the default
    tolerance, with ``"mean"`` at ``cluster_tol=goldstein_tol`` (a Goldstein ε-subgradient),
    and the smoothed λ_max μ · logsumexp(λ/μ). Same families, start and optimiser.

    Args:
        seeds: one random family per seed.
        n, params: family size.
        steps, lr, mu: see :func:`minimise_lambda_max`.
        goldstein_tol: the user-set cluster tolerance of the third variant.

    Returns:
        One row per (seed, variant): ``seed``, ``variant``, ``final`` (λ_max at the end),
        ``excess`` (``final`` minus the smallest λ_max any variant reached on that family),
        ``gap0`` and ``gap`` (λ_max − λ_{n−2} at the start and at the end) and
        ``ms_per_step`` (thread CPU time per step for the whole batch of families, the same
        for every seed of a variant).

    Example:
        >>> rows = tie_training_comparison(seeds=(0,), n=6, params=2, steps=20)
        >>> len(rows)
        4
    """
    A0, As = affine_family(n=n, params=params, seeds=seeds)
    variants = {
        "eigenvector": {"mode": "eigenvector"},
        "mean": {"mode": "mean"},
        f"mean, tol {goldstein_tol:g}": {"mode": "mean", "cluster_tol": goldstein_tol},
        f"smoothed, μ {mu:g}": {"mode": "smoothed"},
    }
    runs = {
        name: minimise_lambda_max(A0, As, steps=steps, lr=lr, mu=mu, **kw)  # type: ignore[arg-type]
        for name, kw in variants.items()
    }
    best = torch.stack([r["best"] for r in runs.values()]).amin(0)
    rows = []
    for i, seed in enumerate(seeds):
        for name, r in runs.items():
            w = r["eigenvalues"]
            rows.append(
                {
                    "seed": seed,
                    "variant": name,
                    "final": float(r["final"][i]),
                    "excess": float(r["final"][i] - best[i]),
                    "gap0": float(w[0, i, -1] - w[0, i, -2]),
                    "gap": float(w[-1, i, -1] - w[-1, i, -2]),
                    "ms_per_step": 1e3 * r["seconds"] / steps,
                }
            )
    return rows
