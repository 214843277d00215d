"""Experiments of the chapter "Clarke subgradients of the k-th eigenvalue".

Every function takes explicit parameters (sizes, seeds) and returns plain data; the chapter
plots with the ``plot_*`` functions at the end. Tests and the GPU recording command
(``python -m eigprec.bench eig``) reuse the same functions.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from eigprec.bench._timing import time_side_by_side
from eigprec.eig import kth_eigvalsh

__all__ = [
    "SpectralRegressor",
    "clarke_membership",
    "crossing_family",
    "descent_demo",
    "eigh_backward_demo",
    "gradient_check",
    "inverse_iteration_tradeoff",
    "load_housing",
    "markdown_table",
    "plot_crossing_family",
    "plot_size_sweep",
    "plot_timing_sweep",
    "regression_size_sweep",
    "stream_race_demo",
    "synthetic_housing",
    "timing_sweep",
    "train_spectral_regression",
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


def descent_demo(
    n: int = 6, multiplicity: int = 3, steps: Iterable[float] = (1e-2, 1e-3, 1e-4), seed: int = 0
) -> list[dict[str, float]]:
    """Does a step against the subgradient decrease λ_max at a repeated top eigenvalue?

    λ_max is convex, and at X with top eigenvalue of multiplicity r its directional
    derivative along D is the largest eigenvalue of UᵀDU. Along D = −q qᵀ (one eigenvector,
    what ``"eigenvector"`` returns) that is 0 for r ≥ 2 — the other r − 1 copies do not move —
    while along D = −UUᵀ/r (``"mean"``) it is −1/r: only the minimum-norm element gives a
    first-order decrease, as for any convex function where −(minimum-norm subgradient) is
    the steepest-descent direction.

    Args:
        n: matrix size.
        multiplicity: copies of λ_max.
        steps: step lengths h.
        seed: seed of the eigenbasis.

    Returns:
        One row per h with the measured slopes (λ_max(X − hG) − λ_max(X)) / h for both modes.

    Example:
        >>> rows = descent_demo(steps=(1e-4,))
        >>> round(rows[0]["slope_mean"], 3), abs(rows[0]["slope_eigenvector"]) < 1e-6
        (-0.333, True)
    """
    X, _ = repeated_eigenvalue_matrix(n, n - multiplicity, multiplicity, seed)
    top = float(torch.linalg.eigvalsh(X)[-1])
    G = {m: _grad(X, -1, subgradient=m) for m in ("eigenvector", "mean")}
    rows = []
    for h in steps:
        row = {"h": h}
        for mode, g in G.items():
            row[f"slope_{mode}"] = (float(torch.linalg.eigvalsh(X - h * g)[-1]) - top) / h
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- 3. speed


def timing_sweep(
    sizes: Iterable[int] = (16, 32, 33, 64, 100),
    batches: Iterable[int] = (100, 500),
    *,
    device: str = "cpu",
    backend: str = "auto",
    dtype: torch.dtype = torch.float32,
    k: int = -1,
    repeats: int = 3,
    seed: int = 0,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Seconds per call of torch.linalg vs kth_eigvalsh, inference and training, side by side.

    ``torch_forward``: ``torch.linalg.eigvalsh(A)[..., k]`` without grad; ``kth_forward``: the
    same through ``kth_eigvalsh``; ``torch_train``: ``torch.linalg.eigh`` + backward of the
    k-th eigenvalues' sum; ``kth_train``: ``kth_eigvalsh`` + backward.

    Args:
        sizes: matrix sizes n.
        batches: batch sizes.
        device: ``"cpu"`` or ``"cuda"``.
        backend: ``kth_eigvalsh`` backend.
        dtype: float32 or float64.
        k: eigenvalue index.
        repeats: interleaved timed rounds (median).
        seed: generator seed of the random symmetric batches.
        threads: torch intra-op threads during the measurement (None: unchanged). One thread
            makes CPU timings far less sensitive to other processes on a shared machine.

    Returns:
        One dict per (n, batch) with the four medians and ``forward_speedup`` /
        ``train_speedup`` (torch time ÷ kth_eigvalsh time).

    Example:
        >>> rows = timing_sweep(sizes=(4,), batches=(8,), repeats=1)
        >>> sorted(rows[0])[:3]
        ['backend', 'batch', 'device']
    """
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _timing_rows(sizes, batches, device, backend, dtype, k, repeats, seed)
    finally:
        torch.set_num_threads(previous_threads)


