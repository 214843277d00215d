"""Shared fixtures and paths for the test suite.

emerging-optimizers 0.3.0 (a test-only cross-check dependency) declares Python ≥ 3.12, but on
3.11 the only thing it lacks is ``typing.override`` (PEP 698), a decorator that has no effect
at run time. Providing that one name lets the cross-check run on 3.11 as well.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import pickle
import sys
import sysconfig
import typing
from pathlib import Path

import pytest
import yaml

if sys.version_info < (3, 12) and not hasattr(typing, "override"):

    def _override(method):  # as in 3.12: mark for type checkers where possible, else no-op
        try:
            method.__override__ = True
        except (AttributeError, TypeError):
            pass
        return method

    typing.override = _override

ROOT = Path(__file__).resolve().parents[1]


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, produce):
    """``produce()``, computed by one pytest-xdist worker and shared with the others.

    Under xdist every worker builds its own module- and session-scoped fixtures, so an
    expensive one (a Chromium session over the fixture site, a minute) was built by two or
    three workers of `make unit`. The first worker to ask computes it and pickles it into the
    run's shared temporary folder; the others wait on a file lock and read it back. Without
    xdist this is ``produce()``. A ``produce`` that raises (or skips) leaves nothing behind,
    so the next worker tries again and meets the same error.

    Args:
        tmp_path_factory: pytest's fixture of that name.
        name: what the value is, unique in the suite (the pickle's file name).
        produce: builds the value; it must pickle, and paths in it stay valid for the run.

    Returns:
        The value, equal in every worker.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return produce()
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent / f"once-per-run-{name}.pickle"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            return pickle.loads(shared.read_bytes())
        value = produce()
        shared.write_bytes(pickle.dumps(value))
        return value


#: What the book's Sphinx extensions (book/_ext) import beyond the package.
BOOK_EXTENSION_TOOLS = ("sphinx", "pybtex", "sphinxcontrib.bibtex")


def missing(*modules: str) -> list[str]:
    """Which of ``modules`` this interpreter cannot import (their parent packages included)."""

    def absent(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is None
        except ModuleNotFoundError:  # a dotted name whose parent package is absent
            return True

    return [name for name in modules if absent(name)]


def needs(*modules: str) -> pytest.MarkDecorator:
    """Skip a test where one of the book build's tools is not installed.

    The book's tools (jupyter-book, jupyter-cache, pybtex, … in requirements.txt, which
    `make env` and CI install) are not the library's dependencies: a machine that has only
    the package and torch (a lent GPU machine, say) skips the tests of the book build, and
    names what it lacks. Where the tools are installed the tests run, so a failure there
    is never hidden.

    Args:
        modules: importable module names, e.g. ``"jupyter_cache"``.

    Returns:
        A ``skipif`` mark.
    """
    lacking = missing(*modules)
    return pytest.mark.skipif(
        bool(lacking), reason=f"needs {', '.join(lacking)} (the book build's tools)"
    )


def missing_from_site_packages(*modules: str) -> list[str]:
    """Which of ``modules`` are not installed in this interpreter's own site-packages.

    tools/colab_check.py builds its fresh environment from a mirror of that folder alone
    (not of PYTHONPATH), so its kernel needs ipykernel & co. installed there, as `make env`
    installs them; a machine that supplies them on PYTHONPATH cannot run the check.
    """
    purelib = sysconfig.get_paths()["purelib"]
    return [m for m in modules if importlib.machinery.PathFinder.find_spec(m, [purelib]) is None]


def site_packages_reason(lacking: list[str]) -> str:
    """The skip reason for :func:`missing_from_site_packages`'s answer."""
    return (
        f"needs {', '.join(lacking)} installed in {sysconfig.get_paths()['purelib']} "
        "(the Colab check mirrors only this interpreter's site-packages)"
    )


def needs_in_site_packages(*modules: str) -> pytest.MarkDecorator:
    """Skip where ``modules`` are not in this interpreter's site-packages (see above).

    Args:
        modules: top-level module names, e.g. ``"ipykernel"``.

    Returns:
        A ``skipif`` mark.
    """
    lacking = missing_from_site_packages(*modules)
    return pytest.mark.skipif(bool(lacking), reason=site_packages_reason(lacking))


def book_extension(name: str):
    """Import a module of book/_ext, skipping the test where the book's tools are absent.

    Only missing tools skip: once they are all importable, an error in the extension
    itself fails the test.
    """
    for tool in BOOK_EXTENSION_TOOLS:
        pytest.importorskip(tool, reason=f"needs {tool} (the book build's tools)")
    ext = str(ROOT / "book" / "_ext")
    if ext not in sys.path:
        sys.path.insert(0, ext)
    return importlib.import_module(name)


def notebook(cells: list[str], first: list[dict] | None = None) -> dict:
    """A minimal nbformat-4 notebook of code cells (ids c0, c1, …), as the fixtures write them.

    Args:
        cells: the code cells' sources.
        first: cells to put before them (a title, say).

    Returns:
        The notebook as a JSON-ready dict.
    """
    code = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{i}",
            "metadata": {},
            "outputs": [],
            "source": src,
        }
        for i, src in enumerate(cells)
    ]
    return {
        "cells": [*(first or []), *code],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def myst_page(nb: dict) -> str:
    """A notebook (an nbformat-4 dict, as :func:`notebook` returns) as a book page: a MyST
    Markdown notebook, as ``book/<page>.md`` are written (front matter, ``{code-cell}``
    blocks with their metadata as YAML, ``+++`` between Markdown cells).
    """
    kernelspec = nb.get("metadata", {}).get("kernelspec") or {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    front = yaml.safe_dump({"file_format": "mystnb", "kernelspec": kernelspec}, sort_keys=False)
    parts, previous = [f"---\n{front}---"], None
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            meta = cell.get("metadata") or {}
            head = "```{code-cell} ipython3"
            if meta:
                head += "\n---\n" + yaml.safe_dump(meta, allow_unicode=True).rstrip() + "\n---"
            parts.append(f"{head}\n{src}\n```")
        else:
            if previous == "markdown":
                parts.append("+++")
            parts.append(src)
        previous = cell["cell_type"]
    return "\n\n".join(parts) + "\n"


def write_page(path: Path, nb: dict) -> Path:
    """Write :func:`myst_page` of ``nb`` to ``path`` (its folder created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(myst_page(nb), encoding="utf-8")
    return path


def read_page(path: Path):
    """A book page as MyST-NB reads it (tools/book_pages.py), skipping the test where
    MyST-NB, one of the book build's tools, is not installed."""
    pytest.importorskip("myst_nb", reason="needs myst_nb (the book build's tools)")
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import book_pages

    return book_pages.read_page(path)


@pytest.fixture
def emerging_soap_lib(monkeypatch):
    """``emerging_optimizers.soap.soap`` 0.3.0 with its RMS clipping run eagerly; skips where
    it is not installed.

    0.3.0 wraps its RMS clipping in ``torch.compile``, which compiles (~15 s on a CPU) even
    when clipping is off; an eager stand-in with the same contract keeps the tests fast
    (and checks that clipping is indeed off).
    """
    lib = pytest.importorskip(
        "emerging_optimizers.soap.soap",
        reason="cross-check needs emerging-optimizers==0.3.0 "
        "(pip install --ignore-requires-python emerging-optimizers==0.3.0)",
    )

    def _no_clip(u, max_rms, eps=1e-7):
        assert max_rms == 0

    monkeypatch.setattr(lib, "_clip_update_rms_in_place", _no_clip)
    return lib


@pytest.fixture(scope="session")
def book_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


@pytest.fixture(scope="session")
def toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def _precision_state() -> dict:
    import torch

    state = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    for path in ("", "cuda.matmul", "mkldnn.matmul", "mkldnn.conv", "cudnn.conv"):
        obj = torch.backends
        for part in filter(None, path.split(".")):
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "fp32_precision"):
            state[path or "fp32"] = obj.fp32_precision
    return state


@pytest.fixture(autouse=True)
def _no_leaked_precision(request):
    """Every test leaves torch's precision settings as it found them (the package promises
    to; a test that leaked would also change the tests after it)."""
    before = _precision_state()
    yield
    after = _precision_state()
    assert after == before, f"{request.node.nodeid} leaked precision state: {before} -> {after}"


def chromium_or_skip() -> str:
    """Chromium's executable for a browser test; skips the test where none is installed.

    Returns:
        The path of Debian's ``chromium`` (or another Chromium or Chrome found).
    """
    tools = str(ROOT / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from browser_driver import find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium installed (apt-get install chromium; .ci/run does)")
    return executable


#: The marker of the PDF's build and check (tests/test_pdf.py).
PDF_MARKER = "pdf"


def pytest_configure(config: pytest.Config) -> None:
    # Registered here rather than in pyproject.toml: that file is an input of the execution
    # cache's key (Makefile, CACHE_INPUTS), and a change there re-executes every page.
    config.addinivalue_line(
        "markers",
        f"{PDF_MARKER}: builds the book's PDF through LaTeX (minutes; `make pdf-check`, run "
        "weekly); deselected unless -m selects it",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the PDF's build unless ``-m`` chooses: `make test` never builds the PDF."""
    if config.getoption("markexpr"):
        return
    kept = [item for item in items if item.get_closest_marker(PDF_MARKER) is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept
