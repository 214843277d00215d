"""The values a build glued into its pages, read from an execution cache, and a comparison.

A refactoring that must not change what the book prints (issue 44: the layout move) is
checked by running the pages before and after and comparing every glued value:

    python tools/glued_values.py dump _build/.jupyter_cache > before.json
    python tools/glued_values.py compare before.json after.json

Each value is the plain-text form MyST-NB glues (``text/plain``); Markdown values are
compared as their Markdown text. Timings differ between any two runs; ``compare`` lists
every difference and exits with status 1 if there is one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

GLUE_PREFIX = "application/papermill.record/"


def glued(nb: dict) -> dict[str, str]:
    """Every glued value of one executed notebook (nbformat 4 as JSON): name -> its text."""
    out: dict[str, str] = {}
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = output.get("data", {})
            for mime in (f"{GLUE_PREFIX}text/markdown", f"{GLUE_PREFIX}text/plain"):
                if mime in data:
                    value = data[mime]
                    out[name] = "".join(value) if isinstance(value, list) else str(value)
                    break
            else:
                out[name] = "<" + ", ".join(sorted(data)) + ">"
    return out


def dump(cache: Path) -> dict[str, dict[str, str]]:
    """The glued values of every notebook in a jupyter-cache folder, by page name."""
    from jupyter_cache import get_cache

    result: dict[str, dict[str, str]] = {}
    jc = get_cache(str(cache))
    for record in jc.list_cache_records():
        nb = jc.get_cache_bundle(record.pk).nb
        page = Path(record.uri).stem if record.uri else str(record.pk)
        result[page] = glued(json.loads(json.dumps(nb)))
    return result


def compare(before: dict, after: dict) -> list[str]:
    """Lines naming every page or value that differs between two dumps."""
    lines = []
    for page in sorted(set(before) | set(after)):
        a, b = before.get(page), after.get(page)
        if a is None or b is None:
            lines.append(f"{page}: only in {'after' if a is None else 'before'}")
            continue
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                lines.append(f"{page}: {name}: {a.get(name)!r} -> {b.get(name)!r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="print the glued values of a cache as JSON")
    d.add_argument("cache", type=Path)
    c = sub.add_parser("compare", help="compare two dumps")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        json.dump(dump(args.cache), sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    lines = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    print("\n".join(lines) or "identical")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
