"""What the PDF edition (issue 51) needs from the LaTeX build that the site does not.

``make pdf`` builds the book with Sphinx's LaTeX builder (through jupyter-book and
sphinx-jupyterbook-latex) and xelatex. This extension changes nothing in an HTML build.

**Figures.** The pages' figures are SVG outputs (``eigprec_book.helpers.use_book_style``),
which LaTeX cannot include. _config.yml lets MyST-NB pick ``image/svg+xml`` for the LaTeX
builder too, and :class:`SvgToPdf` converts each SVG to a PDF with ``rsvg-convert``
(Debian's ``librsvg2-bin``) as Sphinx copies the images: vector to vector, so lines and
text stay sharp at any zoom and in print, and the SVG stays the one thing a page emits.
Emitting a PDF beside each SVG from the pages instead would change ``bookpkg`` and so
re-execute every page (the execution cache is keyed on it), and would put a second copy of
every figure into the reader's notebooks.

**Outputs that only have HTML.** A few outputs are HTML with a plain-text fallback that
reads badly on paper: the provenance box (a collapsed ``<details>`` whose text form is
``RuntimeInfo(device=…, …)`` on one line), the notes a page displays as an HTML admonition
(text form ``<IPython.core.display.HTML object>``) and ``show_source``'s listings.
:class:`HtmlOutputs` turns the first two into what they are, a titled box with its table or
paragraphs (:func:`html_to_nodes`), and a listing into highlighted Python under its
heading. Collapsed boxes are shown open: paper has no toggles.

**Code.** Code and outputs are set in 8 points, where a ruff-width line (100 characters)
fits the column; an output with longer lines (a report table) in the largest of
:data:`CODE_SIZES_PT` that fits it (:class:`WideOutputs`), so that its rows stay rows.

**The page.** sphinx-jupyterbook-latex sets its own document class, ``jupyterBook.cls``,
which loads ``bbm.sty`` for blackboard macros the book does not use: that one file would
need Debian's ``texlive-fonts-extra`` (500 MB). The build uses Sphinx's own ``manual``
class instead, and :func:`preamble` defines the two environments the extension wraps code
cells in. US letter with 0.75-inch side margins leaves a 7-inch column, the width the
pages' figures are drawn at (``eigprec_book.helpers.figures.MAX_WIDTH_IN``), so a figure
prints at its own size and its 9-point text stays 9 points; one-sided, with chapters on
the next page rather than the next right-hand one (no blank pages). The introduction (the root
page, whose title is the book's) becomes an unnumbered chapter "Introduction", and the
bibliography sits under the references page's own chapter heading instead of opening a
second chapter after an empty one.

**The title page.** It says when the PDF was built, from which commit, and on which
devices the pages were executed, read from the pages' provenance boxes as they are
rendered (:data:`EDITION_FILE`, written when the build finishes, which the title page
reads).
"""

from __future__ import annotations

import datetime
import html
import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.builders.latex import LaTeXBuilder
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.transforms.post_transforms.images import ImageConverter
from sphinx.util import logging

__all__ = [
    "CODE_SIZES_PT",
    "CODE_WIDTH_PT",
    "EDITION_FILE",
    "FONTS",
    "MONO_EM",
    "RSVG",
    "TABLE_OF_CONTENTS",
    "TITLE_DATE",
    "HeadingDepths",
    "HtmlOutputs",
    "IntroHeadings",
    "SvgToPdf",
    "WideOutputs",
    "code_size",
    "edition_tex",
    "html_to_nodes",
    "preamble",
    "provenance_summary",
    "setup",
    "tex_escape",
]

logger = logging.getLogger(__name__)

