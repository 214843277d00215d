"""tools/lint_pages.py: ruff on the pages' code cells, reported at the pages' own lines."""

import sys

import pytest

from .conftest import ROOT, needs, notebook, write_page

sys.path.insert(0, str(ROOT / "tools"))
import lint_pages

pytestmark = needs("myst_nb", "ruff")


def test_findings_and_formatting_are_reported_at_the_pages_lines(tmp_path):
    title = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# Page\n\nText."}
    page = write_page(
        tmp_path / "book" / "page.md",
        notebook(["x = 1", "import  os\nimport sys\nprint(sys.argv)"], first=[title]),
    )
    lines = page.read_text().splitlines()
    start = lines.index("import  os") + 1  # 1-based line of the cell's first line
    found = lint_pages.lint(page)
    assert f"{page}:{start}:9: F401 `os` imported but unused" in found
    assert f"{page}:{start}: ruff format would change this cell:" in found
    assert any("-import  os" in block and "+import os" in block for block in found)
    assert lint_pages.main([str(page)]) == 1


def test_a_clean_page_passes_and_notebook_settings_apply(tmp_path, capsys):
    # A late import is E402 in a module but not in a notebook (pyproject.toml): the
    # cells are handed to ruff as a notebook.
    page = write_page(tmp_path / "page.md", notebook(["x = 1", "import os\n\nprint(os.sep, x)"]))
    assert lint_pages.lint(page) == []
    assert lint_pages.main([str(page)]) == 0
    assert "pass ruff check and ruff format" in capsys.readouterr().out


@pytest.mark.parametrize("page", sorted((ROOT / "book").glob("tf32*.md")), ids=lambda p: p.name)
def test_the_book_pages_code_cells_are_clean(page):
    assert lint_pages.lint(page) == []
