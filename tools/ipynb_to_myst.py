"""Convert a chapter notebook (``book/<page>.ipynb``) to a MyST Markdown notebook (``.md``).

The pages became text (issue 44) so that a prose edit is a prose diff. This converter
writes MyST-NB's text-notebook format:

- YAML front matter with ``file_format: mystnb`` and the notebook's kernelspec;
- every code cell as a ```` ```{code-cell} ipython3 ```` block, its source byte for byte,
  its tags as a ``:tags: [...]`` option line, other metadata (a figure's caption, name
  and alt text) as the block's YAML header, long strings folded one sentence per line;
- a ``+++`` break between consecutive Markdown cells, so that every cell of the notebook
  stays a cell (the reader's notebooks convert Markdown cell by cell);
- prose one sentence per line, long sentences also split at clause boundaries (``; ``,
  `` — ``, ``: ``, ``, which`` …), never inside inline code, math, a role or a link; a list
  item's continuation lines indented to its content column.

It checks its own output before writing it: the page read back by MyST-NB's reader
(:func:`book_pages.read_page`) has the same cells, the same code (source and metadata)
and kernelspec, and every Markdown cell parses to the same blocks and inline HTML as
before, up to whitespace. A page that fails a check is not written.

Usage: ``python tools/ipynb_to_myst.py book/tf32.ipynb [...] [--check-only]``: writes
``book/tf32.md`` beside each notebook (remove the ``.ipynb`` with ``git mv``/``git rm``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import yaml
from book_pages import read_page

#: A sentence longer than this is split at clause boundaries too.
SOFT = 110
#: No part of a split shorter than this.
MIN_PART = 24
#: The test's limit on a prose line.
HARD = 200

ABBREVIATIONS = {"e.g.", "i.e.", "i.i.d.", "etc.", "vs.", "cf.", "al.", "fig.", "eq.", "sec."}
CLAUSE_WORDS = (
    "which|where|whose|while|but|so|since|because|though|although|whereas|when|unless|yet|and|or"
)
# What a continuation line may not start with: it would open a block (a list item, a
# heading, a quote, a fence, a directive option, a MyST comment, a table row, HTML).
BAD_START = re.compile(
    r"([-+*]\s|#|>|\||:|=|%|<|~~~|```|\$\$|\d+[.)](\s|$)|\+\+\+|---|\[\^|\\begin|\([^)]*\)=\s*$)"
)
LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])(\s+)(\S.*)$")
LABEL = re.compile(r"^\s*\([^)\s]+\)=\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})")
COLON_FENCE = re.compile(r"^(\s*)(:{3,})")


# --------------------------------------------------------------------------- inline


def _protected_spans(text: str) -> list[tuple[int, int]]:
    """Spans a line break must not enter: code, math, roles, links, HTML, escapes."""
    spans = []
    i, n = 0, len(text)

    def code_end(j: int) -> int | None:
        run = len(text[j:]) - len(text[j:].lstrip("`"))
        close = text.find("`" * run, j + run)
        while close != -1:
            after = close + run
            if after >= n or text[after] != "`":
                if close == 0 or text[close - 1] != "`":
                    return after
            close = text.find("`" * run, close + 1)
        return None

    def bracket_end(j: int, open_: str, close_: str) -> int | None:
        depth, k = 0, j
        while k < n:
            c = text[k]
            if c == "\\":
                k += 2
                continue
            if c == "`":
                end = code_end(k)
                if end is not None:
                    k = end
                    continue
            if c == open_:
                depth += 1
            elif c == close_:
                depth -= 1
                if depth == 0:
                    return k + 1
            k += 1
        return None

    while i < n:
        c = text[i]
        if c == "\\":
            spans.append((i, min(i + 2, n)))
            i += 2
            continue
        if c == "`":
            end = code_end(i)
            if end is not None:
                spans.append((i, end))
                i = end
                continue
        if c == "{":
            m = re.match(r"\{[A-Za-z][\w:.+-]*\}`", text[i:])
            if m:
                end = code_end(i + m.end() - 1)
                if end is not None:
                    spans.append((i, end))
                    i = end
                    continue
            m = re.match(r"\{\{.*?\}\}", text[i:])
            if m:
                spans.append((i, i + m.end()))
                i += m.end()
                continue
        if c == "$":
            if text.startswith("$$", i):
                close = text.find("$$", i + 2)
                if close != -1:
                    spans.append((i, close + 2))
                    i = close + 2
                    continue
            close = i + 1
            while close < n and (text[close] != "$" or text[close - 1] == "\\"):
                close += 1
            if close < n:
                spans.append((i, close + 1))
                i = close + 1
                continue
        if c == "[" or (c == "!" and text.startswith("![", i)):
            start = i + (c == "!")
            end = bracket_end(start, "[", "]")
            if end is not None and end < n and text[end] in "([":
                close = bracket_end(end, text[end], ")" if text[end] == "(" else "]")
                if close is not None:
                    spans.append((i, close))
                    i = close
                    continue
        if c == "<":
            m = re.match(r"<(/?[A-Za-z][^<>]*|https?://[^<>\s]+)>", text[i:])
            if m:
                spans.append((i, i + m.end()))
                i += m.end()
                continue
        i += 1
    return spans


def _free(spans: list[tuple[int, int]], pos: int) -> bool:
    return not any(a <= pos < b for a, b in spans)


def _breaks(text: str) -> list[tuple[int, int]]:
    """``(index of a space, tier)`` where a line may break: 0 a sentence end, 1 ``; ``,
    `` — `` or ``: ``, 2 a comma before a clause word, 3 any comma, 4 any space."""
    spans = _protected_spans(text)
    found = []
    for m in re.finditer(r" +", text):
        pos, end = m.start(), m.end()
        if not _free(spans, pos) or pos == 0 or end >= len(text):
            continue
        before, after = text[:pos], text[end:]
        if BAD_START.match(after):
            continue
        word = before.rsplit(" ", 1)[-1]
        stripped = word.rstrip("\"')*’”_")
        tier = 4
        if (
            re.search(r"[.?!]$", stripped)
            and stripped.lower() not in ABBREVIATIONS
            and not re.fullmatch(r"[A-Za-z]\.", stripped)
            and re.match(r"[A-Za-z0-9{`$(*\"'“‘_\[]", after)
        ):
            tier = 0
        elif before.endswith(";") or after.startswith("— ") or before.endswith(":"):
            tier = 1
        elif before.endswith(",") and re.match(rf"({CLAUSE_WORDS})\b", after):
            tier = 2
        elif before.endswith(","):
            tier = 3
        found.append((pos, tier))
    return found


def split_prose(text: str, soft: int = SOFT) -> list[str]:
    """``text`` (one paragraph, on one line) as lines: one sentence each, a long sentence
    also split at its clause boundaries, the most important boundary nearest the middle
    first; commas and plain spaces only where a part would exceed :data:`HARD`."""
    breaks = _breaks(text)
    sentences, start = [], 0
    for pos, tier in breaks:
        if tier == 0:
            sentences.append((start, pos))
            start = pos
    sentences.append((start, len(text)))

    def split(a: int, b: int) -> list[tuple[int, int]]:
        length = b - a
        if length <= soft:
            return [(a, b)]
        inner = [(p, t) for p, t in breaks if a + MIN_PART <= p <= b - MIN_PART and t > 0]
        # Commas where a sentence is long, any space only where it would exceed HARD.
        for tier, above in ((1, soft), (2, soft), (3, 150), (4, HARD - 20)):
            if length <= above:
                continue
            options = [p for p, t in inner if t == tier]
            if options:
                mid = (a + b) / 2
                p = min(options, key=lambda q: abs(q - mid))
                return split(a, p) + split(p, b)
        return [(a, b)]

    lines = []
    for a, b in sentences:
        lines += [text[x:y].strip() for x, y in split(a, b)]
    return [line for line in lines if line]


# --------------------------------------------------------------------------- blocks


def _block_start(line: str) -> bool:
    s = line.lstrip()
    return bool(
        not s
        or s.startswith(("#", "|", "<", "%", "$$", "\\begin", "+++", ">"))
        or FENCE.match(line)
        or COLON_FENCE.match(line)
        or LABEL.match(line)
        or LIST_ITEM.match(line)
        or re.match(r"^\s*(---+|===+)\s*$", line)
        or re.match(r"^\s*\[[^\]]+\]:", line)
    )


def reflow_markdown(source: str) -> str:
    """The Markdown ``source`` with every paragraph one sentence (or clause) per line;
    everything that is not a paragraph (fences, math blocks, headings, targets, directive
    lines and options, tables, HTML) as it was."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        fence = FENCE.match(line)
        if fence:  # a code block or a backtick directive: verbatim up to its closing fence
            mark = fence.group(2)
            out.append(line)
            i += 1
            while i < len(lines):
                out.append(lines[i])
                closing = lines[i].strip()
                i += 1
                if closing.startswith(mark[0] * len(mark)) and not closing.strip(mark[0]):
                    break
            continue
        if COLON_FENCE.match(line):  # a directive: its line and options verbatim, body reflowed
            out.append(line)
            i += 1
            if s.strip(":"):
                while i < len(lines) and re.match(r"^\s*:[\w-]+:", lines[i]):
                    out.append(lines[i])
                    i += 1
            continue
        if s.startswith("$$") and not (len(s) > 2 and s.endswith("$$")):
            out.append(line)
            i += 1
            while i < len(lines):
                out.append(lines[i])
                i += 1
                if lines[i - 1].strip().endswith("$$"):
                    break
            continue
        begin = re.match(r"^\s*\\begin\{([^}]+)\}", line)
        if begin:
            end = f"\\end{{{begin.group(1)}}}"
            while i < len(lines):
                out.append(lines[i])
                i += 1
                if end in lines[i - 1]:
                    break
            continue
        item = LIST_ITEM.match(line)
        if not s or (_block_start(line) and not item):
            out.append(line)
            i += 1
            continue
        # A paragraph (or a list item's first paragraph): this line and its continuations.
        if item:
            indent, marker, gap, first = item.groups()
            prefix = f"{indent}{marker}{gap}"
            hang = " " * len(prefix)
        else:
            prefix = hang = line[: len(line) - len(line.lstrip())]
            first = line.lstrip()
        para = [line]
        j = i + 1
        while j < len(lines) and not _block_start(lines[j]):
            para.append(lines[j])
            j += 1
        hard_break = any(p.endswith(("  ", "\\")) for p in para[:-1])
        if hard_break:
            out += para
        else:
            text = " ".join([first.strip(), *(p.strip() for p in para[1:])])
            parts = split_prose(text)
            out.append(prefix + parts[0])
            out += [hang + part for part in parts[1:]]
        i = j
    return "\n".join(out)