#: The converter of SVG figures to PDF (Debian package ``librsvg2-bin``).
RSVG = "rsvg-convert"
#: The file, beside the ``.tex``, that the title page reads the edition's facts from
#: (not ``.tex``: the latex folder's Makefile would build every ``.tex`` as a document).
EDITION_FILE = "eigprec-edition.def"
#: DejaVu (Debian's ``fonts-dejavu-core``) rather than Sphinx's FreeFont: FreeSans and
#: FreeMono lack glyphs the pages use (ᵀ in ``diag(QᵀLQ)``, ⟨ ⟩, subscript letters).
#: The monospaced font is scaled by 0.9, where its x-height matches the text's.
FONTS = "\n".join(
    [
        r"\setmainfont{DejaVu Serif}",
        r"\setsansfont{DejaVu Sans}",
        r"\setmonofont{DejaVu Sans Mono}[Scale=0.9]",
    ]
)
#: Width of one monospaced character in ems of the nominal size: DejaVu Sans Mono's
#: advance, 0.602 em, at :data:`FONTS`' scale.
MONO_EM = 0.602 * 0.9
#: Width of a code block's text, in points: the 7-inch column less the block's frame.
CODE_WIDTH_PT = 7 * 72 - 8
#: Point sizes of code blocks: code and outputs in the first (a ruff line of 100
#: characters fits it); an output with longer lines in the largest of the others that
#: fits them, else the last, where it wraps.
CODE_SIZES_PT = (8, 7, 6)
#: The title page's date line (sphinxmanual's ``\@date``).
TITLE_DATE = (
    r"Built \eigprecBuilt{} from commit \texttt{\eigprecCommit}\\[1ex]"
    r"Pages executed on \eigprecExecutedOn"
)
_SUMMARY = re.compile(r"^Provenance: executed on (?P<where>.+)$")
_LISTING_HEADING = re.compile(r"^(?P<name>\S+) — (?P<path>\S+), (?P<lines>.+)$")


def code_size(longest_line: int) -> int:
    """The point size to set a code block in, from its longest line's length.

    Args:
        longest_line: characters in the block's longest line.

    Returns:
        One of :data:`CODE_SIZES_PT`.

    Example:
        >>> code_size(100), code_size(125), code_size(140), code_size(400)
        (8, 7, 6, 6)
    """
    for size in CODE_SIZES_PT:
        if longest_line * MONO_EM * size <= CODE_WIDTH_PT:
            return size
    return CODE_SIZES_PT[-1]


def preamble() -> str:
    """What the extension adds to the LaTeX preamble.

    The edition's facts (with a stand-in where :data:`EDITION_FILE` is missing), the code
    sizes of :data:`CODE_SIZES_PT`, sphinx-jupyterbook-latex's code-cell environments (an
    input on Sphinx's grey; an output framed on white, at the column's full width so that
    figures and tables are not narrowed) and the bibliography under its page's heading.

    Returns:
        LaTeX source.

    Example:
        >>> r"\\newenvironment{sphinxVerbatimOutput}" in preamble()
        True
    """

    def fontsize(size: int) -> str:
        return rf"\fvset{{fontsize=\fontsize{{{size}}}{{{math.ceil(size * 1.25)}}}\selectfont}}"

    smaller = [
        rf"\newenvironment{{sphinxclasseigprecsize{size}}}{{{fontsize(size)}}}{{}}"
        for size in CODE_SIZES_PT[1:]
    ]
    return "\n".join(
        [
            rf"\IfFileExists{{{EDITION_FILE}}}{{\input{{{EDITION_FILE}}}}}{{%",
            r"  \def\eigprecBuilt{unknown}\def\eigprecCommit{unknown}%",
            r"  \def\eigprecExecutedOn{unknown}}",
            r"\setlength{\emergencystretch}{2em}",
            # Room for three-digit page numbers in the table of contents.
            r"\makeatletter\renewcommand*{\@pnumwidth}{2em}\makeatother",
            fontsize(CODE_SIZES_PT[0]),
            *smaller,
            r"\newenvironment{sphinxclasseigpreckeep}{\needspace{12\baselineskip}}{}",
            r"\newenvironment{sphinxVerbatimInput}{}{}",
            r"\newenvironment{sphinxVerbatimOutput}{\sphinxsetup{%",
            r"  pre_background-TeXcolor={rgb}{1,1,1}, pre_border-TeXcolor={rgb}{0.8,0.8,0.8}}}{}",
            # Sphinx's environment opens a chapter of its own ("Bibliography", unnumbered)
            # after the references page's chapter, which is then empty.
            r"\renewenvironment{sphinxthebibliography}[1]{%",
            r"  \let\eigprecchapter\chapter\def\chapter*##1{}%",
            r"  \begin{thebibliography}{#1}\let\chapter\eigprecchapter}{\end{thebibliography}}",
        ]
    )


#: The root page (the introduction, whose title is the book's) as an unnumbered chapter.
TABLE_OF_CONTENTS = (
    r"\sphinxtableofcontents"
    r"\chapter*{Introduction}\phantomsection\addcontentsline{toc}{chapter}{Introduction}"
    r"\markboth{Introduction}{Introduction}"
)


