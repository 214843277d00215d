"""The pages a jupyter-book ``_toc.yml`` lists, in reading order, sections included.

One walk shared by the tools (site check, page execution, reader's notebooks) and the tests:
the root page, then every chapter — of the top-level ``chapters`` and of each part — each
followed by its ``sections`` (a chapter's details pages), depth first. Entries without a
``file`` (a ``url`` or a ``glob``) are skipped.

Example:
    >>> toc_files({"root": "intro", "parts": [{"chapters": [
    ...     {"file": "book/a", "sections": [{"file": "book/a_details"}]}, {"url": "x"}]}]})
    ['intro', 'book/a', 'book/a_details']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["read_toc_files", "toc_files"]


def toc_files(toc: dict[str, Any]) -> list[str]:
    """Every page ``file`` of a parsed ``_toc.yml``, root first, in reading order.

    Args:
        toc: the parsed table of contents (``yaml.safe_load`` of ``_toc.yml``).

    Returns:
        The ``file`` entries (without suffix), root first.

    Raises:
        ValueError: if the table of contents has no ``root``.
    """
    if "root" not in toc:
        raise ValueError("the table of contents has no 'root' entry")
    files = [toc["root"]]

    def walk(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))

    walk(toc.get("chapters", []))
    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    return files


def read_toc_files(toc_path: Path) -> list[str]:
    """:func:`toc_files` of the ``_toc.yml`` at ``toc_path``.

    Args:
        toc_path: path of ``_toc.yml``.

    Returns:
        The page files it lists, root first.

    Raises:
        OSError: if the file cannot be read.
    """
    import yaml

    return toc_files(yaml.safe_load(Path(toc_path).read_text()))
