"""tools/check_site.py finds broken links and anchors, network assets and wrong Colab links.

Each check runs on a small fixture site holding one instance of each fault next to
correct counterparts, so a check that cannot fail (or flags correct pages) fails here.
"""

import sys

import pytest

from .conftest import ROOT, notebook, write_page

sys.path.insert(0, str(ROOT / "tools"))
import check_site


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "html"
    _write(root / "index.html", '<a href="book/a.html">A</a> <a href="book/">dir</a>')
    _write(root / "book" / "index.html", "<p>folder index</p>")
    _write(
        root / "book" / "a.html",
        """<html><head><link rel="stylesheet" href="../_static/local.css"></head><body>
        <h1 id="top">A</h1><a name="old-anchor"></a>
        <a href="b.html#sec-2">good anchor</a> <a href="#top">self anchor</a>
        <a href="#old-anchor">name anchor</a> <a href="https://example.org/x">external</a>
        <a href="mailto:someone@example.org">mail</a> <img src="../_static/pic.png">
        </body></html>""",
    )
    _write(root / "book" / "b.html", '<section id="sec-2"><h2>B</h2></section>')
    _write(root / "_static" / "local.css", "body { color: black }")
    (root / "_static" / "pic.png").write_bytes(b"\x89PNG\r\n")
    return root


def test_clean_site_passes(site):
    problems, external = check_site.check_links_and_assets(site)
    assert problems == []
    assert external == 1  # the https link in an <a>: counted, not fetched


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="missing.html">x</a>', "broken link missing.html"),
        ('<a href="b.html#no-such-section">x</a>', "broken anchor b.html#no-such-section"),
        ('<a href="#nowhere">x</a>', "broken anchor #nowhere"),
        ('<img src="../_images/gone.png">', "broken link ../_images/gone.png"),
        ('<script src="https://cdn.example.org/mathjax.js"></script>', "from the network"),
        ('<link rel="stylesheet" href="//fonts.example.org/f.css">', "from the network"),
        ('<a href="../../../etc/passwd">x</a>', "leaves the site"),
    ],
)
def test_each_fault_is_reported(site, html, expected):
    (site / "book" / "bad.html").write_text(f"<html><body>{html}</body></html>")
    problems, _ = check_site.check_links_and_assets(site)
    assert len(problems) == 1, problems
    assert problems[0].startswith("book/bad.html: ")
    assert expected in problems[0]


def test_remote_font_in_stylesheet_is_reported(site):
    (site / "_static" / "theme.css").write_text(
        "@font-face { src: url('https://fonts.example.org/x.woff2') }"
    )
    problems, _ = check_site.check_links_and_assets(site)
    assert problems == [
        "_static/theme.css: fetches https://fonts.example.org/x.woff2 from the network"
    ]


DOWNLOAD = '<a href="../_sources/book/ch.ipynb">.ipynb</a>'


def _colab_fixture(tmp_path, link, download=DOWNLOAD):
    (tmp_path / "_config.yml").write_text(
        "repository:\n  url: https://github.com/org/repo\n  path_to_book: ''\n  branch: main\n"
    )
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch\n"
    )
    write_page(tmp_path / "book" / "ch.md", notebook(["x = 1"]))  # a MyST notebook page
    _write(tmp_path / "book" / "intro.md", "# Intro")
    _write(tmp_path / "html" / "book" / "ch.html", f'<a href="{link}">Colab</a> {download}')
    _write(tmp_path / "html" / "book" / "intro.html", "<p>no launch button: a Markdown page</p>")
    return check_site.check_colab(tmp_path / "html", tmp_path / "_config.yml")


def test_colab_link_to_the_readers_notebook_passes(tmp_path):
    url = "https://colab.research.google.com/github/org/repo/blob/main/book/ch.ipynb"
    problems, checked = _colab_fixture(tmp_path, url)
    assert problems == []
    assert checked == [url]


@pytest.mark.parametrize(
    "url",
    [
        "https://colab.research.google.com/github/org/repo/blob/main/ch.ipynb",
        "https://colab.research.google.com/github/org/other/blob/main/book/ch.ipynb",
        "https://colab.research.google.com/github/org/repo/blob/dev/book/ch.ipynb",
        "https://example.org/not-colab",
    ],
)
def test_wrong_colab_link_is_reported(tmp_path, url):
    problems, checked = _colab_fixture(tmp_path, url)
    assert checked == []
    assert len(problems) == 1 and "no Colab link to" in problems[0]


def test_details_page_nested_as_a_section_is_checked_too(tmp_path):
    # The toc nests a chapter's details page under it (`sections:`): its Colab button
    # must be checked like the chapter's, not skipped.
    url = "https://colab.research.google.com/github/org/repo/blob/main/book/ch.ipynb"
    _colab_fixture(tmp_path, url)
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - chapters:\n"
        "      - file: book/ch\n        sections:\n          - file: book/ch_details\n"
    )
    write_page(tmp_path / "book" / "ch_details.md", notebook(["x = 1"]))
    _write(tmp_path / "html" / "book" / "ch_details.html", "<p>no Colab button</p>")
    problems, checked = check_site.check_colab(tmp_path / "html", tmp_path / "_config.yml")
    assert checked == [url]
    assert [p.split(": ")[1][:14] for p in problems] == ["no Colab link ", "no Download li"]
    assert all(p.startswith("book/ch_details.html: ") for p in problems)


