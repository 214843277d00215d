"""Experiments of the chapter "Clarke subgradients of the k-th eigenvalue": the gradient, kinks
and the Clarke set.

Every function takes explicit parameters (sizes, seeds) and returns plain data; plots are in
:mod:`eigprec_book.chapters.clarke.plots`, timing sweeps in
:mod:`eigprec_book.chapters.clarke.speed`
and the regression model in :mod:`eigprec_book.chapters.clarke.regression`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from eigprec.eig import default_cluster_tol, kth_eigvalsh

__all__ = [
    "chain_rule_counterexamples",
    "clarke_membership",
    "cluster_step_slopes",
    "convexity_along_lines",
    "crossing_family",
    "eigh_backward_demo",
    "gradcheck_demo",
    "gradient_check",
    "repeated_eigenvalue_matrix",
    "tolerance_check",
]


def _rotation(n: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    Q, R = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return Q * torch.sign(torch.diagonal(R))  # Haar-distributed, deterministic sign


def _grad(X: Tensor, k: int, **kw: Any) -> Tensor:
    Xr = X.detach().clone().requires_grad_(True)
    kth_eigvalsh(Xr, k, **kw).sum().backward()
    assert Xr.grad is not None
    return Xr.grad


# --------------------------------------------------------------------------- 1. smooth case


def gradient_check(n: int = 6, k: int = 2, seed: int = 0, h: float = 1e-6) -> dict[str, float]:
    """The gradient q qᵀ at a simple eigenvalue, three ways.

    Compares ``kth_eigvalsh``'s gradient with autograd through ``torch.linalg.eigvalsh`` and with
    a central finite difference along a random symmetric direction E:
    (λ_k(X + hE) − λ_k(X − hE)) / 2h ≈ ⟨q qᵀ, E⟩.

    Args:
        n: matrix size.
        k: eigenvalue index.
        seed: generator seed for X and E.
        h: finite-difference step (float64).

    Returns:
        dict with the eigen-gap at k, ``max_abs_diff_autograd`` (vs eigvalsh autograd),
        ``directional`` (⟨G, E⟩), ``finite_difference`` and their ``fd_rel_err``.

    Example:
        >>> r = gradient_check()
        >>> r["max_abs_diff_autograd"] < 1e-12
        True
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, n, generator=g, dtype=torch.float64)
    X = (X + X.T) / 2
    E = torch.randn(n, n, generator=g, dtype=torch.float64)
    E = (E + E.T) / 2
    G = _grad(X, k)
    Xr = X.clone().requires_grad_(True)
    torch.linalg.eigvalsh(Xr)[k].backward()
    assert Xr.grad is not None
    w = torch.linalg.eigvalsh(X)
    gap = min(
        float(w[k] - w[k - 1]) if k > 0 else math.inf,
        float(w[k + 1] - w[k]) if k < n - 1 else math.inf,
    )
    directional = float((G * E).sum())
    fd = float((kth_eigvalsh(X + h * E, k) - kth_eigvalsh(X - h * E, k)) / (2 * h))
    return {
        "gap": gap,
        "max_abs_diff_autograd": float((G - Xr.grad).abs().max()),
        "directional": directional,
        "finite_difference": fd,
        "fd_rel_err": abs(fd - directional) / abs(directional),
    }


# --------------------------------------------------------------------------- 2. kinks


