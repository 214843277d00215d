"""What a user of eigenvalue layers asks of the Clarke chapter's model: is it better than a
linear fit, does the subgradient mode matter, how close do eigenvalues come in training?

Experiments only (plots in :mod:`eigprec_book.chapters.clarke.plots`); the model and its training
loop are in :mod:`eigprec_book.chapters.clarke.regression`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from eigprec.eig import default_cluster_tol, kth_eigvalsh
from eigprec.eig.core import default_tolerance
from eigprec_book.chapters.clarke.regression import (
    SpectralRegressor,
    _split,
    from_bunch,
    train_spectral_regression,
)

__all__ = [
    "SymmetricStartRegressor",
    "gaps_at_k",
    "init_spectral_norm",
    "linear_baseline",
    "load_diabetes",
    "noise_floor",
    "seed_sweep",
    "step_vs_gap",
    "train_symmetric_start",
]


def load_diabetes() -> dict[str, Any]:
    """scikit-learn's bundled diabetes data (442 patients × 10 features): real data, no download.

    Returns:
        dict with ``X`` (442, 10) float32, ``y`` (442,) float32 (disease progression after one
        year), ``source="diabetes"``, ``feature_names`` and ``note``.

    Raises:
        ModuleNotFoundError: without scikit-learn.

    Example:
        >>> tuple(load_diabetes()["X"].shape)  # doctest: +SKIP
        (442, 10)
    """
    from sklearn.datasets import load_diabetes as _load

    return from_bunch(_load(), "diabetes")


def linear_baseline(data: dict[str, Any], seed: int = 0) -> float:
    """Test RMSE of ordinary least squares (with intercept) on the split the model uses.

    Args:
        data: ``X`` (N, F), ``y`` (N,).
        seed: seed of the train/test split (as in ``train_spectral_regression``).

    Returns:
        Test RMSE in standardised target units (1.0 = predicting the training mean).

    Example:
        >>> from eigprec_book.chapters.clarke.regression import synthetic_housing
        >>> linear_baseline(synthetic_housing(rows=500)) < 1.0
        True
    """
    Xtr, ytr, Xte, yte = _split(data, seed)
    design = torch.cat([Xtr, torch.ones(Xtr.shape[0], 1)], dim=1).double()
    # gelsd (SVD): gelsy, the CPU default, gave different last bits for the same input from
    # call to call (tests/test_chapter_clarke_questions.py).
    coef = torch.linalg.lstsq(design, ytr.double()[:, None], driver="gelsd").solution[:, 0]
    pred = torch.cat([Xte, torch.ones(Xte.shape[0], 1)], dim=1).double() @ coef
    return float((pred - yte.double()).square().mean().sqrt())


def noise_floor(data: dict[str, Any], seed: int = 0) -> float | None:
    """The best test RMSE any model can expect on the synthetic stand-in: its noise level.

    The stand-in's target carries independent noise of standard deviation ``noise_std``; in
    the standardised units of the test RMSE that is ``noise_std`` ÷ the training target's
    standard deviation.

    Args:
        data: from ``synthetic_housing`` (others have no known noise: None).
        seed: seed of the split.

    Returns:
        The noise floor, or None for data without a known noise level.

    Example:
        >>> from eigprec_book.chapters.clarke.regression import synthetic_housing
        >>> 0 < noise_floor(synthetic_housing(rows=500)) < 0.2
        True
    """
    if "noise_std" not in data:
        return None
    X, y = data["X"], data["y"]
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(X.shape[0], generator=g)
    train = perm[round(0.2 * X.shape[0]) :]
    return float(data["noise_std"] / y[train].std())


def seed_sweep(
    data: dict[str, Any],
    sizes: Iterable[int] = (2, 16),
    seeds: Iterable[int] = (0, 1, 2),
    *,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    **train_kw: Any,
) -> list[dict[str, Any]]:
    """Test RMSE for each matrix size and seed (split, initialisation and minibatch order).

    Args:
        data: the data set.
        sizes: matrix sizes n.
        seeds: seeds.
        progress: wraps the (n, seed) iterator.
        **train_kw: passed to ``train_spectral_regression``.

    Returns:
        One row per (n, seed): ``n``, ``seed``, ``test_rmse``, ``linear`` (least squares on the
        same split).

    Example:
        >>> from eigprec_book.chapters.clarke.regression import synthetic_housing
        >>> rows = seed_sweep(synthetic_housing(rows=300), sizes=(2,), seeds=(0,), epochs=1)
        >>> rows[0]["n"], rows[0]["seed"]
        (2, 0)
    """
    pairs: Iterable[tuple[int, int]] = [(n, s) for n in sizes for s in seeds]
    if progress is not None:
        pairs = progress(pairs)
    rows = []
    for n, seed in pairs:
        r = train_spectral_regression(data, n, seed=seed, **train_kw)
        rows.append(
            {
                "n": n,
                "seed": seed,
                "test_rmse": r["test_rmse"],
                "linear": linear_baseline(data, seed),
            }
        )
    return rows


def _matrices(model: SpectralRegressor, X: Tensor) -> Tensor:
    S = (model.A + model.A.mT) / 2
    return torch.diag_embed(model.mu()).expand(X.shape[0], -1, -1) + torch.einsum(
        "bf,fij->bij", X, S
    )


def gaps_at_k(model: SpectralRegressor, X: Tensor) -> dict[str, Tensor]:
    """Relative eigen-gap at k of the model's matrix for each input row.

    The gap is min_{j≠k} |λ_j − λ_k| / max_j |λ_j| of the float32 matrix the model builds,
    computed in float64 (the exact spectrum of the matrix the solver sees).

    Args:
        model: a trained :class:`~eigprec_book.chapters.clarke.regression.SpectralRegressor`.
        X: (N, F) standardised inputs.

    Returns:
        dict with ``gap`` (N,), on the CPU, and ``tol``: the default ``"mean"`` tolerance next
        to λ_k relative to max|λ| (float32: 2 eps on refined gaps, which follow the true ones
        within 0.1 eps), the width below which ``"mean"`` averages.

    Example:
        >>> m = SpectralRegressor(3, 4, generator=torch.Generator().manual_seed(0))
        >>> gaps_at_k(m, torch.zeros(2, 3))["gap"].shape
        torch.Size([2])
    """
    with torch.no_grad():
        M = _matrices(model, X).double()
    w = torch.linalg.eigvalsh(M)
    k, n = model.k, model.n
    others = torch.cat([w[:, :k], w[:, k + 1 :]], dim=-1)
    gap = (others - w[:, k : k + 1]).abs().amin(-1) / w.abs().amax(-1)
    one = torch.ones(n, dtype=torch.float32)
    return {"gap": gap.cpu(), "tol": float(default_cluster_tol(one, n))}


def step_vs_gap(result: dict[str, Any]) -> dict[str, float]:
    """Could the model's last optimizer step have swapped λ_k with a neighbour?

    By Weyl's inequality no eigenvalue of M(x) moves by more than ‖ΔM(x)‖₂ in a step, so a
    gap larger than 2‖ΔM(x)‖₂ cannot close; smaller ones may, and there the gradient of the
    next step can point elsewhere (it varies like 1/gap).

    Args:
        result: from ``train_spectral_regression(..., keep_model=True)``.

    Returns:
        dict with ``min_gap`` and ``median_gap`` (relative), ``median_step`` (‖ΔM(x)‖₂ ÷
        max|λ|, median over the test rows), ``frac_step_exceeds_gap`` (rows where 2‖ΔM‖₂
        exceeds the gap) and ``tol`` (the default ``"mean"`` tolerance, relative).

    Example:
        >>> from eigprec_book.chapters.clarke.regression import synthetic_housing
        >>> r = train_spectral_regression(synthetic_housing(rows=300), 4, keep_model=True)
        >>> 0 <= step_vs_gap(r)["frac_step_exceeds_gap"] <= 1
        True
    """
    model, before, X = result["model"], result["model_before_last_step"], result["X_test"]
    g = gaps_at_k(model, X)
    with torch.no_grad():
        M = _matrices(model, X).double()
        dM = M - _matrices(before, X).double()
    scale = torch.linalg.eigvalsh(M).abs().amax(-1)
    step = (torch.linalg.matrix_norm(dM, ord=2) / scale).cpu()
    gap = g["gap"]
    return {
        "min_gap": float(gap.min()),
        "median_gap": float(gap.median()),
        "median_step": float(step.median()),
        "frac_step_exceeds_gap": float((2 * step > gap).double().mean()),
        "tol": g["tol"],
    }


class SymmetricStartRegressor(nn.Module):
    """f(x) = λ_k(b·I + Σᵢ xᵢ Sᵢ) with every Sᵢ = 0 at the start: all n eigenvalues tie.

    A structural tie: at initialisation M(x) = b·I for every input, so λ_k sits in an n-fold
    cluster for every sample, and the subgradient mode decides which directions training
    ever explores.

    Args:
        n_features: F.
        n: matrix size.
        k: eigenvalue index (default the median n // 2).
        subgradient: ``kth_eigvalsh`` subgradient mode.

    Example:
        >>> SymmetricStartRegressor(3, 4)(torch.ones(2, 3)).tolist()
        [0.0, 0.0]
    """

    def __init__(
        self, n_features: int, n: int, k: int | None = None, *, subgradient: str = "eigenvector"
    ) -> None:
        super().__init__()
        self.n, self.k, self.subgradient = n, n // 2 if k is None else k, subgradient
        self.b = nn.Parameter(torch.zeros(()))
        self.A = nn.Parameter(torch.zeros(n_features, n, n))

    def matrices(self, x: Tensor) -> Tensor:
        """M(x) for each row of x: (batch, F) → (batch, n, n)."""
        S = (self.A + self.A.mT) / 2
        eye = torch.eye(self.n, dtype=x.dtype, device=x.device)
        return self.b * eye + torch.einsum("bf,fij->bij", x, S)

    def forward(self, x: Tensor) -> Tensor:
        """λ_k of each sample's matrix."""
        return kth_eigvalsh(self.matrices(x), self.k, subgradient=self.subgradient)


def train_symmetric_start(
    data: dict[str, Any],
    n: int = 8,
    *,
    subgradient: str = "eigenvector",
    epochs: int = 3,
    batch_size: int = 256,
    lr: float = 0.02,
    max_train: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Train :class:`SymmetricStartRegressor` with Adam; report test RMSE and surviving ties.

    Args:
        data: ``X`` (N, F), ``y`` (N,).
        n: matrix size.
        subgradient: ``"eigenvector"`` or ``"mean"``.
        epochs: passes over the training rows.
        batch_size: minibatch size.
        lr: Adam learning rate.
        max_train: use only the first this many (shuffled) training rows.
        seed: split and minibatch order (the initialisation is deterministic: zero).

    Returns:
        dict with ``subgradient``, ``test_rmse``, ``linear`` (least squares on the same split),
        ``tied_fraction`` (test rows whose λ_k still has another computed eigenvalue within
        the default tolerance on computed gaps, min(3·√max(n, 16), 20)·eps·max|λ|),
        ``distinct`` (median number of distinct eigenvalues per test matrix, same tolerance)
        and ``offdiag`` (largest off-diagonal entry of any Sᵢ).

    Example:
        >>> from eigprec_book.chapters.clarke.regression import synthetic_housing
        >>> r = train_symmetric_start(synthetic_housing(rows=300), 4, subgradient="mean")
        >>> r["tied_fraction"]
        1.0
    """
    Xtr, ytr, Xte, yte = _split(data, seed)
    if max_train is not None:
        Xtr, ytr = Xtr[:max_train], ytr[:max_train]
    model = SymmetricStartRegressor(Xtr.shape[1], n, subgradient=subgradient)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(Xtr.shape[0], generator=gen)
        for i in range(0, Xtr.shape[0], batch_size):
            idx = perm[i : i + batch_size]
            loss = (model(Xtr[idx]) - ytr[idx]).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        test_rmse = float((model(Xte) - yte).square().mean().sqrt())
        M = model.matrices(Xte)
        w = torch.linalg.eigvalsh(M)
        tol = default_tolerance(w, refined=False)[:, None]  # computed gaps
        near = (w - w[:, model.k : model.k + 1]).abs() <= tol
        tied = near.sum(-1) > 1
        distinct = 1 + (w.diff(dim=-1) > tol).sum(-1)
        S = (model.A + model.A.mT) / 2
        offdiag = float((S - torch.diag_embed(S.diagonal(dim1=-2, dim2=-1))).abs().max())
    return {
        "subgradient": subgradient,
        "test_rmse": test_rmse,
        "linear": linear_baseline(data, seed),
        "tied_fraction": float(tied.double().mean()),
        "distinct": float(distinct.double().median()),
        "offdiag": offdiag,
    }


def init_spectral_norm(
    sizes: tuple[int, ...] = (4, 16, 64),
    features: tuple[int, ...] = (2, 8, 32),
    *,
    samples: int = 200,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Spectral norm of Σᵢ xᵢAᵢ at :class:`SpectralRegressor`'s initialisation.

    Args:
        sizes: matrix sizes n.
        features: feature counts F.
        samples: standard-normal feature vectors x per (n, F).
        seed: seeds the initialisation and the x.

    Returns:
        One row per (n, F): ``n``, ``F``, ``norm`` (median over the x of ‖Σᵢ xᵢAᵢ‖₂) and
        ``sqrt(2/F)``.

    Example:
        >>> rows = init_spectral_norm(sizes=(4,), features=(2,), samples=10)
        >>> sorted(rows[0])
        ['F', 'n', 'norm', 'sqrt(2/F)']
    """
    rows = []
    for n in sizes:
        for F in features:
            g = torch.Generator().manual_seed(seed)
            model = SpectralRegressor(F, n, generator=g)
            X = torch.randn(samples, F, generator=g)
            with torch.no_grad():
                S = (model.A + model.A.mT) / 2
                norms = torch.linalg.matrix_norm(torch.einsum("bf,fij->bij", X, S), ord=2)
            rows.append(
                {"n": n, "F": F, "norm": float(norms.median()), "sqrt(2/F)": math.sqrt(2 / F)}
            )
    return rows
