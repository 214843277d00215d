"""The book's notebook pages: which files they are, and each read as the build reads it.

The chapter pages are MyST Markdown notebooks (``book/<page>.md`` whose front matter says
``file_format: mystnb``): text, so that a prose edit is a prose diff. MyST-NB turns such
a file into a notebook before executing it; this module is the one place the tools
(page execution, the reader's notebooks, the site check, the GPU recorder) and the tests
do the same, with MyST-NB's own reader and the Markdown extensions of ``_config.yml``, so
that what they see is the notebook the build executes and caches: the execution cache
keys on the code cells (source and metadata) and the kernelspec.

Example:
    >>> from pathlib import Path
    >>> nb = read_page(Path("book/tf32.md"))  # doctest: +SKIP
    >>> nb.cells[0].metadata.tags  # doctest: +SKIP
    ['remove-cell']
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

__all__ = ["PAGE_SUFFIX", "is_page", "page_paths", "read_page", "toc_pages"]

ROOT = Path(__file__).resolve().parents[1]
#: A notebook page's suffix (a MyST Markdown notebook).
PAGE_SUFFIX = ".md"


def is_page(path: Path) -> bool:
    """Whether ``path`` is a notebook page: a ``.md`` file whose front matter has the line
    ``file_format: mystnb`` (the form MyST-NB reads as a notebook, and the one the book's
    pages use; tests/test_book_files.py checks that MyST-NB agrees on every file of
    ``book/``). A plain Markdown page (the introduction, the glossary) is not one.

    Needs the standard library only: the GPU recorder lists the chapters with the GPU
    machine's own Python, before its carried wheels (PyYAML, MyST-NB) are on the path.
    """
    path = Path(path)
    if path.suffix != PAGE_SUFFIX or not path.is_file():
        return False
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].rstrip() != "---":
        return False
    for line in lines[1:]:
        if line.startswith(("---", "...")):
            return False
        if re.fullmatch(r"file_format:\s*([\"']?)mystnb\1\s*", line):
            return True
    return False


def page_paths(folder: Path) -> list[Path]:
    """The notebook pages directly in ``folder`` (e.g. ``book/``), sorted by name."""
    return [p for p in sorted(Path(folder).glob(f"*{PAGE_SUFFIX}")) if is_page(p)]


def toc_pages(toc_path: Path) -> list[Path]:
    """The notebook pages a ``_toc.yml`` lists, sections included, in reading order."""
    from book_toc import read_toc_files

    root = Path(toc_path).parent
    pages = [root / f"{f}{PAGE_SUFFIX}" for f in read_toc_files(Path(toc_path))]
    return [p for p in pages if is_page(p)]


@functools.lru_cache(maxsize=8)
def _extensions(config_path: Path) -> tuple[str, ...]:
    import yaml

    if not config_path.is_file():
        return ()
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    return tuple(config.get("parse", {}).get("myst_enable_extensions", []) or ())


def _md_config(config_path: Path) -> Any:
    from myst_parser.config.main import MdParserConfig

    return MdParserConfig(enable_extensions=set(_extensions(config_path)))


def read_page(path: Path, config: Path | None = None) -> Any:
    """The page as MyST-NB reads it in the build: an nbformat-4 ``NotebookNode``.

    Cells are split at code cells and at ``+++`` breaks; a code cell's ``:tags:`` and other
    options (or its YAML block) become its metadata; the front matter becomes the
    notebook's metadata (with MyST-NB's ``source_map``). MyST-NB gives each cell a random
    id (the text has none, and nothing keys on them); here they are ``cell-<index>``, so
    that what is written from a page is the same on every run.

    Args:
        path: the page (``book/<page>.md``).
        config: the book's ``_config.yml``, for its Markdown extensions (default: the one
            beside the page's folder, else this repository's).

    Returns:
        The notebook, without outputs.

    Raises:
        ValueError: ``path`` is not a MyST Markdown notebook.
    """
    from myst_nb.core.read import is_myst_markdown_notebook, read_myst_markdown_notebook

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if not is_myst_markdown_notebook(text):
        raise ValueError(f"{path}: not a MyST Markdown notebook (no 'file_format: mystnb')")
    if config is None:
        beside = path.resolve().parent.parent / "_config.yml"
        config = beside if beside.is_file() else ROOT / "_config.yml"
    nb = read_myst_markdown_notebook(
        text, config=_md_config(Path(config).resolve()), add_source_map=True, path=str(path)
    )
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    return nb