def _timing_rows(
    sizes: Iterable[int],
    batches: Iterable[int],
    device: str,
    backend: str,
    dtype: torch.dtype,
    k: int,
    repeats: int,
    seed: int,
) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        for batch in batches:
            g = torch.Generator().manual_seed(seed)
            B = torch.randn(batch, n, n, generator=g, dtype=dtype)
            A = ((B + B.mT) / 2).to(device)

            def torch_forward(A: Tensor = A) -> None:
                with torch.no_grad():
                    torch.linalg.eigvalsh(A)[..., k]

            def kth_forward(A: Tensor = A) -> None:
                with torch.no_grad():
                    kth_eigvalsh(A, k, backend=backend)

            def torch_train(A: Tensor = A) -> None:
                X = A.detach().requires_grad_(True)
                torch.linalg.eigh(X).eigenvalues[..., k].sum().backward()

            def kth_train(A: Tensor = A) -> None:
                X = A.detach().requires_grad_(True)
                kth_eigvalsh(X, k, backend=backend).sum().backward()

            t = time_side_by_side(
                {
                    "torch_forward": torch_forward,
                    "kth_forward": kth_forward,
                    "torch_train": torch_train,
                    "kth_train": kth_train,
                },
                repeats=repeats,
                device=device,
            )
            rows.append(
                {
                    "n": n,
                    "batch": batch,
                    "device": device,
                    "backend": backend,
                    **t,
                    "forward_speedup": t["torch_forward"] / t["kth_forward"],
                    "train_speedup": t["torch_train"] / t["kth_train"],
                }
            )
    return rows


