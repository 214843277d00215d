"""Lint and format-check the code cells of the book's pages with ruff (``make lint``).

The pages are MyST Markdown notebooks, which ruff does not read; it read their code cells
when the pages were ``.ipynb`` files. Each page is read as MyST-NB reads it
(tools/book_pages.py) and handed to ``ruff check`` and ``ruff format --check`` on standard
input as a notebook named ``book/<page>.ipynb``, so the project's settings for notebooks
apply (pyproject.toml: line length, rules, ``E402`` ignored). Findings are reported at
the page's own lines (``book/tf32.md:123:8: F401 …``); a cell ruff would reformat is shown
as ruff's diff, under the line where the cell starts.

Usage: ``python tools/lint_pages.py [--fix] [book/<page>.md ...]`` (default: every page of
``book/``). Exit status 1 where ruff finds anything. ``--fix`` first applies ruff's safe
fixes and its formatting to the code cells and writes them back into the pages, each cell
where it stood (the Markdown, the cells' options and their order untouched).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from book_pages import page_paths, read_page

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]


def body_lines(page: Path, nb) -> list[int | None]:
    """The 1-based line of ``page`` where each cell's source starts (None: not found)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    starts: list[int | None] = []
    for cell, fence in zip(nb.cells, nb.metadata.get("source_map", []), strict=False):
        src = cell.source.splitlines()
        found = None
        for k in range(max(fence - 1, 0), len(lines)):
            if lines[k : k + len(src)] == src:
                found = k + 1
                break
        starts.append(found)
    return starts


def _ruff(args: list[str], name: str, text: str) -> subprocess.CompletedProcess:
    cmd = [*RUFF, *args, "--stdin-filename", name, "-"]
    return subprocess.run(cmd, input=text, capture_output=True, text=True, cwd=ROOT)


def lint(page: Path) -> list[str]:
    """Ruff's findings in ``page``'s code cells, as lines to print (none: clean)."""
    import nbformat

    nb = read_page(page)
    rel = page.resolve().relative_to(ROOT) if page.resolve().is_relative_to(ROOT) else page
    name = str(Path(rel).with_suffix(".ipynb"))
    text = nbformat.writes(nb)
    starts = body_lines(page, nb)

    def where(cell: int, row: int = 1) -> str:
        start = starts[cell - 1] if 0 < cell <= len(starts) else None
        return f"{rel}:{start + row - 1}" if start else f"{rel}: cell {cell} line {row}"

    out = []
    check = _ruff(["check", "--output-format", "json", "--no-fix"], name, text)
    try:
        findings = json.loads(check.stdout or "[]")
    except ValueError:
        return [f"{rel}: ruff check failed: {check.stderr.strip() or check.stdout.strip()}"]
    if check.returncode not in (0, 1):
        return [f"{rel}: ruff check failed: {check.stderr.strip()}"]
    for f in findings:
        loc = f["location"]
        out.append(
            f"{where(f.get('cell') or 0, loc['row'])}:{loc['column']}: {f['code']} {f['message']}"
        )
    fmt = _ruff(["format", "--diff"], name, text)
    if fmt.returncode not in (0, 1):
        return [*out, f"{rel}: ruff format failed: {fmt.stderr.strip()}"]
    if fmt.returncode == 1:
        # ruff names every code cell; keep the cells that have a hunk.
        blocks = re.split(r"(?m)^--- .*?:cell (\d+)\n\+\+\+ .*\n", fmt.stdout)
        for cell, hunk in zip(blocks[1::2], blocks[2::2], strict=True):
            if hunk.strip():
                out.append(f"{where(int(cell))}: ruff format would change this cell:")
                out.append(hunk.rstrip("\n"))
    return out


#: A code cell of a MyST page: the fence line, its options (``:key: value`` lines or a YAML
#: block between ``---`` lines), the code, the closing fence.
CODE_CELL = re.compile(
    r"^(?P<open>```\{code-cell\}[^\n]*\n)(?P<head>(?:---\n.*?\n---\n|(?::[^\n]*\n)*))"
    r"(?P<code>.*?)^```$",
    re.S | re.M,
)


def fix(page: Path) -> bool:
    """Apply ruff's safe fixes and formatting to ``page``'s code cells, in place.

    Returns:
        Whether the page changed.
    """
    import nbformat

    text = page.read_text(encoding="utf-8")
    cells = list(CODE_CELL.finditer(text))
    if not cells:
        return False
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(m["code"].strip("\n")) for m in cells]
    )
    nb.metadata["language_info"] = {"name": "python"}
    name = str(page.with_suffix(".ipynb").name)
    checked = _ruff(["check", "--fix", "--exit-zero", "--quiet"], name, nbformat.writes(nb))
    formatted = _ruff(["format"], name, checked.stdout or nbformat.writes(nb))
    if formatted.returncode != 0:
        raise RuntimeError(f"{page}: ruff format failed: {formatted.stderr.strip()}")
    new_cells = [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in json.loads(formatted.stdout)["cells"]
    ]
    out, pos = [], 0
    for m, code in zip(cells, new_cells, strict=True):
        lead = m["code"][: len(m["code"]) - len(m["code"].lstrip("\n"))]  # after the options
        out.append(text[pos : m.start("code")] + lead + code + "\n")
        pos = m.end("code")
    out.append(text[pos:])
    new = "".join(out)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", type=Path, help="default: every page of book/")
    parser.add_argument("--fix", action="store_true", help="fix and format the code cells first")
    args = parser.parse_args(argv)
    pages = args.pages or page_paths(ROOT / "book")
    if args.fix:
        for page in pages:
            if fix(page):
                print(f"lint_pages: fixed {page}")
    found = 0
    for page in pages:
        lines = lint(page)
        found += bool(lines)
        for line in lines:
            print(line)
    if found:
        print(f"lint_pages: ruff found problems in the code cells of {found} of {len(pages)} pages")
        return 1
    print(f"lint_pages: the code cells of {len(pages)} pages pass ruff check and ruff format")
    return 0


if __name__ == "__main__":
    sys.exit(main())
