"""What a page's layout asks of a reader: elements wider than the article column, and
how much code is on show. Used by ``check_browser.py``.

Every page is measured at a desktop width (``--desktop-width``, 1280 px) and again at a
phone width (``--phone-width``, 390 px), both enforced, against the article column: the
content box of ``article.bd-article`` (the theme's main column; ``main`` or ``body``
where there is none). Only what a reader sees without clicking is measured: an element
inside a closed ``<details>`` (MyST-NB's ``hide-input``, ``hide-output`` and
``hide-cell`` toggles) or with no box is skipped; ``remove-*`` cells are not in the
HTML at all. The provenance box (``details.eigprec-provenance``) is the exception: it
is opened before measuring, since a reader opens it to read it, and measured as a
kind of its own besides its table. An element is *wider than the column* when any
part of it would be out of a reader's sight at load:

- its border box reaches past the column's content box (more than 1 px) on either
  side, even where a scrolling wrapper such as the theme's
  ``.pst-scrollable-table-container`` or an ``overflow: hidden`` parent keeps the page
  itself from widening: the reader has to scroll, or never sees the rest; or
- it scrolls or clips its own content (``overflow-x`` not ``visible`` and
  ``scrollWidth`` more than 1 px over ``clientWidth``), as a ``pre`` or a formula in
  its own scroll box does; or its content spills visibly past the column.

Measured: top-level ``table`` elements (not a code block's line-number table);
display formulas (MathJax's ``mjx-container[display="true"]``); figures (``figure``,
and ``img`` outside a figure); the provenance box; code blocks (every ``pre``: cell
inputs, highlighted listings and plain-text outputs).

*Visible code lines* are the lines, from first to last non-blank, of the visible
``pre`` blocks in cell inputs (``div.cell_input``). Highlighted listings are reported
beside them and count too with ``--count-listings``: a ``pre`` in Pygments markup
(``div.highlight`` or ``div[class*="highlight-"]``) that is not a cell's stream,
``text/plain`` or error output (MyST-NB highlights those too), such as
``show_source``'s HTML listing or a fenced block in prose. Plain-text outputs are
output, not code. The theme's own pages (search, general index, module index) are
not measured.

At the desktop width, on a chapter (a page with MyST-NB's ``div.cell`` markup, or
those named by ``--chapters``) a page fails where any table, display formula, figure
or provenance box is wider than the column (``--max-wide``, 0), where more than
``--max-wide-code`` (3) code blocks are, or where more than ``--max-code-lines`` (150)
code lines are visible. Other pages (introduction, API, references) are held to the
table, formula, figure and provenance rule only.

At the phone width every page fails where the page itself is wider than the screen
(the reader would pan the whole page sideways), where any table, display formula,
figure or provenance box is wider than the column (``--phone-max-wide``, 0), or where
any code block is, be it a cell's input, a listing or a printed output
(``--phone-max-wide-code``, 0): the book's stylesheet wraps code and printed output
there, so one that is still wider holds a word longer than a phone's line. The
code-line budget is a desktop rule only.

``LAYOUT_JS`` runs in the page (after MathJax and the images have settled) and returns
the raw figures; :func:`layout_problems` turns them into the problems that fail a page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Sub-pixel rounding of boxes and scroll widths stays below this.
TOLERANCE_PX = 1

# Waits, inside an async function, for MathJax and every image (at most 15 s each); both
# in-page scripts (this one and check_browser's INSPECT_JS) start with it.
SETTLE_JS = r"""
  const timeout = (ms) => new Promise((r) => setTimeout(r, ms));
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await Promise.race([window.MathJax.startup.promise, timeout(15000)]);
  }
  const imgs = [...document.images];
  imgs.forEach((img) => { img.loading = "eager"; });
  await Promise.race([
    Promise.all(imgs.map((img) => img.decode().catch(() => null))), timeout(15000)]);
