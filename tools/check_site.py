"""Static checks of the built site: links, offline assets and Colab launch buttons.

- **Internal links**: every ``href``/``src`` that stays inside the site must name an
  existing file, and a ``#fragment`` must name an ``id`` (or ``name``) on the target
  page. External links are not fetched (the check runs offline); they are counted.
- **Offline**: no page may load a script, stylesheet, font, image or frame from
  ``http(s)://`` or ``//``, and no stylesheet under ``_static`` may pull a font or
  ``@import`` from the network, so the site renders with no connection.
- **Tables**: no page may show a Markdown table as raw text — a line such as
  ``|---|---:|`` outside ``<pre>``/``<code>`` means the table did not parse (for example an
  unescaped ``|`` in a header cell split the header into more cells than the rule has).
- **Roles**: no page may show a MyST role as raw text (``{ref}``, ``{doc}``, ``{glue:text}``
  … outside code), as a role inside glued Markdown is shown.
- **Colab and Download** (with ``--config``): every chapter page built from a notebook
  (``<page>.md``, a MyST Markdown notebook) has a launch link to
  ``https://colab.research.google.com/github/<org>/<repo>/blob/<branch>/<path>`` for the
  repository URL and branch in ``_config.yml``, where ``<path>`` is the chapter's
  reader's notebook, ``<page>.ipynb`` (the ``notebooks`` branch holds those), and no
  launch link to the MyST source; its Download menu offers ``_sources/<page>.ipynb`` (the
  reader's notebook, written there by ``make notebooks``) and not the MyST source.

Usage: ``python tools/check_site.py _build/html --config _config.yml``
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from book_pages import PAGE_SUFFIX, is_page
from book_toc import toc_files

COLAB = "https://colab.research.google.com/github"
# Attributes that make the browser fetch something as part of the page.
LOADING = {("script", "src"), ("img", "src"), ("iframe", "src"), ("source", "src")}
LOADING_LINK_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut"}
CSS_REMOTE = re.compile(r"""(?:url\(\s*["']?|@import\s+["'])\s*((?:https?:)?//[^"')\s]+)""", re.I)


@dataclass
class _Page:
    ids: set[str] = field(default_factory=set)
    links: list[tuple[str, str, str]] = field(default_factory=list)  # (tag, attr, value)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = _Page()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        for key in ("id", "name") if tag in {"a", "span", "div", "section", "dt"} else ("id",):
            if values.get(key):
                self.page.ids.add(values[key])
        for attr in ("href", "src"):
            if attr in values:
                kind = tag
                if tag == "link":
                    kind = "link:" + " ".join(sorted(values.get("rel", "").lower().split()))
                self.page.links.append((kind, attr, values[attr]))


# The delimiter row of a Markdown table: cells of dashes with optional alignment colons.
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$")
_VERBATIM = {"pre", "code", "script", "style", "textarea", "kbd", "samp"}


class _TextCollector(HTMLParser):
    """The page's running text, outside verbatim elements (where a table rule is literal)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VERBATIM:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _VERBATIM and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.chunks.append(data)


def running_text(html: str) -> str:
    """A page's text outside verbatim elements (code, scripts), where raw MyST would show."""
    collector = _TextCollector()
    collector.feed(html)
    return "".join(collector.chunks)


# A MyST role left as text: ``{name}`` with a role's name, outside code (a role inside glued
# Markdown is not parsed, and the target shows as inline code after the literal "{ref}").
_RAW_ROLE = re.compile(
    r"\{(?:ref|doc|numref|term|eq|cite(?::[a-z]+)?|glue(?::[a-z]+)?|py:[a-z]+|math|download"
    r"|abbr|sub|sup)\}"
)


def _pages_text(site: Path) -> Iterator[tuple[str, str]]:
    """(path relative to the site, running text) of each page, Sphinx's own folders left out."""
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if not rel.startswith(("_static/", "_sources/")):
            yield rel, running_text(path.read_text(encoding="utf-8", errors="replace"))


def _table_problems(rel: str, text: str) -> list[str]:
    return [
        f"{rel}: unrendered Markdown table (raw text {line.strip()[:60]!r})"
        for line in text.splitlines()
        if _TABLE_RULE.match(line)
    ]


def _role_problems(rel: str, text: str) -> list[str]:
    return [
        f"{rel}: unrendered MyST role {role!r} (raw text in the page)"
        for role in dict.fromkeys(_RAW_ROLE.findall(text))
    ]


def check_raw_markup(site: Path) -> list[str]:
    """Pages showing MyST as raw text: a Markdown table or a role (``{ref}`` before its target).

    Each page is parsed once for both.
    """
    return [
        problem
        for rel, text in _pages_text(site)
        for problem in _table_problems(rel, text) + _role_problems(rel, text)
    ]


def parse(path: Path) -> _Page:
    collector = _Collector()
    collector.feed(path.read_text(encoding="utf-8", errors="replace"))
    return collector.page


def _is_remote(url: str) -> bool:
    return url.startswith("//") or urlsplit(url).scheme in {"http", "https"}


