"""tools/check_browser.py fails on what a reader would see broken, and passes clean pages.

One headless Chromium session loads a small fixture site: clean pages (a loaded
image, math typeset by the bundled offline MathJax, dollar signs in code and prose)
and one page per fault (a missing image, raw $…$, raw \\(…\\), an untypeset .math
element, a console error, an uncaught exception, a script from a CDN), and one per
accessibility fault axe-core grades serious or worse (an image without alt text, faint
text, text unreadable in the dark theme only).

Layout: pages shaped like the theme's (an ``article.bd-article`` column 560 px wide
at 1280 px, 350 px at 390 px, MyST-NB's cell markup) that keep within the limits at
both widths, hidden cells included, and one page per broken limit: a wide table in a
scrolling wrapper, a clipped display formula, a wide figure, four wide code blocks, 151
lines of code at the desktop width; a table, a printed output, a provenance box and a
page that fit the desktop but not the phone.
"""

import base64
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, chromium_or_skip, once_per_run

sys.path.insert(0, str(ROOT / "tools"))
import check_browser
import page_layout

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


VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


def _page(body: str, head: str = "") -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><title>t</title>{VIEWPORT}{head}</head>'
        f"<body>{body}</body></html>"
    )


MATHJAX = '<script defer src="mathjax/tex-chtml.js"></script>'


def _churn(last: str) -> str:
    """A script that changes the page every 40 ms for 1.6 s after the load event, then
    runs ``last``."""
    return (
        '<script>addEventListener("load", () => { let k = 0; const t = setInterval(() => {'
        ' document.getElementById("n").textContent = String(++k);'
        f" if (k === 40) {{ clearInterval(t); {last}; }} }}, 40); }});</script>"
    )


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
    # Accessibility (axe-core): critical, serious, and serious in the dark theme only.
    "axe_alt.html": _page('<main><img src="pic.png"></main>'),
    "axe_faint.html": _page('<main><p style="color:#bbb;background:#fff">faint</p></main>'),
    "axe_dark.html": _page(
        '<style>html[data-theme="dark"] p{color:#333;background:#111}</style>'
        "<main><p>dark only</p></main>"
    ),
    # A page whose script is still rewriting it after the load event (as Font Awesome
    # turns the theme's <i> icons into <svg> with a <title>): what is checked is the page
    # once it has stopped changing, not a state in between. Clean in the end, with a
    # serious fault on the way (a button whose text is not in its name, as CI once saw).
    "settling.html": _page(
        '<main><button aria-label="Color mode"><span id="s">Light</span></button>'
        '<p id="n">0</p></main>' + _churn('document.getElementById("s").textContent = ""')
    ),
    # ... and one that is clean on the way and faulty once it has settled.
    "settling_fault.html": _page(
        '<main><p id="n">0</p></main>'
        + _churn(
            'const i = document.createElement("img"); i.src = "pic.png";'
            " document.querySelector('main').append(i)"
        )
    ),
}

# The theme's layout in miniature: a centred column (560 px of content at 1280 px,
# 350 px on a 390 px phone), code that scrolls in its own box, display math in a
# clipping flex row, tables in a scrolling wrapper; what scrolls can take the keyboard's
# focus (tabindex="0", which the theme's script adds), as axe-core asks.
THEME = (
    "<style>body{margin:0} article.bd-article{box-sizing:border-box;width:600px;"
    "max-width:100%;margin:0 auto;padding:0 20px} pre{overflow-x:auto;margin:0}"
    "div.math{display:flex;overflow:hidden;max-width:100%}"
    "div.math mjx-container{flex-grow:1;overflow:auto}"
    ".scroll{overflow-x:auto} td{padding:0}"
    # As the book's stylesheet does on a phone: code and printed output wrap (at spaces).
    "@media (max-width:600px){pre{white-space:pre-wrap}}</style>"
)


def _chapter(body: str, math: bool = False) -> str:
    return _page(f'<article class="bd-article">{body}</article>', THEME + (MATHJAX if math else ""))


def _code(lines: int, start: int = 0) -> str:
    return "\n".join(f"x_{i} = {i}" for i in range(start, start + lines))


