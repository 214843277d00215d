"""What the book's PDF holds, read back for its check (tests/test_pdf.py, issue 51).

Figures: the pages' figures are SVG and go into the PDF as vector drawings (book/_ext/
eigprec_latex.py converts each to a one-page PDF, which xelatex includes), so
``pdfimages -list``, which lists raster images only, does not see them. An included page
becomes a form XObject whose ``/BBox`` is that page's size, and the converted page is the
SVG's size; so each figure a page shows is found in the PDF as a form of its SVG's width
and height (:func:`missing_figures`). A form's dictionary is never compressed (a stream
object cannot sit in an object stream), so it can be read from the file's bytes.

The figures a page shows are its code cells' SVG outputs in the page as executed (the
execution cache holds it with its outputs), except cells whose output the page removes
(``remove-cell``, ``remove-output``): the figures of the HTML.

Text: ``pdftotext`` (poppler-utils) extracts it; :func:`letters` keeps only letters and
digits, so that a phrase can be looked for whatever the line breaks and hyphenation.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "figure_sizes",
    "form_sizes",
    "letters",
    "missing_figures",
    "svg_size",
]

_FORM = re.compile(rb"/Subtype\s*/Form\b[^>]*?/BBox\s*\[\s*([-\d.\s]+)\]")
_FORM_REVERSED = re.compile(rb"/BBox\s*\[\s*([-\d.\s]+)\][^>]*?/Subtype\s*/Form\b")
_SVG_SIZE = re.compile(r'<svg\b[^>]*?\bwidth="([\d.]+)pt"[^>]*?\bheight="([\d.]+)pt"', re.S)
#: How far, in points, a form's size may differ from its SVG's (the PDF's rounding).
TOLERANCE_PT = 0.5


def form_sizes(pdf: bytes) -> list[tuple[float, float]]:
    """The width and height of every form XObject in a PDF file's bytes.

    Args:
        pdf: the file's content.

    Returns:
        ``(width, height)`` in points, one per form, in file order.

    Example:
        >>> form_sizes(b"<</Type/XObject/Subtype/Form/BBox[0 0 496.8 213.9]>>")
        [(496.8, 213.9)]
    """
    sizes = []
    for pattern in (_FORM, _FORM_REVERSED):
        for match in pattern.finditer(pdf):
            x0, y0, x1, y1 = (float(v) for v in match.group(1).split())
            sizes.append((x1 - x0, y1 - y0))
    return sizes


def svg_size(svg: str) -> tuple[float, float]:
    """An SVG's width and height in points (matplotlib writes them in ``pt``).

    Args:
        svg: the SVG document.

    Returns:
        ``(width, height)`` in points.

    Raises:
        ValueError: the root element has no width and height in points.

    Example:
        >>> svg_size('<svg xmlns="http://www.w3.org/2000/svg" width="504pt" height="216pt">')
        (504.0, 216.0)
    """
    match = _SVG_SIZE.search(svg)
    if match is None:
        raise ValueError("the SVG's root element has no width and height in pt")
    return float(match.group(1)), float(match.group(2))


def figure_sizes(
    notebooks: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[tuple[float, float]]]:
    """The sizes of the SVG figures each executed notebook shows, by page.

    Args:
        notebooks: executed notebooks (nbformat-4 dicts, outputs included), by page name.

    Returns:
        For each page, the ``(width, height)`` in points of each SVG output of a code cell
        whose output the page shows, in order.

    Raises:
        ValueError: an SVG output without a size in points.

    Example:
        >>> svg = '<svg width="504pt" height="216pt"></svg>'
        >>> cell = {"cell_type": "code", "metadata": {},
        ...         "outputs": [{"data": {"image/svg+xml": svg}}]}
        >>> hidden = {**cell, "metadata": {"tags": ["remove-output"]}}
        >>> figure_sizes({"page": {"cells": [cell, hidden]}})
        {'page': [(504.0, 216.0)]}
    """
    found: dict[str, list[tuple[float, float]]] = {}
    for name, nb in notebooks.items():
        sizes = found.setdefault(name, [])
        for cell in nb["cells"]:
            tags = set(cell.get("metadata", {}).get("tags", []))
            if cell["cell_type"] != "code" or tags & {"remove-cell", "remove-output"}:
                continue
            for output in cell.get("outputs", []):
                svg = output.get("data", {}).get("image/svg+xml")
                if svg is not None:
                    sizes.append(svg_size("".join(svg) if isinstance(svg, list) else svg))
    return found


def missing_figures(
    figures: Iterable[tuple[float, float]], forms: Iterable[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The figures that no form of the PDF matches in size (each form matches one figure).

    Args:
        figures: the figures' sizes, in points.
        forms: the PDF's form sizes (:func:`form_sizes`).

    Returns:
        The sizes of the figures left unmatched.

    Example:
        >>> missing_figures([(504, 216), (504, 216)], [(504.2, 215.9), (10, 10)])
        [(504, 216)]
    """
    pool = Counter((round(w, 1), round(h, 1)) for w, h in forms)
    left = []
    for width, height in figures:
        match = next(
            (
                key
                for key, count in pool.items()
                if count
                and abs(key[0] - width) <= TOLERANCE_PT
                and abs(key[1] - height) <= TOLERANCE_PT
            ),
            None,
        )
        if match is None:
            left.append((width, height))
        else:
            pool[match] -= 1
    return left


def letters(text: str) -> str:
    """Only the letters and digits of ``text``, case-folded: a phrase is found in
    ``pdftotext``'s output whatever its line breaks, hyphenation or capitals there.

    Args:
        text: any text.

    Returns:
        Its letters and digits.

    Example:
        >>> letters("TF32 MANTISSA\\nLOSS") == letters("TF32 mantissa loss")
        True
        >>> letters("the k-th eigen-\\nvalue")
        'thektheigenvalue'
    """
    return "".join(ch for ch in text.casefold() if ch.isalnum())