class SvgToPdf(ImageConverter):
    """SVG figures as PDF for the LaTeX builder, through ``rsvg-convert``."""

    # Before sphinx.ext.imgconverter's ImageMagick rule (priority 10), which would raster.
    default_priority = 9
    conversion_rules: ClassVar[list[tuple[str, str]]] = [("image/svg+xml", "application/pdf")]

    def is_available(self) -> bool:
        if shutil.which(RSVG):
            return True
        logger.warning(
            "%s not found: SVG figures cannot go into the PDF (Debian: apt-get install "
            "librsvg2-bin; `make pdf` names everything it needs)",
            RSVG,
        )
        return False

    def convert(self, _from: str, _to: str) -> bool:
        subprocess.run([RSVG, "--format=pdf", "--output", _to, _from], check=True)
        return True


class _Html(HTMLParser):
    """A small tree of the HTML that the book's own outputs use."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root: dict[str, Any] = {"tag": "", "attrs": {}, "children": []}
        self._stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = {"tag": tag, "attrs": {k: v or "" for k, v in attrs}, "children": []}
        self._stack[-1]["children"].append(element)
        if tag not in {"br", "hr", "img", "meta", "input"}:
            self._stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._stack) - 1, 0, -1):
            if self._stack[depth]["tag"] == tag:
                del self._stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self._stack[-1]["children"].append(data)


def _parse(source: str) -> dict[str, Any]:
    parser = _Html()
    parser.feed(source)
    parser.close()
    return parser.root


def _classes(element: dict[str, Any]) -> list[str]:
    return element["attrs"].get("class", "").split()


def _text(element: dict[str, Any] | str) -> str:
    if isinstance(element, str):
        return element
    return "".join(_text(child) for child in element["children"])


def _elements(element: dict[str, Any]) -> list[dict[str, Any]]:
    return [child for child in element["children"] if isinstance(child, dict)]


def _find(element: dict[str, Any], tag: str) -> dict[str, Any] | None:
    for child in _elements(element):
        found = child if child["tag"] == tag else _find(child, tag)
        if found is not None:
            return found
    return None


def _summary(element: dict[str, Any]) -> str | None:
    for child in _elements(element):
        if child["tag"] == "summary":
            return " ".join(_text(child).split())
    return None


def _inline(element: dict[str, Any] | str) -> list[nodes.Node]:
    if isinstance(element, str):
        return [nodes.Text(element)] if element else []
    tag = element["tag"]
    if tag == "code":
        return [nodes.literal(text=_text(element))]
    if tag in {"em", "i"}:
        return [nodes.emphasis(text=_text(element))]
    if tag in {"strong", "b"}:
        return [nodes.strong(text=_text(element))]
    if tag == "a" and element["attrs"].get("href"):
        return [nodes.reference(text=_text(element), refuri=element["attrs"]["href"])]
    return [node for child in element["children"] for node in _inline(child)]


def _table(element: dict[str, Any]) -> nodes.table:
    rows = []

    def collect(item: dict[str, Any]) -> None:
        for child in _elements(item):
            if child["tag"] == "tr":
                rows.append(_elements(child))
            else:
                collect(child)

    collect(element)
    width = max((len(row) for row in rows), default=1)
    group = nodes.tgroup(cols=width)
    group.extend(nodes.colspec(colwidth=1) for _ in range(width))
    body = nodes.tbody()
    group += body
    for row in rows:
        line = nodes.row()
        for cell in row:
            content = _inline(cell)
            if cell["tag"] == "th":
                content = [nodes.strong("", "", *content)]
            line += nodes.entry("", nodes.paragraph("", "", *content))
        line.extend(nodes.entry() for _ in range(width - len(row)))
        body += line
    return nodes.table("", group)


def _box(title: str, body: list[nodes.Node], classes: list[str]) -> nodes.container:
    box = nodes.admonition(classes=classes)
    box += nodes.title(text=title)
    box.extend(body)
    # The boxes are short (a provenance table, a note): not a title alone at a page's foot.
    return nodes.container("", box, classes=["eigpreckeep"])


def _block(element: dict[str, Any]) -> list[nodes.Node]:
    tag, classes = element["tag"], _classes(element)
    if tag == "p":
        return [nodes.paragraph("", "", *_inline(element))]
    if tag == "table":
        return [_table(element)]
    if tag == "pre":
        return [nodes.literal_block(text=_text(element).strip("\n"))]
    if tag in {"ul", "ol"}:
        listing = nodes.bullet_list() if tag == "ul" else nodes.enumerated_list()
        for item in _elements(element):
            if item["tag"] == "li":
                listing += nodes.list_item("", nodes.paragraph("", "", *_inline(item)))
        return [listing]
    if tag == "details":
        # Open on paper; a title is one line there, so it keeps the summary's head only:
        # what a closed box's summary adds after its colon, the open box shows.
        title = _summary(element) or "Details"
        return [_box(title.split(": ", 1)[0], _blocks(element), classes)]
    if tag == "div" and "admonition" in classes:
        heading = next((c for c in _elements(element) if "admonition-title" in _classes(c)), None)
        rest = {**element, "children": [c for c in element["children"] if c is not heading]}
        title = " ".join(_text(heading).split()) if heading else "Note"
        return [_box(title, _blocks(rest), [c for c in classes if c != "admonition"])]
    return _blocks(element)


def _blocks(element: dict[str, Any]) -> list[nodes.Node]:
    """Block content: paragraphs, tables, boxes; loose inline content as a paragraph."""
    out: list[nodes.Node] = []
    loose: list[nodes.Node] = []

    def flush() -> None:
        if any(not isinstance(n, nodes.Text) or n.astext().strip() for n in loose):
            out.append(nodes.paragraph("", "", *loose))
        loose.clear()

    for child in element["children"]:
        tag = child["tag"] if isinstance(child, dict) else None
        if tag in {"p", "table", "details", "div", "pre", "ul", "ol"}:
            flush()
            out.extend(_block(child))
        elif tag != "summary":  # a summary is its box's title (_block)
            loose.extend(_inline(child))
    flush()
    return out


def html_to_nodes(source: str) -> list[nodes.Node]:
    """The book's HTML outputs as docutils nodes that the LaTeX builder can write.

    A ``<details>`` box becomes an admonition (in a container that keeps it off a page's
    foot: :func:`preamble`'s ``eigpreckeep``) shown open, titled by its ``<summary>`` up
    to the first colon (a title is one line on paper; the rest of a closed box's summary
    says what the open box shows); a ``<div class="admonition …">`` an admonition titled
    by its ``admonition-title``; tables, paragraphs, lists, ``<pre>``, ``<code>``,
    ``<em>``/``<strong>`` and links keep their meaning. Styles and other markup are dropped.

    Args:
        source: an output's ``text/html``.

    Returns:
        The nodes, in order (empty for HTML with no text).

    Example:
        >>> [n.astext() for n in html_to_nodes("<p>a <code>b</code></p>")]
        ['a b']
    """
    return _blocks(_parse(source))


def provenance_summary(source: str) -> str | None:
    """Where a page ran, from its provenance box's HTML; None for any other output.

    Args:
        source: an output's ``text/html``.

    Returns:
        The summary after "Provenance: executed on ", e.g.
        ``"CPU (x86_64, 2 logical cores); TF32 emulated in software (…)"``, or None.

    Example:
        >>> provenance_summary('<details class="eigprec-provenance"><summary>'
        ...                    "Provenance: executed on CPU; TF32 emulated</summary></details>")
        'CPU; TF32 emulated'
        >>> provenance_summary("<p>hello</p>") is None
        True
    """
    for box in _elements(_parse(source)):
        if box["tag"] == "details" and "eigprec-provenance" in _classes(box):
            match = _SUMMARY.match(_summary(box) or "")
            if match:
                return match["where"]
    return None


def _listing(source: str, plain: str) -> list[nodes.Node]:
    """``show_source``'s listing: its heading (names and path in code, which breaks at
    dots and slashes), then the code, highlighted."""
    heading, _, code = plain.partition("\n")
    pre = _find(_parse(source), "pre")
    if pre is not None:
        code = html.unescape(_text(pre)).strip("\n")
    heading = heading.removeprefix("# ")
    match = _LISTING_HEADING.match(heading)
    if match:
        words = [
            nodes.literal(text=match["name"]),
            nodes.Text(" — "),
            nodes.literal(text=match["path"]),
            nodes.Text(f", {match['lines']}"),
        ]
    else:
        words = [nodes.literal(text=heading)]
    block = nodes.literal_block(code, code, language="python")
    return [nodes.paragraph("", "", *words), block]


def _is_bundle(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "mime_bundle"


# A bundle that has one of these renders it in LaTeX; its HTML is left alone.
_RICHER = {"image/svg+xml", "image/png", "image/jpeg", "application/pdf", "text/latex"}


class HtmlOutputs(SphinxPostTransform):
    """In a LaTeX build, the book's HTML-only outputs as boxes, tables and listings."""

    # Before MyST-NB picks one type out of each output's bundle (SelectMimeType, 4).
    default_priority = 3
    builders = ("latex",)

    def run(self, **kwargs: Any) -> None:
        for bundle in list(self.document.findall(_is_bundle)):
            by_type = {child["mime_type"]: child for child in bundle.children}
            if "text/html" not in by_type or set(by_type) & _RICHER:
                continue
            source = "".join(raw.astext() for raw in by_type["text/html"].findall(nodes.raw))
            plain = by_type["text/plain"].astext() if "text/plain" in by_type else ""
            if 'class="eigprec-source"' in source:
                replacement = _listing(source, plain)
            else:
                where = provenance_summary(source)
                if where is not None:
                    self.env.eigprec_executed_on.setdefault(where, []).append(self.env.docname)
                replacement = html_to_nodes(source)
            if replacement:
                bundle.replace_self(replacement)


