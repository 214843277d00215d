"""Project-specific Sphinx fixes: public constants on the API page with their source,
the package version in the footer, Colab and Download buttons that give a text page's
reader's notebook, and one script that jupyter-book 1 includes twice on every page.

API page (book/api.md): it documents the names in ``eigprec.__all__`` and
``eigprec_book.helpers.__all__`` as ``eigprec.<name>`` and ``eigprec_book.helpers.<name>``.
Functions and classes carry their docstrings wherever they are defined, but a
re-exported constant is documented by a ``#:`` comment in the submodule that
defines it, and autodoc reads such comments only from the module it documents
(the package's ``__init__.py``): it would silently leave the constant bare.
This extension copies those comments into autodoc's view of each package before
anything is read, and fails the build (a warning, under -W) for a public constant
that has none. For the same reason ``sphinx.ext.viewcode`` finds no source for a
re-exported constant (a tuple has no ``__module__``, and viewcode marks only
functions and classes in a module's code); the extension names the submodule that
defines it and the lines that assign it, so its entry gets a ``[source]`` link too.

Footer: ``html.extra_footer`` in _config.yml may contain ``{version}``, replaced by
``eigprec.__version__`` (the package the pages ran; Sphinx's ``version`` and ``release``
are set to it as well), and ``{repository}``, replaced by ``repository.url``, which
_config.yml defines once.

Colab and Download of a text page: the chapters are MyST Markdown notebooks
(``book/<page>.md``), and sphinx-book-theme builds a page's launch links from its source
file, so its Colab button would open ``book/<page>.md`` on the ``notebooks`` branch, where
only the reader's ``book/<page>.ipynb`` is (tools/reader_notebooks.py); it also offers the
MyST source for download beside the notebook. On a notebook page the launch links name the
``.ipynb``, and the Download menu offers the notebook (``_sources/<page>.ipynb``, which
``make notebooks`` replaces with the reader's) and the PDF, not the MyST text.

The book as a PDF (issue 51): every page's Download menu also offers the whole book as
one PDF, ``make pdf``'s output, which the publishing workflow puts on the site at
:data:`PDF_PATH` under ``html.baseurl``. The entry links the published copy, so a local
build links it too without one of its own.

Duplicate scripts: sphinx-thebe's inline configuration (``const THEBE_JS_URL = …``)
is registered twice in a jupyter-book 1 build, and the second copy throws
"SyntaxError: Identifier 'THEBE_JS_URL' has already been declared" in every
reader's browser (tools/check_browser.py caught it). Each page keeps the first
copy of any script included more than once.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from typing import Any

import eigprec_bibtex
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

logger = logging.getLogger(__name__)

PACKAGES = ("eigprec", "eigprec_book.helpers")
#: Where the publishing workflow puts the book's PDF on the site (.github/workflows/book.yml).
PDF_PATH = "_pdf/eigen-precision.pdf"


def _own_modules(package: Any) -> list[pkgutil.ModuleInfo]:
    """The package's own modules, not its subpackages: a library's constants live in the
    library (importing eigprec_book.chapters here would import the whole book)."""
    found = pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}.")
    return [info for info in found if not info.ispkg]


def _defining_comment(package: Any, name: str) -> list[str]:
    """The ``#:`` comment of ``name`` in the submodule of ``package`` that defines it."""
    value = getattr(package, name)
    for info in _own_modules(package):
        module = importlib.import_module(info.name)
        if getattr(module, name, None) is not value:
            continue
        docs = ModuleAnalyzer.for_module(info.name).find_attr_docs()
        if ("", name) in docs:
            return list(docs[("", name)])
    return []


def _defining_module(package: Any, name: str) -> str | None:
    """The submodule of ``package`` whose source assigns the public constant ``name``."""
    value = getattr(package, name)
    for info in _own_modules(package):
        module = importlib.import_module(info.name)
        if getattr(module, name, None) is not value:
            continue
        if ("", name) in ModuleAnalyzer.for_module(info.name).find_attr_docs():
            return info.name
    return None


