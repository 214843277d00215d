"""How a chapter talks to its reader: glued values, progress bars and recorded GPU results."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["glue", "load_record", "progress", "record_dirs"]

T = TypeVar("T")


def glue(name: str, value: object, display: bool = False) -> None:
    """Make ``value`` available to the chapter's prose (MyST-NB's ``glue:text`` role).

    Uses MyST-NB's ``glue`` when it is installed (the book build); elsewhere
    (Colab, a plain Jupyter) it only displays the value when asked to.

    Args:
        name: the key the Markdown refers to; letters, digits, ``_`` and ``-``.
        value: any displayable object (a number, a figure, a table).
        display: also show the value where the cell runs.

    Returns:
        None, so a cell that ends with a ``glue`` call shows no stray value.

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: if ``name`` is empty or holds other characters.

    Example:
        >>> glue("answer", 42)  # in a chapter: {glue:text}`answer`
    """
    if not isinstance(name, str):
        raise TypeError(f"glue name must be a string, got {type(name).__name__}")
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"glue name must be letters, digits, '_' or '-'; got {name!r}")
    try:
        from myst_nb import glue as _myst_glue
    except ImportError:
        _myst_glue = None
    in_kernel = "ipykernel" in sys.modules
    if _myst_glue is not None and in_kernel:
        _myst_glue(name, value, display=display)
    elif display and in_kernel:
        from IPython.display import display as _display

        _display(value)


def progress(iterable: Iterable[T], **kwargs: Any) -> Iterable[T]:
    """Wrap an iterable in a progress bar that suits where the code runs.

    A widget in Jupyter/Colab when ipywidgets is available; plain text on stdout
    otherwise, and always in the book build (``EIGPREC_PROGRESS=text``), where a
    widget would need scripts from the network.

    Args:
        iterable: what to loop over.
        **kwargs: passed to :class:`tqdm.tqdm` (``desc``, ``total``, …).

    Returns:
        An iterable yielding the same items.

    Example:
        >>> total = sum(progress(range(3), desc="demo", disable=True))
        >>> total
        3
    """
    text = os.environ.get("EIGPREC_PROGRESS", "").lower() == "text"
    in_kernel = "ipykernel" in sys.modules
    if not text and in_kernel and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm

        # Few redraws: every redraw is kept in a notebook's stored output.
        kwargs = {"file": sys.stdout, "mininterval": 10.0, "ascii": True, **kwargs}
    return tqdm(iterable, **kwargs)


def record_dirs() -> list[Path]:
    """Directories searched for recorded GPU results, most specific first.

    ``data/`` next to the running notebook (jupyter-book runs a chapter in
    ``book/``), ``book/data/`` under the current directory, and the repository's
    ``book/data/`` when the package is installed from a checkout.

    Returns:
        The existing directories, without duplicates.

    Example:
        >>> all(p.is_dir() for p in record_dirs())
        True
    """
    candidates = [
        Path.cwd() / "data",
        Path.cwd() / "book" / "data",
        Path(__file__).resolve().parents[3] / "book" / "data",
    ]
    seen: list[Path] = []
    for path in candidates:
        if path.is_dir() and path.resolve() not in seen:
            seen.append(path.resolve())
    return seen


def load_record(name: str) -> dict[str, Any] | None:
    """Load a recorded result (JSON with provenance) from ``book/data/``.

    Args:
        name: the file name, with or without ``.json``.

    Returns:
        The parsed JSON object, or None where no such file is found (e.g. in
        Colab, or before anyone has recorded it).

    Raises:
        TypeError: if ``name`` is not a string.
        ValueError: if ``name`` contains a path separator, or the file is not a
            JSON object.

    Example:
        >>> load_record("no-such-record") is None
        True
    """
    if not isinstance(name, str):
        raise TypeError(f"record name must be a string, got {type(name).__name__}")
    if "/" in name or "\\" in name or not name:
        raise ValueError(f"record name must be a plain file name; got {name!r}")
    filename = name if name.endswith(".json") else f"{name}.json"
    for directory in record_dirs():
        path = directory / filename
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"{path} must hold a JSON object, not {type(data).__name__}")
            return data
    return None