class WideOutputs(SphinxPostTransform):
    """In a LaTeX build, an output with lines too long for 8 points in a smaller size."""

    # After MyST-NB has picked each output's type (SelectMimeType, 4).
    default_priority = 5
    builders = ("latex",)

    def run(self, **kwargs: Any) -> None:
        for block in list(self.document.findall(nodes.literal_block)):
            if "output" not in block["classes"]:
                continue
            size = code_size(max(map(len, block.astext().splitlines()), default=0))
            if size != CODE_SIZES_PT[0]:
                wrapper = nodes.container(classes=[f"eigprecsize{size}"])
                block.replace_self(wrapper)
                wrapper += block


_SECTIONS = ("part", "chapter", "section", "subsection", "subsubsection", "paragraph")


class HeadingDepths(SphinxPostTransform):
    """In a LaTeX build, each section's ``header_level`` as its depth in its page.

    sphinx-jupyterbook-latex numbers a page's sections in document order, one more for
    each sibling, so the introduction's second ``##`` heading read as level 3, its third
    as 4 (and were set ever smaller); :class:`IntroHeadings` needs the true depth.
    """

    # Before sphinx-jupyterbook-latex reads the levels (LatexRootDocPostTransforms, 700).
    default_priority = 690
    builders = ("latex",)

    def run(self, **kwargs: Any) -> None:
        for section in self.document.findall(nodes.section):
            if "header_level" not in section:
                continue
            depth, parent = 1, section.parent
            while parent is not None:
                if isinstance(parent, nodes.section) and (
                    parent.get("docname") == section.get("docname")
                ):
                    depth += 1
                parent = parent.parent
            section["header_level"] = depth


