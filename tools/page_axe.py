"""Accessibility of a loaded page, by axe-core (vendored in ``tools/axe-core``). Used by
``check_browser.py``.

Each page of the site is checked twice, as it loaded at the desktop width, once it has
stopped changing (``check_browser.INSPECT_JS`` waits for that: scripts such as Font
Awesome's rewrite it after the load event, and axe-core must not grade a state in
between): once in the light theme with every rule of the WCAG 2.0/2.1/2.2 A and AA tags
and axe's ``best-practice`` tag, and once in the dark theme
(``html[data-theme="dark"]``, the pydata theme's switch) with ``color-contrast`` only,
the one rule a colour scheme changes. A violation whose impact is ``serious`` or
``critical`` fails the page (axe's own grading: text a reader cannot make out, an image
without a text alternative, a control without a name, a link that says nothing);
``moderate`` and ``minor`` ones are printed and written to the JSON summary, never
failing a page (``--axe-fail`` moves that line). The script is read from the vendored
file after checking its SHA-256, so the check never loads anything from the network.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

AXE_DIR = Path(__file__).resolve().parent / "axe-core"
AXE_VERSION = "4.14.1"
# The subresource-integrity hash axe-core publishes for this version's axe.min.js
# (the npm package's sri-history.json).
AXE_SHA256 = "KTSJmUUM3yhJqOcLeRL8LahahJ2jnA0NU5T1HUqe2Vw="
IMPACTS = ("minor", "moderate", "serious", "critical")
FAILING_FROM = "serious"
#: Seconds one axe-core run may take. A run on the longest pages is seconds on an idle
#: machine, but `make test` runs the check beside the Colab run, and on Python 3.12 beside the
#: robustness matrix as well (load 5 on 2 cores) one took over the 30 s a page load gets.
AXE_TIMEOUT_S = 180.0
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice")

_RUN_JS = r"""
(async () => {
  const dark = __DARK__;
  const root = document.documentElement;
  const before = root.dataset.theme;
  if (dark) {
    root.dataset.theme = "dark";
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  }
  const options = dark
    ? {runOnly: {type: "rule", values: ["color-contrast"]}}
    : {runOnly: {type: "tag", values: __TAGS__}};
  options.resultTypes = ["violations"];
  try {
    const result = await axe.run(document, options);
    return result.violations.map((v) => ({
      id: v.id, impact: v.impact || "minor", help: v.help, nodes: v.nodes.length,
      targets: v.nodes.slice(0, 3).map((n) => n.target.join(" ")),
      summary: (v.nodes[0] && v.nodes[0].failureSummary || "").split("\n").slice(0, 2)
        .join(" ").slice(0, 200),
      dark,
    }));
  } finally {
    if (dark) {
      if (before === undefined) delete root.dataset.theme; else root.dataset.theme = before;
    }
  }
})()
"""


@functools.cache
def axe_source() -> str:
    """The vendored axe-core script, after checking it is the published file.

    Returns:
        The JavaScript source of ``axe.min.js``.

    Raises:
        RuntimeError: if the file is missing or its SHA-256 is not ``AXE_SHA256``.

    Example:
        >>> axe_source().startswith("/*! axe v4.14.1")
        True
    """
    path = AXE_DIR / "axe.min.js"
    if not path.is_file():
        raise RuntimeError(f"axe-core is missing: {path} (see {AXE_DIR / 'README.md'})")
    data = path.read_bytes()
    digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
    if digest != AXE_SHA256:
        raise RuntimeError(f"{path} is not axe-core {AXE_VERSION}: sha256-{digest}")
    return data.decode("utf-8")


def run_axe(client: Any, dark: bool = False) -> list[dict]:
    """Run axe-core in the page ``client`` has loaded.

    Args:
        client: a connected ``check_browser.DevTools`` page client, the page loaded and
            settled (``page_layout.QUIET_JS``, which ``check_browser.check_page`` runs first).
        dark: check ``color-contrast`` in the dark theme instead of every rule in the
            light one (the page's theme is restored afterwards).

    Returns:
        One dict per violated rule: ``id``, ``impact``, ``help``, ``nodes`` (how many
        elements), ``targets`` (the first three CSS selectors), ``summary``, ``dark``.

    Raises:
        RuntimeError: if the script cannot be loaded or axe fails in the page.
    """
    if not isinstance(dark, bool):
        raise TypeError(f"dark must be a bool, got {type(dark).__name__}")
    loaded = client.call(
        "Runtime.evaluate", expression=axe_source() + "\n;typeof axe", returnByValue=True
    )
    if loaded.get("result", {}).get("value") != "object":
        raise RuntimeError(f"axe-core did not load: {loaded.get('exceptionDetails', loaded)}")
    script = _RUN_JS.replace("__DARK__", json.dumps(dark)).replace(
        "__TAGS__", json.dumps(list(AXE_TAGS))
    )
    result = client.call(
        "Runtime.evaluate",
        wait_s=AXE_TIMEOUT_S,
        expression=script,
        awaitPromise=True,
        returnByValue=True,
    )
    if "exceptionDetails" in result:
        raise RuntimeError(f"axe-core failed: {result['exceptionDetails']}")
    return result["result"]["value"]


def _level(impact: str) -> int:
    return IMPACTS.index(impact) if impact in IMPACTS else 0


def axe_problems(violations: list[dict], failing_from: str = FAILING_FROM) -> list[str]:
    """The violations that fail a page: impact ``failing_from`` or worse.

    Args:
        violations: :func:`run_axe`'s result (light and dark together).
        failing_from: the least impact that fails (one of ``IMPACTS``).

    Returns:
        One message per failing rule, naming the impact, the rule, how many elements
        and the first of them; empty if none.

    Raises:
        ValueError: if ``failing_from`` is not an axe impact.

    Example:
        >>> axe_problems([{"id": "image-alt", "impact": "critical", "help": "Images must "
        ...     "have alternative text", "nodes": 1, "targets": ["img"], "dark": False}])
        ['accessibility (critical, image-alt): Images must have alternative text; 1 element: img']
    """
    if failing_from not in IMPACTS:
        raise ValueError(f"failing_from must be one of {IMPACTS}, got {failing_from!r}")
    problems = []
    for v in violations:
        if _level(v["impact"]) < IMPACTS.index(failing_from):
            continue
        theme = " in the dark theme" if v.get("dark") else ""
        count = f"{v['nodes']} element{'s' if v['nodes'] != 1 else ''}"
        first = f": {v['targets'][0]}" if v.get("targets") else ""
        summary = f" ({v['summary']})" if v.get("summary") else ""
        problems.append(
            f"accessibility ({v['impact']}, {v['id']}){theme}: {v['help']}; {count}{first}{summary}"
        )
    return problems


def axe_summary(violations: list[dict]) -> str:
    """One line counting a page's violated rules by impact, for the printed report."""
    counts = {i: sum(1 for v in violations if v["impact"] == i) for i in reversed(IMPACTS)}
    ids = sorted({v["id"] + (" (dark)" if v.get("dark") else "") for v in violations})
    return (
        f"axe {AXE_VERSION}: rules violated "
        + " ".join(f"{k} {n}" for k, n in counts.items())
        + (f" [{', '.join(ids)}]" if ids else "")
    )
