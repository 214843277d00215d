"""Figure of :mod:`~eigprec_book.chapters.degeneracy.real_model`: held-out loss around the spike.

Plotting only; the data come from
:func:`~eigprec_book.chapters.degeneracy.real_model.lm_experiment`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from eigprec_book.chapters.degeneracy.real_model import LMResult

__all__ = ["plot_lm_curves"]

_COLOURS = {"float64": "0.35", "highest": "C0", "high rna": "C3", "high rne": "C1"}


def plot_lm_curves(result: LMResult, before: int | None = 10) -> Figure:
    """Every run's held-out loss per step, one colour per arm, the spike marked.

    Args:
        result: A result of ``lm_experiment``.
        before: Steps before the spike to show (``None``: the whole run, whose start-up
            can dwarf the spike's effect).

    Returns:
        The figure.

    Raises:
        ValueError: if ``before`` is negative.

    Example:
        >>> from eigprec_book.chapters.degeneracy.real_model import TinyLM, lm_experiment
        >>> r = lm_experiment(arms=("float64",), seeds=(0,), spike_step=2, window=1,
        ...                   model=TinyLM(vocab=16, width=8, ffn=16, context=6, batch=2))
        >>> len(plot_lm_curves(r).axes)
        1
    """
    if before is not None and before < 0:
        raise ValueError(f"before must be ≥ 0 or None, got {before}")
    cfg = result.config
    # Entry k of a curve is the loss after step k + 1 (1-based steps on the axis).
    first = 0 if before is None else max(0, cfg["spike_step"] - before)
    fig, ax = plt.subplots(figsize=(6.8, 3.6), layout="constrained")
    for (arm, _), curve in result.curves.items():
        steps = range(first + 1, len(curve) + 1)
        ax.plot(steps, curve[first:], color=_COLOURS.get(arm, "C2"), lw=1.2, alpha=0.85)
    for arm in cfg["arms"]:
        ax.plot([], [], color=_COLOURS.get(arm, "C2"), lw=1.6, label=arm)
    spike = cfg["spike_step"] + 1  # the loss after the spiked step
    ax.axvline(spike, color="0.5", ls="--", lw=1, label=f"×{cfg['spike']:g} spike")
    ax.set_xlabel("optimizer steps")
    ax.set_ylabel("held-out loss (nats per token)")
    clip = "unclipped" if cfg["clip"] is None else f"global clip {cfg['clip']:g}"
    ax.set_title(f"Small transformer, REKLS at lr {cfg['lr']:g}, {clip}", fontsize=10)
    ax.legend(fontsize=9, loc="upper right")
    ax.grid(alpha=0.3)
    return fig