"""

# A page has settled once its DOM has not changed for QUIET_MS; SETTLE_MS caps the wait
# (a page that never stops changing is checked as it is then).
QUIET_MS, SETTLE_MS = 250, 10000

# Waits, inside an async function, until the page has settled: scripts may still be
# rewriting it after the load event (Font Awesome turns each <i> icon into an <svg>),
# and what is checked must be the page a reader sees, not a state in between. Run once
# a page has loaded (check_browser's INSPECT_JS, before the inspection and axe-core).
QUIET_JS = r"""
  await new Promise((resolve) => {
    let quiet;
    const done = () => { observer.disconnect(); clearTimeout(quiet); clearTimeout(cap);
                         resolve(); };
    const observer = new MutationObserver(() => {
      clearTimeout(quiet); quiet = setTimeout(done, __QUIET_MS__); });
    observer.observe(document, {subtree: true, childList: true, attributes: true,
                                characterData: true});
    quiet = setTimeout(done, __QUIET_MS__);
    const cap = setTimeout(done, __SETTLE_MS__);
  });
""".replace("__QUIET_MS__", str(QUIET_MS)).replace("__SETTLE_MS__", str(SETTLE_MS))

LAYOUT_JS = (
    r"""
(async () => {
"""
    + SETTLE_JS
    + r"""  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

  const TOL = __TOLERANCE__;
  const article = document.querySelector("article.bd-article")
    || document.querySelector("main") || document.body;
  const acs = getComputedStyle(article);
  const abox = article.getBoundingClientRect();
  const left = abox.left + parseFloat(acs.borderLeftWidth) + parseFloat(acs.paddingLeft);
  const right = abox.right - parseFloat(acs.borderRightWidth) - parseFloat(acs.paddingRight);

  // Seen without clicking: not inside a closed <details> (MyST-NB's hide-* toggles),
  // and rendered with a box.
  const visible = (el) => {
    const closed = el.closest("details:not([open])");
    if (closed && !el.closest("summary")) return false;
    if (el.checkVisibility) return el.checkVisibility({visibilityProperty: true});
    return el.getClientRects().length > 0;
  };
  const all = (sel) => [...article.querySelectorAll(sel)];
  // A reader opens the provenance box to read it: measure it open.
  all("details.eigprec-provenance").forEach((d) => { d.open = true; });
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const describe = (el) => {
    const text = el.tagName === "IMG" ? (el.getAttribute("alt") || el.getAttribute("src"))
      : el.textContent;
    return (text || "").trim().replace(/\s+/g, " ").slice(0, 60);
  };
  // Pixels of the element out of sight at load: past the column on either side, or
  // scrolled/clipped inside its own box, or spilling visibly past the column.
  const excess = (el) => {
    const r = el.getBoundingClientRect();
    let over = Math.max(r.right - right, left - r.left);
    if (el.clientWidth > 0) {
      if (getComputedStyle(el).overflowX !== "visible") {
        over = Math.max(over, el.scrollWidth - el.clientWidth);
      }
      over = Math.max(over, r.left + el.clientLeft + el.scrollWidth - right);
    }
    return over;
  };
  const measure = (els) => {
    const shown = els.filter(visible);
    const wide = [];
    for (const el of shown) {
      const over = excess(el);
      if (over > TOL) {
        wide.push({tag: el.tagName.toLowerCase(), excess_px: Math.round(over),
                   width_px: Math.round(el.getBoundingClientRect().width),
                   text: describe(el)});
      }
    }
    return {count: shown.length, hidden: els.length - shown.length, wide};
  };

  const tables = all("table").filter(
    (t) => !(t.parentElement && t.parentElement.closest("table, pre, .highlight")));
  const formulas = all('mjx-container[display="true"]');
  const figures = all("figure, img").filter(
    (el) => el.tagName === "FIGURE" || !el.closest("figure"));
  const pres = all("pre");

  // Code a reader reads: cell inputs, and highlighted (Pygments) listings that are
  // not a cell's plain-text, stream or error output (MyST-NB highlights those too).
  const PLAIN_OUTPUT = ".output.stream, .output.text_plain, .output.traceback, "
    + ".output.error, .output.stderr";
  const codeKind = (pre) => {
    if (pre.closest(".cell_input")) return "input";
    if (pre.closest(PLAIN_OUTPUT)) return "output";
    if (pre.closest('.highlight, [class*="highlight-"]')) return "listing";
    return "output";
  };
  const lines = (pre) => {
    const text = pre.textContent.replace(/^\s*\n/, "").replace(/\s+$/, "");
    return text ? text.split("\n").length : 0;
  };
  const code = {input: 0, listing: 0, hidden_input: 0};
  for (const pre of pres) {
    const kind = codeKind(pre);
    if (kind === "output") continue;
    if (visible(pre)) code[kind] += lines(pre);
    else if (kind === "input") code.hidden_input += lines(pre);
  }
  return {
    page_px: document.documentElement.scrollWidth,
    column_px: Math.round(right - left),
    notebook: !!article.querySelector("div.cell"),
    tables: measure(tables),
    formulas: measure(formulas),
    figures: measure(figures),
    provenance: measure(all("details.eigprec-provenance")),
    code_blocks: measure(pres),
    input_lines: code.input,
    listing_lines: code.listing,
    hidden_input_lines: code.hidden_input,
  };
})()
""".replace("__TOLERANCE__", str(TOLERANCE_PX))
)


def measure_layout(client: Any, url: str, width: int, timeout: float) -> dict:
    """Load ``url`` in a ``width`` px wide viewport and measure its layout.

    Args:
        client: a connected ``check_browser.DevTools`` page client.
        url: the page's address.
        width: the viewport's width in CSS pixels (below 600: emulated as a phone).
        timeout: seconds the page may take to load.

    Returns:
        ``LAYOUT_JS``'s figures.

    Raises:
        RuntimeError: if the page does not load or the measurement fails.
    """
    client.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=900,
        deviceScaleFactor=1,
        mobile=width < 600,  # a phone honours the page's viewport meta tag
    )
    try:
        client.events.clear()
        client.call("Page.navigate", url=url)
        if not client.wait_for("Page.loadEventFired", timeout):
            raise RuntimeError(f"{url} did not load at {width} px")
        result = client.call(
            "Runtime.evaluate", expression=LAYOUT_JS, awaitPromise=True, returnByValue=True
        )
    finally:
        client.call("Emulation.clearDeviceMetricsOverride")
    if "exceptionDetails" in result:
        raise RuntimeError(f"layout script failed on {url}: {result['exceptionDetails']}")
    return {"viewport_px": width, **result["result"]["value"]}


INT_LIMITS = (
    "max_wide",
    "max_wide_code",
    "max_code_lines",
    "phone_max_wide",
    "phone_max_wide_code",
)
WIDE_KINDS = ("tables", "formulas", "figures", "provenance")


@dataclass(frozen=True)
class LayoutBudget:
    """What a page may ask of a reader at the enforced width.

    Attributes:
        max_wide: tables, display formulas and figures wider than the column, per page.
        max_wide_code: code blocks wider than the column, per chapter.
        max_code_lines: visible code lines per chapter.
        count_listings: whether highlighted listings outside cell inputs (``show_source``
            output, fenced blocks) count towards ``max_code_lines``, besides cell inputs.
        phone_max_wide: tables, display formulas, figures and provenance boxes wider
            than the column at the phone width, per page.
        phone_max_wide_code: code blocks (inputs, listings, printed outputs) wider than
            the column at the phone width, per page.
    """

    max_wide: int = 0
    max_wide_code: int = 3
    max_code_lines: int = 150
    count_listings: bool = False
    phone_max_wide: int = 0
    phone_max_wide_code: int = 0

    def __post_init__(self) -> None:
        for name in INT_LIMITS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not isinstance(self.count_listings, bool):
            raise TypeError(
                f"count_listings must be a bool, got {type(self.count_listings).__name__}"
            )

    def code_lines(self, seen: dict) -> int:
        """The visible code lines of a page (``LAYOUT_JS``'s figures) this budget counts."""
        return seen["input_lines"] + (seen["listing_lines"] if self.count_listings else 0)


def _wide_items(seen: dict) -> list[tuple[str, dict]]:
    # "provenance" is missing from figures measured before the box was a kind.
    return [(kind, item) for kind in WIDE_KINDS for item in seen.get(kind, {"wide": []})["wide"]]


def layout_problems(
    seen: dict, budget: LayoutBudget, chapter: bool, phone: bool = False
) -> list[str]:
    """The problems a page's measured layout (``LAYOUT_JS``'s result) fails on.

    Args:
        seen: the figures ``LAYOUT_JS`` returned for one page at one width.
        budget: the limits.
        chapter: whether the code-block and code-line limits apply (chapters only; at
            the phone width the code-block limit holds on every page).
        phone: whether ``seen`` was measured at the phone width (the ``phone_*``
            limits, and the page may not be wider than the screen).

    Returns:
        One message per broken limit, naming the offending elements; empty if none.

    Example:
        >>> empty = {"count": 0, "hidden": 0, "wide": []}
        >>> seen = {"viewport_px": 390, "column_px": 358, "page_px": 500, "tables": empty,
        ...         "formulas": empty, "figures": empty, "code_blocks": empty}
        >>> layout_problems(seen, LayoutBudget(), chapter=False, phone=True)
        ['the page is 500 px wide on a 390 px screen: the reader pans the whole page']
    """
    width = f"{seen['viewport_px']} px"
    problems = []
    if phone and seen["page_px"] > seen["viewport_px"] + TOLERANCE_PX:
        problems.append(
            f"the page is {seen['page_px']} px wide on a {width} screen: "
            "the reader pans the whole page"
        )
    wide = _wide_items(seen)
    max_wide = budget.phone_max_wide if phone else budget.max_wide
    if len(wide) > max_wide:
        problems.append(
            f"{len(wide)} tables/formulas/figures/provenance boxes wider than the "
            f"{seen['column_px']} px column at {width} (at most {max_wide})"
        )
        problems += [
            f"  {kind.removesuffix('s')} {item['excess_px']} px too wide: {item['text']!r}"
            for kind, item in wide
        ]
    if not (chapter or phone):
        return problems
    wide_code = seen["code_blocks"]["wide"]
    max_wide_code = budget.phone_max_wide_code if phone else budget.max_wide_code
    if len(wide_code) > max_wide_code:
        problems.append(
            f"{len(wide_code)} code blocks wider than the {seen['column_px']} px column "
            f"at {width} (at most {max_wide_code})"
        )
        problems += [f"  {item['excess_px']} px too wide: {item['text']!r}" for item in wide_code]
    if phone or not chapter:
        return problems
    lines = budget.code_lines(seen)
    if lines > budget.max_code_lines:
        counted = "in cells and listings" if budget.count_listings else "in cells"
        problems.append(
            f"{lines} visible code lines {counted} (at most {budget.max_code_lines}; "
            f"{seen['input_lines']} in cells, {seen['listing_lines']} in listings)"
        )
    return problems


def layout_summary(seen: dict) -> str:
    """One line of a page's layout figures at one width, for the printed report."""
    return (
        f"@{seen['viewport_px']}px column={seen['column_px']}px "
        + (f"page={seen['page_px']}px " if seen["page_px"] > seen["viewport_px"] else "")
        + "wide: "
        f"tables {len(seen['tables']['wide'])}/{seen['tables']['count']} "
        f"formulas {len(seen['formulas']['wide'])}/{seen['formulas']['count']} "
        f"figures {len(seen['figures']['wide'])}/{seen['figures']['count']} "
        + (
            f"provenance {len(seen['provenance']['wide'])}/{seen['provenance']['count']} "
            if "provenance" in seen
            else ""
        )
        + f"code {len(seen['code_blocks']['wide'])}/{seen['code_blocks']['count']}; "
        f"code lines: cells {seen['input_lines']}, listings {seen['listing_lines']}, "
        f"hidden cells {seen['hidden_input_lines']}"
    )
