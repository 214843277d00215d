"""Figures of the Clarke chapter (experiments return data; these draw it)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

__all__ = [
    "plot_cpu_costs",
    "plot_crossing_family",
    "plot_gap_histogram",
    "plot_seed_sweep",
]

_METHOD_LABELS = {
    "forward": "kth forward",
    "forward_grad": "kth forward, requires grad",
    "torch_train": "eigh + backward",
    "train_eigh": 'kth + bwd "eigh"',
    "train_subset": 'kth + bwd "subset"',
    "train_inverse_iteration": 'kth + bwd "inv. it."',
    "train_mean": 'kth + bwd, "mean" mode',
}


def plot_crossing_family(fam: dict[str, Tensor]):
    """Eigenvalues of the crossing family and their slopes in both subgradient modes.

    Args:
        fam: output of :func:`crossing_family`.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    # One panel per row: side by side they would be shrunk below a readable size.
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(6.5, 6.4), sharex=True, layout="constrained")
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
        ylabel="eigenvalue",
    )
    ax1.set(
        title="Slopes from kth_eigvalsh's backward pass",
        xlabel="t (dimensionless)",
        ylabel="dλ_k/dt (offset ±0.03)",
    )
    ax0.legend(loc="upper left")
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    return fig


def plot_cpu_costs(costs: dict[int, dict[str, float]]):
    """Time of each call ÷ ``torch.linalg.eigvalsh`` time, per matrix size.

    Args:
        costs: n → output of :func:`cpu_method_costs` at that n.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.6), layout="constrained")
    sizes = sorted(costs)
    width = 0.8 / len(_METHOD_LABELS)
    for j, (key, label) in enumerate(_METHOD_LABELS.items()):
        ratios = [costs[n][key] / costs[n]["eigvalsh"] for n in sizes]
        ax.bar(
            [i + (j - (len(_METHOD_LABELS) - 1) / 2) * width for i in range(len(sizes))],
            ratios,
            width,
            label=label,
        )
    ax.axhline(1.0, color="k", lw=0.8, label="torch.linalg.eigvalsh")
    ax.set_xticks(range(len(sizes)), [f"n = {n}" for n in sizes])
    ax.set(
        title="CPU cost relative to eigenvalues alone (float32, one thread)",
        xlabel="matrix size",
        ylabel="time ÷ eigvalsh time (×)",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    return fig


def plot_gap_histogram(gap, tol: float, step: float, resolution: float):
    """Distribution of the relative eigen-gap at k over the test set, with the scales that
    matter: the ``"mean"`` tolerance, float32's resolution and twice the last step's size.

    Args:
        gap: (N,) relative gaps (tensor or array).
        tol: default ``"mean"`` tolerance (relative).
        step: median 2‖ΔM(x)‖₂ ÷ max|λ| of the last optimizer step.
        resolution: float32 eigenvalue resolution (relative), e.g. eps·√n.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    g = np.asarray(gap, dtype=float)
    fig, ax = plt.subplots(figsize=(6.5, 4.4), layout="constrained")
    lo = min(float(g.min()), tol, resolution) / 2
    bins = np.logspace(np.log10(lo), np.log10(float(g.max()) * 1.5), 40)
    ax.hist(g, bins=bins, color="C0", alpha=0.8, label="test inputs")
    ax.axvline(resolution, color="C3", ls=":", label="float32 resolution (eps·√n)")
    ax.axvline(tol, color="C1", ls="--", label='default "mean" tolerance')
    ax.axvline(step, color="C2", ls="-.", label="2 × median last step ‖ΔM‖₂")
    ax.set_xscale("log")
    ax.set(
        title="Eigen-gap at k of the trained model",
        xlabel="relative gap min |λ_j − λ_k| / max |λ|",
        ylabel="number of test inputs",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


def plot_seed_sweep(rows: list[dict[str, Any]], source: str, floor: float | None = None):
    """Test RMSE per matrix size and seed, with the linear least-squares baseline.

    Args:
        rows: output of :func:`seed_sweep`.
        source: data set name for the title.
        floor: the noise floor (None when unknown).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    sizes = sorted({r["n"] for r in rows})
    for seed in sorted({r["seed"] for r in rows}):
        sel = sorted((r for r in rows if r["seed"] == seed), key=lambda r: r["n"])
        ax.plot([r["n"] for r in sel], [r["test_rmse"] for r in sel], "-o", label=f"seed {seed}")
    lin = [r["linear"] for r in rows]
    ax.hlines(
        sum(lin) / len(lin), sizes[0], sizes[-1], colors="k", linestyles="--",
        label="linear least squares",
    )  # fmt: skip
    if floor is not None:
        ax.hlines(floor, sizes[0], sizes[-1], colors="grey", linestyles=":", label="noise floor")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set(
        title=f"Spectral regression on {source}",
        xlabel="matrix size n",
        ylabel="test RMSE (standardised target)",
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    return fig
