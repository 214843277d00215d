"""Load every page of the built site in headless Chromium, as a reader's browser would.

The site is served from a loopback-only HTTP server and Chromium cannot resolve any
other host, so the check also proves the site works offline. A page fails on:

- a console error, an uncaught exception or a resource that failed to load;
- a request to any host but the local server (a script, stylesheet or font that
  would come from a CDN);
- an image that did not load;
- math left unrendered: a ``.math`` element MathJax did not typeset, or raw
  ``$…$``, ``$$``, ``\\(`` or ``\\[`` in the visible text outside code.

- an accessibility violation of impact serious or critical found by axe-core (vendored
  in ``tools/axe-core``; light theme, and the dark theme's colour contrast):
  ``page_axe.py`` says which rules run.

Sphinx's source listings (``_modules/``, one page per module the API page documents,
all one template filled with highlighted code) are checked in full on two pages: their
index and the longest listing; the others are loaded and checked for the faults above
but not screenshot, measured or graded by axe-core (``--every-listing`` checks them all
in full; on the 2-core machine the 19 listings took 107 of the check's 196 s).

A full-page screenshot of each page is saved (``--screenshots``) and a summary per
page (images, figures, rendered formulas, accessibility) is printed and written as JSON.

Layout: every page is measured again at 1280 px and at 390 px, both enforced: tables,
display formulas, figures, the provenance box and code blocks wider than the article
column, a page wider than a phone's screen, and, on chapters, the lines of code in
view. ``page_layout.py`` says exactly what counts.

Chromium is driven over the DevTools protocol (``websocket-client``,
``browser_driver.py``); no browser is downloaded. Where Chromium is not installed the
check is skipped, saying so. (Playwright for Python drives the same Debian Chromium
offline, but its wheel is 53 MB, 165 MB installed with its own Node.js, for what a
160-line driver does here; axe-core runs in the page either way.)

Usage: ``python tools/check_browser.py _build/html --screenshots _build/screenshots
--chapters tf32,clarke,degeneracy``
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser_driver import (
    CHROMIUM_CANDIDATES,
    PAGE_TIMEOUT_S,
    DevTools,
    chromium,
    find_chromium,
    serve,
)
from page_axe import IMPACTS, axe_problems, axe_summary, run_axe
from page_layout import (
    QUIET_JS,
    SETTLE_JS,
    LayoutBudget,
    layout_problems,
    layout_summary,
    measure_layout,
)

SCREENSHOT_MAX_HEIGHT = 6000
DESKTOP_WIDTH, PHONE_WIDTH = 1280, 390
# Pages of the theme, not of the book: no layout of ours to measure.
NOT_MEASURED = {"search.html", "genindex.html", "py-modindex.html"}

# Raw TeX a reader would see if MathJax did not run: $…$ (not a lone dollar amount),
# $$, \( and \[ , and \begin{…}.
RAW_MATH = re.compile(
    r"\$\$|\\\(|\\\[|\\begin\{|(?<![\w$\\])\$(?=[^\s$])[^$\n]{1,200}?(?<=[^\s$\\])\$(?![\w$])"
)

# Runs in the page once it has loaded: waits for MathJax, every image and the page to
# stop changing, then reports what a reader would see. Code is excluded from the
# raw-math search.
INSPECT_JS = (
    r"""