def test_a_link_to_the_myst_source_is_reported(tmp_path):
    # sphinx-book-theme builds launch links from the page's source: Colab would open
    # book/ch.md, which the notebooks branch does not hold; the Download menu would offer
    # the MyST text (book/_ext/eigprec_sphinx.py rewrites both).
    md = "https://colab.research.google.com/github/org/repo/blob/main/book/ch.md"
    problems, checked = _colab_fixture(tmp_path, md)
    assert checked == [] and len(problems) == 2
    assert "no Colab link to" in problems[0] and "links to its MyST source" in problems[1]
    url = "https://colab.research.google.com/github/org/repo/blob/main/book/ch.ipynb"
    source = DOWNLOAD + ' <a href="../_sources/book/ch.md">.md</a>'
    problems, checked = _colab_fixture(tmp_path, url, source)
    assert checked == [url]
    assert problems == ["book/ch.html: links to its MyST source ['../_sources/book/ch.md']"]


def test_a_page_without_the_notebook_download_is_reported(tmp_path):
    url = "https://colab.research.google.com/github/org/repo/blob/main/book/ch.ipynb"
    problems, _ = _colab_fixture(tmp_path, url, download="")
    assert problems == ["book/ch.html: no Download link to _sources/book/ch.ipynb"]


def test_colab_url_needs_github():
    with pytest.raises(ValueError, match=r"github\.com"):
        check_site.colab_url("https://gitlab.com/org/repo", "main", "book/x.ipynb")


# A table whose header holds an unescaped pipe, as the Clarke chapter once showed it: the
# Markdown renderer left the whole table as one paragraph of raw text.
RAW_TABLE_PAGE = """<html><body><section><p>| dtype | mode | |tr W − 1| |
|---|---|---:|
| float64 | mean | 1e-16 |</p></section></body></html>"""
RENDERED_TABLE_PAGE = """<html><body><table><thead><tr><th>dtype</th><th>|tr W − 1|</th>
</tr></thead><tbody><tr><td>float64</td><td>1e-16</td></tr></tbody></table>
<pre>| a | b |
|---|---|</pre><p>A rule in prose --- not a table; x | y.</p>
<div class="highlight"><code>|---|---:|</code></div></body></html>"""


def test_unrendered_table_is_reported(site):
    (site / "book" / "raw.html").write_text(RAW_TABLE_PAGE)
    problems = check_site.check_raw_markup(site)
    assert len(problems) == 1, problems
    assert problems[0].startswith("book/raw.html: unrendered Markdown table")
    assert "|---|---|---:|" in problems[0]


def test_rendered_tables_and_verbatim_rules_pass(site):
    (site / "book" / "ok.html").write_text(RENDERED_TABLE_PAGE)
    assert check_site.check_raw_markup(site) == []


def test_main_fails_on_an_unrendered_table(site, capsys):
    (site / "book" / "raw.html").write_text(RAW_TABLE_PAGE)
    assert check_site.main([str(site)]) == 1
    assert "unrendered Markdown table" in capsys.readouterr().out


# A role inside glued Markdown (the advice page's key results glued "({ref}`da-held-out`)"):
# MyST-NB rendered it as the text "{ref}" and the target as inline code.
RAW_ROLE_PAGE = """<html><body><p>held on every cell (<em>clip</em>) ({ref}<code class="docutils
literal notranslate"><span class="pre">da-held-out</span></code>).</p></body></html>"""
QUOTED_ROLE_PAGE = """<html><body><p>In a chapter write <code>{glue:text}`answer`</code>;
a set such as {1, 2} or {x} in prose is not a role.</p>
<pre>{ref}`a-label`</pre></body></html>"""


def test_unrendered_role_is_reported(site):
    (site / "book" / "raw.html").write_text(RAW_ROLE_PAGE)
    problems = check_site.check_raw_markup(site)
    assert problems == ["book/raw.html: unrendered MyST role '{ref}' (raw text in the page)"]


def test_roles_quoted_as_code_pass(site):
    (site / "book" / "ok.html").write_text(QUOTED_ROLE_PAGE)
    assert check_site.check_raw_markup(site) == []


def test_a_page_with_a_raw_table_and_a_raw_role_reports_both(site):
    page = RAW_TABLE_PAGE.replace("</section>", "</section>" + RAW_ROLE_PAGE[12:-14])
    (site / "book" / "raw.html").write_text(page)
    problems = check_site.check_raw_markup(site)
    assert [p.split(": ")[1].split(" (")[0] for p in problems] == [
        "unrendered Markdown table",
        "unrendered MyST role '{ref}'",
    ], problems


def test_main_fails_on_an_unrendered_role(site, capsys):
    (site / "book" / "raw.html").write_text(RAW_ROLE_PAGE)
    assert check_site.main([str(site)]) == 1
    assert "unrendered MyST role" in capsys.readouterr().out
