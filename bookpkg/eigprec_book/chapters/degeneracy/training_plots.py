"""Figures of the chapter's training, transient, sensitivity and diagnosis experiments.

Each function draws data returned by :mod:`~eigprec_book.chapters.degeneracy.training`,
:mod:`~eigprec_book.chapters.degeneracy.transient`,
:mod:`~eigprec_book.chapters.degeneracy.diagnosis` or
:mod:`~eigprec_book.chapters.degeneracy.failure_map`; none runs an experiment. Every panel has a
title, labelled axes and a legend (or a colour bar).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from eigprec_book.chapters.degeneracy.diagnosis import SpikeTrace
from eigprec_book.chapters.degeneracy.failure_map import FailureMap
from eigprec_book.chapters.degeneracy.training import TrainingResult
from eigprec_book.chapters.degeneracy.transient import SensitivityResult, TransientResult

__all__ = [
    "plot_failure_map",
    "plot_r_spectra",
    "plot_sensitivity",
    "plot_training",
    "plot_transient",
]

# Dashed, dotted and solid in turn, so that curves that coincide stay visible.
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")


def plot_training(result: TrainingResult, labels: Sequence[str] | None = None) -> Figure:
    """Population-loss curves, one panel per method, mean over seeds with the range shaded.

    Args:
        result: A :class:`~eigprec_book.chapters.degeneracy.training.TrainingResult`.
        labels: Settings to draw (default: all), in legend order.

    Returns:
        The figure.

    Raises:
        KeyError: if a label was not run.

    Example:
        >>> from eigprec_book.chapters.degeneracy.training import Setting, training_experiment
        >>> r = training_experiment([Setting("SOAP")], shape=(6, 3), steps=4, spike_step=2)
        >>> len(plot_training(r).axes)
        1
    """
    labels = list(result.losses) if labels is None else list(labels)
    for label in labels:
        if label not in result.losses:
            raise KeyError(f"no setting {label!r}; have {sorted(result.losses)}")
    methods = sorted({label.split()[0] for label in labels})
    fig, axes = plt.subplots(len(methods), 1, figsize=(6.8, 4.2 * len(methods)), squeeze=False)
    steps = np.arange(result.steps + 1)
    for ax, method in zip(axes[:, 0], methods, strict=True):
        mine = [label for label in labels if label.split()[0] == method]
        for i, label in enumerate(mine):
            curves = result.losses[label].numpy()
            (line,) = ax.plot(
                steps, curves.mean(axis=0), _STYLES[i % 4], lw=1.4, color=f"C{i}", label=label
            )
            if curves.shape[0] > 1:
                ax.fill_between(
                    steps,
                    curves.min(axis=0),
                    curves.max(axis=0),
                    color=line.get_color(),
                    alpha=0.15,
                )
        if result.spike_step is not None:
            ax.axvline(result.spike_step + 1, color="gray", lw=0.8, ls=":", label="spike")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("population loss per output")
        spike = "" if result.spike_step is None else f", ×{result.spike_scale:g} spike"
        ax.set_title(f"{method}{spike} ({len(result.seeds)} seeds)")
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_transient(result: TransientResult) -> Figure:
    """Left: the loss after a spike at each step, per setting. Right: L's λ₁/λ₂ before it.

    Args:
        result: A :class:`~eigprec_book.chapters.degeneracy.transient.TransientResult`.

    Returns:
        The figure.
    """
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(6.8, 8.0))
    labels = list(dict.fromkeys(r["setting"] for r in result.rows))
    spikes = sorted({r["spike step"] for r in result.rows})
    for i, label in enumerate(labels):
        rows = sorted(
            (r for r in result.rows if r["setting"] == label), key=lambda r: r["spike step"]
        )
        x = [r["spike step"] for r in rows]
        # Own marker and size per setting: the settings share λ₁/λ₂ until they diverge.
        style = {"marker": _MARKERS[i % 4], "markersize": 5 + 2 * i, "fillstyle": "none"}
        ax.plot(
            x,
            [r["peak"] for r in rows],
            _STYLES[i % 4],
            color=f"C{i}",
            label=f"{label}: peak after spike",
            **style,
        )
        ax2.plot(
            x,
            [r["lambda1/lambda2"] for r in rows],
            _STYLES[i % 4],
            color=f"C{i}",
            label=label,
            **style,
        )
    base = result.baseline[labels[0]]
    ax.plot(
        spikes,
        [base[s].item() for s in spikes],
        "k:",
        marker="x",
        label=f"{labels[0]}: loss before spike",
    )
    ax.set_yscale("log")
    ax.set_xlabel("spike step")
    ax.set_ylabel("population loss per output")
    ax.set_title(f"Largest loss within {result.config['window']} steps of the spike")
    ax.legend(fontsize=9)
    ax2.set_xlabel("spike step")
    ax2.set_ylabel("λ₁/λ₂ of L just before the spike")
    ax2.set_title("How isotropic L is when the spike arrives")
    ax2.legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_sensitivity(result: SensitivityResult, label: str, reference: str) -> Figure:
    """Heat map of peak loss (``label`` over ``reference``) over eps × spike size.

    Args:
        result: A :class:`~eigprec_book.chapters.degeneracy.transient.SensitivityResult`.
        label: The setting to judge (e.g. ``'REKLS high'``).
        reference: Its ground truth (e.g. ``'REKLS float64'``).

    Returns:
        The figure.

    Raises:
        KeyError: if a label was not run.
    """
    ratio = result.ratio(label, reference).numpy()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    image = ax.imshow(np.log10(ratio), cmap="magma_r", aspect="auto", vmin=0)
    for (i, j), value in np.ndenumerate(ratio):
        ax.text(
            j,
            i,
            f"{value:.3g}",
            ha="center",
            va="center",
            fontsize=9,
            color="white" if np.log10(value) > 1.2 else "black",
        )
    ax.set_xticks(range(len(result.scales)), [f"×{s:g}" for s in result.scales.tolist()])
    ax.set_yticks(range(len(result.eps)), [f"{e:.0e}" for e in result.eps.tolist()])
    ax.set_xlabel("spike size")
    ax.set_ylabel("eps (Adam's ε and the eigenvalue floor)")
    ax.set_title(f"Peak loss after the spike, {label} / {reference}")
    fig.colorbar(image, ax=ax, label="log₁₀ ratio")
    fig.tight_layout()
    return fig


def plot_r_spectra(
    traces: Sequence[SpikeTrace], step: int, reference: SpikeTrace | None = None
) -> Figure:
    """R's eigenvalues at ``step`` per run, and (if given) their ratio to a reference run.

    Args:
        traces: Runs to draw.
        step: 0-based step.
        reference: The float64 run; adds a panel of per-eigenvalue ratios.

    Returns:
        The figure.

    Raises:
        IndexError: if ``step`` is outside a trace.
    """
    for tr in (*traces, *([reference] if reference is not None else [])):
        if not 0 <= step < tr.eig_R.shape[0]:
            raise IndexError(f"step {step} is outside the trace of {tr.label!r}")
    panels = 2 if reference is not None else 1
    fig, axes = plt.subplots(panels, 1, figsize=(6.8, 4.2 * panels), squeeze=False)
    ax = axes[0, 0]
    runs = list(traces) + ([reference] if reference is not None else [])
    for i, tr in enumerate(runs):
        values = tr.eig_R[step].abs().clamp_min(1e-30).numpy()
        ax.plot(values, _STYLES[i % 4], color=f"C{i}", label=tr.label)
    ax.set_yscale("log")
    ax.set_xlabel("index i (descending)")
    ax.set_ylabel("|λᵢ(R)|")
    ax.set_title(f"R's spectrum after step {step}")
    ax.legend(fontsize=9)
    if reference is not None:
        ax = axes[1, 0]
        for i, tr in enumerate(traces):
            ratio = (tr.eig_R[step] / reference.eig_R[step]).abs().numpy()
            ax.plot(ratio, _STYLES[i % 4], color=f"C{i}", label=tr.label)
        ax.axhline(1.0, color="gray", lw=0.8, label="equal to float64")
        ax.set_yscale("log")
        ax.set_xlabel("index i (descending)")
        ax.set_ylabel(f"λᵢ(R) / λᵢ(R) of {reference.label}")
        ax.set_title(f"Per-eigenvalue ratio to float64 after step {step}")
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def plot_failure_map(fmap: FailureMap, arms: Sequence[str] | None = None) -> Figure:
    """The failure map: one panel per precision arm, a row per layer, a column per spike.

    A cell's colour is the median over seeds of the jump, the peak loss after the spike over
    the run's own loss just before it; its text is how many seeds were harmed (jump above
    :data:`~eigprec_book.chapters.degeneracy.failure_map.HARM_JUMP`) out of those whose float64
    reference trained (seeds whose reference failed are left out of every mark). A cell
    is outlined where the angle probe disagrees with training in some seed (Q_L turned
    without harm, or harm without a turn), and marked "!" where
    :class:`eigprec.SOAPMonitor` missed a damaged seed.

    Args:
        fmap: A :class:`~eigprec_book.chapters.degeneracy.failure_map.FailureMap`.
        arms: Arms to draw (default: every arm but float64, the reference).

    Returns:
        The figure.

    Raises:
        KeyError: if an arm was not run.

    Example:
        >>> from eigprec_book.chapters.degeneracy.failure_map import failure_map_experiment
        >>> fm = failure_map_experiment(
        ...     [((8, 4), 0.1)], spike_scales=(10.0,), arms=("float64", "highest"),
        ...     seeds=(0,), spike_step=12, window=3, turn_steps=2, k=2,
        ... )
        >>> len(plot_failure_map(fm).axes)  # one panel and its colour bar
        2
    """
    summary = fmap.summary()
    run_arms = list(dict.fromkeys(r["arm"] for r in summary))
    arms = [a for a in run_arms if a != "float64"] if arms is None else list(arms)
    for arm in arms:
        if arm not in run_arms:
            raise KeyError(f"no arm {arm!r}; have {run_arms}")
    layers = list(dict.fromkeys((r["shape"], r["lr"]) for r in summary))
    spikes = list(dict.fromkeys(r["spike"] for r in summary))
    cell = {(r["shape"], r["lr"], r["spike"], r["arm"]): r for r in summary}
    rows = {(r["shape"], r["lr"], r["spike"], r["arm"]): [] for r in summary}
    for r in fmap.valid():
        rows[(r["shape"], r["lr"], r["spike"], r["arm"])].append(r)
    height = 1.6 + 0.42 * len(layers)
    fig, axes = plt.subplots(
        1, len(arms), figsize=(6.9, height), squeeze=False, sharey=True, layout="constrained"
    )
    medians = [r["jump median"] for r in summary if r["arm"] in arms and r["seeds"]]
    top = max(2.0, max(np.log10(medians), default=2.0))
    image = None
    for ax, arm in zip(axes[0], arms, strict=True):
        data = np.array(
            [[np.log10(cell[(*layer, s, arm)]["jump median"]) for s in spikes] for layer in layers]
        )
        image = ax.imshow(data, cmap="magma_r", aspect="auto", vmin=0, vmax=top)
        for (i, j), value in np.ndenumerate(data):
            c = cell[(*layers[i], spikes[j], arm)]
            runs = rows[(*layers[i], spikes[j], arm)]
            text = f"{c['harmed']}/{c['seeds']}"
            if any(r["damaged"] and not (r["flagged"] or r["flag before"]) for r in runs):
                text += "!"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=9,
                color="white" if value > 0.55 * top else "black",
            )
            if any(r["turned"] != r["harmed"] for r in runs):
                ax.add_patch(
                    plt.Rectangle(
                        (j - 0.45, i - 0.45), 0.9, 0.9, fill=False, ec="C0", lw=1.6, ls="--"
                    )
                )
        ax.set_xticks(range(len(spikes)), [f"×{s:g}" for s in spikes], fontsize=9)
        ax.set_xlabel("spike size")
        ax.set_title(arm)
    axes[0, 0].set_yticks(
        range(len(layers)), [f"{m}×{n}, lr {lr:g}" for (m, n), lr in layers], fontsize=9
    )
    axes[0, 0].set_ylabel("layer (m×n) and learning rate")
    fig.colorbar(
        image,
        ax=axes[0].tolist(),
        location="bottom",
        shrink=0.8,
        label="log₁₀ median jump (peak over the loss before the spike)",
    )
    fig.suptitle("Harmed seeds per cell (peak loss > 2× the loss before the spike)", fontsize=11)
    return fig
