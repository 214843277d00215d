"""tools/reader_notebooks.py: the reader's notebook generated from an executed page.

Small executed fixture pages (a tiny book: _config.yml, _toc.yml, references.bib and
an "executed" notebook with glue outputs) stand in for the chapters, which are not
executed here.
"""

import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, notebook, read_page, write_page

sys.path.insert(0, str(ROOT / "tools"))
import reader_notebooks as rn
from reader_markdown import GenerationError

MYST = re.compile(
    r"\{(glue|cite|numref|ref|doc|term|py:|func|class|eq)[^}]*\}`|^\s*(`{3,}|:{3,})\{", re.M
)
CONFIG = """\
repository:
  url: https://github.com/org/repo
  path_to_book: ""
  branch: notebooks
html:
  baseurl: https://org.github.io/repo/
bibtex_bibfiles:
  - book/refs.bib
"""
BIB = """\
@article{smith2020,
  title = {A paper},
  author = {Smith, Ann and J{\\'o}nes, Bo},
  journal = {J. Things},
  year = {2020},
  doi = {10.1000/xyz}
}
"""


def _glue(name: str, text: str) -> dict:
    prefix = "application/papermill.record/"
    return {
        "output_type": "display_data",
        "metadata": {"scrapbook": {"name": name, "mime_prefix": prefix}},
        "data": {prefix + "text/plain": text},
    }


def _md(src: str, cid: str) -> dict:
    return {"cell_type": "markdown", "id": cid, "metadata": {}, "source": src}


def _book(tmp_path: Path, cells: list[str], tags: dict[int, list[str]], prose: list[str]) -> Path:
    (tmp_path / "book").mkdir()
    (tmp_path / "_config.yml").write_text(CONFIG)
    (tmp_path / "_toc.yml").write_text("root: book/intro\nchapters:\n  - file: book/page\n")
    (tmp_path / "book" / "refs.bib").write_text(BIB)
    (tmp_path / "book" / "intro.md").write_text("# Intro\n\n(sec-start)=\n## Start here\n")
    nb = notebook(cells, first=[_md(p, f"m{i}") for i, p in enumerate(prose)])
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for i, t in tags.items():
        code[i]["metadata"]["tags"] = t
    nb["cells"][-1]["metadata"]["mystnb"] = {
        "figure": {"caption": "A {glue:text}`n` plot.", "name": "fig-x"}
    }
    write_page(tmp_path / "book" / "page.md", nb)  # the page as the book writes them
    for c in code:
        c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "out\n"}]
    code[0]["outputs"] = [_glue("n", "3"), _glue("pi", "3.14159"), _glue("word", "'cat'")]
    executed = tmp_path / "_build" / "jupyter_execute" / "book"
    executed.mkdir(parents=True)
    (executed / "page.ipynb").write_text(json.dumps(nb))
    return tmp_path


PROSE = [
    "# Title\n\nWe ran {glue:text}`n` trials; pi is {glue:text}`pi:.2f` "
    "and the animal {glue:}`word`.",
    "As shown {cite:p}`smith2020` and by {cite:t}`smith2020`; see {numref}`fig-x`, "
    "{ref}`sec-start`, {doc}`intro`, {term}`TF32` and {py:func}`eigprec.kth_eigvalsh`.\n\n"
    "```{note}\nMind {glue:text}`n` things.\n```\n\n:::{dropdown} Details\nHidden $x^2$.\n:::\n\n"
    "$$a = b$$\n\n```python\nprint('{not a role}')\n```",
]


def _needs_pybtex() -> None:
    # The references are read with pybtex, one of the book build's tools (requirements.txt).
    pytest.importorskip("pybtex", reason="needs pybtex (the book build's tools)")


def _generate(book: Path, ref: str = "0123456789ab") -> dict:
    _needs_pybtex()
    (path,) = rn.generate(
        book / "_build" / "jupyter_execute", book / "_build" / "notebooks", book, ref
    )
    assert path == book / "_build" / "notebooks" / "book" / "page.ipynb"
    return json.loads(path.read_text())


