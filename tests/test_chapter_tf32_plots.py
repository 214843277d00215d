"""Tests of eigprec_book.chapters.tf32.plots: figures carry titles and labels; tables render."""

from __future__ import annotations

import doctest

import matplotlib
import pytest

matplotlib.use("Agg")

import eigprec_book.chapters.tf32.plots as tp
import matplotlib.pyplot as plt
from eigprec_book.chapters.tf32.experiments import diag_qtlq_experiment, predicted_median_error


def test_formats_figure_is_labelled():
    fig = tp.plot_formats()
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel()
    # the grey bits are rounded away, not ignored: the highest of them decides the rounding
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "float32 bits rounded away" in legend
    assert not any("ignor" in t.get_text() for t in ax.texts)
    plt.close(fig)


def test_3xtf32_line_is_the_split_loss():
    result = diag_qtlq_experiment(n=32)
    fig = tp.plot_qtlq_errors(result)
    levels = [
        line.get_ydata()[0] for line in fig.axes[0].get_lines() if line.get_linestyle() == "--"
    ]
    expected = predicted_median_error(result.eigenvalues, 2.0**-23)
    assert any(abs(level - expected) <= 1e-12 * expected for level in levels)
    plt.close(fig)


def test_relative_error_figure():
    from eigprec_book.chapters.tf32.model import qtlq_rounding_contributions

    result = diag_qtlq_experiment(n=32, methods=("fp32",))
    fig = tp.plot_qtlq_relative_errors(qtlq_rounding_contributions(n=32), result)
    ax = fig.axes[0]
    assert ax.get_title() and "λ" in ax.get_xlabel() and "relative" in ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"only L rounded", "only Q rounded", "float32 ('highest')"} <= set(labels)
    # the model line for rounding L has slope -1 on log-log axes
    line = next(x for x in ax.get_lines() if "slope" in x.get_label())
    xs, ys = line.get_xdata(), line.get_ydata()
    assert abs(float(xs[0] * ys[0]) - float(xs[-1] * ys[-1])) < 1e-9 * float(xs[0] * ys[0])
    plt.close(fig)


def test_error_figure_is_labelled_and_has_predicted_lines():
    result = diag_qtlq_experiment(n=32)
    fig = tp.plot_qtlq_errors(result)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum(label.startswith("predicted") for label in labels) == 3
    # the TF32 line sits at the median model's level
    levels = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    expected = predicted_median_error(result.eigenvalues, 2.0**-11)
    assert any(abs(level - expected) <= 1e-12 * expected for level in levels)
    plt.close(fig)


def test_hex_float():
    assert tp.hex_float(1 + 2**-11) == "0x1.002p+0"
    assert tp.hex_float(float("nan")) == "nan"


@pytest.mark.parametrize(
    "v",
    [1 + 2**-11, -(1 + 2**-11), 2 - 2**-12, 1024.5, 3.4028234663852886e38, 2.0**-130 + 2.0**-137],
)
def test_hex_significand_reads_back_exactly(v):
    e = tp.binade(v)
    assert float.fromhex(tp.hex_significand(v, e)) * 2.0**e == v
    # the rounded value of a tie that carries into the next binade reads as 2 on its row
    assert tp.hex_significand(2.0, 0) == "2"


def test_hex_significand_rejects_a_value_outside_its_row():
    with pytest.raises(ValueError, match="hexadecimal digit"):
        tp.hex_significand(1024.0, 0)


def test_short_float_is_the_same_number_narrower():
    for v in (280690.0, -5.1512, 0.52618, 2.4999e6, 1.66e-5, -27.317):
        for digits in (2, 4, 5):
            text = tp.short_float(v, digits)
            assert float(text) == float(format(v, f".{digits}g")) and "+" not in text
    with pytest.raises(ValueError):
        tp.short_float(1.0, 0)


def test_docstring_examples():
    result = doctest.testmod(tp)
    assert result.attempted > 0 and result.failed == 0


def test_truncated_series_is_drawn_without_a_model_line():
    from eigprec_book.chapters.tf32.published import diag_qtlq_roundings

    result = diag_qtlq_experiment(n=32)
    plain = tp.plot_qtlq_errors(result)
    fig = tp.plot_qtlq_errors(result, truncated=diag_qtlq_roundings(("rz",), n=32)["rz"])
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "TF32 truncated (rz)" in labels
    dashed = [ln for ln in fig.axes[0].get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == len(
        [ln for ln in plain.axes[0].get_lines() if ln.get_linestyle() == "--"]
    )
    plt.close(fig)
    plt.close(plain)


def test_figures_fit_the_column_with_readable_text():
    """Each figure the chapter shows is at most 7 in wide with text >= 9 pt (issue 23.3)."""
    from eigprec_book.chapters.tf32.model import qtlq_rounding_contributions
    from eigprec_book.chapters.tf32.published import diag_qtlq_roundings
    from eigprec_book.helpers import check_readable, use_book_style

    with matplotlib.rc_context():
        use_book_style()
        result = diag_qtlq_experiment(n=32)
        figs = [
            tp.plot_formats(),
            tp.plot_qtlq_errors(result, truncated=diag_qtlq_roundings(("rz",), n=32)["rz"]),
            tp.plot_qtlq_relative_errors(qtlq_rounding_contributions(n=32), result),
        ]
        for fig in figs:
            check_readable(fig)
            plt.close(fig)
