"""Show the package's own code in a chapter instead of a copy that could drift.

A chapter shows the few lines that carry an idea, not a whole listing: the package marks such
a part with two comments, ``# [show:NAME]`` and ``# [/show:NAME]``, and
``show_source(obj, part="NAME")`` shows only the lines between them (the markers themselves
never appear in a listing).
"""

from __future__ import annotations

import html
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SourceListing", "show_source"]

_MARKER = re.compile(r"^\s*# \[(/?)show:([\w-]+)\]\s*$")


@dataclass(frozen=True)
class SourceListing:
    """Source code of one object, with where it lives.

    Renders syntax-highlighted HTML in notebooks and plain text elsewhere. The HTML
    carries Pygments' CSS classes inside a ``div.highlight``, not inline colours: the
    book's theme colours them with its own Pygments stylesheets, one for its light and
    one for its dark theme, both at WCAG contrast. Where a page loads no such
    stylesheet the listing reads as plain monospaced code.

    Attributes:
        qualname: the object's qualified name, e.g. ``"eigprec.round_tf32"``.
        path: the source file, relative to the package's parent directory.
        first_line: the line number of the first line shown.
        code: the source text.

    Example:
        >>> listing = show_source(show_source)
        >>> listing.qualname
        'eigprec_book.helpers.source.show_source'
        >>> listing.header.split(" — ")[1].startswith("eigprec_book/helpers/source.py")
        True
    """

    qualname: str
    path: str
    first_line: int
    code: str

    @property
    def header(self) -> str:
        """``"<qualname> — <path>, lines a–b"``."""
        last = self.first_line + self.code.count("\n") - (1 if self.code.endswith("\n") else 0)
        return f"{self.qualname} — {self.path}, lines {self.first_line}–{last}"

    def __str__(self) -> str:
        return f"# {self.header}\n{self.code}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        # Classes, not inline colours: an inline colour is right for one theme only.
        formatter = HtmlFormatter(noclasses=False, cssclass="highlight", nowrap=False)
        body = highlight(self.code, PythonLexer(), formatter)
        return (
            '<div class="eigprec-source" style="margin:4px 0">'
            f'<div style="font-size:0.85em;margin-bottom:2px">'
            f"<code>{html.escape(self.header)}</code></div>"
            f'<div style="overflow-x:auto;font-size:0.85em">{body}</div></div>'
        )


def show_source(obj: object, part: str | None = None) -> SourceListing:
    """Return the source of a function, class or method, ready to display.

    Args:
        obj: a Python-level function, method or class (objects wrapped with
            :func:`functools.wraps` show the wrapped definition).
        part: the name of a marked part (``# [show:part]`` … ``# [/show:part]`` inside
            ``obj``) to show instead of the whole definition; it is dedented, and the
            header gives its own line numbers.

    Returns:
        A :class:`SourceListing`; as the last expression of a notebook cell it
        displays highlighted code with its file and line numbers.

    Raises:
        TypeError: if ``obj`` has no Python source (a builtin, an instance, a
            C extension function), or ``part`` is not a string.
        ValueError: if ``obj`` has no part of that name.

    Example:
        >>> from eigprec_book.helpers import show_source
        >>> listing = show_source(show_source)
        >>> listing.code.startswith("def show_source")
        True
    """
    target = inspect.unwrap(obj) if callable(obj) else obj
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target)):
        raise TypeError(
            f"show_source needs a Python function, method or class; got {type(obj).__name__}"
        )
    try:
        lines, first = inspect.getsourcelines(target)
        file = inspect.getsourcefile(target)
    except (OSError, TypeError) as exc:
        raise TypeError(f"no Python source is available for {obj!r}: {exc}") from exc
    module = inspect.getmodule(target)
    path = Path(file or "<unknown>")
    if module is not None and module.__name__.partition(".")[0]:
        package = __import__(module.__name__.partition(".")[0])
        root = Path(inspect.getsourcefile(package) or path).parent.parent
        try:
            path = path.relative_to(root)
        except ValueError:
            pass
    qualname = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
    if part is not None:
        if not isinstance(part, str):
            raise TypeError(f"part must be a string, got {type(part).__name__}")
        lines, first = _marked_part(lines, first, part, qualname)
    else:
        lines = [line for line in lines if not _MARKER.match(line)]
    return SourceListing(
        qualname=qualname, path=path.as_posix(), first_line=first, code="".join(lines)
    )


def _marked_part(lines: list[str], first: int, part: str, qualname: str) -> tuple[list[str], int]:
    """The lines strictly between ``# [show:part]`` and ``# [/show:part]``, dedented."""
    start = end = None
    for i, line in enumerate(lines):
        match = _MARKER.match(line)
        if match and match.group(2) == part:
            if match.group(1) == "" and start is None:
                start = i + 1
            elif match.group(1) == "/" and start is not None:
                end = i
                break
    if start is None or end is None:
        raise ValueError(f"{qualname} has no part marked '# [show:{part}]' … '# [/show:{part}]'")
    body = [line for line in lines[start:end] if not _MARKER.match(line)]
    return textwrap.dedent("".join(body)).splitlines(keepends=True), first + start