def test_reader_notebook_has_values_links_no_myst_no_guards_and_outputs(tmp_path):
    cells = [
        "from math import sqrt\nfrom eigprec_book.helpers import glue\nglue('n', 3)",
        "helper = sqrt(4)\nassert helper == 2\nglue('pi', 3.14159)",  # guard: dropped
        "value = helper + 1",  # visible, needs helper from the dropped cell
        "print(value)",  # collapsed
        "fig = value",
    ]
    book = _book(tmp_path, cells, {1: ["remove-cell"], 3: ["remove-input"]}, PROSE)
    nb = _generate(book)
    md = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
    assert MYST.search(md) is None, MYST.search(md)
    assert "We ran 3 trials; pi is 3.14 and the animal cat." in md
    assert "(Smith & Jónes, [2020](https://doi.org/10.1000/xyz))" in md
    assert "Smith & Jónes ([2020](https://doi.org/10.1000/xyz))" in md
    assert "](https://org.github.io/repo/book/page.html#fig-x)" in md
    assert "[Start here](https://org.github.io/repo/book/intro.html#sec-start)" in md
    assert "[Intro](https://org.github.io/repo/book/intro.html)" in md
    assert "> **Note**\n>\n> Mind 3 things." in md and "> **Details**" in md
    assert "$$a = b$$" in md and "print('{not a role}')" in md
    assert "*Figure 1.* A 3 plot." in md
    assert md.endswith(
        "## References\n\n- Smith, Ann; Jónes, Bo (2020). *A paper*. J. Things. "
        "<https://doi.org/10.1000/xyz>"
    )
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    install = code[0]["source"]
    assert 'if "google.colab" in sys.modules:' in install
    assert '%pip install -q "eigprec @ git+https://github.com/org/repo@0123456789ab"' in install
    assert (
        "commit [`0123456789ab`]" in nb["cells"][0]["source"] and "T4" in nb["cells"][0]["source"]
    )
    sources = [c["source"] for c in code]
    assert not any("assert" in s for s in sources)  # the guard is gone ...
    kept = next(c for c in code if "helper = sqrt(4)" in c["source"])  # ... its definition kept
    assert kept["metadata"]["cellView"] == "form" and kept["source"].startswith("#@title")
    assert "glue(" not in kept["source"]
    hidden = next(c for c in code if "print(value)" in c["source"])
    assert hidden["metadata"]["cellView"] == "form" and hidden["source"].startswith("#@title")
    # Outputs kept for every code cell of the page; glue data (display=False) left out.
    assert code[1]["outputs"] == [] and "from math import sqrt" in code[1]["source"]
    for c in code[2:]:
        if "helper = sqrt" not in c["source"]:
            assert c["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "out\n"}]
    assert not any("remove-cell" in c["metadata"].get("tags", []) for c in nb["cells"])


@pytest.mark.parametrize(
    "guard, shown, message",
    [
        # a definition made inside a guard's loop
        (
            "for k in range(3):\n    assert k < 3\n    last = k",
            "print(last)",
            r"cell 4 \(id c2\) needs `last`.*remove-cell cell 3",
        ),
        # an object a guard changes as well as checks
        (
            "rows = []\nfor k in range(3):\n    rows.append(k)\n    assert k < 3",
            "print(rows)",
            r"cell 4 \(id c2\) needs `rows`.*changes",
        ),
    ],
)
def test_a_visible_cell_needing_what_a_guard_defines_fails_naming_the_cell(
    tmp_path, guard, shown, message
):
    cells = ["from eigprec_book.helpers import glue", guard, shown, "x = 1"]
    book = _book(tmp_path, cells, {1: ["remove-cell"]}, PROSE)
    with pytest.raises(GenerationError, match=message):
        _generate(book)


def test_a_name_no_cell_defines_fails_naming_the_cell(tmp_path):
    book = _book(
        tmp_path, ["from eigprec_book.helpers import glue", "print(nowhere)", "x = 1"], {}, PROSE
    )
    with pytest.raises(GenerationError, match=r"cell 3 \(id c1\) uses `nowhere`"):
        _generate(book)


@pytest.mark.parametrize(
    "prose, message",
    [
        ("{glue:text}`missing`", "no glued value 'missing'"),
        ("{cite:p}`nobody1999`", "no reference 'nobody1999'"),
        ("{numref}`fig-nowhere`", "unknown cross-reference target 'fig-nowhere'"),
        ("```{mermaid}\ngraph\n```", "directive {mermaid}"),
        ("{abbr2}`x`", "role {abbr2}"),
    ],
)
def test_what_cannot_become_markdown_is_an_error_not_raw_myst(tmp_path, prose, message):
    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, [prose])
    with pytest.raises(GenerationError, match=re.escape(message)):
        _generate(book)


