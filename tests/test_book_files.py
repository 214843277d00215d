"""The committed book files follow the conventions the build and Colab rely on.

The chapter pages are MyST Markdown notebooks (``book/<page>.md``, issue 44); the tests
read them as MyST-NB reads them in the build (tools/book_pages.py).
"""

import re
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, read_page

sys.path.insert(0, str(ROOT / "tools"))
from book_pages import is_page, page_paths
from book_toc import toc_files

NOTEBOOKS = page_paths(ROOT / "book")
#: The longest line of prose a page may hold, so that a prose edit is a short diff.
MAX_PROSE_LINE = 200


def _toc_files(toc: dict) -> list[str]:
    return toc_files(toc)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def test_there_are_three_chapters():
    assert {p.stem for p in NOTEBOOKS} >= {"tf32", "clarke", "degeneracy"}


def test_pages_are_text_not_notebook_json():
    # Prose diffs, not JSON diffs (issue 44): no page is committed as .ipynb.
    assert not sorted((ROOT / "book").rglob("*.ipynb"))


def test_myst_nb_reads_as_notebooks_exactly_the_pages():
    # book_pages.is_page (standard library only, for the GPU recorder) agrees with
    # MyST-NB on every Markdown file of book/: the chapters are notebooks, the rest not.
    pytest.importorskip("myst_nb", reason="needs myst_nb (the book build's tools)")
    from myst_nb.core.read import is_myst_markdown_notebook

    for path in sorted((ROOT / "book").glob("*.md")):
        assert is_page(path) == is_myst_markdown_notebook(path.read_text()), path.name


def test_toc_lists_every_chapter_and_only_existing_files(toc):
    listed = _toc_files(toc)
    for file in listed:
        assert any((ROOT / f"{file}{ext}").exists() for ext in ("", ".md")), file
    for nb in NOTEBOOKS:
        assert f"book/{nb.stem}" in listed, f"{nb.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_page_reads_as_a_notebook_of_code_and_markdown_cells(path: Path):
    nb = read_page(path)
    kinds = {c.cell_type for c in nb.cells}
    assert kinds == {"code", "markdown"}, f"{path.name}: {kinds}"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(nb.cells):
        assert cell.source.strip(), f"{path.name} cell {i} is empty"
        if cell.cell_type == "code":  # no {code-cell} left inside a directive or a list
            tags = cell.metadata.get("tags", [])
            assert isinstance(tags, list), f"{path.name} cell {i}: tags {tags!r}"
        else:
            assert "{code-cell}" not in cell.source, f"{path.name} cell {i}: a nested code cell"


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """``(line number, line)`` of the page's prose: outside the front matter, code cells,
    fenced blocks and display math; table rows (which cannot be broken) left out."""
    lines = path.read_text(encoding="utf-8").splitlines()
    prose, fence, math = [], None, False
    start = lines.index("---", 1) + 1 if lines and lines[0] == "---" else 0
    for number, line in enumerate(lines[start:], start + 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            continue
        opening = re.match(r"(`{3,}|~{3,})", stripped)
        if opening:
            fence = opening.group(1)
            continue
        if math:
            math = not stripped.endswith("$$")
            continue
        if stripped.startswith("$$"):
            math = len(stripped) == 2 or not stripped.endswith("$$")  # opens a block
            continue
        if stripped and not stripped.startswith("|"):
            prose.append((number, line))
    return prose


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_is_one_sentence_or_clause_per_line(path: Path):
    long = [(n, len(line)) for n, line in _prose_lines(path) if len(line) > MAX_PROSE_LINE]
    assert not long, (
        f"{path.name}: prose lines over {MAX_PROSE_LINE} characters (line, length): {long}; "
        "break after each sentence, and long sentences at clause boundaries"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_pages_link_each_other_by_name_not_by_file(path: Path):
    # A Markdown link to tf32.ipynb broke when the pages became .md; {doc}`tf32` names the
    # page (and the reader's notebook turns it into a link to the published page).
    files = re.findall(r"\]\(([\w./-]+\.(?:ipynb|md))(?:#[^)]*)?\)", path.read_text())
    assert not files, f"{path.name}: link pages with {{doc}} or {{ref}}, not {files}"


def test_prose_lines_skip_code_math_and_tables(tmp_path):
    page = tmp_path / "p.md"
    wide = "x" * 300
    page.write_text(
        f"---\nfile_format: mystnb\n---\n\n# T\n\n```{{code-cell}} ipython3\n{wide} = 1\n```\n\n"
        f"$$\n{wide}\n$$\n\n| {wide} |\n|---|\n\nShort.\n{wide}\n"
    )
    assert [n for n, _ in _prose_lines(page)] == [5, 18, 19]
    assert [len(line) for _, line in _prose_lines(page)][-1] == 300


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_installs_from_the_configured_url_only_in_colab(path: Path, book_config):
    url = book_config["repository"]["url"]
    first = read_page(path)["cells"][0]
    assert first["cell_type"] == "code", f"{path.name}: the first cell must be the setup cell"
    assert "remove-cell" in first["metadata"].get("tags", []), "setup cell must be hidden"
    src = _source(first)
    assert re.search(r'if\s+"google\.colab"\s+in\s+sys\.modules\s*:', src), src
    installs = re.findall(r"%pip install .*", src)
    # The library, then the book's own package from its folder of the same repository.
    assert [re.findall(r"https?://[^\s\"']+", line) for line in installs] == [
        [url],
        [f"{url}#subdirectory=bookpkg"],
    ], f"{path.name}: install eigprec and eigprec-book from {url}, the URL in _config.yml"
    assert '"eigprec @ git+' in installs[0] and '"eigprec-book @ git+' in installs[1]


def test_repository_url_defined_once(book_config):
    url = book_config["repository"]["url"]
    assert url.startswith("https://github.com/")
    # Only one key in the configuration holds it.
    assert (ROOT / "_config.yml").read_text().count(url) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_guard_cells_use_the_guard_helper_not_bare_asserts(path: Path):
    # A bare assert says pass or fail; eigprec_book.helpers.guard/check also record the margin
    # each claim stands on (_build/guard-margins.json, make robustness), issue 32.
    import ast

    nb = read_page(path)
    bare = []
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or "remove-cell" not in tags:
            continue
        # IPython magics (the setup cell's %pip) are not Python: keep their indentation.
        source = "\n".join(
            re.sub(r"^(\s*)%.*", r"\1pass", line) for line in _source(cell).splitlines()
        )
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assert):
                bare.append(f"cell {i} line {node.lineno}: {ast.unparse(node)[:70]}")
    assert not bare, f"{path.name}: use guard()/check() from eigprec_book.helpers:\n" + "\n".join(
        bare
    )