# --------------------------------------------------------------------------- cells


def _plain(value: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][\w.-]*", value)) and value not in (
        "true",
        "false",
        "null",
        "yes",
        "no",
        "on",
        "off",
    )


def _yaml(value, indent: int) -> list[str]:
    """YAML lines of a cell's metadata; long strings folded (``>-``) one sentence per line."""
    pad = " " * indent
    lines = []
    for key, val in value.items():
        if isinstance(val, dict):
            lines.append(f"{pad}{key}:")
            lines += _yaml(val, indent + 2)
        elif isinstance(val, list) and all(isinstance(v, str) and _plain(v) for v in val):
            lines.append(f"{pad}{key}: [{', '.join(val)}]")
        elif isinstance(val, str) and _plain(val):
            lines.append(f"{pad}{key}: {val}")
        elif isinstance(val, str) and "\n" not in val and val == val.strip() and val:
            lines.append(f"{pad}{key}: >-")
            lines += [f"{pad}  {part}" for part in split_prose(val, soft=90)]
        else:
            dumped = yaml.safe_dump({key: val}, allow_unicode=True, width=10**6)
            lines += [pad + x for x in dumped.rstrip("\n").split("\n")]
    return lines


def code_cell(cell: dict) -> str:
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    runs = [len(r) for r in re.findall(r"`{3,}", source)]
    fence = "`" * max(3, *(r + 1 for r in runs)) if runs else "```"
    meta = cell.get("metadata", {})
    head = [f"{fence}{{code-cell}} ipython3"]
    if set(meta) == {"tags"} and all(_plain(t) for t in meta["tags"]):
        head.append(f":tags: [{', '.join(meta['tags'])}]")
        head.append("")
    elif meta:
        head += ["---", *_yaml(meta, 0), "---"]
    return "\n".join([*head, source, fence])