def test_command_line_fails_with_the_message_and_writes_download_copies(tmp_path, capsys):
    _needs_pybtex()
    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, PROSE)
    sources = book / "_build" / "html" / "_sources" / "book"
    sources.mkdir(parents=True)
    (sources / "page.ipynb").write_text("{}")
    args = ["--executed", str(book / "_build" / "jupyter_execute"), "--root", str(book)]
    args += ["--out", str(book / "_build" / "notebooks"), "--ref", "v1.0"]
    assert rn.main([*args, "--html", str(book / "_build" / "html")]) == 0
    served = json.loads((sources / "page.ipynb").read_text())
    assert "eigprec @ git+https://github.com/org/repo@v1.0" in served["cells"][1]["source"]
    (book / "_build" / "jupyter_execute" / "book" / "page.ipynb").unlink()
    assert rn.main(args) == 1
    assert "no executed notebook" in capsys.readouterr().err


def test_pages_come_from_the_table_of_contents_including_sections():
    toc = {"root": "a", "chapters": [{"file": "b", "sections": [{"file": "b1"}]}], "parts": []}
    assert rn.toc_pages(toc) == ["a", "b", "b1"]


def test_what_hidden_cells_add_to_a_kept_object_is_kept_too(tmp_path):
    cells = [
        "from eigprec_book.helpers import glue",
        "rows = []\nfor k in range(3):\n    rows.append(k)\nassert len(rows) == 3",
        "print(rows)",
        "x = 1",
    ]
    book = _book(tmp_path, cells, {1: ["remove-cell"]}, PROSE)
    nb = _generate(book)
    kept = next(c["source"] for c in nb["cells"] if "rows = []" in c["source"])
    assert "rows.append(k)" in kept and "assert" not in kept


def test_a_visible_cell_that_only_writes_into_an_object_needs_only_the_object(tmp_path):
    cells = [
        "from eigprec_book.helpers import glue",
        "shown = {}",
        "for k in range(3):\n    shown[k] = k\n    glue(f'k{k}', k)",
        "shown['mine'] = 2\nprint(shown['mine'])",
        "x = 1",
    ]
    book = _book(tmp_path, cells, {1: ["remove-cell"], 2: ["remove-cell"]}, PROSE)
    nb = _generate(book)
    kept = [c["source"] for c in nb["cells"] if c["source"].startswith("#@title Definitions")]
    assert kept == ["#@title Definitions the next cells use (hidden on the page)\nshown = {}"]


EXERCISES = [
    "# Title\n\n:::{admonition} Key results\n:class: tip\nWe ran {glue:text}`n` trials.\n:::",
    ":::{exercise} Your own model\n:label: ex-page-own\nRun {py:func}`eigprec.kth_eigvalsh` "
    "on a {term}`TF32` model of yours.\n:::\n\n"
    "::::{solution} ex-page-own\n:class: dropdown\nUse {glue:text}`n` seeds.\n::::",
    "```{exercise-start} Gated\n:label: ex-page-gated\n```",
    "Try it with $x^2$.",
    "```{exercise-end}\n```",
    "```{solution-start} ex-page-gated\n:class: dropdown\n```",
    "The code below answers it.",
    "```{solution-end}\n```",
    "See {ref}`ex-page-own`.",
]


