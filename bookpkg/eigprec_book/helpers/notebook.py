"""How a chapter talks to its reader: glued values, progress bars and recorded GPU results."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO, TypeVar

__all__ = ["glue", "load_record", "progress", "record_dirs", "record_source"]

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


def _terminal() -> TextIO | None:
    """The stream that reaches the terminal and never a notebook cell's output.

    Outside a Jupyter kernel: ``sys.stderr``. In an ipykernel, ``sys.stderr`` is the
    cell's output, and so is the process's file descriptor 2 where the kernel captures
    low-level output (``capture_fd_output``, ipykernel >= 6); the kernel keeps a copy
    of the original descriptor, the terminal of whatever started it (jupyter-book, a
    Jupyter server): write there. None where no such terminal is known.
    """
    stream = sys.stderr
    if not type(stream).__module__.startswith("ipykernel"):
        return stream
    original = getattr(stream, "_original_stdstream_copy", None)
    if isinstance(original, int):
        return _fd_stream(original)
    # Descriptor 2 not captured: sys.__stderr__ writes to the terminal only.
    return sys.__stderr__


@functools.cache
def _fd_stream(fd: int) -> TextIO | None:
    try:
        return os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        return None


def progress(iterable: Iterable[T], **kwargs: Any) -> Iterable[T]:
    """Wrap an iterable in a progress bar that suits where the code runs.

    A progress bar is never part of a page: with ``EIGPREC_PROGRESS=text`` (the book
    build, ``make``) it is plain text on the terminal only (the kernel's own stderr,
    which no cell output holds); with ``EIGPREC_PROGRESS=off`` there is none.
    Otherwise it is a widget in Jupyter or Colab where ipywidgets is installed, and
    text on stderr elsewhere.

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
    mode = os.environ.get("EIGPREC_PROGRESS", "").lower()
    in_kernel = "ipykernel" in sys.modules
    if mode not in {"text", "off"} and in_kernel and importlib.util.find_spec("ipywidgets"):
        from tqdm.notebook import tqdm

        return tqdm(iterable, **kwargs)
    from tqdm.std import tqdm

    stream = None if mode == "off" else _terminal()
    # Few redraws: a log keeps every one of them.
    kwargs = {"mininterval": 10.0, "ascii": True, **kwargs}
    disable = bool(kwargs.pop("disable", False)) or stream is None
    return tqdm(iterable, **{**kwargs, "file": stream, "disable": disable})


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


def _direct_url() -> dict[str, Any] | None:
    """pip's record of where ``eigprec-book`` was installed from (PEP 610), or None."""
    try:
        text = importlib.metadata.distribution("eigprec-book").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    return json.loads(text) if text else None


def _urlopen(url: str, timeout: float) -> Any:
    return urllib.request.urlopen(url, timeout=timeout)


def record_source(filename: str) -> Path | str | None:
    """Where a record lives in the source the book's package was installed from.

    In Colab a chapter runs in an empty folder: the records are not beside it, but the
    package was installed from the book's repository (``git+https://github.com/...``,
    pinned to the commit the pages were built from) or from a checkout's folder. pip
    notes which (``direct_url.json``); the record is that source's ``book/data/<filename>``.

    Args:
        filename: the record's file name, e.g. ``"eig_gpu.json"``.

    Returns:
        A local path (an install from a folder), an ``https://raw.githubusercontent.com``
        URL at the installed commit (an install from GitHub), or None: an editable install
        (:func:`record_dirs` already covers the checkout), no pip record, or another host.

    Example:
        >>> record_source("eig_gpu.json") is None  # the book's own editable install
        True
    """
    info = _direct_url()
    if not info or info.get("dir_info", {}).get("editable"):
        return None
    url = urllib.parse.urlparse(info.get("url", ""))
    if url.scheme == "file" and "dir_info" in info:
        folder = Path(urllib.request.url2pathname(url.path))
        for root in (folder, *folder.parents[:2]):
            if (root / "book" / "data").is_dir():
                return root / "book" / "data" / filename
        return None
    commit = info.get("vcs_info", {}).get("commit_id")
    parts = url.path.strip("/").removesuffix(".git").split("/")
    if url.scheme == "https" and url.netloc == "github.com" and commit and len(parts) == 2:
        owner, repo = parts
        return f"https://raw.githubusercontent.com/{owner}/{repo}/{commit}/book/data/{filename}"
    return None


def _read_source(filename: str) -> str | None:
    source = record_source(filename)
    if isinstance(source, Path):
        return source.read_text(encoding="utf-8") if source.is_file() else None
    if source is None:
        return None
    try:
        with _urlopen(source, timeout=30) as response:
            return response.read().decode("utf-8")
    except OSError as exc:  # offline, or no such file at that commit
        print(
            f"load_record: {filename} is not beside this notebook and could not be fetched "
            f"from {source} ({exc}); the cells that read it cannot run here, and the outputs "
            "saved in the notebook are the build's.",
            file=sys.stderr,
        )
        return None


def load_record(name: str) -> dict[str, Any] | None:
    """Load a recorded result (JSON with provenance) from ``book/data/``.

    Args:
        name: the file name, with or without ``.json``.

    Returns:
        The parsed JSON object, or None where no such file is found (not in
        :func:`record_dirs`, nor in the source the package was installed from
        (:func:`record_source`; Colab reads it from the repository at the installed
        commit, and says so on stderr when it cannot), nor recorded by anyone yet).

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
            return _as_record(path.read_text(encoding="utf-8"), path)
    text = _read_source(filename)  # Colab: from the source the package was installed from
    return None if text is None else _as_record(text, record_source(filename))


def _as_record(text: str, where: object) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object, not {type(data).__name__}")
    return data