def _cell(code: str, output: str = "", hidden: bool = False) -> str:
    source = (
        '<div class="cell_input docutils container"><div class="highlight-ipython3 notranslate">'
        f'<div class="highlight"><pre tabindex="0">{code}</pre></div></div></div>'
    )
    if hidden:  # MyST-NB's hide-input toggle
        source = f'<details class="hide above-input"><summary>Show code</summary>{source}</details>'
    out = f'<div class="cell_output docutils container">{output}</div>' if output else ""
    tags = " tag_hide-input" if hidden else ""
    return f'<div class="cell docutils container{tags}">{source}{out}</div>'


def _listing(code: str) -> str:  # show_source output: a highlighted Markdown block
    return (
        '<div class="highlight-python notranslate">'
        f'<div class="highlight"><pre tabindex="0">{code}</pre></div></div>'
    )


def _stream(text: str) -> str:  # printed output
    return (
        '<div class="output stream highlight-myst-ansi notranslate">'
        f'<div class="highlight"><pre tabindex="0">{text}</pre></div></div>'
    )


def _table(width_px: int) -> str:
    span = f'<span style="display:inline-block;width:{width_px // 4}px">'
    cells = "".join(f"<td>{span}c{i}</span></td>" for i in range(4))
    table = f'<table style="border-collapse:collapse"><tr>{cells}</tr></table>'
    return f'<div class="scroll" tabindex="0">{table}</div>'


PROVENANCE = (
    '<details class="eigprec-provenance"><summary>Provenance: executed on CPU</summary>'
    '<table><tr><th>Versions</th><td><span style="display:inline-block;width:{width}px">'
    "torch</span></td></tr></table></details>"
)
LONG = "y = " + " + ".join(f"coefficient_{i}" for i in range(30))
WIDE_TEX = " + ".join(f"a_{{{i}}} b_{{{i}}}" for i in range(60))

LAYOUT_PAGES = {
    # At the limits: 149 + 1 visible code lines in cells (and a 50-line listing), 3 wide
    # code blocks (printed output), a hidden cell (40 lines and a wide line) that must
    # not count, a narrow table, formula and figure, and a provenance box (closed) that
    # fits. On a phone the printed lines wrap.
    "chapter_ok.html": _chapter(
        _cell(_code(149), _listing(_code(50, 200)) + _stream(_code(30)))
        + _cell(_code(40) + "\n" + LONG, hidden=True)
        + _cell("print(row)", "".join(_stream(LONG) for _ in range(3)))
        + _table(200)
        + PROVENANCE.format(width=200)
        + '<div class="math notranslate nohighlight">\\[\\sum_i a_i b_i\\]</div>'
        + '<figure><img src="pic.png" alt="small" style="width:300px"></figure>',
        math=True,
    ),
    "wide_table.html": _chapter(_cell("t") + _table(900)),
    "wide_formula.html": _chapter(
        _cell("f") + f'<div class="math notranslate nohighlight">\\[{WIDE_TEX}\\]</div>', math=True
    ),
    "wide_figure.html": _chapter(_cell("g") + '<img src="pic.png" alt="big" style="width:900px">'),
    "wide_code.html": _chapter("".join(_cell(LONG) for _ in range(4))),
    "many_lines.html": _chapter(_cell(_code(100)) + _cell(_code(51, 100), _listing(_code(9)))),
    # Not a chapter (no notebook cells): code is not budgeted there.
    "prose.html": _chapter(_listing(_code(200)) + "".join(_listing(LONG) for _ in range(4))),
    # Fit the desktop, not the phone: a 500 px table, a printed line with no space to
    # wrap at (60 digits, about 480 px), a provenance box holding a 450 px cell, and a
    # 600 px banner that widens the page.
    "phone_table.html": _chapter(_cell("t") + _table(500)),
    "phone_output.html": _chapter(_cell("print(x)", _stream("0123456789" * 6))),
    "phone_provenance.html": _chapter(_cell("p") + PROVENANCE.format(width=450)),
    "phone_page.html": _page(
        f'<div style="width:600px">banner</div><article class="bd-article">{_cell("b")}</article>',
        THEME,
    ),
}
PAGES.update(LAYOUT_PAGES)