def crossing_family(
    t_min: float = -1.0, t_max: float = 2.0, steps_per_unit: int = 100, seed: int = 0
) -> dict[str, Tensor]:
    """Eigenvalues and their slopes along X(t) = Q diag(t, 0, 1) Qᵀ.

    The eigenvalues t, 0, 1 cross at t = 0 and t = 1, where the sorted λ_k(t) have kinks; the
    largest, max(t, 1), and the smallest, min(t, 0), are ReLU-like. Slopes are
    dλ_k/dt = ⟨G_k, dX/dt⟩ = ⟨G_k, q qᵀ⟩ with q = Q e₁ for each subgradient mode; at a
    crossing the ``"mean"`` mode gives exactly the midpoint ½ of the one-sided slopes, the
    ``"eigenvector"`` mode whatever the solver's basis implies.

    Args:
        t_min, t_max: parameter range (integers times 1/steps_per_unit hit 0 and 1 exactly).
        steps_per_unit: grid points per unit of t.
        seed: seed of the rotation Q that hides the structure from the solver.

    Returns:
        dict with ``t`` (T,), ``eigenvalues`` (T, 3), ``slope_eigenvector`` and ``slope_mean``
        (T, 3), and ``crossings`` (indices of t = 0 and t = 1 in the grid).

    Example:
        >>> fam = crossing_family()
        >>> fam["eigenvalues"].shape
        torch.Size([301, 3])
    """
    lo, hi = round(t_min * steps_per_unit), round(t_max * steps_per_unit)
    t = torch.arange(lo, hi + 1, dtype=torch.float64) / steps_per_unit
    Q = _rotation(3, seed)
    d = torch.zeros(t.numel(), 3, dtype=torch.float64)
    d[:, 0], d[:, 2] = t, 1.0
    X = (Q * d[:, None, :]) @ Q.T
    dX = torch.outer(Q[:, 0], Q[:, 0])
    lam = torch.linalg.eigvalsh(X)
    slopes = {}
    for mode in ("eigenvector", "mean"):
        slopes[mode] = torch.stack(
            [(_grad(X, k, subgradient=mode) * dX).sum((-2, -1)) for k in range(3)], dim=-1
        )
    crossings = torch.tensor([int((t == 0).nonzero()), int((t == 1).nonzero())])
    return {
        "t": t,
        "eigenvalues": lam,
        "slope_eigenvector": slopes["eigenvector"],
        "slope_mean": slopes["mean"],
        "crossings": crossings,
    }


