"""Write the reader's notebook of every chapter page from the executed book build.

What "Open in Colab" and "Download" give a reader (issue 25): the page as a notebook,
not the MyST source it was built from. For each notebook page of ``_toc.yml``
(``<page>.md``, a MyST Markdown notebook) that jupyter-book executed
(``_build/jupyter_execute/<page>.ipynb``, which MyST-NB writes for text pages too) this
writes
``_build/notebooks/<page>.ipynb`` where

- every glued value is filled into the prose (``{glue:text}``, ``{glue:md}``,
  ``{glue}``, the glue directives), as the build computed it;
- citations become readable references with their DOI or URL, cross-references
  (``{numref}``, ``{ref}``, ``{doc}``, ``{term}``, ``{py:func}`` …) links to the
  published pages, and MyST directives Markdown that Colab renders (admonitions and
  dropdowns as block quotes with a bold title, math kept);
- ``remove-cell`` cells (guards, glue) are dropped; a definition that a later visible
  cell needs is kept, alone, in a collapsed cell; when that cannot be done (the
  definition sits in an assertion or a glue call, or nothing earlier defines a name a
  visible cell uses) generation fails naming the cell, so the reader never meets the
  ``NameError``;
- ``remove-input``/``hide-input`` cells are kept, collapsed (Colab's form view);
- outputs are kept, and a figure's caption follows its output;
- the first cells say where and when the numbers were computed, and install the
  package (in Colab only) at the commit the pages were built from.

A role or directive this script does not know is an error, not raw syntax left for
the reader.

Usage: ``python tools/reader_notebooks.py --executed _build/jupyter_execute
--out _build/notebooks [--html _build/html]`` (``make notebooks``). With ``--html`` the
built site's download copy (``_sources/<page>.ipynb``, where the theme copies the executed
notebook of a text page) is replaced by the reader's notebook, so the page's Download
button serves it.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from book_pages import PAGE_SUFFIX, is_page, read_page
from book_toc import toc_files
from reader_cells import kept_definitions
from reader_markdown import Context, GenerationError, convert_markdown, load_bibliography

ROOT = Path(__file__).resolve().parents[1]
GLUE_PREFIX = "application/papermill.record/"
COLLAPSED = ("hide-input", "remove-input")
#: The call that shows a page's provenance box (in the page's first visible code cell).
PROVENANCE_CALL = re.compile(r"^(provenance|eigprec\.describe_runtime)\(\)", re.M)

__all__ = ["GenerationError", "generate", "main", "reader_notebook"]


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _glue_store(nb: dict, sidecar: Path | None = None) -> dict[str, dict]:
    """Glued values by name: from the outputs' ``scrapbook`` metadata, and from the
    ``<page>.glue.json`` that myst-nb writes beside the executed notebook after it took
    them out of the outputs."""
    store = {}
    if sidecar is not None and sidecar.is_file():
        for name, out in json.loads(sidecar.read_text(encoding="utf-8")).items():
            cut = len(out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix", ""))
            store[name] = {
                k[cut:] if k.startswith(GLUE_PREFIX) else k: v
                for k, v in out.get("data", {}).items()
            }
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                cut = len(meta.get("mime_prefix", ""))
                store[meta["name"]] = {k[cut:]: v for k, v in out.get("data", {}).items()}
    return store


def _visible_outputs(outputs: list[dict]) -> list[dict]:
    kept = []
    for out in outputs:
        meta = out.get("metadata", {})
        if "scrapbook" in meta:
            if meta["scrapbook"].get("mime_prefix"):
                continue  # glue(..., display=False): nothing the page shows
            out = copy.deepcopy(out)
            del out["metadata"]["scrapbook"]
        kept.append(out)
    return kept


def _code_cell(source: str, outputs=(), metadata=None, cell_id=None) -> dict:
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": metadata or {},
        "outputs": list(outputs),
        "source": source,
    }
    if cell_id:
        cell["id"] = cell_id
    return cell


def _markdown_cell(source: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}


def _collapsed(source: str, title: str) -> str:
    return f"#@title {title}\n{source}" if not source.startswith("#@title") else source


def _runtime_text(nb: dict) -> str | None:
    """Where the build ran, from what the provenance cell (``provenance()``, which is
    ``eigprec.describe_runtime`` with the scale) returned there."""
    for cell in nb["cells"]:
        src = "".join(cell.get("source", "")) if cell["cell_type"] == "code" else ""
        if not PROVENANCE_CALL.search(src):
            continue
        for out in cell.get("outputs", []):
            text = "".join(out.get("data", {}).get("text/plain", ""))
            fields = dict(re.findall(r"(\w+)=('[^']*'|True|False|None)", text))
            if "device_name" in fields:
                tf32 = (
                    "TF32 on its tensor cores"
                    if fields.get("tf32_hardware") == "True"
                    else "TF32 emulated in software"
                )
                torch = fields.get("torch_version", "?").strip("'")
                return f"{fields['device_name'].strip(chr(39))}, {tf32}, torch {torch}"
    return None


def _provenance(ctx: Context, page: str, nb: dict, built: str) -> str:
    runtime = _runtime_text(nb)
    where = f" The machine that computed them: {runtime}." if runtime else ""
    return (
        f"> **The reader's notebook of [this page]({ctx.page_url(page)}).** Its text and "
        f"outputs were computed when the book was built, on {built}, from commit "
        f"[`{ctx.ref[:12]}`]({ctx.repo_url}/tree/{ctx.ref}) of the book's repository.{where}\n>\n"
        "> Running it recomputes every output; your figures may differ from the text, "
        "for instance on Colab's T4, where TF32 is emulated in software (TF32 tensor cores "
        "need an Ampere or later GPU). Code the page hides is collapsed here "
        "(double-click a cell's title to see it); the page's own checks are left out."
    )


def install_source(repo_url: str, ref: str) -> str:
    """The first code cell: in Colab only, install the package at ``ref``."""
    return (
        "# Colab only: install the library and the book's code at the commit these pages were\n"
        "# built from.\n"
        "import sys\n\n"
        'if "google.colab" in sys.modules:\n'
        f'    %pip install -q "eigprec @ git+{repo_url}@{ref}"\n'
        f'    %pip install -q "eigprec-book @ git+{repo_url}@{ref}#subdirectory=bookpkg"'
    )


def reader_notebook(
    executed: dict, page: str, ctx: Context, built: str, glue_file: Path | None = None
) -> dict:
    """The reader's notebook of one executed page.

    Args:
        executed: the executed notebook (nbformat 4, as JSON).
        page: its docname, e.g. ``book/tf32``.
        ctx: the book's labels, bibliography and URLs.
        built: when the build ran, as the reader is told.
        glue_file: myst-nb's ``<page>.glue.json`` beside the executed notebook.

    Returns:
        The reader's notebook as a JSON-ready dict.

    Raises:
        GenerationError: a visible cell needs a definition that cannot be kept, or a
            Markdown cell holds syntax this script cannot turn into Markdown.
    """
    ctx.glue = _glue_store(executed, glue_file)
    ctx.page = page
    ctx.cited = []
    ctx.exercises = {}
    cells = executed["cells"]
    install = install_source(ctx.repo_url, ctx.ref)
    kept_by_cell = kept_definitions(cells, install)

    out = [
        _markdown_cell(_provenance(ctx, page, executed, built), "reader-provenance"),
        _code_cell(install, cell_id="reader-install"),
    ]
    figures = 0
    for i, cell in enumerate(cells):
        tags = _tags(cell)
        cid = f"cell-{i}"  # the text pages carry no ids (MyST-NB draws random ones)
        if "remove-cell" in tags:
            if i in kept_by_cell:
                src = _collapsed(
                    "\n".join(kept_by_cell[i]),
                    "Definitions the next cells use (hidden on the page)",
                )
                out.append(_code_cell(src, metadata={"cellView": "form"}, cell_id=cid))
            continue
        if cell["cell_type"] == "markdown":
            text = convert_markdown("".join(cell["source"]), ctx, f"{page} cell {i}")
            if not text.strip() and not cell.get("attachments"):
                continue  # e.g. an exercise's or solution's end marker
            md = _markdown_cell(text, cid)
            if cell.get("attachments"):
                md["attachments"] = cell["attachments"]
            md["attachments"] = {**md.get("attachments", {}), **ctx.take_attachments()}
            if not md["attachments"]:
                del md["attachments"]
            out.append(md)
            continue
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        meta = {k: v for k, v in cell.get("metadata", {}).items() if k not in ("tags", "execution")}
        rest = sorted(tags - {"remove-input", "hide-input", "remove-output"})
        if rest:
            meta["tags"] = rest
        if tags & set(COLLAPSED):
            outputs_shown = bool(cell.get("outputs")) and "remove-output" not in tags
            what = "Code behind the output below" if outputs_shown else "Set-up code"
            how = "hidden" if "remove-input" in tags else "collapsed"
            src = _collapsed(src, f"{what} ({how} on the page)")
            meta["cellView"] = "form"
        outputs = [] if "remove-output" in tags else _visible_outputs(cell.get("outputs", []))
        out.append(_code_cell(src, outputs, meta, cid))
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if figure and figure.get("caption"):
            figures += 1
            caption = convert_markdown(figure["caption"], ctx, f"{page} cell {i} caption")
            out.append(_markdown_cell(f"*Figure {figures}.* {caption}", f"{cid}-caption"))
    if ctx.cited:
        refs = "\n".join(f"- {ctx.bibliography[k].text}" for k in ctx.cited)
        out.append(_markdown_cell(f"## References\n\n{refs}", "reader-references"))
    return {
        "cells": out,
        "metadata": {
            "colab": {"provenance": [], "toc_visible": True},
            "kernelspec": executed.get("metadata", {}).get(
                "kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"}
            ),
            "language_info": executed.get("metadata", {}).get("language_info", {"name": "python"}),
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _git_ref(root: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


def toc_pages(toc: dict) -> list[str]:
    """Every page of a jupyter-book ``_toc.yml``, in order (:func:`book_toc.toc_files`)."""
    return toc_files(toc)


def _from_cache(cache_dir: Path | None, page_path: Path) -> dict | None:
    """The page executed, as the execution cache holds it (None: no cache or no match).

    MyST-NB writes ``jupyter_execute/<page>.ipynb`` from the page as read, and only a page
    it executes itself gets outputs there: a page found in the cache (every page, once
    ``execute_pages.py`` has run) is written without them (issue 32). The cache has them.
    """
    if cache_dir is None or not cache_dir.is_dir():
        return None
    import nbformat
    from jupyter_cache import get_cache

    cache = get_cache(str(cache_dir))
    page_nb = read_page(page_path)
    try:
        _, merged = cache.merge_match_into_notebook(page_nb)
    except KeyError:
        return None
    return json.loads(nbformat.writes(merged))


def _has_outputs(nb: dict) -> bool:
    return any(c.get("outputs") for c in nb.get("cells", []) if c.get("cell_type") == "code")


def generate(
    executed: Path,
    out: Path,
    root: Path = ROOT,
    ref: str | None = None,
    html: Path | None = None,
    cache: Path | None = None,
) -> list[Path]:
    """Write the reader's notebook of every executed page under ``out``.

    Args:
        executed: jupyter-book's executed notebooks (``_build/jupyter_execute``).
        out: where the reader's notebooks go (``_build/notebooks``).
        root: the book's root (``_config.yml``, ``_toc.yml``).
        ref: the commit or tag the pages were built from (default: ``git rev-parse HEAD``).
        html: the built site; its download copies are replaced by the reader's notebooks.
        cache: the execution cache; a page it holds is taken from it, with its outputs.

    Returns:
        The paths written.

    Raises:
        GenerationError: a page cannot become a reader's notebook, a notebook page of
            the table of contents has no executed copy, or it has no output at all.
    """
    config = yaml.safe_load((root / "_config.yml").read_text())
    pages = toc_pages(yaml.safe_load((root / "_toc.yml").read_text()))
    ref = ref or _git_ref(root)
    bib = [root / p for p in config.get("bibtex_bibfiles", [])]
    ctx = Context.from_book(root, pages, config, load_bibliography(bib), ref)
    if out.exists():
        shutil.rmtree(out)
    written = []
    for page in pages:
        if not is_page(root / f"{page}{PAGE_SUFFIX}"):
            continue
        source = executed / f"{page}.ipynb"
        if not source.is_file():
            raise GenerationError(f"{page}: no executed notebook {source}; build the book first")
        nb = _from_cache(cache, root / f"{page}{PAGE_SUFFIX}") or json.loads(
            source.read_text(encoding="utf-8")
        )
        if not _has_outputs(nb):
            raise GenerationError(
                f"{page}: the executed notebook has no output in any code cell; "
                "a reader would get a page without results (execute it, or pass --cache)"
            )
        built = dt.datetime.fromtimestamp(source.stat().st_mtime, dt.UTC).strftime(
            "%Y-%m-%d %H:%M UTC"
        )
        try:
            reader = reader_notebook(nb, page, ctx, built, executed / f"{page}.glue.json")
        except GenerationError as exc:
            raise GenerationError(f"{page}{PAGE_SUFFIX}: {exc}") from exc
        dest = out / f"{page}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps(reader, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(dest)
        if html is not None and (html / "_sources" / f"{page}.ipynb").is_file():
            shutil.copyfile(dest, html / "_sources" / f"{page}.ipynb")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executed", type=Path, default=ROOT / "_build" / "jupyter_execute")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "notebooks")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--ref", help="commit or tag to pin the install to (default: HEAD)")
    parser.add_argument("--html", type=Path, help="built site whose download copies to replace")
    parser.add_argument(
        "--cache", type=Path, help="execution cache to take executed pages from (with outputs)"
    )
    args = parser.parse_args(argv)
    try:
        written = generate(args.executed, args.out, args.root, args.ref, args.html, args.cache)
    except GenerationError as exc:
        print(f"reader notebooks: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"reader's notebook: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
