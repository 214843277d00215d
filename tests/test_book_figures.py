"""eigprec_book.helpers.figures: the readability guard chapters run on every figure they show."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from eigprec_book.helpers.figures import MAX_WIDTH_IN, MIN_FONT_PT, check_readable, use_book_style


@pytest.fixture(autouse=True)
def _book_style():
    with matplotlib.rc_context():
        use_book_style()
        yield
    plt.close("all")


def test_book_style_figure_passes():
    fig, ax = plt.subplots(figsize=(MAX_WIDTH_IN, 3))
    ax.plot([1, 2], [3, 4], label="float32")
    ax.set(xlabel="step", ylabel="angle (°)", title="t")
    ax.legend()
    check_readable(fig)


def test_too_wide_figure_is_refused():
    fig, _ = plt.subplots(figsize=(MAX_WIDTH_IN + 0.5, 3))
    with pytest.raises(ValueError, match="in wide"):
        check_readable(fig)


def test_small_text_is_named():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.set_xlabel("tiny label", fontsize=MIN_FONT_PT - 2)
    with pytest.raises(ValueError, match="tiny label"):
        check_readable(fig)


def test_small_tick_labels_are_caught():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.tick_params(labelsize=6)
    with pytest.raises(ValueError, match=r"6\.0 pt"):
        check_readable(fig)


def test_invisible_small_text_is_ignored():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.text(0.5, 0.5, "hidden", fontsize=4, visible=False)
    check_readable(fig)


def test_not_a_figure_is_a_type_error():
    with pytest.raises(TypeError, match="Figure"):
        check_readable("fig.png")