(async () => {
"""
    + SETTLE_JS
    + QUIET_JS
    + r"""  const broken = imgs.filter((img) => !(img.complete && img.naturalWidth > 0))
                     .map((img) => img.getAttribute("src") || "(no src)");
  const skip = "pre, code, script, style, textarea, kbd, mjx-container, .MathJax";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const parts = [];
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (!el || el.closest(skip)) continue;
    if (el.checkVisibility && !el.checkVisibility()) continue;
    parts.push(walker.currentNode.textContent);
  }
  const unrendered = [...document.querySelectorAll(".math")]
    .filter((el) => !el.querySelector("mjx-container"))
    .map((el) => el.textContent.trim().slice(0, 80));
  // The chapter's own content, not the theme's header (launch-button logos).
  const main = document.querySelector("article") || document.querySelector("main")
    || document.body;
  return {
    title: document.title,
    text: parts.join(" "),
    broken_images: broken,
    unrendered_math: unrendered,
    images: main.querySelectorAll("img").length,
    figures: main.querySelectorAll("figure").length,
    formulas: document.querySelectorAll("mjx-container").length,
    height: Math.ceil(document.documentElement.scrollHeight),
  };
})()
"""
)


@dataclass
class PageReport:
    """What the browser saw on one page."""

    page: str
    title: str = ""
    images: int = 0
    figures: int = 0
    formulas: int = 0
    screenshot: str | None = None
    chapter: bool = False
    # Layout figures per viewport width ("1280", "390"), as page_layout.LAYOUT_JS reports.
    layout: dict[str, dict] = field(default_factory=dict)
    # axe-core's violated rules (page_axe.run_axe), light and dark theme; None: not run.
    axe: list[dict] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def site_pages(site: Path) -> list[str]:
    """Every HTML page of a built site, relative to it (theme and source files excluded)."""
    pages = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if rel.split("/")[0] in {"_static", "_sources", "_images"}:
            continue
        pages.append(rel)
    return pages


def listings_in_full(site: Path, pages: list[str]) -> set[str]:
    """The source-listing pages (``_modules/``) checked in full: their index and the longest.

    Every listing page is the same Sphinx template around one module's highlighted source,
    so the longest one (the most code to lay out) stands for the rest, and the index for
    the pages that list rather than show code.
    """
    listings = [p for p in pages if p.startswith("_modules/")]
    chosen = {p for p in listings if p == "_modules/index.html"}
    code = [p for p in listings if p not in chosen]
    if code:
        chosen.add(max(code, key=lambda p: ((site / p).stat().st_size, p)))
    return chosen


def _console_problems(events: list[dict], base_url: str) -> list[str]:
    problems = []
    requests: dict[str, str] = {}
    for event in events:
        method, params = event["method"], event.get("params", {})
        # Chromium probes /favicon.ico at the server's root by itself; the page did not
        # ask for it (and on GitHub Pages that root is not even the book's).
        if urlsplit(str(params.get("entry", {}).get("url", ""))).path == "/favicon.ico":
            continue
        if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            args = " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])
            )
            problems.append(f"console error: {args}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            problems.append(f"uncaught exception: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            problems.append(
                f"console error: {entry.get('text', '')} {entry.get('url', '')}".strip()
            )
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            requests[params.get("requestId", "")] = url
            if urlsplit(url).scheme in {"http", "https"} and not url.startswith(base_url):
                problems.append(f"fetches from the network: {url}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = requests.get(params.get("requestId", ""), "?")
            problems.append(f"failed to load {url}: {params.get('errorText', '')}")
    # One failure is often reported twice (network and console); keep each once.
    return list(dict.fromkeys(problems))


META_REFRESH = re.compile(
    r"""<meta[^>]+http-equiv=["']?refresh["']?[^>]*content=["'][^"']*url=([^"'>\s]+)""", re.I
)


def redirect_target(site: Path, page: str) -> str | None:
    """The page a redirect-only page (``<meta http-equiv="refresh">``) sends readers to."""
    match = META_REFRESH.search((site / page).read_text(encoding="utf-8", errors="replace"))
    if match is None:
        return None
    return (Path(page).parent / match.group(1).split("#")[0]).as_posix()


def _check_axe(report: PageReport, client: DevTools, axe_fail: str) -> None:
    """axe-core's rules in the light and dark theme; a run that fails or gets no answer in
    :data:`page_axe.AXE_TIMEOUT_S` is a problem of the page, named, not a crash of the check."""
    try:
        report.axe = run_axe(client) + run_axe(client, dark=True)
    except TimeoutError as exc:
        report.problems.append(f"axe-core: {exc}")
    except RuntimeError as exc:
        report.problems.append(str(exc))
    else:
        report.problems += axe_problems(report.axe, axe_fail)


