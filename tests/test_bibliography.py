"""The bibliography's labels read like the citations in the text, and two works by one
author in one year are told apart (issue 23.10; book/_ext/eigprec_bibtex.py).
"""

import html
import re

import pytest

from .conftest import book_extension
from .test_build_strictness import JUPYTER_BOOK, _build

# The style is the book's extension: where pybtex and Sphinx are absent, nothing here runs.
eigprec_bibtex = book_extension("eigprec_bibtex")
from pybtex.database import parse_string  # noqa: E402

BIB = r"""
@misc{b, author = {{PyTorch contributors}}, title = {Zeta}, year = {2026}}
@misc{a, author = {{PyTorch contributors}}, title = {Alpha}, year = {2026}}
@article{c, author = {Ootomo, Hiroyuki and Yokota, Rio}, title = {T}, year = {2022}}
@article{d, author = {Fasi, M. and Higham, N. J. and Mikaitis, M. and Pranesh, S.},
         title = {T}, year = {2021}}
@article{e, author = {Hiriart-Urruty, J.-B. and Lewis, A. S.}, title = {T}, year = {1999}}
@book{f, editor = {Editor, Ed}, title = {Proceedings}, year = {2001}}
"""


def _labels() -> dict[str, str]:
    entries = list(parse_string(BIB, "bibtex").entries.values())
    style = eigprec_bibtex.Style()
    ordered = style.sort(entries)
    return {e.key: label for e, label in zip(ordered, style.format_labels(ordered), strict=True)}


def test_labels_are_author_year_with_a_letter_only_where_two_would_share_one():
    labels = _labels()
    assert labels["a"] == "PyTorch contributors, 2026a"  # a, b in the order of the titles
    assert labels["b"] == "PyTorch contributors, 2026b"
    assert labels["c"] == "Ootomo and Yokota, 2022"
    assert labels["d"] == "Fasi et al., 2021"
    assert labels["e"] == "Hiriart-Urruty and Lewis, 1999"
    assert labels["f"] == "Editor, 2001"


def test_the_book_uses_the_style_in_the_list_and_in_the_text(book_config):
    config = book_config["sphinx"]["config"]
    assert config["bibtex_default_style"] == eigprec_bibtex.NAME
    assert config["bibtex_reference_style"] == eigprec_bibtex.NAME


@pytest.mark.skipif(not JUPYTER_BOOK.exists(), reason="jupyter-book not installed")
def test_built_citations_and_list_labels_agree(tmp_path):
    # Two cited works of the PyTorch contributors from 2026, one by several authors, and a
    # textual citation; built with the strict flags of `make test`.
    page = (
        "# Refs\n\n"
        "{cite:p}`pytorch_source_tf32` and {cite:p}`pytorch192483`; "
        "{cite:p}`fasi2021tensorcores`; {cite:t}`ootomo2022`.\n\n"
        "```{bibliography}\n```\n"
    )
    result = _build(tmp_path, "refs", page)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = (tmp_path / "_build" / "html" / "book" / "refs.html").read_text()
    listed = re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<span', text)
    assert sorted(html.unescape(re.sub(r"<[^>]+>", "", x)) for x in listed) == [
        "Fasi et al., 2021",
        "Ootomo and Yokota, 2022",
        "PyTorch contributors, 2026a",
        "PyTorch contributors, 2026b",
    ]
    prose = html.unescape(re.sub(r"<[^>]+>", "", text.split('class="bibliography')[0]))
    prose = " ".join(prose.split())
    # a and b follow the titles: "PyTorch issue 192483: ..." before "PyTorch source: ...".
    assert "[PyTorch contributors, 2026b] and [PyTorch contributors, 2026a]" in prose
    assert "[Fasi et al., 2021]" in prose
    assert "Ootomo and Yokota [2022]" in prose
