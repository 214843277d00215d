"""Two project-specific Sphinx fixes: public constants on the API page, and one
script that jupyter-book 1 includes twice on every page.

API page (book/api.md): ``automodule:: eigprec`` with ``:members:`` lists the names
in ``eigprec.__all__``.
Functions and classes carry their docstrings wherever they are defined, but a
re-exported constant is documented by a ``#:`` comment in the submodule that
defines it, and autodoc reads such comments only from the module it documents
(``eigprec/__init__.py``): it would silently leave the constant off the page.
This extension copies those comments into autodoc's view of ``eigprec`` before
anything is read, and fails the build (a warning, under -W) for a public constant
that has none.

Duplicate scripts: sphinx-thebe's inline configuration (``const THEBE_JS_URL = …``)
is registered twice in a jupyter-book 1 build, and the second copy throws
"SyntaxError: Identifier 'THEBE_JS_URL' has already been declared" in every
reader's browser (tools/check_browser.py caught it). Each page keeps the first
copy of any script included more than once.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

logger = logging.getLogger(__name__)

PACKAGE = "eigprec"


def _defining_comment(package: Any, name: str) -> list[str]:
    """The ``#:`` comment of ``name`` in the submodule of ``package`` that defines it."""
    value = getattr(package, name)
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        module = importlib.import_module(info.name)
        if getattr(module, name, None) is not value:
            continue
        docs = ModuleAnalyzer.for_module(info.name).find_attr_docs()
        if ("", name) in docs:
            return list(docs[("", name)])
    return []


def _copy_constant_comments(app: Sphinx) -> None:
    package = importlib.import_module(PACKAGE)
    analyzer = ModuleAnalyzer.for_module(PACKAGE)
    docs = analyzer.find_attr_docs()  # analyzes once; autodoc reuses this cached object
    for name in package.__all__:
        value = getattr(package, name)
        if callable(value) or ("", name) in docs:  # classes, functions: own docstrings
            continue
        comment = _defining_comment(package, name)
        if comment:
            analyzer.attr_docs[("", name)] = comment
        else:
            logger.warning("%s.%s is public but has no #: documentation comment", PACKAGE, name)


def _drop_duplicate_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, str]] = set()
    kept = []
    for script in scripts:
        # An inline script has filename None or "" depending on who added it.
        filename = str(getattr(script, "filename", script) or "")
        key = (filename, repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    scripts[:] = kept


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _copy_constant_comments)
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
