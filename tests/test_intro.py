"""The landing page (book/intro.md, issue 23.8): its headline results are pasted from
the chapters that compute them, every chapter page opens in Colab from it, and it says
truthfully where the published pages run.
"""

import re
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT, notebook, read_page, write_page
from .test_build_strictness import JUPYTER_BOOK

sys.path.insert(0, str(ROOT / "tools"))
from book_pages import page_paths

INTRO = ROOT / "book" / "intro.md"
# {glue:text}`tf32.md::key:.3g`: a value glued on the page book/tf32.md.
CROSS_GLUE = re.compile(r"\{glue(?::\w+)?\}`([\w./-]+\.md)::(\w+)(?::[^`]*)?`")


def _markdown(page: str) -> str:
    cells = read_page(ROOT / "book" / page).cells
    return "\n".join(c.source for c in cells if c.cell_type == "markdown")


def test_headline_results_are_pasted_from_each_chapter():
    refs = CROSS_GLUE.findall(INTRO.read_text())
    assert {page for page, _ in refs} >= {"tf32.md", "clarke.md", "degeneracy.md"}
    for page, key in refs:
        # The chapter pastes the key in its own prose, so it glues it, and its guard
        # cell holds the sentence the number belongs to.
        own = re.compile(r"\{glue(?::\w+)?\}`" + re.escape(key) + r"(?::[^`]*)?`")
        assert own.search(_markdown(page)), f"{page} does not paste {key!r}"


def test_every_chapter_page_opens_in_colab_from_the_intro(book_config):
    repo = book_config["repository"]["url"].removeprefix("https://github.com/")
    branch = book_config["repository"]["branch"]
    links = set(
        re.findall(
            rf"\(https://colab\.research\.google\.com/github/{re.escape(repo)}/blob/"
            rf"{re.escape(branch)}/book/([\w-]+)\.ipynb\)",
            INTRO.read_text(),
        )
    )
    pages = {p.stem for p in page_paths(ROOT / "book")}
    assert pages <= links, f"no Colab link for {sorted(pages - links)}"


def test_intro_says_where_published_pages_run():
    text = INTRO.read_text()
    assert "Published pages are executed on a GPU" not in text
    assert "CPU runner" in text and "emulated" in text
    assert "CITATION.cff" in text


def test_pasted_numbers_follow_a_chapter_that_alone_reexecuted(tmp_path):
    """Pasting from another page works, and an incremental build rewrites the intro with
    the new number though only the chapter changed (the intro holds the toctree, so Sphinx
    rewrites it with any chapter)."""
    if not JUPYTER_BOOK.exists():
        pytest.skip("jupyter-book not installed")
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    shutil.copytree(ROOT / "book" / "_ext", tmp_path / "book" / "_ext")
    shutil.copytree(ROOT / "book" / "_static", tmp_path / "book" / "_static")
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    (tmp_path / "book" / "intro.md").write_text(
        "# Intro\n\nThe answer is {glue:text}`chapter.md::answer:d`.\n"
    )
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/chapter\n"
    )

    def build(value: int) -> str:
        title = {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# A chapter"}
        cell = f"from myst_nb import glue\nglue('answer', {value}, display=False)"
        page = notebook([cell], first=[title])
        write_page(tmp_path / "book" / "chapter.md", page)
        result = subprocess.run(
            [str(JUPYTER_BOOK), "build", str(tmp_path), "--builder", "html", "-W", "-n"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        html = (tmp_path / "_build" / "html" / "book" / "intro.html").read_text()
        return re.sub(r"<[^>]+>", "", html)

    assert "The answer is 42." in build(42)
    assert "The answer is 43." in build(43)  # an incremental build: only the chapter changed