WIDE = "tables/formulas/figures/provenance boxes"
EXPECTED = {
    "broken_image.html": "image did not load: missing.png",
    "raw_dollar.html": "raw math in the visible text",
    "raw_paren.html": "raw math in the visible text",
    "untypeset.html": "math not rendered",
    "console_error.html": "console error: chapter widget broke",
    "exception.html": "uncaught exception: ReferenceError",
    "cdn.html": "fetches from the network: https://cdn.example.org/lib.js",
    "wide_table.html": f"1 {WIDE} wider than the 560 px column at 1280 px",
    "wide_formula.html": f"1 {WIDE} wider than the 560 px column at 1280 px",
    "wide_figure.html": f"1 {WIDE} wider than the 560 px column at 1280 px",
    "wide_code.html": "4 code blocks wider than the 560 px column at 1280 px (at most 3)",
    "many_lines.html": "151 visible code lines in cells (at most 150; 151 in cells, 9 in",
    "phone_table.html": f"1 {WIDE} wider than the 350 px column at 390 px (at most 0)",
    "phone_output.html": "1 code blocks wider than the 350 px column at 390 px (at most 0)",
    "phone_provenance.html": f"2 {WIDE} wider than the 350 px column at 390 px (at most 0)",
    "phone_page.html": "the page is 600 px wide on a 390 px screen",
    "axe_alt.html": "accessibility (critical, image-alt): Images must have alternative text",
    "axe_faint.html": "accessibility (serious, color-contrast): Elements must meet minimum",
    "axe_dark.html": "accessibility (serious, color-contrast) in the dark theme: Elements",
    "settling_fault.html": "accessibility (critical, image-alt): Images must have alternative",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    executable = chromium_or_skip()
    mathjax = _mathjax_dir()
    if mathjax is None:
        pytest.skip("sphinx-mathjax-offline (the bundled MathJax) is not installed")
    site = tmp_path_factory.mktemp("site")
    for name, html in PAGES.items():
        (site / name).write_text(html)
    (site / "pic.png").write_bytes(PNG)
    (site / "mathjax").symlink_to(mathjax, target_is_directory=True)
    shots = Path(__file__).resolve().parents[1] / "_build" / "fixture-screenshots"

    def check() -> dict:
        return {r.page: r for r in check_browser.check_site(site, shots, executable)}

    return once_per_run(tmp_path_factory, "browser-fixture-site", check)


def test_every_page_is_checked(reports):
    assert set(reports) == set(PAGES)


@pytest.mark.parametrize(
    "page", ["clean.html", "math_ok.html", "chapter_ok.html", "prose.html", "settling.html"]
)
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


def test_hidden_cells_and_outputs_are_not_code_lines(reports):
    seen = reports["chapter_ok.html"].layout["1280"]
    assert (seen["input_lines"], seen["listing_lines"], seen["code_lines"]) == (150, 50, 150)
    assert seen["hidden_input_lines"] == 41
    assert reports["chapter_ok.html"].chapter and not reports["prose.html"].chapter


def test_layout_figures_at_both_widths(reports):
    layout = reports["chapter_ok.html"].layout
    assert set(layout) == {"1280", "390"}
    desktop, phone = layout["1280"], layout["390"]
    assert (desktop["viewport_px"], desktop["column_px"]) == (1280, 560)
    assert (phone["viewport_px"], phone["column_px"]) == (390, 350)
    # Three printed lines too wide (allowed); the hidden cell's wide line is not seen.
    assert len(desktop["code_blocks"]["wide"]) == 3
    assert desktop["code_blocks"]["hidden"] == 1
    for kind, count in (("tables", 2), ("formulas", 1), ("figures", 1)):
        assert desktop[kind]["count"] == count and desktop[kind]["wide"] == []
    assert (desktop["provenance"]["count"], desktop["provenance"]["wide"]) == (1, [])
    # On the phone the printed lines wrap, and nothing is wider than the column.
    for kind in ("tables", "formulas", "figures", "provenance", "code_blocks"):
        assert phone[kind]["wide"] == [], kind
    assert phone["page_px"] == 390
    assert reports["chapter_ok.html"].problems == []


def test_phone_only_faults_fit_the_desktop(reports):
    for page in ("phone_table.html", "phone_output.html", "phone_provenance.html"):
        assert not any("1280 px" in p for p in reports[page].problems), page
    (box,) = reports["phone_provenance.html"].layout["390"]["provenance"]["wide"]
    assert box["text"].startswith("Provenance: executed on CPU")
    assert any(p.startswith("  provenance ") for p in reports["phone_provenance.html"].problems)


def test_axe_grades_and_what_fails(reports):
    # Content outside landmarks is a moderate finding: reported, not failing.
    math_ok = reports["math_ok.html"]
    assert {v["id"]: v["impact"] for v in math_ok.axe}.get("region") == "moderate"
    assert math_ok.problems == []
    dark = reports["axe_dark.html"].axe
    assert [v["id"] for v in dark if v["dark"]] == ["color-contrast"]
    assert not any(v["id"] == "color-contrast" for v in dark if not v["dark"])


@pytest.mark.parametrize(
    "page, kind",
    [
        ("wide_table.html", "tables"),
        ("wide_formula.html", "formulas"),
        ("wide_figure.html", "figures"),
    ],
)
def test_wide_element_is_measured(reports, page, kind):
    (wide,) = reports[page].layout["1280"][kind]["wide"]
    assert wide["excess_px"] > 100


def test_layout_problems_rules():
    def seen(wide_tables=0, wide_code=0, lines=0):
        item = {"excess_px": 40, "width_px": 600, "text": "x", "tag": "table"}
        return {
            "viewport_px": 1280,
            "column_px": 560,
            "tables": {"count": 5, "hidden": 0, "wide": [item] * wide_tables},
            "formulas": {"count": 0, "hidden": 0, "wide": []},
            "figures": {"count": 0, "hidden": 0, "wide": []},
            "code_blocks": {"count": 9, "hidden": 0, "wide": [item] * wide_code},
            "input_lines": lines,
            "listing_lines": 7,
        }

    budget = page_layout.LayoutBudget()
    assert page_layout.layout_problems(seen(0, 3, 150), budget, chapter=True) == []
    assert len(page_layout.layout_problems(seen(1), budget, chapter=False)) == 2  # + the item
    # On the phone: code blocks count on every page, none may be wide by default, and
    # the code-line budget does not apply.
    phone = {**seen(0, 1, 999), "viewport_px": 390, "column_px": 358, "page_px": 390}
    assert page_layout.layout_problems(phone, budget, chapter=False, phone=True) == [
        "1 code blocks wider than the 358 px column at 390 px (at most 0)",
        "  40 px too wide: 'x'",
    ]
    loose = page_layout.LayoutBudget(phone_max_wide_code=1)
    assert page_layout.layout_problems(phone, loose, chapter=True, phone=True) == []
    assert page_layout.layout_problems(seen(0, 9, 999), budget, chapter=False) == []
    assert page_layout.layout_problems(seen(0, 0, 151), budget, chapter=True) == [
        "151 visible code lines in cells (at most 150; 151 in cells, 7 in listings)"
    ]
    looser = page_layout.LayoutBudget(max_wide=1, max_wide_code=4, max_code_lines=151)
    assert page_layout.layout_problems(seen(1, 4, 151), looser, chapter=True) == []
    listings = page_layout.LayoutBudget(count_listings=True)
    assert page_layout.layout_problems(seen(0, 0, 144), listings, chapter=True) == [
        "151 visible code lines in cells and listings (at most 150; 144 in cells, 7 in listings)"
    ]


def test_layout_budget_rejects_bad_limits():
    with pytest.raises(ValueError, match="max_code_lines must be >= 0"):
        page_layout.LayoutBudget(max_code_lines=-1)
    with pytest.raises(TypeError, match="max_wide must be an int"):
        page_layout.LayoutBudget(max_wide=0.5)
    with pytest.raises(TypeError, match="count_listings must be a bool"):
        page_layout.LayoutBudget(count_listings="yes")


def test_chapters_by_name_or_by_cells():
    assert check_browser.is_chapter("book/tf32.html", {"notebook": False}, {"tf32"})
    assert not check_browser.is_chapter("book/api.html", {"notebook": True}, {"tf32"})
    assert check_browser.is_chapter("book/api.html", {"notebook": True}, None)


def test_chapters_option_must_name_existing_pages(tmp_path):
    (tmp_path / "tf32.html").write_text(_page("<p>x</p>"))
    with pytest.raises(SystemExit, match=r"lacks: \['clark'\]"):
        check_browser.check_site(tmp_path, None, "unused", chapters={"tf32", "clark"})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-code-lines", "-5"], "must be >= 0"),
        (["--max-wide-code", "three"], "not a whole number"),
        (["--phone-width", "39"], "a viewport width of 200 to 4000 px"),
        (["--desktop-width", "0"], "--desktop-width must be a positive"),
        (["--desktop-width", "800", "--phone-width", "800"], "must differ"),
        (["--chapters", "tf32,,clarke"], "an empty name"),
    ],
)
def test_bad_options_are_refused(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        check_browser.main([str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_main_prints_and_writes_layout(tmp_path, capsys):
    chromium_or_skip()
    site = tmp_path / "site"
    site.mkdir()
    (site / "many_lines.html").write_text(LAYOUT_PAGES["many_lines.html"])
    summary = tmp_path / "summary.json"
    argv = [str(site), "--json", str(summary), "--phone-width", "400"]
    assert check_browser.main(argv) == 1
    out = capsys.readouterr().out
    assert "chapter layout (desktop) @1280px column=560px" in out
    assert "chapter layout (phone) @400px column=360px" in out
    assert "axe 4.14.1: rules violated critical 0 serious 0" in out
    (page,) = json.loads(summary.read_text())
    assert page["layout"]["1280"]["code_lines"] == 151 and page["chapter"]
    assert check_browser.main([*argv, "--max-code-lines", "151"]) == 0
    assert check_browser.main([*argv, "--max-code-lines", "151", "--count-listings"]) == 1
    (page,) = json.loads(summary.read_text())
    assert page["layout"]["1280"]["code_lines"] == 160


def test_listing_pages_in_full_are_the_index_and_the_longest(tmp_path):
    pages = {
        "_modules/index.html": 500,
        "_modules/pkg/a.html": 3000,
        "_modules/pkg/b.html": 9000,
        "_modules/pkg/sub/c.html": 4000,
        "book/a.html": 99000,
    }
    for name, size in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x" * size)
    chosen = check_browser.listings_in_full(tmp_path, sorted(pages))
    assert chosen == {"_modules/index.html", "_modules/pkg/b.html"}
    assert check_browser.listings_in_full(tmp_path, ["book/a.html"]) == set()


@pytest.mark.parametrize("every_listing", [False, True])
def test_other_listings_are_loaded_without_screenshot_layout_or_axe(
    tmp_path, monkeypatch, every_listing
):
    import contextlib

    for name, size in (
        ("_modules/index.html", 10),
        ("_modules/a.html", 50),
        ("_modules/b.html", 90),
        ("book/x.html", 20),
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("<p>" + "x" * size)
    loaded, measured = {}, []
    monkeypatch.setattr(check_browser, "serve", lambda site: contextlib.nullcontext("http://h/"))
    monkeypatch.setattr(check_browser, "chromium", lambda exe: contextlib.nullcontext(None))

    def fake_page(client, base, page, shots, axe_fail=None):
        loaded[page] = (shots, axe_fail)
        return check_browser.PageReport(page=page)

    monkeypatch.setattr(check_browser, "check_page", fake_page)
    monkeypatch.setattr(check_browser, "check_layout", lambda c, b, r, *a: measured.append(r.page))
    shots = tmp_path / "shots"
    reports = check_browser.check_site(tmp_path, shots, "chromium", every_listing=every_listing)
    assert sorted(r.page for r in reports) == sorted(loaded) and len(loaded) == 4
    full = (
        set(loaded) if every_listing else {"_modules/index.html", "_modules/b.html", "book/x.html"}
    )
    assert {p for p, (s, axe) in loaded.items() if s == shots and axe == "serious"} == full
    assert set(measured) == full
    assert all(loaded[p] == (None, None) for p in set(loaded) - full)