def repeated_eigenvalue_matrix(
    n: int, start: int, multiplicity: int, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[Tensor, Tensor]:
    """X = Q diag(λ) Qᵀ whose eigenvalues start, …, start+multiplicity−1 all equal 1.

    Args:
        n: size.
        start: first ascending index of the repeated eigenvalue.
        multiplicity: how many copies.
        seed: seed of Q.
        dtype: dtype of the returned X (built in float64, then rounded).

    Returns:
        ``(X, U)``: the matrix and an orthonormal basis U (n, multiplicity) of the eigenspace.

    Example:
        >>> X, U = repeated_eigenvalue_matrix(5, 1, 2)
        >>> U.shape
        torch.Size([5, 2])
    """
    Q = _rotation(n, seed)
    lam = torch.arange(n, dtype=torch.float64) - start + 1.0
    lam[start : start + multiplicity] = 1.0
    return ((Q * lam) @ Q.T).to(dtype), Q[:, start : start + multiplicity]


def clarke_membership(
    n: int = 6,
    start: int = 1,
    multiplicity: int = 3,
    k: int = 2,
    seed: int = 0,
    dtypes: Iterable[torch.dtype] = (torch.float64, torch.float32),
) -> list[dict[str, Any]]:
    """Check both subgradient modes against ∂λ_k(X) = {U W Uᵀ : W ⪰ 0, tr W = 1}.

    For each dtype and mode: the deviation of G from symmetry, its smallest eigenvalue, the
    error of its trace, the size of the part of G outside the eigenspace (‖(I − UUᵀ)G‖), its
    distance to the minimum-norm element UUᵀ/r, its norm, and its *basis dependence*: the
    change of G when the same problem is posed in rotated coordinates (RXRᵀ) and the answer
    rotated back. Only the minimum-norm choice is independent of the solver's basis.

    Args:
        n, start, multiplicity: shape of the repeated eigenvalue (see
            :func:`repeated_eigenvalue_matrix`).
        k: index inside the cluster.
        seed: seed of X's eigenbasis (the rotation uses ``seed + 1``).
        dtypes: dtypes to test.

    Returns:
        One dict per (dtype, mode).

    Example:
        >>> rows = clarke_membership(dtypes=(torch.float64,))
        >>> sorted(r["mode"] for r in rows)
        ['eigenvector', 'mean']
    """
    rows = []
    R = _rotation(n, seed + 1)
    for dtype in dtypes:
        X, U = repeated_eigenvalue_matrix(n, start, multiplicity, seed, dtype)
        Y = (R.to(dtype) @ X @ R.T.to(dtype)).to(dtype)
        for mode in ("eigenvector", "mean"):
            G = _grad(X, k, subgradient=mode).double()
            G_rot = R.T @ _grad(Y, k, subgradient=mode).double() @ R
            P_perp = torch.eye(n, dtype=torch.float64) - U @ U.T
            rows.append(
                {
                    "dtype": str(dtype).removeprefix("torch."),
                    "mode": mode,
                    "symmetry_err": float((G - G.T).abs().max()),
                    "min_eigenvalue": float(torch.linalg.eigvalsh((G + G.T) / 2).min()),
                    "trace_err": abs(float(torch.trace(G)) - 1.0),
                    "outside_eigenspace": float(torch.linalg.matrix_norm(P_perp @ G)),
                    "dist_to_min_norm": float(torch.linalg.matrix_norm(G - U @ U.T / multiplicity)),
                    "frobenius_norm": float(torch.linalg.matrix_norm(G)),
                    "basis_dependence": float(torch.linalg.matrix_norm(G - G_rot)),
                }
            )
    return rows


def eigh_backward_demo(n: int = 5, multiplicity: int = 2, seed: int = 0) -> dict[str, Any]:
    """Gradients at a repeated eigenvalue: through an eigenvector vs through the eigenvalue.

    At λ₀ = λ₁ the eigenvector q₀ is not a function of X (any unit vector of the eigenspace
    will do), so a loss that reads it, here L = (cᵀq₀)² with c = (1, …, 1)/√n, has no
    derivative; ``torch.linalg.eigh``'s backward divides by λᵢ − λⱼ and reports it as
    non-finite (when the solver returns exactly equal eigenvalues, ``diagonal``) or
    astronomically large (when rounding splits them by ~1e-16, ``rotated``). The eigenvalue
    itself is 1-Lipschitz: ``torch.linalg.eigvalsh``'s autograd and ``kth_eigvalsh`` give
    gradients of norm at most 1 at the same matrices.

    Args:
        n: matrix size.
        multiplicity: copies of the repeated eigenvalue (indices 0 … multiplicity−1).
        seed: seed of the rotation.

    Returns:
        dict keyed ``diagonal`` / ``rotated``, each with the eigen-gap the solver saw, and the
        max |gradient| and finiteness for the eigenvector loss (``eigh_vector_*``),
        ``torch.linalg.eigvalsh`` autograd (``eigvalsh_*``) and ``kth_eigvalsh`` with
        subgradient ``"mean"`` (``kth_*``).

    Example:
        >>> d = eigh_backward_demo()
        >>> d["diagonal"]["eigh_vector_finite"], d["diagonal"]["kth_finite"]
        (False, True)
    """
    lam = torch.arange(n, dtype=torch.float64) + 2.0 - multiplicity
    lam[:multiplicity] = 1.0
    Q = _rotation(n, seed)
    cases = {"diagonal": torch.diag(lam), "rotated": (Q * lam) @ Q.T}
    c = torch.ones(n, dtype=torch.float64) / math.sqrt(n)
    out: dict[str, Any] = {}
    for name, X in cases.items():
        Xr = X.clone().requires_grad_(True)
        w, V = torch.linalg.eigh(Xr)
        (c @ V[:, 0]).square().backward()
        assert Xr.grad is not None
        g_vec = Xr.grad
        Xv = X.clone().requires_grad_(True)
        torch.linalg.eigvalsh(Xv)[0].backward()
        assert Xv.grad is not None
        g_kth = _grad(X, 0, subgradient="mean")
        out[name] = {
            "solver_gap": abs(float(w[1].detach() - w[0].detach())),
            "eigh_vector_max_abs": float(g_vec.abs().nan_to_num(nan=math.inf).max()),
            "eigh_vector_finite": bool(torch.isfinite(g_vec).all()),
            "eigvalsh_max_abs": float(Xv.grad.abs().max()),
            "eigvalsh_finite": bool(torch.isfinite(Xv.grad).all()),
            "kth_norm": float(torch.linalg.matrix_norm(g_kth)),
            "kth_max_abs": float(g_kth.abs().max()),
            "kth_finite": bool(torch.isfinite(g_kth).all()),
        }
    return out


# --------------------------------------------------------------------------- gradcheck


def gradcheck_demo(n: int = 4, k: int = 1, seed: int = 0) -> dict[str, bool]:
    """``torch.autograd.gradcheck`` on the k-th eigenvalue, called directly and through X + Xᵀ.

    Both ``kth_eigvalsh`` and ``torch.linalg.eigvalsh`` read one triangle but return the
    symmetric gradient q qᵀ; gradcheck's finite differences perturb one entry at a time, and an
    entry of the unread triangle has derivative 0. Called on the matrix directly, both fail;
    composed with the symmetric parametrisation X ↦ X + Xᵀ, both pass.

    Args:
        n: matrix size.
        k: eigenvalue index.
        seed: generator seed of X (float64, generic so λ_k is simple).

    Returns:
        dict ``{"kth_direct", "eigvalsh_direct", "kth_symmetrised", "eigvalsh_symmetrised"}``
        → whether gradcheck passed.

    Example:
        >>> r = gradcheck_demo()
        >>> r["kth_direct"], r["kth_symmetrised"]
        (False, True)
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, n, generator=g, dtype=torch.float64)
    X = ((X + X.T) / 2).requires_grad_(True)
    fns = {
        "kth": lambda A: kth_eigvalsh(A, k),
        "eigvalsh": lambda A: torch.linalg.eigvalsh(A)[..., k],
    }
    out = {}
    for name, f in fns.items():
        for how, wrap in (("direct", lambda A: A), ("symmetrised", lambda A: A + A.mT)):
            out[f"{name}_{how}"] = bool(
                torch.autograd.gradcheck(
                    lambda A, f=f, wrap=wrap: f(wrap(A)), (X,), raise_exception=False
                )
            )
    return out


# --------------------------------------------------------------------------- which element


def cluster_step_slopes(
    n: int = 6, multiplicity: int = 3, h: float = 1e-5, seed: int = 0
) -> list[dict[str, Any]]:
    """First-order change of λ_k per unit step along ±G/‖G‖ for both subgradient modes.

    At X with an eigenvalue of multiplicity r (indices start … start + r − 1), the one-sided
    derivative of λ_k along D is the (k − start)-th smallest eigenvalue of UᵀDU. A unit step
    along q qᵀ moves one copy by 1, a unit step along U Uᵀ/√r moves all r copies by 1/√r. So
    which element is steeper depends on where k sits in the cluster and on the sign of the
    step, that is of dL/dλ_k.

    Args:
        n: matrix size.
        multiplicity: r.
        h: step length (float64 difference quotient).
        seed: seed of X's eigenbasis.

    Returns:
        One row per (position of k in the cluster: ``"top"``, ``"middle"``, ``"bottom"``;
        ``step`` ``"+G"`` (ascent) or ``"−G"`` (descent)) with the measured slopes
        ``eigenvector`` and ``mean``: (λ_k(X ± h G/‖G‖) − λ_k(X)) / h.

    Example:
        >>> rows = cluster_step_slopes()
        >>> [round(r["mean"], 3) for r in rows if r["k in cluster"] == "middle"]
        [0.577, -0.577]
    """
    start = 1
    X, _ = repeated_eigenvalue_matrix(n, start, multiplicity, seed)
    where = {
        "top": start + multiplicity - 1,
        "middle": start + multiplicity // 2,
        "bottom": start,
    }
    rows = []
    for name, k in where.items():
        lam = float(torch.linalg.eigvalsh(X)[k])
        G = {m: _grad(X, k, subgradient=m) for m in ("eigenvector", "mean")}
        for sign, label in ((1.0, "+G"), (-1.0, "−G")):
            row: dict[str, Any] = {"k in cluster": name, "step": label}
            for mode, g in G.items():
                d = sign * g / torch.linalg.matrix_norm(g)
                row[mode] = (float(torch.linalg.eigvalsh(X + h * d)[k]) - lam) / h
            rows.append(row)
    return rows


def chain_rule_counterexamples() -> list[dict[str, Any]]:
    """Derivatives at t = 0 of two functions of λ_k whose Clarke set at 0 is a single point.

    * f(t) = λ₁(diag(t, 0)) − λ₁(diag(−t, 0)) = max(t, 0) − max(−t, 0) = t: f′(0) = 1. Each
      term is λ_max of a 2 × 2, convex and therefore Clarke regular; what fails is the *sum*
      rule: the second term enters with a minus sign, and −max(−t, 0) = min(t, 0) is not
      regular (a difference of regular functions need not be), so ∂f(0) ⊆ ∂g(0) − ∂h(0) =
      [0, 1] − [0, 1] is only an inclusion;
    * f(t) = λ₁(diag(t, 0, 0)) ≡ 0 (the median of t, 0, 0): f′(0) = 0. Here the eigenvalue
      itself, the middle one of a 3 × 3, is not Clarke regular at the triple tie, and the
      chain rule through it is only an inclusion.

    At t = 0 each λ₁ sits on a tie and each mode returns a legitimate element of ∂λ₁ there,
    yet autograd assembles a number outside ∂f(0) = {f′(0)}.

    Returns:
        One row per function with ``true`` f′(0) and the autograd values of both modes.

    Example:
        >>> [r["eigenvector"] for r in chain_rule_counterexamples()]
        [0.0, 0.0]
    """

    def f_odd(t: Tensor, mode: str) -> Tensor:
        z = torch.zeros((), dtype=t.dtype)
        up = kth_eigvalsh(torch.diag(torch.stack([t, z])), 1, subgradient=mode)
        down = kth_eigvalsh(torch.diag(torch.stack([-t, z])), 1, subgradient=mode)
        return up - down

    def f_median(t: Tensor, mode: str) -> Tensor:
        z = torch.zeros((), dtype=t.dtype)
        return kth_eigvalsh(torch.diag(torch.stack([t, z, z])), 1, subgradient=mode)

    rows = []
    for label, f, true in (
        ("λ₁(diag(t,0)) − λ₁(diag(−t,0)) = t", f_odd, 1.0),
        ("λ₁(diag(t,0,0)) ≡ 0", f_median, 0.0),
    ):
        row: dict[str, Any] = {"f(t)": label, "true": true}
        for mode in ("eigenvector", "mean"):
            t = torch.zeros((), dtype=torch.float64, requires_grad=True)
            f(t, mode).backward()
            assert t.grad is not None
            row[mode] = float(t.grad)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- tolerance


def tolerance_check(
    n: int = 100,
    gaps: Iterable[float] = (6e-6, 3e-5),
    batch: int = 50,
    k: int = 50,
    seed: int = 0,
) -> list[dict[str, float]]:
    """Does ``"mean"`` merge float32 eigenvalues that are distinct? Default vs former rule.

    Matrices Q diag(λ) Qᵀ (Haar Q, λ evenly spaced on [−1, 1] so max|λ| = 1) whose λ_k has a
    neighbour at a relative gap ``gap``; λ_k is differentiable there, with gradient q qᵀ. For
    each gap: the largest error (Frobenius norm, against the float64 gradient) of the float32
    ``"mean"`` gradient with the library's default rule (:func:`eigprec.default_cluster_tol`)
    and with the former default, min(3·√max(n, 16), 20)·eps·max|λ| on computed gaps (issue
    33; 20 eps from n = 45); for scale, that of the solver's own float32 q qᵀ
    (``"eigenvector"`` with ``method="eigh"``, the decomposition ``"mean"`` uses); how many
    matrices each rule kept apart; and the solver's largest float32 eigenvalue error.

    Args:
        n: matrix size.
        gaps: relative gaps at k to test.
        batch: matrices per gap.
        k: eigenvalue index (its upper neighbour is moved to λ_k + gap).
        seed: generator seed.

    Returns:
        One row per gap: ``gap``, ``tol_default``, ``tol_former`` (relative to max|λ|),
        ``solver_err`` (max |λ32 − λ64|), ``err_default``, ``err_former``, ``err_solver``,
        ``apart_default``, ``apart_former`` (matrices whose ``"mean"`` gradient is the
        solver's q qᵀ) and ``batch``.

    Example:
        >>> r = tolerance_check(n=20, gaps=(1e-3,), batch=4, k=10)
        >>> r[0]["err_default"] < 1e-3, r[0]["apart_default"]
        (True, 4)
    """
    g = torch.Generator().manual_seed(seed)
    eps = torch.finfo(torch.float32).eps
    former = min(3 * math.sqrt(max(n, 16)), 20) * eps
    rows = []
    for gap in gaps:
        Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
        lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
        lam[k + 1] = lam[k] + gap
        A64 = (Q * lam) @ Q.mT
        A64 = (A64 + A64.mT) / 2
        A32 = A64.float()
        exact = _grad(A64, k)
        G_solver = _grad(A32, k, method="eigh")
        errs, apart = {}, {}
        for name, rtol in (("default", None), ("former", former)):
            G = _grad(A32, k, subgradient="mean", cluster_rtol=rtol)
            errs[name] = float(torch.linalg.matrix_norm(G.double() - exact).max())
            apart[name] = int((G == G_solver).flatten(-2).all(-1).sum())
        errs["solver"] = float(torch.linalg.matrix_norm(G_solver.double() - exact).max())
        solver_err = float(
            (torch.linalg.eigvalsh(A32).double() - torch.linalg.eigvalsh(A64)).abs().max()
        )
        rows.append(
            {
                "gap": gap,
                "tol_default": float(default_cluster_tol(torch.ones(n), n)),
                "tol_former": former,
                "solver_err": solver_err,
                "err_default": errs["default"],
                "err_former": errs["former"],
                "err_solver": errs["solver"],
                "apart_default": apart["default"],
                "apart_former": apart["former"],
                "batch": batch,
            }
        )
    return rows


# --------------------------------------------------------------------------- choosing k


def convexity_along_lines(
    n: int = 8, features: int = 3, lines: int = 200, seed: int = 0
) -> list[dict[str, float]]:
    """Second differences of x ↦ λ_k(M(x)) along random lines, M affine, for every k.

    M(x) = A₀ + Σᵢ xᵢ Aᵢ with random symmetric Aᵢ. λ_max ∘ M is convex (a maximum of linear
    functions uᵀM(x)u), λ_min ∘ M concave, and a middle λ_k a difference of two convex Ky Fan
    sums (sum of the j largest eigenvalues), neither convex nor concave in general. Midpoint
    second differences λ(x − d) − 2λ(x) + λ(x + d) ≥ 0 everywhere is what convexity means.

    Args:
        n: matrix size.
        features: dimension of x.
        lines: random (x, d) pairs.
        seed: generator seed.

    Returns:
        One row per k with the smallest and largest second difference (``min_d2``,
        ``max_d2``).

    Example:
        >>> rows = convexity_along_lines(n=4, lines=50)
        >>> rows[-1]["min_d2"] >= -1e-12
        True
    """
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(features + 1, n, n, generator=g, dtype=torch.float64)
    A = (A + A.mT) / 2
    x = torch.randn(lines, features, generator=g, dtype=torch.float64)
    d = torch.randn(lines, features, generator=g, dtype=torch.float64)

    def lam(z: Tensor) -> Tensor:
        return torch.linalg.eigvalsh(A[0] + torch.einsum("bf,fij->bij", z, A[1:]))

    d2 = lam(x - d) - 2 * lam(x) + lam(x + d)
    return [
        {"k": k, "min_d2": float(d2[:, k].min()), "max_d2": float(d2[:, k].max())} for k in range(n)
    ]
