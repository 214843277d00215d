"""Figures and tables of the chapter "Eigenbasis degeneracy".

Each function draws recorded data from :mod:`eigprec_book.chapters.degeneracy.experiments` and
:mod:`eigprec_book.chapters.degeneracy.spike`; none runs an experiment. Figures are returned (not
shown) so a chapter can glue or display them.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from eigprec_book.chapters.degeneracy.experiments import RotationResult
from eigprec_book.chapters.degeneracy.spike import SpikeRun

__all__ = [
    "plot_approx_vs_true",
    "plot_factor_health",
    "plot_rotation",
    "plot_spectra",
    "plot_spike_angles",
]

# Dash patterns and markers that keep coinciding curves apart.
_DASHES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "v", "D", "P")


def plot_rotation(result: RotationResult) -> Figure:
    """Top eigenvector and top-2 eigenspace rotation against ‖E‖/gap, with Davis–Kahan.

    Args:
        result: Output of :func:`eigprec.eigvec_rotation_experiment`.

    Returns:
        The figure.

    Example:
        >>> from eigprec_book.chapters.degeneracy.experiments import eigvec_rotation_experiment
        >>> fig = plot_rotation(eigvec_rotation_experiment(n=6, ratios=[0.1, 1.0], trials=2))
        >>> len(fig.axes)
        1
    """
    fig, ax = plt.subplots(figsize=(7, 4.2))
    r = result.ratios.numpy()
    for values, bound, color, name in (
        (result.top1, result.top1_bound, "C3", "top eigenvector (gap λ₁−λ₂)"),
        (result.cluster, result.cluster_bound, "C0", "top-2 eigenspace (gap λ₂−λ₃)"),
    ):
        for j in range(values.shape[1]):
            ax.scatter(
                r,
                values[:, j].numpy(),
                s=9,
                color=color,
                alpha=0.5,
                label=f"{name}, measured" if j == 0 else None,
            )
        ax.plot(r, bound.numpy(), color=color, lw=1.5, label=f"{name}, Davis–Kahan bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("perturbation size ‖E‖₂ / (λ₁ − λ₂)")
    ax.set_ylabel("rotation angle (degrees)")
    ax.set_title("An eigenvector is only as stable as its gap")
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    ax.legend(fontsize=9, loc="lower right")
    fig.tight_layout()
    return fig


def plot_spike_angles(
    runs: Sequence[SpikeRun], ref_step: int = 49, k: int = 8, spike_step: int = 50
) -> Figure:
    """Angle trajectories of Q_L against the pre-spike basis: top-1 and top-``k`` subspace.

    Args:
        runs: Recorded runs (one line each).
        ref_step: Step of the reference basis.
        k: Size of the leading subspace of the right panel.
        spike_step: Step of the spike, marked by a vertical line.

    Returns:
        The figure (two panels).

    Example:
        >>> from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> len(plot_spike_angles([run], ref_step=2, k=2, spike_step=3).axes)
        2
    """
    fig, axes = plt.subplots(2, 1, figsize=(6.8, 7.4), sharex=True, sharey=True)
    for i, run in enumerate(runs):
        # Curves that coincide (every run without damage sits near 0°) stay visible: each
        # run has its own dash pattern and marker, placed at staggered steps.
        style = {
            "color": f"C{i}",
            "lw": 1.4,
            "ls": _DASHES[i % len(_DASHES)],
            "marker": _MARKERS[i % len(_MARKERS)],
            "markevery": (2 * i, 2 * len(runs) + 3),
            "markersize": 5,
            "fillstyle": "none",
        }
        steps = torch.arange(run.steps).numpy()
        axes[0].plot(steps, run.top1_angles(ref_step).numpy(), label=run.label, **style)
        axes[1].plot(steps, run.subspace_angles(ref_step, k).numpy(), label=run.label, **style)
    for ax, title in zip(
        axes, ("top eigenvector", f"top-{k} subspace (largest angle)"), strict=True
    ):
        ax.axvline(spike_step, color="0.5", lw=0.8, ls=":")
        ax.set_xlabel("optimizer step")
        ax.set_title(f"Q_L against step {ref_step}: {title}")
        ax.set_ylim(-2, 92)
    axes[0].set_ylabel("angle (degrees)")
    for ax in axes:
        ax.legend(fontsize=9, loc="center right")
    fig.tight_layout()
    return fig


def plot_spectra(runs: Sequence[SpikeRun], window: tuple[int, int] = (40, 70)) -> Figure:
    """Largest and smallest eigenvalue of L and R over a window of steps.

    Negative eigenvalues (a positive semi-definite factor that rounding made indefinite)
    are drawn as hollow markers at their absolute value.

    Args:
        runs: Recorded runs.
        window: Half-open step range to draw.

    Returns:
        The figure (two panels: L, R).

    Example:
        >>> from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> len(plot_spectra([run], window=(0, 6)).axes)
        2
    """
    fig, axes = plt.subplots(2, 1, figsize=(6.8, 7.4))
    lo, hi = window
    for i, run in enumerate(runs):
        hi_i = min(hi, run.steps)
        steps = torch.arange(lo, hi_i)
        for ax, eig in zip(axes, (run.eig_L, run.eig_R), strict=True):
            top, bottom = eig[lo:hi_i, 0], eig[lo:hi_i, -1]
            ax.plot(steps, top.abs(), color=f"C{i}", lw=1.4, label=f"{run.label}: largest")
            ax.plot(
                steps, bottom.abs(), color=f"C{i}", lw=1.0, ls="--", label=f"{run.label}: smallest"
            )
            neg = bottom < 0
            if bool(neg.any()):
                ax.scatter(
                    steps[neg],
                    bottom[neg].abs(),
                    facecolors="none",
                    edgecolors=f"C{i}",
                    s=28,
                    label=f"{run.label}: smallest < 0 (|λ| shown)",
                )
    for ax, name in zip(axes, ("L (128×128)", "R (64×64)"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("|eigenvalue|")
        ax.set_title(f"Extreme eigenvalues of {name}")
        ax.legend(fontsize=9, loc="center right")
    fig.tight_layout()
    return fig


def plot_approx_vs_true(runs: Sequence[SpikeRun], step: int) -> Figure:
    """Approximate eigenvalues diag(Q_Rᵀ R Q_R) used at ``step`` against R's true spectrum.

    KL-Shampoo at step t uses R and Q_R as left by step t − 1; the true spectrum drawn is that
    of the same stored R (``eig_R[step − 1]``), so the gap between the two is the error of
    the approximation, not a change of R.

    Args:
        runs: Recorded runs with diagnostics (reference implementation).
        step: Step whose approximate eigenvalues are drawn, ≥ 1.

    Returns:
        The figure.

    Raises:
        ValueError: if ``step`` is 0.

    Example:
        >>> from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> len(plot_approx_vs_true([run], step=4).axes)
        1
    """
    if step < 1:
        raise ValueError("step must be ≥ 1: step 0 has no previous factor")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, run in enumerate(runs):
        approx = run.approx_R[step].sort(descending=True).values
        true = run.eig_R[step - 1]
        idx = torch.arange(true.numel())
        ax.plot(idx, true.abs(), color=f"C{i}", lw=1.2, label=f"{run.label}: true eigenvalues of R")
        pos = approx > 0
        ax.scatter(idx[pos], approx[pos], color=f"C{i}", s=10, label=f"{run.label}: diag(QᵀRQ) > 0")
        if bool((~pos).any()):
            ax.scatter(
                idx[~pos],
                approx[~pos].abs().clamp_min(1e-30),
                marker="x",
                color=f"C{i}",
                s=22,
                label=f"{run.label}: diag(QᵀRQ) ≤ 0 (|·| shown), clamped",
            )
    ax.set_yscale("log")
    ax.set_xlabel("index (descending)")
    ax.set_ylabel("|eigenvalue|")
    ax.set_title(f"R's approximate eigenvalues used at step {step}")
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_factor_health(runs: Sequence[SpikeRun], window: tuple[int, int] = (40, 70)) -> Figure:
    """Clamped approximate eigenvalues of R and relative change ‖ΔL‖/‖L‖ per step.

    Args:
        runs: Recorded runs with diagnostics.
        window: Half-open step range to draw.

    Returns:
        The figure (two panels).

    Example:
        >>> from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
        >>> run = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> len(plot_factor_health([run], window=(0, 6)).axes)
        2
    """
    fig, axes = plt.subplots(2, 1, figsize=(6.8, 7.0), sharex=True)
    lo, hi = window
    for i, run in enumerate(runs):
        hi_i = min(hi, run.steps)
        steps = torch.arange(lo, hi_i)
        # Runs that never clamp all lie on 0: own dash pattern and hollow marker each.
        style = {
            "color": f"C{i}",
            "ls": _DASHES[i % len(_DASHES)],
            "marker": _MARKERS[i % len(_MARKERS)],
            "markersize": 4 + 2 * i,
            "fillstyle": "none",
        }
        axes[0].plot(steps, run.clamped_R[lo:hi_i], label=run.label, **style)
        axes[1].plot(steps, run.rel_change_L[lo:hi_i], label=run.label, **style)
    axes[0].set_ylabel("approximate eigenvalues of R below the floor")
    axes[0].set_title("Clamping in R (count of 64)")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("‖L_t − L_{t−1}‖_F / ‖L_t‖_F")
    axes[1].set_title("How far L moves per step")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig
