"""Figures a reader can read at the column's width (issue 23, figure conventions).

The book's article column is about 690 px wide on a desktop. A figure drawn wider than
:data:`MAX_WIDTH_IN` inches is shrunk to fit, and its text with it; so a chapter draws
figures at most that wide, with no text below :data:`MIN_FONT_PT`, and its hidden guard
cell calls :func:`check_readable` on each figure it shows.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_WIDTH_IN", "MIN_FONT_PT", "check_readable", "use_book_style"]

#: Widest figure, in inches, that the column shows unscaled (96 px per inch).
#:
#: Example:
#:     >>> MAX_WIDTH_IN * 96  # pixels at the column's width
#:     672.0
MAX_WIDTH_IN = 7.0
#: Smallest text size, in points, that stays readable at the column's width.
#:
#: Example:
#:     >>> MIN_FONT_PT
#:     9.0
MIN_FONT_PT = 9.0

_STYLE = {
    "font.size": 10.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 10.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "legend.fontsize": 9.0,
    "legend.title_fontsize": 9.0,
    "figure.titlesize": 10.0,
    "figure.dpi": 96.0,
    "savefig.dpi": 96.0,
}


def use_book_style() -> None:
    """Set matplotlib's text sizes for the book and show figures as SVG in a notebook.

    SVG keeps text sharp at any zoom; with the sizes set here and figures no wider than
    :data:`MAX_WIDTH_IN`, text is at least :data:`MIN_FONT_PT` at the column's width.
    Changes matplotlib's global ``rcParams`` (a notebook's own plotting state).

    Example:
        >>> import matplotlib
        >>> with matplotlib.rc_context():
        ...     use_book_style()
        ...     print(matplotlib.rcParams["legend.fontsize"])
        9.0
    """
    import matplotlib

    matplotlib.rcParams.update(_STYLE)
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside IPython there is no inline backend to configure
        return
    set_matplotlib_formats("svg")


def check_readable(fig: Any, max_width_in: float = MAX_WIDTH_IN) -> None:
    """Fail unless a figure fits the column unscaled and all its visible text is readable.

    Args:
        fig: a matplotlib ``Figure``.
        max_width_in: the widest figure allowed, in inches.

    Raises:
        TypeError: ``fig`` is not a matplotlib figure.
        ValueError: the figure is wider than ``max_width_in``, or a visible, non-empty
            text (title, label, tick label, legend entry, annotation) is smaller than
            :data:`MIN_FONT_PT`; the message names the text.

    Example:
        >>> import matplotlib.pyplot as plt
        >>> fig, ax = plt.subplots(figsize=(6, 3))
        >>> _ = ax.set_xlabel("step")
        >>> check_readable(fig)
        >>> plt.close(fig)
    """
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    if not isinstance(fig, Figure):
        raise TypeError(f"check_readable expects a matplotlib Figure, got {type(fig).__name__}")
    width = float(fig.get_figwidth())
    if width > max_width_in + 1e-9:
        raise ValueError(
            f"figure is {width:.2f} in wide, more than the column's {max_width_in:.2f} in: "
            "it would be shrunk and its text with it"
        )
    fig.canvas.draw()  # tick labels exist only once the figure is drawn
    small = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        if text.get_fontsize() < MIN_FONT_PT - 1e-9:
            small.append(f"{text.get_text()!r} ({text.get_fontsize():.1f} pt)")
    if small:
        raise ValueError(
            f"text smaller than {MIN_FONT_PT:g} pt: " + ", ".join(sorted(set(small))[:8])
        )
