"""Figures of :mod:`~eigprec_book.chapters.degeneracy.practice`: every seed's peak, per setting.

Plotting only; the data come from
:func:`~eigprec_book.chapters.degeneracy.practice.practice_experiment` (or any
:class:`~eigprec_book.chapters.degeneracy.training.TrainingResult` with a spike).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from eigprec_book.chapters.degeneracy.practice import peak_spread
from eigprec_book.chapters.degeneracy.training import TrainingResult

__all__ = ["plot_peak_spread"]


def plot_peak_spread(result: TrainingResult, labels: Sequence[str] | None = None) -> Figure:
    """Each seed's peak loss after the spike (dots) and the loss before it (bar), per setting.

    Args:
        result: A result with a spike.
        labels: Settings to draw, top to bottom (default: all).

    Returns:
        The figure (log-scaled loss axis).

    Raises:
        KeyError: if a label was not run.
        ValueError: if the result has no spike.

    Example:
        >>> from eigprec_book.chapters.degeneracy.practice import Arm, practice_experiment
        >>> r = practice_experiment([Arm("Adam")], seeds=(0, 1), steps=4, spike_step=2,
        ...                         shape=(6, 3), batch=8)
        >>> len(plot_peak_spread(r).axes)
        1
    """
    spread = peak_spread(result)
    labels = list(spread) if labels is None else list(labels)
    for label in labels:
        if label not in spread:
            raise KeyError(f"no setting {label!r}; have {sorted(spread)}")
    fig, ax = plt.subplots(figsize=(6.8, 0.36 * len(labels) + 1.4))
    rows = np.arange(len(labels))[::-1]
    for y, label in zip(rows, labels, strict=True):
        s = spread[label]
        ax.plot([s["before"]] * 2, [y - 0.3, y + 0.3], color="0.5", lw=2)
        ax.scatter(s["peaks"].numpy(), np.full(len(s["peaks"]), y), s=14, color="C3", zorder=3)
    ax.scatter([], [], s=14, color="C3", label="peak after the spike, one dot per seed")
    ax.plot([], [], color="0.5", lw=2, label="loss just before the spike (mean)")
    ax.set_yticks(rows, labels, fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel("population loss")
    ax.set_title(f"Spike ×{result.spike_scale:g} at step {result.spike_step}")
    ax.legend(fontsize=9, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
