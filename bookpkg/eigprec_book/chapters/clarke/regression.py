"""The Clarke chapter's spectral regression: data (California Housing or its synthetic stand-in),
the model whose features are k-th eigenvalues, and its training.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from eigprec.eig import kth_eigvalsh

__all__ = [
    "SpectralRegressor",
    "from_bunch",
    "load_housing",
    "synthetic_housing",
    "train_spectral_regression",
]


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
        ``feature_names`` and ``noise_std`` (0.1, the standard deviation of the target's noise).

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
        "noise_std": 0.1,
    }


def from_bunch(raw: Any, source: str) -> dict[str, Any]:
    """A scikit-learn data set (a ``Bunch``) as the dict the chapter's models train on.

    Args:
        raw: the loader's result, with ``data``, ``target`` and ``feature_names``.
        source: the data set's name, kept with the numbers.

    Returns:
        ``X`` and ``y`` (float32 tensors), ``source``, ``feature_names`` and an empty ``note``.
    """
    return {
        "X": torch.as_tensor(raw.data, dtype=torch.float32),
        "y": torch.as_tensor(raw.target, dtype=torch.float32),
        "source": source,
        "feature_names": list(raw.feature_names),
        "note": "",
    }


#: Seconds the download host gets to answer before the stand-in is used.
HOUSING_CONNECT_TIMEOUT_S = 3.0


def _host_unreachable(url: str, timeout: float) -> str | None:
    """Why ``url``'s host cannot be reached within ``timeout`` seconds, or None.

    Name lookup and connection run in a daemon thread: ``socket.create_connection``'s
    timeout does not bound the lookup, which on an offline machine can hang far longer.
    """
    import socket
    import threading
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    result: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"offline: {host} did not answer within {timeout:g} s"
    return None if result[0] is None else f"offline: {host} unreachable ({result[0]})"


def load_housing(seed: int = 0, allow_download: bool = True) -> dict[str, Any]:
    """California Housing (20640 × 8) from scikit-learn, or the synthetic stand-in offline.

    The cached copy is used where there is one. Otherwise the download host gets
    :data:`HOUSING_CONNECT_TIMEOUT_S` seconds to answer before anything is downloaded, so an
    offline machine never waits on the network: it gets the stand-in and a note saying why.

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
                try:
                    raw = fetch_california_housing(download_if_missing=False)
                except OSError:  # not cached: download, if the host answers at once
                    from sklearn.datasets import _california_housing

                    url = getattr(getattr(_california_housing, "ARCHIVE", None), "url", "")
                    offline = _host_unreachable(
                        url or "https://ndownloader.figshare.com", HOUSING_CONNECT_TIMEOUT_S
                    )
                    if offline:
                        raise OSError(offline) from None
                    raw = fetch_california_housing(n_retries=1, delay=0.5)
            return from_bunch(raw, "california_housing")
        except Exception as exc:  # offline, no scikit-learn, corrupt cache: use the stand-in
            note = f"{type(exc).__name__}: {exc}"
    data = synthetic_housing(seed)
    data["note"] = note
    return data


class SpectralRegressor(nn.Module):
    """f(x) = λ_k(diag(μ) + Σᵢ xᵢ Aᵢ) with non-decreasing μ — an "eigenvalue neuron".

    μ₁ = θ₁ and μⱼ = θ₁ + Σ_{2≤i≤j} softplus(θᵢ), so μ is non-decreasing for every θ.
    A₁ … A_F are symmetrised copies of free parameters initialised N(0, 1)/(√n · F): for
    standardised features the spectral norm of Σᵢ xᵢAᵢ is then about √(2/F) whatever n
    (measured by ``training.init_spectral_norm``), so it shrinks as F grows.

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

    # [show:forward]
    def forward(self, x: Tensor) -> Tensor:
        """λ_k of each sample's matrix: (batch, F) → (batch,)."""
        S = (self.A + self.A.mT) / 2
        M = torch.diag_embed(self.mu()).expand(x.shape[0], -1, -1) + torch.einsum(
            "bf,fij->bij", x, S
        )
        if self.eig == "torch":
            return torch.linalg.eigvalsh(M)[..., self.k]
        return kth_eigvalsh(M, self.k, backend=self.backend, subgradient=self.subgradient)

    # [/show:forward]


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
    keep_model: bool = False,
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
        keep_model: also return the trained ``model``, a copy ``model_before_last_step`` of it
            taken just before the last optimizer step, and the standardised test inputs
            ``X_test`` (for :func:`gaps_at_k` and :func:`step_vs_gap`).

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
    before_last: SpectralRegressor | None = None
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
            if keep_model:
                before_last = copy.deepcopy(model)
            opt.step()
            sq += float(loss.detach()) * idx.numel()
            count += idx.numel()
        if device != "cpu":
            torch.cuda.synchronize()
        epoch_seconds.append(time.perf_counter() - t0)
        train_rmse.append(math.sqrt(sq / max(count, 1)))
    with torch.no_grad():
        test_rmse = float((model(Xte) - yte).square().mean().sqrt())
    out: dict[str, Any] = {
        "n": n,
        "eig": eig,
        "seed": seed,
        "epoch_seconds": epoch_seconds,
        "train_rmse": train_rmse,
        "test_rmse": test_rmse,
        "nonfinite_steps": nonfinite,
    }
    if keep_model:
        out.update(model=model, model_before_last_step=before_last, X_test=Xte)
    return out
