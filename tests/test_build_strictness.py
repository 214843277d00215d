"""A raising chapter cell or a Sphinx warning fails the strict build.

These build a one-page book with the project's own _config.yml and the flags of
`make test` (Makefile target strict-book), so a change to either that would let a
broken page through fails here.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, myst_page, notebook

JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
pytestmark = pytest.mark.skipif(not JUPYTER_BOOK.exists(), reason="jupyter-book not installed")


def _strict_flags() -> list[str]:
    """The jupyter-book flags of `make test`, read from the Makefile."""
    text = (ROOT / "Makefile").read_text()
    base = re.search(r"^JB := \S+ build \. (.+)$", text, re.M)
    strict = re.search(r"^\t\$\(JB\) (.+)$", text.split("strict-book:")[1], re.M)
    assert base and strict, "Makefile no longer has the expected JB / strict-book lines"
    return base.group(1).split() + strict.group(1).split()


def _notebook(cells: list[str]) -> dict:
    title = {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# A chapter"}
    return notebook(cells, first=[title])


def _build(tmp_path: Path, page: str, body: dict | str) -> subprocess.CompletedProcess:
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    # _config.yml loads the project's local Sphinx extension from book/_ext and its
    # stylesheet from book/_static.
    shutil.copytree(ROOT / "book" / "_ext", tmp_path / "book" / "_ext")
    shutil.copytree(ROOT / "book" / "_static", tmp_path / "book" / "_static")  # html_static_path
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    (tmp_path / "book" / "intro.md").write_text("# Intro\n\nA page.\n")
    # A notebook (dict) is written as the book writes its pages: a MyST Markdown notebook.
    content = myst_page(body) if isinstance(body, dict) else body
    (tmp_path / "book" / f"{page}.md").write_text(content)
    (tmp_path / "_toc.yml").write_text(
        f"format: jb-book\nroot: book/intro\nchapters:\n  - file: book/{page}\n"
    )
    return subprocess.run(
        [str(JUPYTER_BOOK), "build", str(tmp_path), *_strict_flags()],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_clean_book_builds(tmp_path):
    result = _build(tmp_path, "fine", _notebook(["x = 1 + 1\nprint(x)"]))
    assert result.returncode == 0, result.stdout + result.stderr


def test_raising_cell_fails_naming_notebook_and_cell(tmp_path):
    result = _build(tmp_path, "broken", _notebook(["x = 1", "raise ValueError('chapter broke')"]))
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "broken" in out  # the notebook
    assert "raise ValueError('chapter broke')" in out  # the cell's code
    assert "ValueError" in out


def test_sphinx_warning_fails(tmp_path):
    result = _build(tmp_path, "warns", "# Warns\n\nSee {ref}`a-label-that-does-not-exist`.\n")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "a-label-that-does-not-exist" in out