class IntroHeadings(SphinxPostTransform):
    """In a LaTeX build, the introduction's headings as unnumbered headings.

    sphinx-jupyterbook-latex sets the root page's subheadings as large bold lines
    (``RootHeader``), which LaTeX may leave alone at a page's foot, apart from their text;
    an unnumbered ``\\section*`` (a rubric with a heading level) stays with it.
    """

    # After sphinx-jupyterbook-latex has made them (LatexRootDocPostTransforms, 700).
    default_priority = 710
    builders = ("latex",)

    def run(self, **kwargs: Any) -> None:
        from sphinx_jupyterbook_latex.nodes import RootHeader

        top = _SECTIONS.index(self.config.latex_toplevel_sectioning or "chapter")
        for header in list(self.document.findall(RootHeader)):
            # A page's "##" is a section below the introduction's chapter.
            level = _SECTIONS.index("section") + header["level"] - 2
            rubric = nodes.rubric("", "", *[child.deepcopy() for child in header.children])
            rubric["heading-level"] = min(level, len(_SECTIONS) - 1) - top + 1
            header.replace_self(rubric)


def _commit(srcdir: Path) -> str:
    if shutil.which("git") is None:
        return "unknown (git not found)"

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=srcdir, capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown (not a git checkout)"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return commit + (" with uncommitted changes" if changed else "")


