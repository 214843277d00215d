"""tools/check_browser.py fails on what a reader would see broken, and passes clean pages.

One headless Chromium session loads a small fixture site: clean pages (a loaded
image, math typeset by the bundled offline MathJax, dollar signs in code and prose)
and one page per fault (a missing image, raw $…$, raw \\(…\\), an untypeset .math
element, a console error, an uncaught exception, a script from a CDN).
"""

import base64
import importlib.util
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import check_browser

CHROMIUM = check_browser.find_chromium()

# A 2x2 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP8z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg=="
)


def _mathjax_dir() -> Path | None:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    return path if path.is_dir() else None


def _page(body: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head><title>t</title>{head}</head><body>{body}</body></html>"


MATHJAX = '<script defer src="mathjax/tex-chtml.js"></script>'

PAGES = {
    "clean.html": _page(
        '<main><figure><img src="pic.png" alt="a"></figure>'
        "<p>A shell line: <code>echo $HOME $PATH</code>; it costs $5 and $6 today.</p>"
        "<pre>price = $x$  # code keeps its dollars</pre></main>"
    ),
    "math_ok.html": _page(
        '<p>Inline <span class="math notranslate nohighlight">\\(x^2 + 1\\)</span> and</p>'
        '<div class="math notranslate nohighlight">\\[\\sum_i a_i\\]</div>',
        head=MATHJAX,
    ),
    "broken_image.html": _page('<img src="missing.png" alt="gone">'),
    "raw_dollar.html": _page("<p>The energy is $E = mc^2$ here.</p>"),
    "raw_paren.html": _page("<p>The norm \\(\\|x\\|\\) stays raw.</p>"),
    "untypeset.html": _page('<span class="math">x</span>'),
    "console_error.html": _page('<script>console.error("chapter widget broke")</script>'),
    "exception.html": _page("<script>undefinedFunction()</script>"),
    "cdn.html": _page('<script src="https://cdn.example.org/lib.js"></script><p>x</p>'),
}

EXPECTED = {
    "broken_image.html": "image did not load: missing.png",
    "raw_dollar.html": "raw math in the visible text",
    "raw_paren.html": "raw math in the visible text",
    "untypeset.html": "math not rendered",
    "console_error.html": "console error: chapter widget broke",
    "exception.html": "uncaught exception: ReferenceError",
    "cdn.html": "fetches from the network: https://cdn.example.org/lib.js",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (apt-get install chromium; .ci/run does)")
    mathjax = _mathjax_dir()
    if mathjax is None:
        pytest.skip("sphinx-mathjax-offline (the bundled MathJax) is not installed")
    site = tmp_path_factory.mktemp("site")
    for name, html in PAGES.items():
        (site / name).write_text(html)
    (site / "pic.png").write_bytes(PNG)
    (site / "mathjax").symlink_to(mathjax, target_is_directory=True)
    shots = Path(__file__).resolve().parents[1] / "_build" / "fixture-screenshots"
    found = check_browser.check_site(site, shots, CHROMIUM)
    return {r.page: r for r in found}


def test_every_page_is_checked(reports):
    assert set(reports) == set(PAGES)


@pytest.mark.parametrize("page", ["clean.html", "math_ok.html"])
def test_clean_pages_pass(reports, page):
    assert reports[page].problems == []
    assert reports[page].screenshot and Path(reports[page].screenshot).stat().st_size > 1000


def test_offline_mathjax_typesets(reports):
    assert reports["math_ok.html"].formulas == 2


def test_figures_counted(reports):
    assert (reports["clean.html"].images, reports["clean.html"].figures) == (1, 1)


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_fault_is_reported(reports, page):
    problems = reports[page].problems
    assert any(EXPECTED[page] in p for p in problems), problems


def test_redirect_page_points_to_existing_page(tmp_path):
    (tmp_path / "index.html").write_text(
        '<meta http-equiv="Refresh" content="0; url=book/intro.html" />'
    )
    assert check_browser.redirect_target(tmp_path, "index.html") == "book/intro.html"
    (tmp_path / "plain.html").write_text("<p>no redirect</p>")
    assert check_browser.redirect_target(tmp_path, "plain.html") is None


def test_main_skips_without_chromium(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(check_browser, "find_chromium", lambda: None)
    assert check_browser.main([str(tmp_path)]) == 0
    assert "browser check SKIPPED: no Chromium found" in capsys.readouterr().out
