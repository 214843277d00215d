"""The committed book files follow the conventions the build and Colab rely on."""

import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from book_toc import toc_files

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def _toc_files(toc: dict) -> list[str]:
    return toc_files(toc)


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def test_there_are_three_chapters():
    assert {p.stem for p in NOTEBOOKS} >= {"tf32", "clarke", "degeneracy"}


def test_toc_lists_every_chapter_and_only_existing_files(toc):
    listed = _toc_files(toc)
    for file in listed:
        assert any((ROOT / f"{file}{ext}").exists() for ext in ("", ".md", ".ipynb")), file
    for nb in NOTEBOOKS:
        assert f"book/{nb.stem}" in listed, f"{nb.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_without_outputs(path: Path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{path.name} cell {i} holds outputs: strip them"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_installs_from_the_configured_url_only_in_colab(path: Path, book_config):
    url = book_config["repository"]["url"]
    first = json.loads(path.read_text())["cells"][0]
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

    nb = json.loads(path.read_text())
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