def _build_date() -> str:
    # SOURCE_DATE_EPOCH: the reproducible-builds convention for a fixed date.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
        if epoch
        else datetime.datetime.now(datetime.UTC)
    )
    return when.strftime("%Y-%m-%d")


# LaTeX's special characters; the rest of Unicode goes to xelatex as it is. (Sphinx's own
# texescape maps nothing until its LaTeX builder has initialised it.)
_TEX_SPECIALS = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "{": r"\{",
        "}": r"\}",
        "$": r"\$",
        "&": r"\&",
        "#": r"\#",
        "^": r"\textasciicircum{}",
        "_": r"\_",
        "%": r"\%",
        "~": r"\textasciitilde{}",
    }
)


def tex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped.

    Args:
        text: plain text.

    Returns:
        LaTeX source that typesets it.

    Example:
        >>> print(tex_escape("x86_64 & 100% {a}"))
        x86\\_64 \\& 100\\% \\{a\\}
    """
    return text.translate(_TEX_SPECIALS)


def edition_tex(date: str, commit: str, executed_on: dict[str, list[str]]) -> str:
    """The title page's facts as LaTeX macros (the content of :data:`EDITION_FILE`).

    Args:
        date: the build's date.
        commit: the commit built from.
        executed_on: each device summary found in the provenance boxes, with its pages.

    Returns:
        ``\\def`` lines for ``\\eigprecBuilt``, ``\\eigprecCommit`` and
        ``\\eigprecExecutedOn``, their text escaped for LaTeX; where the pages ran on
        several devices, one line each with its number of pages.

    Example:
        >>> print(edition_tex("2026-11-28", "abc", {"CPU; TF32 emulated": ["book/tf32"]}))
        \\def\\eigprecBuilt{2026-11-28}
        \\def\\eigprecCommit{abc}
        \\def\\eigprecExecutedOn{CPU; TF32 emulated}
    """
    if not executed_on:
        places = "no page's provenance box was found"
    elif len(executed_on) == 1:
        places = tex_escape(next(iter(executed_on)))
    else:
        places = r"\\ ".join(
            tex_escape(f"{where} ({len(pages)} pages)") for where, pages in executed_on.items()
        )
    return "\n".join(
        [
            rf"\def\eigprecBuilt{{{tex_escape(date)}}}",
            rf"\def\eigprecCommit{{{tex_escape(commit)}}}",
            rf"\def\eigprecExecutedOn{{{places}}}",
        ]
    )


def _latex_config(app: Sphinx, config: Any) -> None:
    # After sphinx-jupyterbook-latex's own handler (priority 500), which sets its class.
    config.latex_theme = "manual"
    elements = config.latex_elements
    elements["papersize"] = "letterpaper"
    elements["pointsize"] = "10pt"
    # Read on a screen more than printed: chapters start on the next page, not the next
    # right-hand one, so no blank pages between them (a printer can still print it duplex).
    elements["extraclassoptions"] = "openany,oneside"
    elements["sphinxsetup"] = "hmargin=0.75in, vmargin=0.9in"
    elements["fontpkg"] = FONTS
    elements["tableofcontents"] = TABLE_OF_CONTENTS
    elements["preamble"] = elements.get("preamble", "") + "\n" + preamble() + "\n"


def _start(app: Sphinx) -> None:
    app.env.eigprec_executed_on = {}
    if isinstance(app.builder, LaTeXBuilder):
        app.builder.context["date"] = TITLE_DATE  # the builder reads it as it writes


def _write_edition(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or not isinstance(app.builder, LaTeXBuilder):
        return
    text = edition_tex(_build_date(), _commit(Path(app.srcdir)), app.env.eigprec_executed_on)
    Path(app.outdir, EDITION_FILE).write_text(text + "\n", encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_post_transform(SvgToPdf)
    app.add_post_transform(HtmlOutputs)
    app.add_post_transform(WideOutputs)
    app.add_post_transform(HeadingDepths)
    app.add_post_transform(IntroHeadings)
    app.connect("config-inited", _latex_config, priority=600)
    app.connect("builder-inited", _start)
    app.connect("build-finished", _write_edition)
    # The provenance boxes are collected into the environment as the book is written.
    return {"parallel_read_safe": True, "parallel_write_safe": False}