def test_exercises_and_solutions_become_colab_markdown(tmp_path):
    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, EXERCISES)
    nb = _generate(book)
    md = [c["source"] for c in nb["cells"] if c["cell_type"] == "markdown"]
    text = "\n".join(md)
    assert MYST.search(text) is None, MYST.search(text)
    assert "exercise" not in re.sub(r"Exercise|ex-page", "", text).lower()
    assert "> **Key results**\n>\n> We ran 3 trials." in text
    assert (
        '<a id="ex-page-own"></a>\n> **Exercise 1 (Your own model)**\n>\n> Run '
        "`eigprec.kth_eigvalsh` on a TF32 model of yours." in text
    )
    # A directive solution with :class: dropdown: collapsed, as on the page.
    assert (
        "<details>\n<summary><b>Solution to Exercise 1 (Your own model)</b></summary>\n\n"
        "Use 3 seeds.\n\n</details>" in text
    )
    # The gated form: the exercise's cells between start and end, the solution as a
    # section (Colab folds a heading's cells) whose code cells follow.
    assert '<a id="ex-page-gated"></a>\n**Exercise 2 (Gated)**' in md
    assert "Try it with $x^2$." in md
    assert "#### Solution to Exercise 2 (Gated)" in md
    assert "" not in md  # the end markers leave no empty cell
    assert (
        "[Exercise 1 (Your own model)](https://org.github.io/repo/book/page.html#ex-page-own)"
        in text
    )


def test_a_solution_to_an_unknown_exercise_is_an_error(tmp_path):
    prose = ["::::{solution} ex-nowhere\n:class: dropdown\nx\n::::"]
    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, prose)
    with pytest.raises(GenerationError, match="solution to an unknown exercise 'ex-nowhere'"):
        _generate(book)


def test_terms_link_to_the_glossary_page(tmp_path):
    prose = ["# Title\n\nSee {term}`TF32` and {term}`the floor <eigenvalue floor>`."]
    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, prose)
    (book / "book" / "glossary.md").write_text(
        "# Glossary\n\n```{glossary}\nTF32\n  A format.\n\neigenvalue floor\n  A floor.\n```\n"
    )
    (book / "_toc.yml").write_text(
        "root: book/intro\nchapters:\n  - file: book/page\n  - file: book/glossary\n"
    )
    md = "\n".join(c["source"] for c in _generate(book)["cells"] if c["cell_type"] == "markdown")
    glossary = "https://org.github.io/repo/book/glossary.html"
    assert f"See [TF32]({glossary}#term-TF32) and " in md
    assert f"[the floor]({glossary}#term-eigenvalue-floor)." in md


def test_a_page_found_in_the_execution_cache_keeps_its_outputs(tmp_path):
    # MyST-NB writes jupyter_execute/<page>.ipynb from the page as read: a page found in
    # the cache (every page once execute_pages.py has run, and every page of a second
    # `make book`) came out with no output at all, and so did its reader's notebook.
    _needs_pybtex()
    pytest.importorskip("jupyter_cache")
    import nbformat
    from jupyter_cache import get_cache

    book = _book(tmp_path, ["from eigprec_book.helpers import glue", "x = 1"], {}, PROSE)
    executed = book / "_build" / "jupyter_execute" / "book" / "page.ipynb"
    with_outputs = json.loads(executed.read_text())
    # What MyST-NB writes for a cached page: the page as read, outputs empty.
    executed.write_text(nbformat.writes(read_page(book / "book" / "page.md")))
    with pytest.raises(GenerationError, match="no output in any code cell"):
        rn.generate(executed.parents[1], book / "_build" / "notebooks", book, "v1")
    cache = get_cache(str(book / "_build" / ".jupyter_cache"))
    record = cache.add_nb_to_project(
        str(book / "book" / "page.md"), read_data={"type": "plugin", "name": "myst_nb_md"}
    )
    from jupyter_cache.base import CacheBundleIn

    cache.cache_notebook_bundle(
        CacheBundleIn(nbformat.reads(json.dumps(with_outputs), 4), record.uri),
        check_validity=False,
    )
    (path,) = rn.generate(
        executed.parents[1], book / "_build" / "notebooks", book, "v1",
        cache=book / "_build" / ".jupyter_cache",
    )  # fmt: skip
    reader = json.loads(path.read_text())
    outputs = [c["outputs"] for c in reader["cells"] if c["cell_type"] == "code"]
    assert any(outputs), "the reader's notebook lost the page's outputs"
    # (nbformat writes a multi-line string as a list of lines)
    assert any("".join(out.get("text", "")) == "out\n" for o in outputs for out in o)