def _copy_constant_comments(app: Sphinx) -> None:
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        analyzer = ModuleAnalyzer.for_module(package_name)
        docs = analyzer.find_attr_docs()  # analyzes once; autodoc reuses this cached object
        for name in package.__all__:
            value = getattr(package, name)
            if callable(value) or ("", name) in docs:  # classes, functions: own docstrings
                continue
            comment = _defining_comment(package, name)
            if comment:
                analyzer.attr_docs[("", name)] = comment
            else:
                logger.warning(
                    "%s.%s is public but has no #: documentation comment", package_name, name
                )


def _follow_constant(app: Sphinx, modname: str, attribute: str) -> str | None:
    # viewcode asks where ``modname.attribute`` is defined; it follows ``__module__``
    # itself, which a re-exported constant lacks.
    if modname not in PACKAGES:
        return None
    package = importlib.import_module(modname)
    if attribute not in package.__all__ or callable(getattr(package, attribute)):
        return None
    return _defining_module(package, attribute)


def _source_with_constants(app: Sphinx, modname: str) -> tuple[str, dict] | None:
    # viewcode's tags list only functions and classes; add the lines that assign each
    # public constant defined in ``modname``, so its [source] link has a target.
    constants = [
        name
        for package_name in PACKAGES
        for name in importlib.import_module(package_name).__all__
        if _follow_constant(app, package_name, name) == modname
    ]
    if not constants:
        return None
    analyzer = ModuleAnalyzer.for_module(modname)
    tags = dict(analyzer.find_tags())
    for node in ast.parse(analyzer.code).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name) and target.id in constants:
                tags[target.id] = ("other", node.lineno, node.end_lineno or node.lineno)
    return analyzer.code, tags


def _version_in_footer(app: Sphinx, config: Any) -> None:
    version = importlib.import_module("eigprec").__version__
    config.version = config.release = version
    options = config.html_theme_options
    footer = options.get("extra_footer") if isinstance(options, dict) else None
    if footer:
        repository = options.get("repository_url", "")
        options["extra_footer"] = footer.replace("{version}", version).replace(
            "{repository}", repository
        )


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


def _reader_notebook_buttons(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    # The theme sets ipynb_source on a MyST Markdown notebook page only, after copying the
    # executed notebook to _sources/<page>.ipynb for its Download menu.
    if not context.get("ipynb_source"):
        return
    source = context.get("page_source_suffix") or ".md"
    for group in context.get("header_buttons", []):
        buttons = group.get("buttons", [])
        if group.get("label") == "launch-buttons":
            for button in buttons:
                url = button.get("url", "")
                if url.endswith(f"{pagename}{source}"):
                    button["url"] = url.removesuffix(source) + ".ipynb"
        elif group.get("label") == "download-buttons":
            buttons[:] = [b for b in buttons if b.get("label") != "download-source-button"]


def book_pdf_url(baseurl: str) -> str:
    """Where the published book's PDF is, for a site published at ``baseurl``.

    Args:
        baseurl: ``html.baseurl`` of _config.yml.

    Returns:
        The URL of :data:`PDF_PATH` there.

    Example:
        >>> book_pdf_url("https://eigprec.github.io/eigen-precision")
        'https://eigprec.github.io/eigen-precision/_pdf/eigen-precision.pdf'
    """
    return baseurl.rstrip("/") + "/" + PDF_PATH


def _book_pdf_button(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    if not app.config.html_baseurl:
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group.setdefault("buttons", []).append(
                {
                    "type": "link",
                    "url": book_pdf_url(app.config.html_baseurl),
                    "text": "Book (PDF)",
                    "tooltip": "Download the whole book as one PDF",
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                }
            )


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.viewcode")  # defines the event connected below
    # Author-year labels in the bibliography, as in the text (book/_ext/eigprec_bibtex.py);
    # registered before sphinxcontrib-bibtex looks its styles up.
    eigprec_bibtex.register()
    app.connect("config-inited", _version_in_footer)
    app.connect("builder-inited", _copy_constant_comments)
    app.connect("viewcode-follow-imported", _follow_constant)
    app.connect("viewcode-find-source", _source_with_constants)
    app.connect("html-page-context", _drop_duplicate_scripts)
    # After sphinx-book-theme's own buttons (priority 501).
    app.connect("html-page-context", _reader_notebook_buttons, priority=600)
    app.connect("html-page-context", _book_pdf_button, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
