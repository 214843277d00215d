"""book/_static/eigprec.css on a 390-px phone: what issue 23.4 asked of it, in Chromium.

A page shaped like the theme's (an ``article.bd-article`` column of 358 px on a 390-px
phone) with the book's stylesheet: a table whose headers must wrap between words, not
letter by letter (the table may then be wider than the column and scroll in the
theme's wrapper: a chapter splits it); the real provenance box (``describe_runtime()``'s
HTML), opened; a printed output and a cell's code line longer than the column. With
the stylesheet the page keeps to the screen's width and the box and the code fit
(tools/check_browser.py's phone rules); the headers are measured word by word.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, chromium_or_skip

sys.path.insert(0, str(ROOT / "tools"))
import check_browser
from browser_driver import chromium, serve
from page_layout import LayoutBudget, layout_problems, measure_layout

import eigprec

CSS = ROOT / "book" / "_static" / "eigprec.css"
# Eight columns of one-character cells: narrower than their headers, as a table of
# flags or small counts is. Squeezed into a phone's column, the old stylesheet broke
# each header letter by letter.
HEADERS = ["error", "eigenspace", "asymmetry", "precision", "tolerance", "residual", "spectrum"]


def _page() -> str:
    head = "".join(f"<th>{h}</th>" for h in HEADERS)
    row = "".join("<td>0</td>" for _ in HEADERS)
    long_line = "print(" + ", ".join(f"value_{i}" for i in range(30)) + ")"
    return (
        '<!DOCTYPE html><html lang="en"><head><title>css</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="eigprec.css">'
        "<style>body{margin:0;font-family:sans-serif} article.bd-article{box-sizing:"
        "border-box;width:100%;padding:0 16px} pre{overflow-x:auto}"
        ".pst-scrollable-table-container{overflow-x:auto}</style></head><body>"
        '<main><article class="bd-article">'
        f'<div class="pst-scrollable-table-container"><table><tr>{head}</tr><tr>{row}</tr>'
        "</table></div>"
        '<div class="cell docutils container"><div class="cell_input docutils container">'
        f'<div class="highlight"><pre tabindex="0">{long_line}</pre></div></div>'
        '<div class="cell_output docutils container"><div class="output text_html">'
        f"{eigprec.describe_runtime()._repr_html_()}</div>"
        '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight">'
        f'<pre tabindex="0">{"  ".join(f"seed {i}: 0.{i}1234" for i in range(12))}</pre>'
        "</div></div></div></div></article></main></body></html>"
    )


# Each header word's width against the width of its cell's line boxes: a word broken
# letter by letter has a line box narrower than the word.
WORDS_JS = r"""
(() => [...document.querySelectorAll("th")].map((th) => {
  const probe = document.createElement("span");
  probe.style.whiteSpace = "nowrap";
  const widest = Math.max(...th.textContent.split(/\s+/).map((w) => {
    probe.textContent = w; th.appendChild(probe);
    const width = probe.getBoundingClientRect().width; probe.remove(); return width;
  }));
  const range = document.createRange(); range.selectNodeContents(th);
  const lines = [...range.getClientRects()].map((r) => r.width);
  return {text: th.textContent, widest_word: widest, widest_line: Math.max(...lines)};
}))()
"""


def test_phone_layout_with_the_book_stylesheet(tmp_path):
    executable = chromium_or_skip()
    (tmp_path / "page.html").write_text(_page())
    (tmp_path / "eigprec.css").write_text(CSS.read_text())
    with serve(tmp_path) as base, chromium(executable) as client:
        seen = measure_layout(client, base + "page.html", 390, 30)
        client.call(
            "Emulation.setDeviceMetricsOverride",
            width=390,
            height=900,
            deviceScaleFactor=1,
            mobile=True,
        )
        client.events.clear()  # measure_layout's load event is not this load's
        client.call("Page.navigate", url=base + "page.html")
        client.wait_for("Page.loadEventFired", 30)
        words = client.call("Runtime.evaluate", expression=WORDS_JS, returnByValue=True)
    assert seen["column_px"] == 358
    assert seen["provenance"]["count"] == 1 and seen["code_blocks"]["count"] == 2
    problems = layout_problems(seen, LayoutBudget(), chapter=True, phone=True)
    assert seen["page_px"] == 390, problems
    assert seen["provenance"]["wide"] == [] and seen["code_blocks"]["wide"] == [], problems
    for th in words["result"]["value"]:
        assert th["widest_line"] + 1 >= th["widest_word"], th


JS = ROOT / "book" / "_static" / "eigprec.js"
# The theme's markup that axe-core fails without book/_static/eigprec.js, as
# sphinx-book-theme 1.3, MyST-NB and docutils write it.
THEME_MARKUP = (
    '<header><button class="btn theme-switch-button" aria-label="Color mode">'
    '<i class="theme-switch" data-mode="light" title="Light"></i>'
    '<i class="theme-switch" data-mode="dark" title="Dark"></i></button></header>'
    '<nav aria-label="Main"><ul><li class="toctree-l1 has-children">'
    '<a href="c.html">3. Eigenbasis degeneracy</a><details><summary>'
    '<span class="toctree-toggle" role="presentation"><i class="fa"></i></span></summary>'
    '<ul><li><a href="d.html">3.1. Details</a></li></ul></details></li></ul></nav>'
    '<main><details class="hide above-input"><summary aria-label="Toggle hidden content">'
    '<p class="collapsed">Show code cell source</p></summary><pre>x = 1</pre></details>'
    '<div role="list" class="citation-list"><div class="citation" id="c1" '
    'role="doc-biblioentry"><span class="label">[Bia20]</span><p>P. Bialecki. '
    '<a href="https://example.org/pr">A pull request</a>.</p></div></div></main>'
)


def test_book_script_fixes_what_axe_finds_in_the_theme_markup(tmp_path):
    executable = chromium_or_skip()
    # Targets of 24 px, as the theme's stylesheet makes them (axe's target-size).
    head = (
        '<!DOCTYPE html><html lang="en"><head><title>t</title><style>a, button, summary'
        "{display:inline-block;min-height:24px;min-width:24px;margin:4px}</style>"
    )
    (tmp_path / "bare.html").write_text(f"{head}</head><body>{THEME_MARKUP}</body></html>")
    (tmp_path / "fixed.html").write_text(
        f'{head}<script defer src="eigprec.js"></script></head><body>{THEME_MARKUP}</body></html>'
    )
    (tmp_path / "eigprec.js").write_text(JS.read_text())
    reports = {r.page: r for r in check_browser.check_site(tmp_path, None, executable, widths=())}
    failing = {v["id"] for v in reports["bare.html"].axe if v["impact"] in ("serious", "critical")}
    assert failing == {"aria-required-children", "label-content-name-mismatch", "summary-name"}
    assert reports["fixed.html"].problems == []


def _fontawesome() -> Path | None:
    spec = importlib.util.find_spec("pydata_sphinx_theme")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    return next(root.glob("theme/*/static/scripts/fontawesome.js"), None)


FONTAWESOME = _fontawesome()
ICONS_JS = r"""
(() => {
  const button = document.querySelector(".theme-switch-button");
  const icons = [...button.children];
  return {
    name: button.getAttribute("aria-label"),
    tags: icons.map((el) => el.tagName.toLowerCase()),
    titles: button.querySelectorAll("title, [title]").length,
    labelled: button.querySelectorAll("[aria-labelledby]").length,
    hidden: icons.every((el) => el.getAttribute("aria-hidden") === "true"),
  };
})()
"""


# What Font Awesome writes for <i class="theme-switch fa-solid fa-sun" title="Light"> when it
# converts the icon before the book's script has taken the title away (path shortened).
CONVERTED = (
    '<svg class="svg-inline--fa fa-{icon} theme-switch fa-lg" data-mode="{mode}" '
    'aria-labelledby="t-{mode}" data-prefix="fas" data-icon="{icon}" role="img" '
    'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 512 512" data-fa-i2svg="">'
    '<title id="t-{mode}">{title}</title><path fill="currentColor" d="M0 0h512v512H0z"></path>'
    '</svg><!-- <i class="theme-switch fa-solid fa-{icon} fa-lg" data-mode="{mode}" '
    'title="{title}"></i> Font Awesome fontawesome.com -->'
)


def test_colour_mode_icons_are_decorative_whichever_script_runs_first(tmp_path):
    # Font Awesome's deferred script turns each <i title="Light"> of the colour-mode button
    # into an <svg role="img"> with a <title>; on some loads it does so before the book's
    # script (at DOMContentLoaded) takes the titles away, and axe-core then counted "Light"
    # as the button's visible text (label-content-name-mismatch, serious: CI failed on it,
    # on a different page each time). The icons must end decorative whichever ran first:
    # hidden, without titles; the button keeps its name.
    executable = chromium_or_skip()
    if FONTAWESOME is None:
        pytest.skip("pydata-sphinx-theme (its fontawesome.js) is not installed")
    modes = (("sun", "light", "Light"), ("moon", "dark", "Dark"))
    icons = "".join(
        f'<i class="theme-switch fa-solid fa-{i} fa-lg" data-mode="{m}" title="{t}"></i>'
        for i, m, t in modes
    )
    converted = "".join(CONVERTED.format(icon=i, mode=m, title=t) for i, m, t in modes)
    fa, book = '<script defer src="fontawesome.js"></script>', '<script src="eigprec.js"></script>'
    pages = {
        "fa_first.html": (fa + book, icons),
        "book_first.html": (book + fa, icons),
        "converted.html": (book + fa, converted),  # Font Awesome won the race
    }
    for name, (scripts, inside) in pages.items():
        (tmp_path / name).write_text(
            f'<!DOCTYPE html><html lang="en"><head><title>t</title>{scripts}</head><body>'
            f'<header><button class="btn theme-switch-button" aria-label="Color mode">{inside}'
            "</button></header><main><p>x</p></main></body></html>"
        )
    (tmp_path / "eigprec.js").write_text(JS.read_text())
    (tmp_path / "fontawesome.js").write_text(FONTAWESOME.read_text())
    with serve(tmp_path) as base, chromium(executable) as client:
        for name in pages:
            client.events.clear()
            client.call("Page.navigate", url=base + name)
            assert client.wait_for("Page.loadEventFired", 30)
            client.call(
                "Runtime.evaluate",
                expression="new Promise((r) => setTimeout(r, 500))",
                awaitPromise=True,
            )
            seen = client.call("Runtime.evaluate", expression=ICONS_JS, returnByValue=True)
            seen = seen["result"]["value"]
            assert seen["tags"] == ["svg", "svg"], (name, seen)  # Font Awesome ran
            assert seen["name"] == "Color mode", (name, seen)
            assert seen["titles"] == 0 and seen["labelled"] == 0, (name, seen)
            assert seen["hidden"], (name, seen)


# A summary table of the API page as Sphinx's autosummary writes it: a name, then the first
# line of its docstring. A long first line must wrap between words in the column; with
# every table cell kept on one line (the rule for tables of numbers) it made the table 504
# px wider than the 688-px desktop column (make test's browser check failed on api.html).
# The name itself stays whole: squeezed by a wrapping description, `check_readable` broke
# into `check_readabl` / `e` (and on a phone `load_re` / `cord`).
AUTOSUMMARY_ROW = (
    '<tr class="row-odd"><td><p><a class="reference internal" href="#q">'
    '<code class="xref py py-obj docutils literal notranslate"><span class="pre">{name}'
    "</span></code></a></p></td><td><p>{summary}</p></td></tr>"
)
NAME_LINES_JS = r"""
[...document.querySelectorAll("table.autosummary td:first-child code")].map((code) => {
  const range = document.createRange(); range.selectNodeContents(code);
  const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
  return [code.textContent, tops.size];
})
"""


@pytest.mark.parametrize(("width", "column"), [(1280, 688), (390, 358)])
def test_api_summary_tables_wrap_descriptions_and_keep_names_whole(tmp_path, width, column):
    executable = chromium_or_skip()
    summary = " ".join(["Whether the chapter's experiments run at the smallest scale;"] * 4)
    rows = "".join(
        AUTOSUMMARY_ROW.format(name=name, summary=text)
        for name, text in (
            ("quick_scale", summary),
            ("check_readable", "Fail unless a figure fits the column unscaled and all its text is "
             "readable."),
            ("load_record", "Load a recorded result (JSON with provenance) from book/data/."),
        )
    )  # fmt: skip
    article = "width:688px" if width > 600 else "box-sizing:border-box;width:100%;padding:0 16px"
    (tmp_path / "page.html").write_text(
        '<!DOCTYPE html><html lang="en"><head><title>api</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="eigprec.css">'
        f"<style>body{{margin:0;font-family:sans-serif}} article.bd-article{{{article}}}"
        ".pst-scrollable-table-container{overflow-x:auto}</style></head><body>"
        '<main><article class="bd-article"><div class="pst-scrollable-table-container">'
        f'<table class="autosummary longtable table autosummary"><tbody>{rows}</tbody></table>'
        "</div></article></main></body></html>"
    )
    (tmp_path / "eigprec.css").write_text(CSS.read_text())
    with serve(tmp_path) as base, chromium(executable) as client:
        seen = measure_layout(client, base + "page.html", width, 30)
        client.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        names = client.call("Runtime.evaluate", expression=NAME_LINES_JS, returnByValue=True)
    problems = layout_problems(seen, LayoutBudget(), chapter=False, phone=width < 600)
    assert seen["column_px"] == column and seen["tables"]["count"] == 1
    assert seen["tables"]["wide"] == [] and seen["page_px"] == width, problems
    assert [lines for _, lines in names["result"]["value"]] == [1, 1, 1], names
