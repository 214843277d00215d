"""tools/book_toc.py: the one walk over ``_toc.yml`` the tools and tests share."""

import sys

import pytest
import yaml

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from book_toc import read_toc_files, toc_files


def test_root_chapters_parts_and_sections_in_reading_order():
    toc = {
        "root": "intro",
        "chapters": [{"file": "a", "sections": [{"file": "a1", "sections": [{"file": "a11"}]}]}],
        "parts": [
            {"chapters": [{"file": "b"}, {"url": "https://example.org"}, {"file": "c"}]},
            {"chapters": [{"file": "d", "sections": [{"glob": "x/*"}, {"file": "d1"}]}]},
        ],
    }
    assert toc_files(toc) == ["intro", "a", "a1", "a11", "b", "c", "d", "d1"]


def test_a_toc_without_root_is_a_clear_error():
    with pytest.raises(ValueError, match="root"):
        toc_files({"chapters": [{"file": "a"}]})


def test_the_books_toc_lists_every_details_page_after_its_chapter():
    files = read_toc_files(ROOT / "_toc.yml")
    assert files == toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    for chapter in ("tf32", "clarke", "degeneracy"):
        details = [f for f in files if f.startswith(f"book/{chapter}_")]
        assert details, chapter
        assert all(files.index(f) > files.index(f"book/{chapter}") for f in details)
