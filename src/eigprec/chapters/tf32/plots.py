"""Figures and tables of the TF32 chapter (plotting kept apart from the experiments)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from eigprec.chapters.tf32.experiments import FORMATS, DiagQtLQResult, predicted_median_error

__all__ = ["hex_float", "plot_formats", "plot_qtlq_errors"]

_COLORS = {"sign": "#c44e52", "exponent": "#4c72b0", "mantissa": "#55a868", "dropped": "#dddddd"}
_METHOD_STYLE = {
    "fp32": ("float32 ('highest')", "#4c72b0", "o"),
    "tf32": ("TF32 ('high')", "#c44e52", "s"),
    "3xtf32": ("3xTF32", "#55a868", "^"),
    "fp64": ("float64 arithmetic", "#8172b2", "d"),
}
_UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "3xtf32": 2.0**-22}


def plot_formats() -> Figure:
    """Bit layouts of fp32, TF32, bf16 and fp16, drawn to scale.

    TF32 is drawn inside its 32-bit float32 container, with the 13 mantissa bits the
    tensor cores ignore greyed out.

    Returns:
        The matplotlib figure.

    Example:
        >>> fig = plot_formats()
        >>> fig.axes[0].get_xlabel()
        'bit (0 = sign bit, counted from the most significant end)'
    """
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for row, (name, exp_bits, man_bits, _) in enumerate(FORMATS):
        y = len(FORMATS) - 1 - row
        fields = [("sign", 1), ("exponent", exp_bits), ("mantissa", man_bits)]
        if name == "TF32":
            fields.append(("dropped", 23 - man_bits))
        x = 0
        for kind, width in fields:
            for b in range(width):
                ax.add_patch(
                    Rectangle((x + b, y + 0.1), 1, 0.8, facecolor=_COLORS[kind], edgecolor="white")
                )
            label = {"dropped": f"{width} bits ignored"}.get(kind, f"{width}")
            ax.text(x + width / 2, y + 0.5, label, ha="center", va="center", fontsize=8)
            x += width
        ax.text(-0.8, y + 0.5, name, ha="right", va="center", fontsize=10, fontweight="bold")
    ax.set_xlim(-5, 33)
    ax.set_ylim(-0.1, len(FORMATS))
    ax.set_yticks([])
    ax.set_xticks(range(0, 33, 4))
    ax.set_xlabel("bit (0 = sign bit, counted from the most significant end)")
    ax.set_title("Floating-point formats: sign, exponent and mantissa bits")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    labels = ["sign", "exponent", "mantissa (explicit)", "float32 bits TF32 ignores"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=4)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


def plot_qtlq_errors(
    result: DiagQtLQResult, methods: Sequence[str] = ("fp32", "tf32", "3xtf32")
) -> Figure:
    """|error| of ``diag(QᵀLQ)`` against λ, log-log, with each format's predicted level.

    The dashed horizontal lines are :func:`~eigprec.tf32_experiments.predicted_median_error`
    for each format's unit roundoff (3xTF32's split keeps about 22 bits): the median error
    that rounding the operands alone would cause; the grey
    diagonal is ``|error| = λ``: points above it have lost every correct digit.

    Args:
        result: output of :func:`~eigprec.tf32_experiments.diag_qtlq_experiment`.
        methods: which estimates to draw.

    Returns:
        The matplotlib figure.

    Example:
        >>> from eigprec.chapters.tf32.experiments import diag_qtlq_experiment
        >>> fig = plot_qtlq_errors(diag_qtlq_experiment(n=32))
        >>> fig.axes[0].get_yscale()
        'log'
    """
    lam = result.eigenvalues
    fig, ax = plt.subplots(figsize=(10, 4.8))
    floor = 1e-6 * float(lam.min())
    for m in methods:
        label, color, marker = _METHOD_STYLE[m]
        err = result.errors(m).clamp_min(floor)
        ax.scatter(lam, err, s=14, color=color, marker=marker, label=label, alpha=0.8)
        if m in _UNIT_ROUNDOFF:
            level = predicted_median_error(lam, _UNIT_ROUNDOFF[m])
            ax.axhline(
                level, color=color, linestyle="--", linewidth=1, label=f"predicted median, {label}"
            )
    ax.plot(
        [float(lam.min()), float(lam.max())],
        [float(lam.min()), float(lam.max())],
        color="grey",
        linewidth=1,
        label="|error| = λ",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("true eigenvalue λ (dimensionless)")
    ax.set_ylabel("|diag(QᵀLQ) − λ| (same units as λ)")
    where = "real TF32" if result.tf32_real else f"TF32 emulated ({result.rounding})"
    ax.set_title(f"Eigenvalues recovered through diag(QᵀLQ), n = {lam.numel()}, {where}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def hex_float(v: float) -> str:
    """Hexadecimal notation of a float with trailing zero digits dropped.

    Args:
        v: a Python float (NaN and infinities allowed).

    Returns:
        e.g. ``"0x1.002p+0"`` for ``1 + 2**-11``.

    Example:
        >>> hex_float(1 + 2**-11), hex_float(-0.0), hex_float(float("inf"))
        ('0x1.002p+0', '-0x0p+0', 'inf')
    """
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return str(v)
    mantissa, _, exponent = v.hex().partition("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"