def inverse_iteration_tradeoff(
    batch: int = 500,
    n: int = 100,
    *,
    k: int = -1,
    device: str = "cpu",
    backend: str = "auto",
    dtype: torch.dtype = torch.float32,
    steps: int = 3,
    repeats: int = 3,
    seed: int = 0,
    gap_range: tuple[float, float] = (1e-7, 1e-2),
    gap_edges: tuple[float, ...] = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, math.inf),
) -> dict[str, Any]:
    """Speed and accuracy of the inverse-iteration gradient against the exact one.

    Times forward alone (eigenvalues only), forward+backward with the solver's eigenvectors
    (``kth_eigvalsh``) and forward+backward with inverse iteration
    (``kth_eigvalsh(..., method="inverse_iteration")``), side by side; then bins the
    batch by relative eigen-gap at k, min_j |λ_k − λ_j| / max|λ|, and reports in each bin the
    largest gradient error (max-abs entry, against the float64 solver gradient) of inverse
    iteration (``max_grad_err``) and, for scale, of the solver's own gradient in ``dtype``
    (``max_grad_err_solver``).

    Args:
        batch, n: problem size.
        k: eigenvalue index.
        device: ``"cpu"`` or ``"cuda"``.
        backend: eigenvalue backend.
        dtype: float32 or float64.
        steps: inverse-iteration steps.
        repeats: timed rounds (median).
        seed: generator seed.
        gap_range: the gap between λ_k and its neighbour is drawn log-uniformly from this
            range (the matrices are Q diag(λ) Qᵀ with Haar Q and otherwise evenly spaced λ on
            [−1, 1]); random symmetric matrices would almost never show small gaps.
        gap_edges: bin edges of the relative gap.

    Returns:
        dict with ``forward``, ``train_exact``, ``train_invit`` seconds, ``bins`` (one dict per
        gap bin: ``lo``, ``hi`` (None for +∞), ``count``, ``max_grad_err``,
        ``max_grad_err_solver`` (None for an empty bin)).

    Example:
        >>> r = inverse_iteration_tradeoff(batch=20, n=8, repeats=1)
        >>> sum(b["count"] for b in r["bins"])
        20
    """
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(batch, n, n, generator=g, dtype=torch.float64))
    kk = k % n
    # Spectrum: evenly spaced on [-1, 1] except that the neighbour above λ_k (below, for the
    # top one) sits at a prescribed gap, log-uniform over gap_range.
    lo_gap, hi_gap = gap_range
    gaps = torch.exp(
        math.log(lo_gap) + (math.log(hi_gap) - math.log(lo_gap)) * torch.rand(batch, generator=g)
    ).double()
    lam = torch.linspace(-1.0, 1.0, n, dtype=torch.float64).repeat(batch, 1)
    nb = kk + 1 if kk + 1 < n else kk - 1
    lam[:, nb] = lam[:, kk] + torch.sign(torch.tensor(float(nb - kk))) * gaps
    A64 = (Q * lam[:, None, :]) @ Q.mT
    A64 = (A64 + A64.mT) / 2
    A = A64.to(dtype).to(device)

    def forward() -> None:
        with torch.no_grad():
            kth_eigvalsh(A, k, backend=backend)

    def train_exact() -> None:
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(X, k, backend=backend, method="eigh").sum().backward()

    def train_invit() -> None:
        X = A.detach().requires_grad_(True)
        kth_eigvalsh(
            X, k, backend=backend, method="inverse_iteration", steps=steps
        ).sum().backward()

    t = time_side_by_side(
        {"forward": forward, "train_exact": train_exact, "train_invit": train_invit},
        repeats=repeats,
        device=device,
    )
    exact = _grad(A64, k)
    X = A.detach().requires_grad_(True)
    kth_eigvalsh(X, k, backend=backend, method="inverse_iteration", steps=steps).sum().backward()
    assert X.grad is not None
    err = (X.grad.double().cpu() - exact).abs().amax(dim=(-2, -1))
    err_exact = (_grad(A, k, backend=backend).double().cpu() - exact).abs().amax(dim=(-2, -1))
    w = torch.linalg.eigvalsh(A64)
    others = torch.cat([w[:, :kk], w[:, kk + 1 :]], dim=-1)
    rel_gap = (others - w[:, kk : kk + 1]).abs().amin(-1) / w.abs().amax(-1)
    bins = []
    for lo, hi in itertools.pairwise(gap_edges):
        sel = (rel_gap >= lo) & (rel_gap < hi)
        bins.append(
            {
                "lo": lo,
                "hi": hi if math.isfinite(hi) else None,
                "count": int(sel.sum()),
                # None, not NaN, for an empty bin: the recordings are strict JSON
                "max_grad_err": float(err[sel].max()) if sel.any() else None,
                "max_grad_err_solver": float(err_exact[sel].max()) if sel.any() else None,
            }
        )
    return {"batch": batch, "n": n, "steps": steps, "device": device, **t, "bins": bins}


