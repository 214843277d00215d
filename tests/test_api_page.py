"""The API page (book/api.md) is grouped by topic, each group a summary table and the
entries it lists, and it documents every public name exactly once (issue 23.7).

The book's extension (book/_ext/eigprec_sphinx.py) gives re-exported constants a
``[source]`` link and puts the package version in the footer; its hooks are tested here
on their own, and the non-executing build checks the rendered page.
"""

import re
from types import SimpleNamespace

import eigprec_book.helpers
import pytest

import eigprec

from .conftest import ROOT, book_extension

TOPICS = [
    "TF32 emulation and audit",
    "Precision",
    "The k-th eigenvalue",
    "Subspaces",
    "SOAP and REKLS",
    "Runtime and timing",
]
RST_BLOCK = re.compile(r"```\{eval-rst\}\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str, list[str], list[str]]]:
    """(heading above, current module, autosummary names, auto* directive names) per block."""
    text = (ROOT / "book" / "api.md").read_text()
    found = []
    for match in RST_BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.M)
        body = match.group(1)
        (module,) = re.findall(r"^\.\. currentmodule:: (\S+)$", body, re.M)
        summary = body.split(".. autosummary::", 1)[1].split("\n\n.. ", 1)[0]
        listed = re.findall(r"^   (\w+)$", summary, re.M)
        documented = re.findall(r"^\.\. auto(?:function|class|data):: (\w+)$", body, re.M)
        found.append((headings[-1], module, listed, documented))
    return found


def test_the_library_is_grouped_by_topic_each_with_a_summary_table():
    library = [b for b in _blocks() if b[1] == "eigprec"]
    assert [b[0] for b in library] == TOPICS
    for topic, _, listed, documented in library:
        assert listed, f"{topic}: no summary table"
        assert listed == documented, f"{topic}: the table and the entries differ"


@pytest.mark.parametrize("package", [eigprec, eigprec_book.helpers], ids=lambda p: p.__name__)
def test_every_public_name_is_documented_once(package):
    listed = [n for b in _blocks() if b[1] == package.__name__ for n in b[2]]
    documented = [n for b in _blocks() if b[1] == package.__name__ for n in b[3]]
    assert sorted(listed) == sorted(package.__all__)
    assert sorted(documented) == sorted(package.__all__)


def test_the_link_back_to_the_intro_does_not_read_as_the_book_title():
    text = (ROOT / "book" / "api.md").read_text()
    assert "{doc}`intro`" not in text  # would render as the whole title of the book
    assert re.search(r"\{doc\}`[^`<]+<intro>`", text)


@pytest.fixture
def eigprec_sphinx():
    """The book's extension; its tests skip where Sphinx and pybtex are not installed."""
    return book_extension("eigprec_sphinx")


def test_a_reexported_constant_is_traced_to_the_lines_that_assign_it(eigprec_sphinx):
    app = SimpleNamespace()
    assert eigprec_sphinx._follow_constant(app, "eigprec", "MATMUL_PRECISIONS") == (
        "eigprec.precision"
    )
    assert eigprec_sphinx._follow_constant(app, "eigprec_book.helpers", "MIN_FONT_PT") == (
        "eigprec_book.helpers.figures"
    )
    # Functions and classes: viewcode follows __module__ itself.
    assert eigprec_sphinx._follow_constant(app, "eigprec", "kth_eigvalsh") is None
    code, tags = eigprec_sphinx._source_with_constants(app, "eigprec.precision")
    _kind, start, _end = tags["MATMUL_PRECISIONS"]
    assert code.splitlines()[start - 1].startswith("MATMUL_PRECISIONS")
    assert tags["matmul_precision"][0] in {"def", "class"}  # viewcode's own tags kept
    assert eigprec_sphinx._source_with_constants(app, "eigprec.eig") is None


def test_the_footer_carries_the_package_version(eigprec_sphinx):
    options = {
        "extra_footer": '<a href="{repository}/blob/main/LICENSE">MIT</a>. eigprec {version}.',
        "repository_url": "https://example.org/repo",
    }
    config = SimpleNamespace(html_theme_options=options, version="", release="")
    eigprec_sphinx._version_in_footer(SimpleNamespace(), config)
    assert options["extra_footer"] == (
        f'<a href="https://example.org/repo/blob/main/LICENSE">MIT</a>. '
        f"eigprec {eigprec.__version__}."
    )
    assert config.version == config.release == eigprec.__version__


def test_the_configured_footer_states_both_licences_and_the_version(book_config):
    footer = book_config["html"]["extra_footer"]
    assert "CC BY 4.0" in footer and "https://creativecommons.org/licenses/by/4.0/" in footer
    assert "MIT" in footer and "{version}" in footer and "{repository}/" in footer
    extensions = book_config["sphinx"]["extra_extensions"]
    assert "sphinx.ext.viewcode" in extensions and "sphinx.ext.autosummary" in extensions