def _loads_resource(kind: str, attr: str) -> bool:
    if kind.startswith("link:"):
        return bool(set(kind[5:].split()) & LOADING_LINK_RELS)
    return (kind, attr) in LOADING


def check_links_and_assets(site: Path) -> tuple[list[str], int]:
    """Broken internal links/anchors and network-loaded assets; also counts external links."""
    pages = {p.relative_to(site).as_posix(): p for p in site.rglob("*.html")}
    parsed = {rel: parse(path) for rel, path in pages.items()}
    problems: list[str] = []
    external = 0
    for rel, page in sorted(parsed.items()):
        if rel.startswith(("_static/", "_sources/")):
            continue
        for kind, attr, value in page.links:
            value = value.strip()
            if _is_remote(value):
                if _loads_resource(kind, attr):
                    problems.append(f"{rel}: loads {value} from the network ({kind} {attr})")
                else:
                    external += 1
                continue
            split = urlsplit(value)
            if split.scheme in {"mailto", "javascript", "data", "tel"} or split.scheme:
                continue
            target_rel = rel
            if split.path:
                target = (site / rel).parent / unquote(split.path)
                if target.is_dir():
                    target = target / "index.html"
                try:
                    target_rel = target.resolve().relative_to(site.resolve()).as_posix()
                except ValueError:
                    problems.append(f"{rel}: link {value} leaves the site")
                    continue
                if not target.is_file():
                    problems.append(f"{rel}: broken link {value} (no {target_rel})")
                    continue
            fragment = unquote(split.fragment)
            if fragment and target_rel.endswith(".html"):
                ids = parsed[target_rel].ids if target_rel in parsed else set()
                if fragment not in ids:
                    problems.append(f"{rel}: broken anchor {value} (no id {fragment!r})")
    for css in sorted(site.glob("_static/**/*.css")):
        for match in CSS_REMOTE.finditer(css.read_text(encoding="utf-8", errors="replace")):
            rel = css.relative_to(site).as_posix()
            problems.append(f"{rel}: fetches {match.group(1)} from the network")
    return problems, external


def colab_url(repository_url: str, branch: str, notebook: str) -> str:
    """The Colab launch URL of ``notebook`` (a path in the repository)."""
    split = urlsplit(repository_url)
    if split.netloc != "github.com":
        raise ValueError(f"Colab opens notebooks from github.com, not {repository_url}")
    org_repo = split.path.strip("/").removesuffix(".git")
    return f"{COLAB}/{org_repo}/blob/{branch}/{notebook}"


def check_colab(site: Path, config_path: Path) -> tuple[list[str], list[str]]:
    """Each notebook chapter's page links to Colab for exactly its reader's notebook, and
    its Download menu offers that notebook, not the MyST source."""
    import yaml

    root = config_path.resolve().parent
    config = yaml.safe_load(config_path.read_text())
    repo = config["repository"]
    book_path = repo.get("path_to_book", "") or ""
    branch = repo.get("branch", "main")
    # A chapter's details pages are its `sections` and carry Colab buttons too.
    files = toc_files(yaml.safe_load((root / "_toc.yml").read_text()))
    problems, checked = [], []
    for file in files:
        source = root / f"{file}{PAGE_SUFFIX}"
        if not is_page(source):
            continue
        page = site / f"{file}.html"
        expected = colab_url(repo["url"], branch, f"{book_path}/{file}.ipynb".lstrip("/"))
        if not page.is_file():
            problems.append(f"{file}.html: missing (chapter {source.name})")
            continue
        hrefs = [v for _, _, v in parse(page).links]
        links = [v for v in hrefs if v.startswith(COLAB)]
        if expected not in links:
            problems.append(f"{file}.html: no Colab link to {expected} (found {links or 'none'})")
        else:
            checked.append(expected)
        name = Path(file).name
        to_source = [v for v in hrefs if urlsplit(v).path.endswith(f"/{name}{PAGE_SUFFIX}")]
        if to_source:
            problems.append(f"{file}.html: links to its MyST source {to_source}")
        download = f"_sources/{file}.ipynb"
        if not any(urlsplit(v).path.endswith(download) for v in hrefs):
            problems.append(f"{file}.html: no Download link to {download}")
    return problems, checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. _build/html")
    parser.add_argument("--config", type=Path, help="_config.yml: also check Colab buttons")
    args = parser.parse_args(argv)
    site = args.site
    if not (site / "index.html").is_file():
        print(f"site check: {site}/index.html does not exist; build the book first")
        return 1
    problems, external = check_links_and_assets(site)
    problems += check_raw_markup(site)
    colab: list[str] = []
    if args.config:
        colab_problems, colab = check_colab(site, args.config)
        problems += colab_problems
    for problem in problems:
        print(f"  - {problem}")
    pages = sum(1 for p in site.rglob("*.html") if not p.relative_to(site).parts[0][0] == "_")
    print(
        f"site check: {pages} pages, {len(problems)} problems; internal links and anchors "
        f"resolved, {external} external links not fetched (offline), no network assets, "
        "no raw MyST (tables, roles)"
        + (f"; Colab buttons checked: {len(colab)}" if args.config else "")
    )
    for url in colab:
        print(f"  colab: {url}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