def notebook_to_myst(nb: dict) -> str:
    kernelspec = nb["metadata"]["kernelspec"]
    front = yaml.safe_dump(
        {"file_format": "mystnb", "kernelspec": kernelspec}, sort_keys=False, allow_unicode=True
    )
    parts = [f"---\n{front}---"]
    previous = None
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            parts.append(code_cell(cell))
        elif cell["cell_type"] == "markdown":
            if cell.get("metadata") or cell.get("attachments"):
                raise ValueError(f"cell {cell.get('id')}: Markdown metadata is not carried")
            if previous == "markdown":
                parts.append("+++")
            parts.append(reflow_markdown(source.strip("\n")))
        else:
            raise ValueError(f"cell {cell.get('id')}: a {cell['cell_type']} cell")
        previous = cell["cell_type"]
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- checks


def _md_parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "_config.yml").read_text())
    extensions = set(config["parse"]["myst_enable_extensions"])
    return create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)


def _ws(text: str) -> str:
    return " ".join(text.split())


def rendered(md, text: str) -> list:
    """Block structure and inline HTML of Markdown ``text``, whitespace normalised; a
    directive's body (options dropped) parsed the same way, recursively."""
    out = []
    for tok in md.parse(text):
        if tok.type in ("fence", "colon_fence") and tok.info.startswith("{"):
            body = tok.content.split("\n")
            while body and re.match(r"^\s*:[\w-]+:", body[0]):
                body.pop(0)
            out.append(("directive", tok.info.strip(), rendered(md, "\n".join(body))))
        elif tok.type == "inline":
            out.append(("inline", _ws(md.renderer.renderInline(tok.children, md.options, {}))))
        else:
            out.append((tok.type, tok.tag, tok.markup, tok.info, tok.hidden, tok.content))
    return out


