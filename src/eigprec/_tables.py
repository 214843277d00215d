"""The package's one Markdown table renderer (private; the book re-exports it as
:func:`eigprec_book.helpers.markdown_table`, and :meth:`eigprec.AuditReport.to_markdown` uses
it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["markdown_table"]


def _format_value(value: object, float_format: str) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value == 0:
            return str(value)
        return format(value, float_format)
    if isinstance(value, list | tuple):
        return ", ".join(_format_value(v, float_format) for v in value)
    return str(value)


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str | tuple[str, str]] | None = None,
    *,
    fmt: Mapping[str, Callable[[Any], str]] | None = None,
    float_format: str = ".4g",
) -> str:
    """Rows of results as a Markdown table; numeric columns are right-aligned.

    The one table renderer of the book: a chapter displays the result with
    ``IPython.display.Markdown``.

    Args:
        rows: mappings holding at least the keys named in ``columns``.
        columns: keys to show, in order, each a key (its own header) or a
            ``(key, header)`` pair; default: every key of the first row.
        fmt: optional per-key formatting functions.
        float_format: format spec for floats without a ``fmt`` entry (lists and
            tuples are joined with commas, each element formatted alike).

    Returns:
        The Markdown source (an empty string for no rows).

    Raises:
        KeyError: if a row lacks a column's key.
        TypeError: if ``rows`` is not a sequence of mappings.

    Example:
        >>> print(markdown_table([{"n": 1, "error": 0.5}], [("n", "size"), "error"]))
        | size | error |
        |---:|---:|
        | 1 | 0.5 |
    """
    if isinstance(rows, Mapping) or not all(isinstance(r, Mapping) for r in rows):
        raise TypeError("rows must be a sequence of mappings (one per table row)")
    if not rows:
        return ""
    spec = [(c, c) if isinstance(c, str) else tuple(c) for c in (columns or list(rows[0]))]
    fmt = fmt or {}
    cells = [
        [
            fmt[key](row[key]) if key in fmt else _format_value(row[key], float_format)
            for key, _ in spec
        ]
        for row in rows
    ]
    numeric = [
        all(isinstance(row[key], int | float) and not isinstance(row[key], bool) for row in rows)
        for key, _ in spec
    ]
    head = "| " + " | ".join(header for _, header in spec) + " |"
    rule = "|" + "|".join("---:" if num else "---" for num in numeric) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(c) + " |" for c in cells)])
