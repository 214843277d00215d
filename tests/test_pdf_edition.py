"""The PDF edition's parts that `make test` checks without building it (issue 51).

The build itself is tests/test_pdf.py (marked ``pdf``, `make pdf-check`). Here: the LaTeX
extension's conversions (book/_ext/eigprec_latex.py), the figure and text readers of the
check (tools/pdf_contents.py), the prerequisites check (tools/pdf_prerequisites.py), that
`make pdf` stops with its message before any work where TeX is missing, that one name and
one URL connect the build, the site and the workflows, and that `make test`'s suite leaves
the PDF's build out.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, book_extension

sys.path.insert(0, str(ROOT / "tools"))
import pdf_contents
import pdf_prerequisites

PROVENANCE_HTML = (
    '<details class="eigprec-provenance" style="border-left:4px solid #4c72b0">'
    '<summary style="font-weight:bold">Provenance: executed on CPU (x86_64, 2 logical cores); '
    "TF32 emulated in software (no GPU)</summary><table><tr><th>Executed on</th>"
    "<td style='padding:2px 0'>CPU (x86_64, 2 logical cores)</td></tr>"
    "<tr><th>Versions</th><td>torch 2.13.0+cpu &middot; NumPy 2.4.6</td></tr></table></details>"
)


@pytest.fixture(scope="module")
def latex():
    return book_extension("eigprec_latex")


# --- book/_ext/eigprec_latex.py ----------------------------------------------------------


def test_the_provenance_box_is_an_open_box_with_its_table(latex):
    from docutils import nodes

    (keep,) = latex.html_to_nodes(PROVENANCE_HTML)
    (box,) = keep.children
    assert "eigpreckeep" in keep["classes"]  # kept off a page's foot (preamble)
    assert isinstance(box, nodes.admonition) and "eigprec-provenance" in box["classes"]
    # A title is one line on paper: the summary's head; the table says the rest.
    assert box[0].astext() == "Provenance"
    (table,) = box.findall(nodes.table)
    rows = [[entry.astext() for entry in row] for row in table.findall(nodes.row)]
    assert rows == [
        ["Executed on", "CPU (x86_64, 2 logical cores)"],
        ["Versions", "torch 2.13.0+cpu · NumPy 2.4.6"],
    ]
    assert len(list(table.findall(nodes.strong))) == 2  # the row heads


def test_an_html_note_becomes_a_titled_box_with_its_code(latex):
    from docutils import nodes

    (keep,) = latex.html_to_nodes(
        '<div class="admonition note"><p class="admonition-title">Synthetic data</p>'
        "<p>Could not load (<code>OSError: offline</code>). Trains on a stand-in.</p></div>"
    )
    (box,) = keep.children
    assert box[0].astext() == "Synthetic data" and "note" in box["classes"]
    assert [p.astext() for p in box.findall(nodes.paragraph)] == [
        "Could not load (OSError: offline). Trains on a stand-in."
    ]
    assert [lit.astext() for lit in box.findall(nodes.literal)] == ["OSError: offline"]


def test_where_the_pages_ran_is_read_from_the_provenance_box_only(latex):
    assert latex.provenance_summary(PROVENANCE_HTML) == (
        "CPU (x86_64, 2 logical cores); TF32 emulated in software (no GPU)"
    )
    assert latex.provenance_summary("<details><summary>Provenance: x</summary></details>") is None
    assert latex.provenance_summary("<p>Provenance: executed on GPU</p>") is None


def test_code_sizes_fit_the_column(latex):
    # A ruff line (100 characters) fits at the first size; a wider one gets the largest
    # size that fits it; past the last it wraps.
    assert latex.code_size(100) == latex.CODE_SIZES_PT[0]
    for width in range(101, 300):
        size = latex.code_size(width)
        fits = width * latex.MONO_EM * size <= latex.CODE_WIDTH_PT
        assert fits or size == latex.CODE_SIZES_PT[-1]
        larger = [s for s in latex.CODE_SIZES_PT if s > size]
        assert all(width * latex.MONO_EM * s > latex.CODE_WIDTH_PT for s in larger)
    assert latex.code_size(141) == 6  # the audit report of tf32.md's exercise


def test_the_preamble_defines_what_the_build_writes(latex):
    text = latex.preamble()
    for size in latex.CODE_SIZES_PT[1:]:  # WideOutputs' containers
        assert rf"\newenvironment{{sphinxclasseigprecsize{size}}}" in text
    assert r"\newenvironment{sphinxclasseigpreckeep}" in text
    # sphinx-jupyterbook-latex's code-cell environments (its class, which defined them, is
    # not used: it loads bbm.sty, from the 500-MB texlive-fonts-extra).
    assert r"\newenvironment{sphinxVerbatimInput}" in text
    assert r"\newenvironment{sphinxVerbatimOutput}" in text
    assert latex.EDITION_FILE in text and not latex.EDITION_FILE.endswith(".tex")
    # Every macro the title page uses is defined by the edition file and by the fallback.
    edition = latex.edition_tex("2026-11-28", "abc", {})
    for macro in re.findall(r"\\eigprec\w+", latex.TITLE_DATE):
        assert rf"\def{macro}" in edition and rf"\def{macro}" in text, macro


def test_the_edition_names_each_device_with_its_pages(latex):
    one = latex.edition_tex("2026-11-28", "1a2b3c with uncommitted changes", {"CPU_x; TF32": ["a"]})
    assert r"\def\eigprecExecutedOn{CPU\_x; TF32}" in one  # escaped for LaTeX
    two = latex.edition_tex(
        "2026-11-28", "1a2b3c", {"NVIDIA H100; TF32 on tensor cores": ["a", "b"], "CPU": ["c"]}
    )
    assert "NVIDIA H100; TF32 on tensor cores (2 pages)" in two and "CPU (1 pages)" in two
    assert "no page's provenance box" in latex.edition_tex("2026-11-28", "1a2b3c", {})


def test_the_latex_transforms_leave_html_alone(latex):
    # The site must not change: the output conversions run for the LaTeX builder only,
    # and the SVG converter only where a builder cannot take SVG (HTML can).
    assert latex.HtmlOutputs.builders == ("latex",)
    assert latex.WideOutputs.builders == ("latex",)
    assert latex.HeadingDepths.builders == latex.IntroHeadings.builders == ("latex",)
    assert latex.SvgToPdf.conversion_rules == [("image/svg+xml", "application/pdf")]


def test_the_introductions_headings_are_unnumbered_headings_of_their_depth(latex, tmp_path):
    # sphinx-jupyterbook-latex flattens the root page's sections into bold lines of a size
    # read from a level that grows with each sibling heading; the PDF needs each "##" a
    # \section*, each "###" a \subsection*, and the other pages' headings left numbered.
    pytest.importorskip("myst_parser", reason="needs myst_parser (the book build's tools)")
    pytest.importorskip("sphinx_jupyterbook_latex", reason="needs sphinx-jupyterbook-latex")
    (tmp_path / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        'extensions = ["myst_parser", "sphinx_jupyterbook_latex", "eigprec_latex"]\n'
        'root_doc = "index"\n'
        'latex_documents = [("index", "mini.tex", "Mini", "A", "manual")]\n'
    )
    (tmp_path / "index.md").write_text(
        "# Book\n\nIntro.\n\n## One\n\nText.\n\n## Two\n\nText.\n\n### Two a\n\nText.\n\n"
        "## Three\n\nText.\n\n```{toctree}\npage\n```\n"
    )
    (tmp_path / "page.md").write_text("# Page\n\n## Sub\n\nBody.\n")
    subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "latex", "-q", str(tmp_path), str(tmp_path / "out")],
        check=True,
        capture_output=True,
    )
    tex = (tmp_path / "out" / "mini.tex").read_text()
    headings = re.findall(r"\\(\w+\*?)\{(One|Two|Two a|Three|Sub)\}", tex)
    assert headings == [
        ("section*", "One"),
        ("section*", "Two"),
        ("subsection*", "Two a"),
        ("section*", "Three"),
        ("section", "Sub"),
    ]
    assert r"\Large" not in tex and r"\large" not in tex  # no bold lines left


@pytest.mark.parametrize(
    "module", ["eigprec_latex", "tools/pdf_contents.py", "tools/pdf_prerequisites.py"]
)
def test_docstring_examples_run(module):
    if module.startswith("tools/"):
        loaded = pdf_contents if "contents" in module else pdf_prerequisites
    else:
        loaded = book_extension(module)
    failures, tried = doctest.testmod(loaded, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failures == 0


# --- tools/pdf_contents.py ---------------------------------------------------------------


def test_forms_are_found_whatever_the_key_order():
    pdf = (
        b"<</Type/XObject/Subtype/Form/FormType 1/BBox[0 0 496.799988 213.911407]/Matrix[1\n0]>>"
        b"<</BBox [ 0 0 100 50 ] /Subtype /Form /Length 3>>"
        b"<</Type/XObject/Subtype/Image/Width 3>>"
    )
    assert pdf_contents.form_sizes(pdf) == [(496.799988, 213.911407), (100.0, 50.0)]


def test_a_figure_missing_from_the_pdf_is_named():
    figures = [(496.8, 213.911404), (496.8, 213.911404), (300.0, 200.0)]
    forms = [(496.799988, 213.911407), (100.0, 50.0)]
    # One form for two figures of one size: the second is missing, and the other size too.
    assert pdf_contents.missing_figures(figures, forms) == [(496.8, 213.911404), (300.0, 200.0)]
    assert pdf_contents.missing_figures(figures[:1], forms) == []


def test_an_svg_without_a_size_in_points_is_an_error():
    with pytest.raises(ValueError, match="no width and height in pt"):
        pdf_contents.svg_size('<svg width="100%" height="100%">')


# --- tools/pdf_prerequisites.py -----------------------------------------------------------


def _fake(bin_dir: Path, name: str, output: str = "") -> None:
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\n")
    script.chmod(0o755)


def _check(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "pdf_prerequisites.py")],
        env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_without_tex_every_package_is_named_with_the_command_to_install_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _check(str(empty))
    assert result.returncode == 1
    for need in pdf_prerequisites.NEEDS:
        assert f"{need.name} ({need.kind}; Debian package {need.package})" in result.stderr
    install = " ".join(pdf_prerequisites.install_command(pdf_prerequisites.PACKAGES))
    assert f"sudo {install}" in result.stderr
    assert "make pdf-prerequisites" in result.stderr


def test_with_everything_found_the_check_passes_and_names_only_what_lacks(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("xelatex", "latexmk", "xindy", "rsvg-convert"):
        _fake(bin_dir, command)
    _fake(bin_dir, "kpsewhich", "/texmf/found")
    _fake(bin_dir, "fc-list", "DejaVu")
    assert _check(str(bin_dir)).returncode == 0
    # kpsewhich finds nothing: only the TeX packages are named.
    _fake(bin_dir, "kpsewhich", "")
    result = _check(str(bin_dir))
    assert result.returncode == 1
    named = set(re.findall(r"Debian package ([\w.-]+)\)", result.stderr))
    assert named == {n.package for n in pdf_prerequisites.NEEDS if n.kind == "tex"}


def test_a_need_of_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="unknown kind"):
        pdf_prerequisites.missing([pdf_prerequisites.Need("x", "magic", "pkg")])


# --- one name, one URL -------------------------------------------------------------------


def test_the_pdf_name_and_url_agree_across_build_site_and_workflows():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    makefile = (ROOT / "Makefile").read_text()
    name = re.search(r"^PDF_NAME := (\S+)$", makefile, re.M).group(1)
    assert config["latex"]["latex_documents"]["targetname"] == f"{name}.tex"
    assert config["latex"]["latex_engine"] == "xelatex"  # the pages' Unicode
    assert ["latex", "image/svg+xml", 15] in config["sphinx"]["config"][
        "nb_mime_priority_overrides"
    ]
    assert "eigprec_latex" in config["sphinx"]["local_extensions"]
    sphinx_ext = book_extension("eigprec_sphinx")
    assert sphinx_ext.PDF_PATH.endswith(f"/{name}.pdf")
    url = sphinx_ext.book_pdf_url(config["html"]["baseurl"])
    assert f"<{url}>" in (ROOT / "book" / "intro.md").read_text()
    publish = (ROOT / ".github" / "workflows" / "book.yml").read_text()
    assert "make -o cache-key pdf" in publish
    folder = "_build/html/" + sphinx_ext.PDF_PATH.rsplit("/", 1)[0]
    assert f"cp _build/pdf/{name}.pdf {folder}/" in publish
    assert publish.index("make -o cache-key pdf") < publish.index("upload-pages-artifact")
    weekly = yaml.safe_load((ROOT / ".github" / "workflows" / "weekly.yml").read_text())
    steps = [step.get("run", "") for step in weekly["jobs"]["pdf"]["steps"]]
    assert any("make pdf-prerequisites" in run for run in steps)
    assert any("make pdf-check" in run for run in steps)


def test_the_pdf_check_fails_rather_than_skips_where_it_is_asked_for():
    recipe = (ROOT / "Makefile").read_text().split("\npdf-check:")[1].split("\n\n")[0]
    assert "EIGPREC_PDF_REQUIRED=1" in recipe and "-m pdf tests/test_pdf.py" in recipe


def test_the_suite_leaves_the_pdf_build_out_unless_asked():
    def collected(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "tests/test_pdf.py", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        ).stdout  # fmt: skip

    plain = collected()
    assert "test_pdf.py::" not in plain and "deselected" in plain
    assert "test_pdf.py::test_the_page_count_is_sane" in collected("-m", "pdf")
