"""book/_static/eigprec.css on a 390-px phone: what issue 23.4 asked of it, in Chromium.

A page shaped like the theme's (an ``article.bd-article`` column of 358 px on a 390-px
phone) with the book's stylesheet: a table whose headers must wrap between words, not
letter by letter (the table may then be wider than the column and scroll in the
theme's wrapper: a chapter splits it); the real provenance box (``describe_runtime()``'s
HTML), opened; a printed output and a cell's code line longer than the column. With
the stylesheet the page keeps to the screen's width and the box and the code fit
(tools/check_browser.py's phone rules); the headers are measured word by word.
"""

import sys

import pytest

from .conftest import ROOT

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
    executable = check_browser.find_chromium()
    if executable is None:
        pytest.skip("no Chromium installed (apt-get install chromium; .ci/run does)")
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