def check_page(
    client: DevTools, base_url: str, page: str, shots: Path | None, axe_fail: str | None = None
) -> PageReport:
    """Load one page, wait for it to settle and report what a reader would see.

    ``axe_fail``: the least axe-core impact that fails the page (``None``: no axe run).
    """
    report = PageReport(page=page)
    client.events.clear()
    client.call("Page.navigate", url=base_url + page)
    if not client.wait_for("Page.loadEventFired", PAGE_TIMEOUT_S):
        report.problems.append(f"did not finish loading within {PAGE_TIMEOUT_S:.0f} s")
        return report
    result = client.call(
        "Runtime.evaluate", expression=INSPECT_JS, awaitPromise=True, returnByValue=True
    )
    if "exceptionDetails" in result:
        report.problems.append(f"inspection script failed: {result['exceptionDetails']}")
        return report
    seen = result["result"]["value"]
    client.drain(0.3)  # late console messages, e.g. from MathJax's font loading
    report.title = seen["title"]
    report.images, report.figures, report.formulas = (
        seen["images"],
        seen["figures"],
        seen["formulas"],
    )
    report.problems += _console_problems(client.events, base_url)
    report.problems += [f"image did not load: {src}" for src in seen["broken_images"]]
    report.problems += [f"math not rendered: {tex}" for tex in seen["unrendered_math"]]
    for match in RAW_MATH.finditer(seen["text"]):
        context = seen["text"][max(0, match.start() - 30) : match.end() + 30].replace("\n", " ")
        report.problems.append(f"raw math in the visible text: …{context}…")
    if axe_fail is not None:
        _check_axe(report, client, axe_fail)
    if shots is not None:
        height = min(max(seen["height"], 600), SCREENSHOT_MAX_HEIGHT)
        # Make the viewport as tall as the page rather than capturing beyond it: with
        # captureBeyondViewport the theme's sticky layout came out shifted sideways.
        client.call(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        client.call("Runtime.evaluate", expression="window.scrollTo(0, 0)")
        client.drain(0.5)
        shot = client.call("Page.captureScreenshot", format="png")
        client.call("Emulation.clearDeviceMetricsOverride")
        path = shots / (page.removesuffix(".html").replace("/", "__") + ".png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        report.screenshot = str(path)
    return report


def is_chapter(page: str, seen: dict, chapters: set[str] | None) -> bool:
    """A chapter: named in ``chapters`` (by file stem), else a page with notebook cells."""
    if chapters is None:
        return bool(seen["notebook"])
    return Path(page).stem in chapters


def check_layout(
    client: DevTools,
    base_url: str,
    report: PageReport,
    widths: tuple[int, ...],
    budget: LayoutBudget,
    chapters: set[str] | None,
) -> None:
    """Measure ``report``'s page at each width: the first is the desktop's, the others
    a phone's (``page_layout.layout_problems`` says what each enforces)."""
    for i, width in enumerate(widths):
        try:
            seen = measure_layout(client, base_url + report.page, width, PAGE_TIMEOUT_S)
        except RuntimeError as exc:
            report.problems.append(str(exc))
            return
        seen["code_lines"] = budget.code_lines(seen)
        report.layout[str(width)] = seen
        report.chapter = is_chapter(report.page, seen, chapters)
        report.problems += layout_problems(seen, budget, report.chapter, phone=i > 0)


SEARCH_JS = r"""
(async () => {
  for (let i = 0; i < 150; i++) {
    const summary = document.querySelector(".search-summary");
    const hits = document.querySelectorAll("#search-results ul.search > li");
    // Results arrive one by one; the summary is written once the search is done.
    const text = summary ? summary.textContent.trim() : "";
    if (text && !/searching|preparing/i.test(text)) {
      return {hits: hits.length, summary: text};
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {hits: 0, summary: "no search results after 15 s"};
})()
"""


def check_search(client: DevTools, base_url: str, term: str) -> PageReport:
    """Search the site for ``term`` from the search page; it must find something."""
    report = PageReport(page=f"search.html?q={term}", title=f"search for {term!r}")
    client.events.clear()
    client.call("Page.navigate", url=f"{base_url}search.html?q={term}")
    if not client.wait_for("Page.loadEventFired", PAGE_TIMEOUT_S):
        report.problems.append("the search page did not load")
        return report
    result = client.call(
        "Runtime.evaluate", expression=SEARCH_JS, awaitPromise=True, returnByValue=True
    )
    found = result.get("result", {}).get("value") or {"hits": 0, "summary": str(result)}
    report.problems += _console_problems(client.events, base_url)
    report.images = 0
    report.title += f": {found['hits']} pages ({found['summary']})"
    if not found["hits"]:
        report.problems.append(f"searching for {term!r} found nothing: {found['summary']}")
    return report


def check_site(
    site: Path,
    shots: Path | None,
    executable: str,
    search_term: str | None = None,
    *,
    widths: tuple[int, ...] = (DESKTOP_WIDTH, PHONE_WIDTH),
    budget: LayoutBudget | None = None,
    chapters: set[str] | None = None,
    axe_fail: str | None = "serious",
    every_listing: bool = False,
) -> list[PageReport]:
    """Check every page of ``site`` (and its search); returns one report per page.

    Source-listing pages other than :func:`listings_in_full`'s are only loaded and checked
    for load, console, image and math faults, unless ``every_listing``.

    Each page's layout is measured at every width in ``widths``; the first is held to
    ``budget``'s desktop limits, the others to its phone limits (none are enforced if
    ``widths`` is empty). ``chapters`` names the chapter pages by file stem (``None``:
    pages with notebook cells). ``axe_fail`` is the least axe-core impact that fails a
    page (``None``: axe-core is not run).
    """
    budget = LayoutBudget() if budget is None else budget
    pages = site_pages(site)
    if not pages:
        raise SystemExit(f"no HTML pages under {site}")
    if chapters is not None:
        missing = chapters - {Path(p).stem for p in pages}
        if missing:
            raise SystemExit(f"--chapters names pages the site lacks: {sorted(missing)}")
    in_full = None if every_listing else listings_in_full(site, pages)
    reports = []
    with serve(site) as base_url, chromium(executable) as client:
        for page in pages:
            target = redirect_target(site, page)
            if in_full is not None and page.startswith("_modules/") and page not in in_full:
                reports.append(check_page(client, base_url, page, None, None))
                continue
            if target is None:
                report = check_page(client, base_url, page, shots, axe_fail)
                if Path(page).name not in NOT_MEASURED:
                    check_layout(client, base_url, report, widths, budget, chapters)
                reports.append(report)
                continue
            # The browser leaves a redirect page at once; what readers see is its target,
            # which is checked as a page of its own.
            report = PageReport(page=page, title=f"redirects to {target}")
            if target not in pages:
                report.problems.append(f"redirects to {target}, which does not exist")
            reports.append(report)
        if search_term and "search.html" in pages:
            reports.append(check_search(client, base_url, search_term))
    return reports


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _width(text: str) -> int:
    value = _count(text)
    if 0 < value < 200 or value > 4000:
        raise argparse.ArgumentTypeError(f"a viewport width of 200 to 4000 px, got {value}")
    return value


def _names(text: str) -> set[str]:
    names = {n.strip().removesuffix(".html").rsplit("/", 1)[-1] for n in text.split(",")}
    if "" in names:
        raise argparse.ArgumentTypeError(f"an empty name in {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--screenshots", type=Path, help="folder for one PNG per page")
    parser.add_argument("--json", type=Path, help="write the per-page summary here")
    parser.add_argument("--search", help="a word the site's search must find")
    layout = parser.add_argument_group("layout (see the module's documentation)")
    layout.add_argument(
        "--desktop-width", type=_width, default=DESKTOP_WIDTH, help="enforced viewport (px)"
    )
    layout.add_argument(
        "--phone-width", type=_width, default=PHONE_WIDTH, help="enforced viewport (px); 0: none"
    )
    layout.add_argument(
        "--chapters",
        type=_names,
        help="comma-separated file stems of the chapter pages, e.g. tf32,clarke,degeneracy "
        "(default: the pages with notebook cells)",
    )
    defaults = LayoutBudget()
    for name, text in (
        ("max_wide", "tables, display formulas and figures wider than the column, per page"),
        ("max_wide_code", "code blocks wider than the column, per chapter"),
        ("max_code_lines", "visible code lines per chapter"),
        ("phone_max_wide", "tables, formulas, figures, provenance boxes too wide on the phone"),
        ("phone_max_wide_code", "code blocks and printed outputs too wide on the phone"),
    ):
        layout.add_argument(
            "--" + name.replace("_", "-"),
            type=_count,
            default=getattr(defaults, name),
            help=f"{text} (default {getattr(defaults, name)})",
        )
    layout.add_argument(
        "--count-listings",
        action="store_true",
        help="count highlighted listings (show_source output) as code lines, besides cells",
    )
    parser.add_argument(
        "--every-listing",
        action="store_true",
        help="check every source-listing page (_modules/) in full, not only the index and "
        "the longest",
    )
    parser.add_argument(
        "--axe-fail",
        choices=(*IMPACTS, "off"),
        default="serious",
        help="the least axe-core impact that fails a page (default serious); off: no axe",
    )
    args = parser.parse_args(argv)
    if args.desktop_width == 0:
        parser.error("--desktop-width must be a positive number of pixels")
    if args.phone_width == args.desktop_width:
        parser.error("--phone-width must differ from --desktop-width")
    budget = LayoutBudget(
        args.max_wide,
        args.max_wide_code,
        args.max_code_lines,
        args.count_listings,
        args.phone_max_wide,
        args.phone_max_wide_code,
    )
    widths = (args.desktop_width,) + ((args.phone_width,) if args.phone_width else ())
    executable = find_chromium()
    if executable is None:
        print(
            "browser check SKIPPED: no Chromium found (looked for "
            f"{', '.join(CHROMIUM_CANDIDATES)}; set $CHROMIUM or `apt-get install chromium`)"
        )
        return 0
    started = time.monotonic()
    if args.screenshots and args.screenshots.is_dir():
        for old in args.screenshots.glob("*.png"):  # from an earlier run
            old.unlink()
    reports = check_site(
        args.site.resolve(),
        args.screenshots,
        executable,
        args.search,
        widths=widths,
        budget=budget,
        chapters=args.chapters,
        axe_fail=None if args.axe_fail == "off" else args.axe_fail,
        every_listing=args.every_listing,
    )
    for r in reports:
        status = "ok  " if r.ok else "FAIL"
        print(
            f"{status} {r.page:<28} images={r.images:<3} figures={r.figures:<3} "
            f"formulas={r.formulas:<4} {r.title}"
        )
        for width, seen in r.layout.items():
            role = "desktop" if width == str(widths[0]) else "phone"
            kind = "chapter" if r.chapter else "page"
            print(f"       {kind} layout ({role}) {layout_summary(seen)}")
        if r.axe is not None:
            print(f"       {axe_summary(r.axe)}")
        for problem in r.problems:
            print(f"       - {problem}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=1))
    failed = [r.page for r in reports if not r.ok]
    print(
        f"browser check: {len(reports) - len(failed)} of {len(reports)} pages fine "
        f"in {time.monotonic() - started:.1f} s with {Path(executable).name}"
        + (f"; screenshots in {args.screenshots}" if args.screenshots else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