def stream_race_demo(
    trials: int = 10, batch: int = 200, n: int = 64, sleep_cycles: int = 20_000_000
) -> dict[str, Any]:
    """Count wrong answers of a naive CuPy hand-off vs the stream-aware bridge (CUDA only).

    The matrices are written by a kernel on a side torch stream that first sleeps on the GPU.
    The naive version hands the tensor to CuPy through ``__cuda_array_interface__`` (which
    carries no stream) and solves on CuPy's own stream: it may read the memory before it has
    been written. ``kth_eigvalsh(backend="cupy")`` runs on torch's current stream and cannot.

    Args:
        trials: repetitions.
        batch, n: problem size.
        sleep_cycles: GPU clock cycles the producing stream idles before writing A.

    Returns:
        dict with ``trials``, ``naive_wrong`` and ``bridge_wrong`` (entries of the batch that
        differ from the reference by more than 1e-3 relative, summed over trials).

    Raises:
        RuntimeError: without CUDA or CuPy.

    Example:
        >>> stream_race_demo(trials=2)  # doctest: +SKIP
    """
    from eigprec import _cupy_bridge

    if not (torch.cuda.is_available() and _cupy_bridge.cupy_available()):
        raise RuntimeError("stream_race_demo needs a CUDA GPU and CuPy")
    import cupy

    g = torch.Generator(device="cuda").manual_seed(0)
    Bm = torch.randn(batch, n, n, device="cuda", generator=g)
    reference = torch.linalg.eigvalsh(Bm @ Bm.mT)[..., -1]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    naive_wrong = bridge_wrong = 0
    for _ in range(trials):
        for route in ("naive", "bridge"):
            with torch.cuda.stream(side):
                A = torch.zeros(batch, n, n, device="cuda")
                torch.cuda._sleep(sleep_cycles)
                torch.matmul(Bm, Bm.mT, out=A)
                if route == "naive":
                    w = cupy.linalg.eigvalsh(cupy.asarray(A))[..., -1]
                    cupy.cuda.Device().synchronize()
                    got = torch.as_tensor(w.get())
                else:
                    got = kth_eigvalsh(A, -1, backend="cupy").cpu()
            torch.cuda.synchronize()
            wrong = int(((got - reference.cpu()).abs() > 1e-3 * reference.abs().cpu()).sum())
            if route == "naive":
                naive_wrong += wrong
            else:
                bridge_wrong += wrong
    return {
        "trials": trials,
        "batch": batch,
        "n": n,
        "naive_wrong": naive_wrong,
        "bridge_wrong": bridge_wrong,
    }


# --------------------------------------------------------------------------- 4. regression


def synthetic_housing(seed: int = 0, rows: int = 20640) -> dict[str, Any]:
    """A deterministic stand-in for California Housing with the same shape (20640 × 8).

    Eight correlated Gaussian features (a fixed random mixing of independent N(0, 1)), and a
    target that is a smooth nonlinear function of them — a sum of a saturating term, a
    product term and a periodic term plus 10 % noise — so that model capacity matters.

    Args:
        seed: ``torch.Generator`` seed; two calls with the same seed are identical.
        rows: number of samples.

    Returns:
        dict with ``X`` (rows, 8) float32, ``y`` (rows,) float32, ``source="synthetic"``,
        ``feature_names``.

    Example:
        >>> d = synthetic_housing()
        >>> tuple(d["X"].shape)
        (20640, 8)
    """
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(rows, 8, generator=g, dtype=torch.float64)
    mix = torch.eye(8, dtype=torch.float64) + 0.3 * torch.randn(
        8, 8, generator=g, dtype=torch.float64
    )
    X = Z @ mix
    y = (
        torch.tanh(X[:, 0] + 0.5 * X[:, 1])
        + 0.5 * X[:, 2] * X[:, 3]
        + 0.3 * torch.sin(2 * X[:, 4])
        - 0.2 * X[:, 5].abs()
        + 0.1 * torch.randn(rows, generator=g, dtype=torch.float64)
    )
    return {
        "X": X.float(),
        "y": y.float(),
        "source": "synthetic",
        "feature_names": [f"z{i}" for i in range(8)],
    }


def load_housing(seed: int = 0, allow_download: bool = True) -> dict[str, Any]:
    """California Housing (20640 × 8) from scikit-learn, or the synthetic stand-in offline.

    Args:
        seed: seed of the stand-in (unused when the real data loads).
        allow_download: try ``fetch_california_housing`` (which downloads on first use).

    Returns:
        dict with ``X``, ``y``, ``source`` (``"california_housing"`` or ``"synthetic"``),
        ``feature_names`` and ``note`` (why the stand-in was used, else empty).

    Example:
        >>> d = load_housing(allow_download=False)
        >>> d["source"]
        'synthetic'
    """
    note = "download not attempted"
    if allow_download:
        try:
            from sklearn.datasets import fetch_california_housing

            with warnings.catch_warnings():  # its retry warnings say what `note` says
                warnings.simplefilter("ignore")
                raw = fetch_california_housing(n_retries=1, delay=0.5)
            return {
                "X": torch.as_tensor(raw.data, dtype=torch.float32),
                "y": torch.as_tensor(raw.target, dtype=torch.float32),
                "source": "california_housing",
                "feature_names": list(raw.feature_names),
                "note": "",
            }
        except Exception as exc:  # offline, no scikit-learn, corrupt cache: use the stand-in
            note = f"{type(exc).__name__}: {exc}"
    data = synthetic_housing(seed)
    data["note"] = note
    return data


