"""Figures of the Clarke chapter (experiments return data; these draw it)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

__all__ = [
    "plot_crossing_family",
    "plot_size_sweep",
    "plot_timing_sweep",
]


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
