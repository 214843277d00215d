"""What a chapter shows besides figures: Markdown tables, admonition notes, printed bounds."""

from __future__ import annotations

import html
import math
from typing import Any

from eigprec._tables import markdown_table

__all__ = ["markdown_table", "note", "printed_bound"]


def note(title: str, text: str) -> Any:
    """A visible note box, rendered the same in the book, Jupyter and Colab.

    Args:
        title: the box's title (plain text).
        text: its body; HTML is allowed (``<code>…</code>`` for a command).

    Returns:
        An ``IPython.display.HTML`` object (display it, or end a cell with it).

    Raises:
        TypeError: if ``title`` or ``text`` is not a string.

    Example:
        >>> box = note("Not yet recorded", "Run <code>make gpu-record</code>.")
        >>> "admonition" in box.data
        True
    """
    if not isinstance(title, str) or not isinstance(text, str):
        raise TypeError("note needs a title and a text, both strings")
    from IPython.display import HTML

    return HTML(
        f'<div class="admonition note"><p class="admonition-title">{html.escape(title)}</p>'
        f"<p>{text}</p></div>"
    )


def printed_bound(value: float, spec: str, side: str) -> float:
    """The tightest number that ``format(·, spec)`` prints as a true bound on ``value``.

    A sentence "turns by at least 82°" printed from 81.66 with ``:.0f`` is false; rounding to
    nearest is wrong for bounds. This rounds down (``side="lower"``, for "at least") or up
    (``side="upper"``, for "at most", "within", "up to") to the last digit that ``spec``
    shows, so that the printed text, read back as a number, still bounds ``value``.

    Args:
        value: The measured number; finite.
        spec: A fixed-point or exponent format such as ``".0f"``, ``".3f"`` or ``".1e"``.
        side: ``"lower"`` or ``"upper"``.

    Returns:
        A float whose ``format(·, spec)`` is ≤ ``value`` (lower) or ≥ ``value`` (upper) and
        differs from the nearest-rounded text by at most one unit of its last digit.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: if ``value`` is not finite, ``spec`` is not ``.<digits>f`` or
            ``.<digits>e``, or ``side`` is neither ``"lower"`` nor ``"upper"``.

    Example:
        >>> format(printed_bound(81.66, ".0f", "lower"), ".0f")
        '81'
        >>> format(printed_bound(1.23e-5, ".1e", "upper"), ".1e")
        '1.3e-05'
    """
    if isinstance(value, bool | str) or not hasattr(value, "__float__"):
        raise TypeError(f"value must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"value must be finite, got {value}")
    if side not in ("lower", "upper"):
        raise ValueError(f"side must be 'lower' or 'upper', got {side!r}")
    if len(spec) < 3 or spec[0] != "." or spec[-1] not in "fe" or not spec[1:-1].isdigit():
        raise ValueError(f"spec must look like '.3f' or '.1e', got {spec!r}")
    digits = int(spec[1:-1])
    sign = 1.0 if side == "upper" else -1.0
    shown = float(format(value, spec))
    # At most two steps: one digit unit past the rounded text always passes value.
    while (shown < value) if side == "upper" else (shown > value):
        if spec[-1] == "f":
            unit = 10.0**-digits
        else:
            exponent = int(format(shown, spec).split("e")[1])
            unit = 10.0 ** (exponent - digits)
        shown = float(format(shown + sign * unit, spec))
    return shown
