"""Figures and tables of the TF32 chapter (plotting kept apart from the experiments)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from eigprec_book.chapters.tf32.experiments import FORMATS, DiagQtLQResult, predicted_median_error
from eigprec_book.chapters.tf32.model import RoundingContributions, model_agreement

__all__ = [
    "binade",
    "hex_float",
    "hex_significand",
    "plot_formats",
    "plot_qtlq_errors",
    "plot_qtlq_relative_errors",
    "power_of_two",
    "short_float",
]

_COLORS = {"sign": "#c44e52", "exponent": "#4c72b0", "mantissa": "#55a868", "dropped": "#dddddd"}
_METHOD_STYLE = {
    "fp32": ("float32 ('highest')", "#4c72b0", "o"),
    "tf32": ("TF32 ('high')", "#c44e52", "s"),
    "3xtf32": ("3xTF32", "#55a868", "^"),
    "fp64": ("float64 arithmetic", "#8172b2", "d"),
}
# 3xTF32's operands carry the split's loss, at most 2**-23 relative (see split_tf32).
_UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "3xtf32": 2.0**-23}


def plot_formats() -> Figure:
    """Bit layouts of fp32, TF32, bf16 and fp16, drawn to scale.

    TF32 is drawn inside its 32-bit float32 container, with the 13 low mantissa bits
    greyed out: TF32 does not keep them, but rounding to TF32 reads them (the highest
    of them decides whether to round up).

    Returns:
        The matplotlib figure.

    Example:
        >>> fig = plot_formats()
        >>> fig.axes[0].get_xlabel()
        'bit (0 = sign bit, counted from the most significant end)'
    """
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
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
            label = {"dropped": f"{width} rounded away"}.get(kind, f"{width}")
            ax.text(x + width / 2, y + 0.5, label, ha="center", va="center", fontsize=9)
            x += width
        ax.text(-0.8, y + 0.5, name, ha="right", va="center", fontweight="bold")
    ax.set_xlim(-5, 33)
    ax.set_ylim(-0.1, len(FORMATS))
    ax.set_yticks([])
    ax.set_xticks(range(0, 33, 4))
    ax.set_xlabel("bit (0 = sign bit, counted from the most significant end)")
    ax.set_title("Floating-point formats: sign, exponent and mantissa bits")
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    labels = ["sign", "exponent", "mantissa (explicit)", "float32 bits rounded away"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


def plot_qtlq_errors(
    result: DiagQtLQResult,
    methods: Sequence[str] = ("fp32", "tf32", "3xtf32"),
    truncated: torch.Tensor | None = None,
) -> Figure:
    """|error| of ``diag(QᵀLQ)`` against λ, log-log, with each format's predicted level.

    The dashed horizontal lines are
    :func:`~eigprec_book.chapters.tf32.experiments.predicted_median_error` for each format's
    unit roundoff (for 3xTF32 the split's loss, at most ``2**-23``): the
    crude model's median error from rounding L alone; the grey
    diagonal is ``|error| = λ``: points above it have lost every correct digit.
    ``truncated`` (TF32 estimates emulated with truncation, "rz") is drawn without a
    dashed line: the crude model assumes rounding to nearest.

    Args:
        result: output of :func:`~eigprec_book.chapters.tf32.experiments.diag_qtlq_experiment`.
        methods: which estimates to draw.
        truncated: optional float64 estimates with TF32 truncation, one per eigenvalue.

    Returns:
        The matplotlib figure.

    Example:
        >>> from eigprec_book.chapters.tf32.experiments import diag_qtlq_experiment
        >>> fig = plot_qtlq_errors(diag_qtlq_experiment(n=32))
        >>> fig.axes[0].get_yscale()
        'log'
    """
    lam = result.eigenvalues
    fig, ax = plt.subplots(figsize=(7.0, 6.2))
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
    if truncated is not None:
        err = (truncated - lam).abs().clamp_min(floor)
        ax.scatter(lam, err, s=16, color="#dd8452", marker="x", label="TF32 truncated (rz)")
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
    ax.set_title(f"diag(QᵀLQ) against λ, n = {lam.numel()}, {where}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.tight_layout()
    return fig


def plot_qtlq_relative_errors(
    contributions: RoundingContributions, result: DiagQtLQResult | None = None
) -> Figure:
    """Relative error of ``diag(QᵀLQ)`` against λ: rounding only L, only Q, and both.

    On log-log axes an error that does not depend on λ_i (rounding L) falls with slope
    −1; an error proportional to λ_i (rounding Q) is flat. The dashed lines are the
    model's medians (:func:`~eigprec_book.chapters.tf32.model.model_agreement`:
    ``0.674·√2·s_L‖L‖_F/(n λ)`` and ``0.674·s_Q·√(3/n)``); relative errors above 1 have
    no correct digit left.

    Args:
        contributions: output of
            :func:`~eigprec_book.chapters.tf32.model.qtlq_rounding_contributions`.
        result: if given, its float32 ('highest') errors are drawn for comparison.

    Returns:
        The matplotlib figure.

    Example:
        >>> from eigprec_book.chapters.tf32.model import qtlq_rounding_contributions
        >>> fig = plot_qtlq_relative_errors(qtlq_rounding_contributions(n=32))
        >>> fig.axes[0].get_xscale(), fig.axes[0].get_yscale()
        ('log', 'log')
    """
    c = contributions
    lam = c.eigenvalues
    agreement = model_agreement(c)
    quartile = 0.6744897501960817
    fig, ax = plt.subplots(figsize=(7.0, 6.2))
    floor = 2.0**-40
    series = [
        (c.both, "TF32: L and Q rounded", "#c44e52", "s"),
        (c.only_l, "only L rounded", "#dd8452", "o"),
        (c.only_q, "only Q rounded", "#4c72b0", "^"),
    ]
    if result is not None:
        series.append((result.errors("fp32"), "float32 ('highest')", "#8c8c8c", "."))
    for err, label, color, marker in series:
        rel = (err.abs() / lam).clamp_min(floor)
        ax.scatter(lam, rel, s=14, color=color, marker=marker, label=label, alpha=0.8)
    ax.plot(
        lam,
        quartile * agreement["l_closed"] / lam,
        color="#dd8452",
        linestyle="--",
        linewidth=1,
        label="model median, L rounded (slope −1)",
    )
    ax.axhline(
        quartile * agreement["q_closed_rel"],
        color="#4c72b0",
        linestyle="--",
        linewidth=1,
        label="model median, Q rounded (flat)",
    )
    ax.axhline(1.0, color="grey", linewidth=1, label="relative error 1: no correct digit")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("true eigenvalue λ (dimensionless)")
    ax.set_ylabel("|diag(QᵀLQ) − λ| / λ (relative, dimensionless)")
    ax.set_title(f"Relative error by operand rounded to TF32, n = {c.n}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
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


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def short_float(v: float, digits: int = 4, *, exponent: bool = False) -> str:
    """A float in ``g`` notation with ``digits`` significant digits and a bare exponent.

    ``2.807e5`` instead of ``2.807e+05``: the same number (Python reads it back), three
    characters narrower, which is what lets a table of them fit a phone's column.

    Args:
        v: a Python float (NaN and infinities allowed).
        digits: significant digits, at least 1.
        exponent: always write an exponent (``e`` notation), as a column of errors
            spanning several decades reads best.

    Returns:
        e.g. ``"2.807e5"``, ``"-5.151"``, ``"1.7e-4"``.

    Raises:
        ValueError: if ``digits`` is below 1.

    Example:
        >>> short_float(280690.0), short_float(-5.1512), short_float(1.7e-4, 2)
        ('2.807e5', '-5.151', '0.00017')
        >>> short_float(1.66e-5, 2), short_float(0.17, 2, exponent=True)
        ('1.7e-5', '1.7e-1')
    """
    if digits < 1:
        raise ValueError(f"digits must be at least 1, got {digits}")
    text = format(float(v), f".{digits - 1}e" if exponent else f".{digits}g")
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if e else text


def binade(v: float) -> int:
    """The exponent ``e`` with ``2**e <= |v| < 2**(e + 1)`` (0 for zero, NaN and infinities).

    Args:
        v: a Python float.

    Returns:
        The binade's exponent; for a float32 subnormal, below -126.

    Example:
        >>> binade(1.5), binade(1024.5), binade(2.0**-130), binade(0.0)
        (0, 10, -130, 0)
    """
    v = float(v)
    if v == 0 or math.isnan(v) or math.isinf(v):
        return 0
    return math.frexp(v)[1] - 1


def power_of_two(e: int) -> str:
    """``2**e`` written with a superscript exponent, e.g. ``"2¹²⁷"``, ``"2⁻¹³⁰"``.

    Example:
        >>> power_of_two(127), power_of_two(-130)
        ('2¹²⁷', '2⁻¹³⁰')
    """
    return "2" + str(int(e)).translate(_SUPERSCRIPT)


def hex_significand(v: float, e: int) -> str:
    """``v / 2**e`` in hexadecimal, without ``0x`` or exponent: the mantissa bits of ``v``
    read against the binade ``2**e`` of its row (trailing zero digits dropped).

    A table whose rows each share one power of two shows the bits a rounding keeps or
    drops, column by column, in a few characters: ``1.002`` and ``1.004`` instead of
    ``0x1.002p+0`` and ``0x1.004p+0``.

    Args:
        v: a Python float (NaN and infinities allowed).
        e: the row's exponent; ``v / 2**e`` must be exact and below 16 in magnitude.

    Returns:
        e.g. ``"1.002"``, ``"-1.004"``, ``"2"``, ``"inf"``, ``"nan"``, ``"-0"``.

    Raises:
        ValueError: if ``|v| / 2**e`` is 16 or more.

    Example:
        >>> hex_significand(1 + 2**-11, 0), hex_significand(2.0, 0)
        ('1.002', '2')
        >>> hex_significand(-(2.0**-130 + 2.0**-137), -130), hex_significand(-0.0, 0)
        ('-1.02', '-0')
    """
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return str(v)
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    s = math.ldexp(abs(v), -int(e))
    if s >= 16:
        raise ValueError(f"{v!r} is 2**{e} times {s}, not a single hexadecimal digit")
    whole, frac = int(s), s - int(s)
    digits = ""
    while frac:  # exact: each step shifts four bits of a finite binary fraction
        frac *= 16
        digits += "0123456789abcdef"[int(frac)]
        frac -= int(frac)
    return f"{sign}{whole:x}" + (f".{digits}" if digits else "")