def check(nb: dict, text: str, path: Path) -> list[str]:
    """What differs between notebook ``nb`` and the MyST page ``text`` (saved at ``path``)."""
    path.write_text(text, encoding="utf-8")
    back = read_page(path)
    problems = []
    if back.metadata.get("kernelspec") != nb["metadata"]["kernelspec"]:
        problems.append("kernelspec differs")
    if len(back.cells) != len(nb["cells"]):
        return [*problems, f"{len(back.cells)} cells read back, {len(nb['cells'])} before"]
    md = _md_parser()
    for i, (old, new) in enumerate(zip(nb["cells"], back.cells, strict=True)):
        src = "".join(old["source"]) if isinstance(old["source"], list) else old["source"]
        if old["cell_type"] != new.cell_type:
            problems.append(f"cell {i}: {old['cell_type']} became {new.cell_type}")
        elif old["cell_type"] == "code":
            if new.source != src:
                problems.append(f"cell {i}: code source differs")
            if dict(new.metadata) != old.get("metadata", {}):
                problems.append(f"cell {i}: metadata {dict(new.metadata)} != {old['metadata']}")
        else:
            if _ws(new.source) != _ws(src):
                problems.append(f"cell {i}: Markdown text differs beyond whitespace")
            if rendered(md, new.source) != rendered(md, src.strip("\n")):
                problems.append(f"cell {i}: Markdown renders differently")
            long = [x for x in new.source.split("\n") if len(x) > HARD]
            if long and not all(x.lstrip().startswith("|") for x in long):
                problems.append(f"cell {i}: {len(long)} line(s) over {HARD} characters")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check-only", action="store_true", help="convert, check, write nothing")
    args = parser.parse_args(argv)
    failed = 0
    for source in args.notebooks:
        nb = json.loads(source.read_text(encoding="utf-8"))
        text = notebook_to_myst(nb)
        target = source.with_suffix(".md")
        trial = target.with_name(f".{target.stem}.converting.md")
        try:
            problems = check(nb, text, trial)
        finally:
            trial.unlink(missing_ok=True)
        if problems:
            failed += 1
            print(f"FAIL {source}:", *problems, sep="\n  ", file=sys.stderr)
            continue
        if not args.check_only:
            target.write_text(text, encoding="utf-8")
        print(f"ok   {source} -> {target} ({len(nb['cells'])} cells)")
        # A Markdown link to a page's file breaks once the pages are .md files: name the
        # page with {doc} instead (tests/test_book_files.py fails on such a link).
        for link in sorted(set(re.findall(r"\]\(([\w./-]+\.ipynb)(?:#[^)]*)?\)", text))):
            print(f"     note: {target} links to {link}; write {{doc}}`...` instead")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
