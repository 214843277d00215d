"""A book built with the project's configuration renders its math with no network.

Builds a two-page book with _config.yml (MathJax from sphinx-mathjax-offline, the
theme, the local Sphinx extension), then checks that no page loads anything from
the network and, where Chromium is installed, that the math is typeset in a browser
that cannot reach any host but the local server.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, chromium_or_skip, once_per_run, write_page

sys.path.insert(0, str(ROOT / "tools"))
import check_browser
import check_site

JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
pytestmark = pytest.mark.skipif(not JUPYTER_BOOK.exists(), reason="jupyter-book not installed")

MATH_PAGE = """# Math

Inline $\\|x\\|_2 \\le \\sqrt{n}\\,\\|x\\|_\\infty$ and a display:

$$
u_{\\mathrm{TF32}} = 2^{-11}
$$

```{math}
:label: eq-test
\\lambda_k(A) = \\min_{\\dim V = n-k+1} \\max_{x \\in V} x^\\top A x
```

See {eq}`eq-test`.
"""


FIGURE_NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# Figure\n\nOf $y = x^2$."},
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "plot",
            "metadata": {"mystnb": {"figure": {"caption": "A parabola.", "name": "fig-parabola"}}},
            "outputs": [],
            "source": "import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots()\nax.plot([0, 1, 2], [0, 1, 4])\n"
            "ax.set(title='y = x^2', xlabel='x (1)', ylabel='y (1)')\nplt.show()",
        },
        {
            "cell_type": "markdown",
            "id": "r",
            "metadata": {},
            "source": "See {numref}`fig-parabola`.",
        },
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Read only by the tests: one build serves every worker.
    return once_per_run(tmp_path_factory, "offline-book-site", lambda: _build(tmp_path_factory))


def _build(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("book")
    shutil.copy(ROOT / "_config.yml", root / "_config.yml")
    shutil.copytree(ROOT / "book" / "_ext", root / "book" / "_ext")
    shutil.copytree(ROOT / "book" / "_static", root / "book" / "_static")  # html_static_path
    shutil.copy(ROOT / "book" / "references.bib", root / "book" / "references.bib")
    (root / "book" / "intro.md").write_text("# Intro\n\nA page.\n")
    (root / "book" / "math.md").write_text(MATH_PAGE)
    write_page(root / "book" / "figure.md", FIGURE_NOTEBOOK)  # a MyST notebook, as the book's
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/math\n  - file: book/figure\n"
    )
    result = subprocess.run(
        [str(JUPYTER_BOOK), "build", str(root), "--builder", "html", "-W", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root / "_build" / "html"


def test_mathjax_is_served_from_the_site(site):
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    html = (site / "book" / "math.html").read_text()
    assert 'src="../_static/mathjax/tex-chtml.js' in html


def test_book_stylesheet_is_served_and_linked(site):
    # _config.yml: html_static_path book/_static, html_css_files eigprec.css.
    assert (site / "_static" / "eigprec.css").is_file()
    assert 'href="../_static/eigprec.css' in (site / "book" / "math.html").read_text()


def test_no_page_loads_from_the_network(site):
    problems, _ = check_site.check_links_and_assets(site)
    assert problems == []


def test_a_text_pages_colab_and_download_buttons_give_its_notebook(site):
    # The theme builds a page's launch links from its source, book/figure.md; Colab opens
    # the reader's notebook on the notebooks branch, figure.ipynb (book/_ext/eigprec_sphinx.py),
    # and the Download menu offers the notebook and the PDF, not the MyST text.
    html = (site / "book" / "figure.html").read_text()
    links = [v for _, _, v in check_site.parse(site / "book" / "figure.html").links]
    colab = [v for v in links if v.startswith(check_site.COLAB)]
    assert colab == [f"{check_site.COLAB}/eigprec/eigen-precision/blob/notebooks/book/figure.ipynb"]
    assert "../_sources/book/figure.ipynb" in links
    assert (site / "_sources" / "book" / "figure.ipynb").is_file()
    assert not [v for v in links if v.endswith("figure.md")], links
    assert "download-notebook-button" in html and "download-source-button" not in html
    # A plain Markdown page keeps its source download and has no launch button.
    math = (site / "book" / "math.html").read_text()
    assert "download-source-button" in math and check_site.COLAB not in math


def test_math_renders_offline_in_a_browser_and_search_works(site):
    shots = ROOT / "_build" / "fixture-screenshots" / "offline-book"
    found = check_browser.check_site(site, shots, chromium_or_skip(), "display")
    reports = {r.page: r for r in found}
    assert all(r.ok for r in reports.values()), {p: r.problems for p, r in reports.items()}
    assert reports["book/math.html"].formulas == 3  # inline, display, labelled
    # An executed notebook's matplotlib figure, with its caption, loads as an image.
    figure = reports["book/figure.html"]
    assert (figure.images, figure.figures, figure.formulas) == (1, 1, 1)
    assert "search.html?q=display" in reports


def test_search_that_finds_nothing_fails(site):
    reports = check_browser.check_site(site, None, chromium_or_skip(), "zzyzxqq")
    assert "found nothing" in " ".join(reports[-1].problems)
