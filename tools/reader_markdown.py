"""MyST Markdown of a book page turned into the Markdown Colab renders.

Used by tools/reader_notebooks.py. Glue roles and directives are filled from the
executed notebook's glue outputs, citations become "Author (year)" links with the
reference's DOI or URL, cross-references links to the published pages, directives
block quotes, math and code blocks; sphinx-exercise's exercises become "Exercise N
(title)" and their solutions a collapsed ``<details>`` or, for the gated form with
code cells, a section headed "Solution to Exercise N". Anything else in MyST's role
or directive syntax is a :class:`GenerationError`: the reader must never see raw MyST.
"""

from __future__ import annotations

import base64
import re
from ast import literal_eval
from dataclasses import dataclass, field
from pathlib import Path

from book_pages import is_page, read_page

__all__ = ["Context", "GenerationError", "convert_markdown", "load_bibliography"]

ROLE = re.compile(r"\{([A-Za-z][\w:+-]*)?\}`([^`]*)`")
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:+-]*)\}[ \t]*(?P<args>.*)$"
)
TARGET = re.compile(r"^\(([\w.:-]+)\)=\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
ADMONITIONS = {
    "note", "warning", "tip", "important", "hint", "caution", "attention", "danger",
    "error", "seealso", "admonition", "dropdown", "margin", "sidebar", "topic",
}  # fmt: skip
PY_ROLES = {"func", "class", "meth", "mod", "attr", "data", "obj", "exc", "const", "any"}
GLUE_ROLES = {"glue", "glue:", "glue:any", "glue:text", "glue:md", "glue:math"}


class GenerationError(RuntimeError):
    """A page cannot be turned into a reader's notebook without leaving MyST behind."""


@dataclass
class Reference:
    authors: str  # as cited: "Clarke", "Park et al."
    year: str
    text: str  # the full reference, Markdown
    link: str | None


def _latex(text: str) -> str:
    import codecs

    import latexcodec  # noqa: F401  (pybtex's dependency; registers the "ulatex" codec)

    text = re.sub(r"\\url\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(?:texttt|emph|textit|textbf)\{([^{}]*)\}", r"\1", text)
    text = codecs.decode(text, "ulatex")  # accents: {\'e} -> é
    text = text.replace("\\&", "&").replace("\\#", "#").replace("\\_", "_").replace("--", "–")
    return re.sub(r"[{}]", "", text).replace("\\", "").strip()


def load_bibliography(paths: list[Path]) -> dict[str, Reference]:
    """Each BibTeX entry of ``paths`` as a short citation, a full reference and a link."""
    from pybtex.database import parse_file

    refs: dict[str, Reference] = {}
    for path in paths:
        for key, entry in parse_file(str(path), bib_format="bibtex").entries.items():
            people = entry.persons.get("author", []) or entry.persons.get("editor", [])
            last = [_latex(" ".join(p.prelast_names + p.last_names) or str(p)) for p in people]
            if not last:
                short = "Anonymous"
            elif len(last) == 1:
                short = last[0]
            elif len(last) == 2:
                short = f"{last[0]} & {last[1]}"
            else:
                short = f"{last[0]} et al."
            f = {k.lower(): _latex(v) for k, v in entry.fields.items()}
            link = None
            if f.get("doi"):
                link = f"https://doi.org/{f['doi']}"
            elif f.get("url"):
                link = f["url"]
            else:
                found = re.search(r"https?://\S+", " ".join(f.values()))
                link = found.group(0).rstrip(".,;") if found else None
            venue = (
                f.get("journal")
                or f.get("booktitle")
                or f.get("howpublished")
                or f.get("publisher")
            )
            names = "; ".join(_latex(str(p)) for p in people) or "Anonymous"
            parts = [f"{names} ({f.get('year', 'n.d.')}).", f"*{f.get('title', key)}*."]
            if venue:
                parts.append(f"{venue}.")
            if link:
                parts.append(f"<{link}>")
            refs[key] = Reference(short, f.get("year", "n.d."), " ".join(parts), link)
    return refs


@dataclass
class Context:
    """What converting a page's Markdown needs: labels, references, URLs, glue data."""

    base_url: str
    repo_url: str
    ref: str
    bibliography: dict[str, Reference]
    labels: dict[str, tuple[str, str]]  # label -> (page, title)
    titles: dict[str, str]  # page -> title
    api_page: str | None
    glossary_page: str | None = None
    glue: dict[str, dict] = field(default_factory=dict)
    page: str = ""
    attachments: dict[str, dict] = field(default_factory=dict)
    cited: list[str] = field(default_factory=list)
    # This page's exercises so far (sphinx-exercise): label -> "Exercise N (title)".
    exercises: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_book(cls, root: Path, pages: list[str], config: dict, bib: dict, ref: str) -> Context:
        labels: dict[str, tuple[str, str]] = {}
        titles: dict[str, str] = {}
        api_page = glossary_page = None
        for page in pages:
            path = root / f"{page}.md"
            if not path.is_file():
                continue
            texts = []
            if is_page(path):  # a notebook page: its Markdown cells and figure names
                for cell in read_page(path).cells:
                    if cell["cell_type"] == "markdown":
                        texts.append(cell["source"])
                    fig = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
                    if fig.get("name"):
                        labels[fig["name"]] = (page, fig.get("caption", "figure"))
            else:
                texts.append(path.read_text(encoding="utf-8"))
                if "automodule::" in texts[-1] or "{automodule}" in texts[-1]:
                    api_page = api_page or page
                if re.search(r"^\s*(`{3,}|:{3,})\{glossary\}", texts[-1], re.M):
                    glossary_page = glossary_page or page
            pending = None
            for line in "\n".join(texts).splitlines():
                target, heading = TARGET.match(line), HEADING.match(line)
                if target:
                    pending = target.group(1)
                elif heading:
                    titles.setdefault(page, heading.group(1))
                    if pending:
                        labels[pending] = (page, heading.group(1))
                    pending = None
                name = re.match(r"^\s*:(?:name|label):\s*(\S+)", line)
                if name:
                    labels.setdefault(name.group(1), (page, name.group(1)))
        return cls(
            base_url=config["html"]["baseurl"].rstrip("/") + "/",
            repo_url=config["repository"]["url"].rstrip("/"),
            ref=ref,
            bibliography=bib,
            labels=labels,
            titles=titles,
            api_page=api_page,
            glossary_page=glossary_page,
        )

    def page_url(self, page: str, anchor: str = "") -> str:
        return f"{self.base_url}{page}.html" + (f"#{anchor}" if anchor else "")

    def take_attachments(self) -> dict[str, dict]:
        taken, self.attachments = self.attachments, {}
        return taken

    # -- roles -------------------------------------------------------------------
    def glue_data(self, key: str, where: str) -> dict:
        if key not in self.glue:
            raise GenerationError(f"{where}: no glued value {key!r} in the executed notebook")
        return self.glue[key]

    def glue_text(self, text: str, where: str) -> str:
        key, _, fmt = text.rpartition(":") if ":" in text else (text, "", "")
        data = self.glue_data(key, where)
        plain = "".join(data.get("text/plain", ""))
        if not plain:
            raise GenerationError(f"{where}: glued value {key!r} has no text/plain")
        try:
            value = literal_eval(plain)
        except (SyntaxError, ValueError):
            value = plain
        if not fmt:
            return str(value)
        kind = fmt[-1]
        if kind in "bcdoxX":
            value = int(value)
        elif kind in "eEfFgGn%":
            value = float(value)
        elif kind == "s":
            value = str(value)
        return format(value, fmt)

    def glue_any(self, key: str, where: str, inline: bool) -> str:
        data = self.glue_data(key, where)
        if "text/markdown" in data:
            return "".join(data["text/markdown"]).strip()
        for mime in ("image/png", "image/jpeg", "image/svg+xml"):
            if mime in data:
                name = f"{key}.{mime.split('/')[1].split('+')[0]}"
                payload = data[mime]
                if mime == "image/svg+xml":
                    payload = base64.b64encode("".join(payload).encode()).decode()
                self.attachments[name] = {mime: "".join(payload).replace("\n", "")}
                return f"![{key}](attachment:{name})"
        if "text/latex" in data:
            return "".join(data["text/latex"]).strip()
        return self.glue_text(key, where)

    def cite(self, role: str, text: str, where: str) -> str:
        out = []
        for key in (k.strip() for k in text.split(",")):
            if key not in self.bibliography:
                raise GenerationError(f"{where}: no reference {key!r} in the bibliography")
            r = self.bibliography[key]
            if key not in self.cited:
                self.cited.append(key)
            year = f"[{r.year}]({r.link})" if r.link else r.year
            out.append(
                f"{r.authors} ({year})"
                if role.startswith(("cite:t", "cite:alt"))
                else f"{r.authors}, {year}"
            )
        if role.startswith(("cite:t", "cite:alt")):
            return "; ".join(out)
        return "(" + "; ".join(out) + ")"

    def xref(self, role: str, text: str, where: str) -> str:
        explicit = re.match(r"^(.*?)\s*<([^<>]+)>$", text, re.S)
        label, shown = (explicit.group(2), explicit.group(1)) if explicit else (text, None)
        if role == "doc":
            page = str(Path(self.page).parent / label) if not label.startswith("/") else label[1:]
            page = re.sub(r"(^|/)\./", r"\1", page)
            return f"[{shown or self.titles.get(page, label)}]({self.page_url(page)})"
        if role in ("ref", "numref"):
            if label not in self.labels:
                raise GenerationError(f"{where}: unknown cross-reference target {label!r}")
            page, title = self.labels[label]
            title = shown.replace("%s", "").replace("{number}", "").strip() if shown else title
            if role == "numref" and not shown:
                title = (
                    "this figure"
                    if page == self.page
                    else f"the figure on {self.titles.get(page, page)}"
                )
            return f"[{title}]({self.page_url(page, label)})"
        if role == "term":
            if self.glossary_page is None:
                return shown or label
            # Sphinx's anchor of a glossary term: "term-" and the term, runs of other
            # characters than letters, digits, "." and "_" made one "-".
            anchor = "term-" + re.sub(r"[^A-Za-z0-9._]+", "-", label).strip("-")
            return f"[{shown or label}]({self.page_url(self.glossary_page, anchor)})"
        if role == "eq":
            return f"({label})"
        name = label.lstrip("~!.")
        code = f"`{shown or (name.rsplit('.', 1)[-1] if label.startswith('~') else name)}`"
        if self.api_page and name.startswith("eigprec"):
            return f"[{code}]({self.page_url(self.api_page, name)})"
        return code

    def role(self, name: str, text: str, where: str) -> str:
        if name in GLUE_ROLES:
            if name == "glue:text":
                return self.glue_text(text, where)
            if name == "glue:md":
                return self.glue_any(
                    text.rsplit(":", 1)[0]
                    if text.endswith((":myst", ":commonmark", ":gfm"))
                    else text,
                    where,
                    True,
                )
            if name == "glue:math":
                return f"${self.glue_any(text, where, True).strip('$')}$"
            return self.glue_any(text, where, True)
        if name.startswith("cite"):
            return self.cite(name, text, where)
        if name in ("math",):
            return f"${text}$"
        if name in ("sub", "sup", "abbr", "kbd", "samp", "file", "code"):
            return f"`{text}`" if name in ("kbd", "samp", "file", "code") else text
        short = name.split(":", 1)[1] if name.startswith(("py:", "std:")) else name
        if short in PY_ROLES | {"doc", "ref", "numref", "term", "eq"}:
            return self.xref(short, text, where)
        raise GenerationError(f"{where}: MyST role {{{name}}} has no Markdown equivalent here")


def _replace_roles(text: str, ctx: Context, where: str) -> str:
    # Leave inline code alone: `{glue:text}` written to be shown, not run.
    pieces = re.split(r"((?<![\w}])`[^`\n]*`)", text)
    out = []
    for piece in pieces:
        if piece.startswith("`") and piece.endswith("`") and len(piece) > 1:
            out.append(piece)
        else:
            out.append(ROLE.sub(lambda m: ctx.role(m.group(1) or "", m.group(2), where), piece))
    joined = "".join(out)
    # A role split by the code-span pass: {name} followed by a code span.
    return re.sub(
        r"\{([A-Za-z][\w:+-]*)\}(`[^`\n]*`)",
        lambda m: ctx.role(m.group(1), m.group(2)[1:-1], where),
        joined,
    )


EXERCISE_DIRECTIVES = {
    "exercise", "exercise-start", "exercise-end", "solution", "solution-start", "solution-end",
}  # fmt: skip


def _exercise(
    name: str, args: str, options: dict[str, str], inner: list[str], ctx: Context, where: str
) -> list[str]:
    # sphinx-exercise's directives, numbered per page as "Exercise N (title)". The
    # gated forms (-start/-end) wrap the cells between them: the exercise's start is a
    # bold line, its solution's start a section heading (Colab folds a section, so a
    # solution's code cells stay collapsed), and the end markers leave nothing.
    if name.endswith("-end"):
        return []
    if name.startswith("exercise"):
        title = _replace_roles(args.strip(), ctx, where)
        heading = f"Exercise {len(ctx.exercises) + 1}" + (f" ({title})" if title else "")
        label = options.get("label", "")
        ctx.exercises[label or f"#{len(ctx.exercises)}"] = heading
        anchor = [f'<a id="{label}"></a>'] if label else []
        if label:
            ctx.labels[label] = (ctx.page, heading)
        if name == "exercise-start":
            return [*anchor, f"**{heading}**", *inner]
        return [*anchor, f"> **{heading}**", ">", *(f"> {x}" if x else ">" for x in inner)]
    label = args.strip()
    if label not in ctx.exercises:
        raise GenerationError(f"{where}: solution to an unknown exercise {label!r}")
    heading = f"Solution to {ctx.exercises[label]}"
    if name == "solution-start":
        return [f"#### {heading}", *inner]
    if "dropdown" in options.get("class", "").split():
        return ["<details>", f"<summary><b>{heading}</b></summary>", "", *inner, "", "</details>"]
    return [f"> **{heading}**", ">", *(f"> {x}" if x else ">" for x in inner)]


def _directive(name: str, args: str, body: list[str], ctx: Context, where: str) -> list[str]:
    options: dict[str, str] = {}
    while body and re.match(r"^\s*:[\w-]+:", body[0]):
        key, _, value = body.pop(0).strip()[1:].partition(":")
        options[key] = value.strip()
    if body and body[0].strip() == "---":
        end = body.index("---", 1) if "---" in body[1:] else 0
        body = body[end + 1 :]
    inner = convert_markdown("\n".join(body), ctx, where).strip("\n").splitlines()
    if name in EXERCISE_DIRECTIVES:
        return _exercise(name, args, options, inner, ctx, where)
    if name in ADMONITIONS:
        title = args.strip() if args.strip() else name.capitalize()
        title = _replace_roles(title, ctx, where)
        if name == "seealso" and not args.strip():
            title = "See also"
        return [f"> **{title}**", ">", *(f"> {line}" if line else ">" for line in inner)]
    if name in ("math", "glue:math"):
        if name == "glue:math":
            return ["$$", ctx.glue_any(args.strip(), where, False).strip("$"), "$$"]
        return ["$$", *body, "$$"]
    if name in ("code", "code-block", "sourcecode", "code-cell"):
        return [f"```{args.strip()}", *body, "```"]
    if name in ("figure", "image"):
        url = f"{ctx.repo_url.replace('github.com', 'raw.githubusercontent.com')}/{ctx.ref}/"
        path = (Path(ctx.page).parent / args.strip()).as_posix()
        alt = options.get("alt", "figure")
        return [f"![{alt}]({url}{path})", "", *(f"*{line}*" if line else "" for line in inner)]
    if name in ("glue", "glue:", "glue:any", "glue:figure", "glue:md"):
        return [
            ctx.glue_any(args.strip(), where, False),
            "",
            *(f"*{line}*" if line else "" for line in inner),
        ]
    if name in ("epigraph", "pull-quote", "highlights"):
        return [f"> {line}" if line else ">" for line in inner]
    raise GenerationError(f"{where}: MyST directive {{{name}}} has no Markdown equivalent here")


def convert_markdown(text: str, ctx: Context, where: str) -> str:
    """A MyST Markdown cell as Markdown with no role or directive left.

    Args:
        text: the cell's source.
        ctx: the book's labels, bibliography, URLs and the page's glue data.
        where: names the cell in error messages.

    Returns:
        The Markdown a reader's notebook holds.

    Raises:
        GenerationError: for a role or directive without a Markdown equivalent, an
            unknown citation or cross-reference, or a glued value the build lacks.
    """
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        plain = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence:
            mark = fence.group("fence")
            end = i + 1
            close = re.compile(rf"^\s*{re.escape(mark[0])}{{{len(mark)},}}\s*$")
            while end < len(lines) and not close.match(lines[end]):
                end += 1
            if end == len(lines):
                raise GenerationError(
                    f"{where}: directive {{{fence.group('name')}}} is never closed"
                )
            body = [b[len(fence.group("indent")) :] for b in lines[i + 1 : end]]
            out += _directive(fence.group("name"), fence.group("args"), body, ctx, where)
            i = end + 1
            continue
        if plain:
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(plain.group(1)):
                end += 1
            out += lines[i : end + 1]
            i = end + 1
            continue
        if TARGET.match(line):
            out.append(f'<a id="{TARGET.match(line).group(1)}"></a>')
        elif re.match(r"^%", line):
            pass  # a MyST comment
        elif line.strip().startswith("$$"):
            end = i if line.strip().count("$$") >= 2 and line.strip() != "$$" else i + 1
            while end < len(lines) and "$$" not in lines[end][1 if end == i else 0 :]:
                end += 1
            out += lines[i : end + 1]
            i = end + 1
            continue
        else:
            out.append(_replace_roles(line, ctx, where))
        i += 1
    result = "\n".join(out)
    leftover = re.search(r"\{[A-Za-z][\w:+-]*\}`|^\s*(`{3,}|:{3,})\{", result, re.M)
    if leftover:
        raise GenerationError(
            f"{where}: MyST syntax left after conversion: {result[leftover.start() :][:60]!r}"
        )
    return result