class SpectralRegressor(nn.Module):
    """f(x) = λ_k(diag(μ) + Σᵢ xᵢ Aᵢ) with non-decreasing μ — an "eigenvalue neuron".

    μ₁ = θ₁ and μⱼ = θ₁ + Σ_{2≤i≤j} softplus(θᵢ), so μ is non-decreasing for every θ.
    A₁ … A_F are symmetrised copies of free parameters initialised N(0, 1)/(√n · F), which
    keeps Σᵢ xᵢAᵢ of order one for standardised features whatever n and F.

    Args:
        n_features: F.
        n: matrix size.
        k: eigenvalue index (default: the median, n // 2).
        eig: ``"kth"`` (``kth_eigvalsh``) or ``"torch"`` (autograd through
            ``torch.linalg.eigvalsh``).
        backend: ``kth_eigvalsh`` backend.
        subgradient: ``kth_eigvalsh`` subgradient mode.
        generator: seeds the initialisation.

    Example:
        >>> m = SpectralRegressor(8, 6, generator=torch.Generator().manual_seed(0))
        >>> m(torch.zeros(3, 8)).shape
        torch.Size([3])
    """

    def __init__(
        self,
        n_features: int,
        n: int,
        k: int | None = None,
        *,
        eig: str = "kth",
        backend: str = "auto",
        subgradient: str = "eigenvector",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if eig not in ("kth", "torch"):
            raise ValueError(f"eig must be 'kth' or 'torch', got {eig!r}")
        self.n, self.k = n, n // 2 if k is None else k
        self.eig, self.backend, self.subgradient = eig, backend, subgradient
        self.theta = nn.Parameter(torch.zeros(n))
        with torch.no_grad():
            # θ such that μ starts evenly spaced on [−1, 1]: softplus(θ) = 2/(n−1).
            step = 2.0 / max(n - 1, 1)
            self.theta[0] = -1.0
            self.theta[1:] = math.log(math.expm1(step))
        self.A = nn.Parameter(
            torch.randn(n_features, n, n, generator=generator) / (math.sqrt(n) * n_features)
        )

    def mu(self) -> Tensor:
        """The non-decreasing diagonal μ (n,)."""
        inc = nn.functional.softplus(self.theta[1:])
        return torch.cat([self.theta[:1], self.theta[:1] + torch.cumsum(inc, 0)])

    def forward(self, x: Tensor) -> Tensor:
        """λ_k of each sample's matrix: (batch, F) → (batch,)."""
        S = (self.A + self.A.mT) / 2
        M = torch.diag_embed(self.mu()).expand(x.shape[0], -1, -1) + torch.einsum(
            "bf,fij->bij", x, S
        )
        if self.eig == "torch":
            return torch.linalg.eigvalsh(M)[..., self.k]
        return kth_eigvalsh(M, self.k, backend=self.backend, subgradient=self.subgradient)


def _split(
    data: dict[str, Any], seed: int, test_fraction: float = 0.2
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    X, y = data["X"], data["y"]
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(X.shape[0], generator=g)
    n_test = round(test_fraction * X.shape[0])
    test, train = perm[:n_test], perm[n_test:]
    mean, std = X[train].mean(0), X[train].std(0).clamp_min(1e-12)
    y_mean, y_std = y[train].mean(), y[train].std().clamp_min(1e-12)
    norm = lambda Z: (Z - mean) / std
    return norm(X[train]), (y[train] - y_mean) / y_std, norm(X[test]), (y[test] - y_mean) / y_std


def train_spectral_regression(
    data: dict[str, Any],
    n: int = 8,
    *,
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 0.02,
    eig: str = "kth",
    backend: str = "auto",
    subgradient: str = "eigenvector",
    max_train: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
) -> dict[str, Any]:
    """Train :class:`SpectralRegressor` with Adam on standardised data; report test RMSE.

    Args:
        data: from :func:`load_housing` (``X`` (N, F), ``y`` (N,)).
        n: matrix size.
        epochs: passes over the training set.
        batch_size: minibatch size.
        lr: Adam learning rate.
        eig: ``"kth"`` or ``"torch"`` (see :class:`SpectralRegressor`).
        backend: ``kth_eigvalsh`` backend.
        subgradient: ``kth_eigvalsh`` subgradient mode.
        max_train: use only the first this many (shuffled) training rows (None: all).
        seed: seeds the split, the initialisation and the minibatch order.
        device: where to train.
        progress: wraps the epoch iterator (e.g. ``eigprec.progress``) for a live display.

    Returns:
        dict with ``epoch_seconds`` (list), ``train_rmse`` (per epoch, standardised units),
        ``test_rmse`` (standardised target units: 1.0 = predicting the mean) and
        ``nonfinite_steps`` (steps skipped because the loss was not finite).

    Example:
        >>> d = synthetic_housing(rows=512)
        >>> r = train_spectral_regression(d, n=4, epochs=1)
        >>> r["test_rmse"] < 1.5
        True
    """
    Xtr, ytr, Xte, yte = _split(data, seed)
    if max_train is not None:
        Xtr, ytr = Xtr[:max_train], ytr[:max_train]
    Xtr, ytr, Xte, yte = (t.to(device) for t in (Xtr, ytr, Xte, yte))
    gen = torch.Generator().manual_seed(seed)
    model = SpectralRegressor(
        Xtr.shape[1], n, eig=eig, backend=backend, subgradient=subgradient, generator=gen
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    epochs_iter: Iterable[int] = range(epochs)
    if progress is not None:
        epochs_iter = progress(epochs_iter)
    epoch_seconds, train_rmse, nonfinite = [], [], 0
    for _ in epochs_iter:
        perm = torch.randperm(Xtr.shape[0], generator=gen).to(device)
        t0 = time.perf_counter()
        sq, count = 0.0, 0
        for i in range(0, Xtr.shape[0], batch_size):
            idx = perm[i : i + batch_size]
            loss = (model(Xtr[idx]) - ytr[idx]).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if not torch.isfinite(loss):
                nonfinite += 1
                continue
            opt.step()
            sq += float(loss.detach()) * idx.numel()
            count += idx.numel()
        if device != "cpu":
            torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - t0)
        train_rmse.append(math.sqrt(sq / max(count, 1)))
    with torch.no_grad():
        test_rmse = float((model(Xte) - yte).square().mean().sqrt())
    return {
        "n": n,
        "eig": eig,
        "epoch_seconds": epoch_seconds,
        "train_rmse": train_rmse,
        "test_rmse": test_rmse,
        "nonfinite_steps": nonfinite,
    }


def regression_size_sweep(
    data: dict[str, Any],
    sizes: Iterable[int] = (2, 4, 8, 16),
    *,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    **train_kw: Any,
) -> list[dict[str, Any]]:
    """Test RMSE against matrix size n (one training run per size, same seed).

    Args:
        data: from :func:`load_housing`.
        sizes: matrix sizes.
        progress: wraps the size iterator for a live display.
        **train_kw: passed to :func:`train_spectral_regression`.

    Returns:
        One result dict per size (see :func:`train_spectral_regression`).

    Example:
        >>> rows = regression_size_sweep(synthetic_housing(rows=400), sizes=(2,), epochs=1)
        >>> rows[0]["n"]
        2
    """
    it: Iterable[int] = list(sizes)
    if progress is not None:
        it = progress(it)
    return [train_spectral_regression(data, n, **train_kw) for n in it]


# --------------------------------------------------------------------------- display


def markdown_table(rows: list[dict[str, Any]], columns: Iterable[str] | None = None) -> str:
    """Rows of results as a Markdown table (floats to 3 significant digits).

    Args:
        rows: dicts with the same keys.
        columns: keys to show, in order (default: all keys of the first row).

    Returns:
        Markdown text, for ``IPython.display.Markdown``.

    Example:
        >>> print(markdown_table([{"a": 1, "b": 0.5}]))
        | a | b |
        |---|---|
        | 1 | 0.5 |
    """
    cols = list(columns) if columns is not None else list(rows[0]) if rows else []

    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3g}"
        if isinstance(v, list):
            return ", ".join(fmt(x) for x in v)
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots


def plot_crossing_family(fam: dict[str, Tensor]):
    """Eigenvalues of the crossing family and their slopes in both subgradient modes.

    Args:
        fam: output of :func:`crossing_family`.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 3.8))
    t = fam["t"].numpy()
    for k in range(3):
        ax0.plot(t, fam["eigenvalues"][:, k].numpy(), label=f"λ_{k}(t)")
        ax1.plot(t, fam["slope_mean"][:, k].numpy() + 0.03 * (k - 1), label=f"dλ_{k}/dt (mean)")
    c = fam["crossings"].numpy()
    for k in range(3):
        ax1.scatter(
            t[c],
            fam["slope_eigenvector"][c, k].numpy(),
            marker="x",
            color="k",
            zorder=3,
            label="'eigenvector' at a crossing" if k == 0 else None,
        )
        ax1.scatter(
            t[c],
            fam["slope_mean"][c, k].numpy(),
            marker="o",
            facecolors="none",
            edgecolors="k",
            zorder=3,
            label="'mean' at a crossing" if k == 0 else None,
        )
    ax0.set(
        title="Eigenvalues of X(t) = Q diag(t, 0, 1) Qᵀ",
        xlabel="t (dimensionless)",
        ylabel="eigenvalue (dimensionless)",
    )
    ax1.set(
        title="Slopes from kth_eigvalsh's backward",
        xlabel="t (dimensionless)",
        ylabel="dλ_k/dt (offset ±0.03 for legibility)",
    )
    ax0.legend()
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_timing_sweep(rows: list[dict[str, Any]], recorded: list[dict[str, Any]] | None = None):
    """Speed-ups (torch ÷ kth_eigvalsh) against n, per batch size, here and as recorded.

    Args:
        rows: output of :func:`timing_sweep` on this machine.
        recorded: the ``sweep`` of a recorded GPU JSON, or None.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=False)
    for ax, key, title in zip(
        axes,
        ("forward_speedup", "train_speedup"),
        ("inference (no grad)", "training (+ backward)"),
        strict=True,
    ):
        for source, rs, style in (("this machine", rows, "-o"), ("recorded GPU", recorded, "--s")):
            if not rs:
                continue
            for batch in sorted({r["batch"] for r in rs}):
                sel = [r for r in rs if r["batch"] == batch]
                ax.plot(
                    [r["n"] for r in sel],
                    [r[key] for r in sel],
                    style,
                    label=f"{source}, batch {batch}",
                )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
        ax.set(
            title=f"Speed-up, {title}",
            xlabel="matrix size n",
            ylabel="torch time / kth_eigvalsh time (×)",
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_size_sweep(rows: list[dict[str, Any]], source: str):
    """Test RMSE against matrix size.

    Args:
        rows: output of :func:`regression_size_sweep`.
        source: data set name for the title.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot([r["n"] for r in rows], [r["test_rmse"] for r in rows], "-o")
    ax.set_xscale("log", base=2)
    ax.set(
        title=f"Spectral regression on {source}",
        xlabel="matrix size n",
        ylabel="test RMSE (standardised target)",
    )
    fig.tight_layout()
    return fig
