"""tools/execute_pages.py: the book's pages executed in parallel into MyST-NB's cache."""

import json
import sys
from pathlib import Path

import pytest

from .conftest import needs, notebook, read_page, write_page

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import execute_pages

# main() imports jupyter-cache before it reads its arguments; the pages are MyST text.
needs_cache = needs("jupyter_cache", "myst_nb")


def _page(path: Path, code: str) -> None:
    """A page as the book writes them: a MyST Markdown notebook, a title and one cell."""
    title = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# Page"}
    write_page(path, notebook([code], first=[title]))


def _as_myst_nb_reads(path: Path):
    """The page as MyST-NB's Sphinx parser reads it (myst_nb.sphinx_), with its reader's
    name for jupyter-cache."""
    from myst_nb.core.config import NbParserConfig
    from myst_nb.core.read import create_nb_reader
    from myst_parser.config.main import MdParserConfig

    text = path.read_text()
    reader = create_nb_reader(str(path), MdParserConfig(), NbParserConfig(), text)
    return reader.read(text), reader.read_fmt


@pytest.fixture
def book(tmp_path):
    (tmp_path / "_config.yml").write_text("execute:\n  timeout: 60\n")
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n  - chapters:\n      - file: book/a\n"
        "        sections:\n          - file: book/a_details\n      - file: book/b\n"
    )
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text("# Intro\n")
    # Each page writes a file in its own folder: pages run where MyST-NB runs them.
    _page(tmp_path / "book" / "a.md", "open('ran-a', 'w').close(); print(6 * 7)")
    _page(tmp_path / "book" / "a_details.md", "open('ran-d', 'w').close()")
    _page(tmp_path / "book" / "b.md", "open('ran-b', 'w').close()")
    return tmp_path


def _run(book: Path, *extra: str) -> int:
    return execute_pages.main(
        [
            "--config", str(book / "_config.yml"),
            "--toc", str(book / "_toc.yml"),
            "--cache", str(book / "_build" / ".jupyter_cache"),
            *extra,
        ]
    )  # fmt: skip


def test_toc_pages_include_sections_and_skip_markdown(book):
    names = [p.name for p in execute_pages.toc_notebooks(book / "_toc.yml")]
    assert names == ["a.md", "a_details.md", "b.md"]  # not intro.md: not a notebook


@needs_cache
def test_every_page_is_cached_as_myst_nb_would_match_it(book, capsys):
    from jupyter_cache import get_cache

    assert _run(book, "--jobs", "2") == 0
    assert {p.name for p in (book / "book").glob("ran-*")} == {"ran-a", "ran-b", "ran-d"}
    cache = get_cache(str(book / "_build" / ".jupyter_cache"))
    # The build finds each page as MyST-NB reads it, so it does not execute it again.
    for name in ("b", "a_details", "a"):
        nb, read_fmt = _as_myst_nb_reads(book / "book" / f"{name}.md")
        cache.match_cache_notebook(nb)
    record = cache.match_cache_notebook(read_page(book / "book" / "a.md"))
    _, merged = cache.merge_match_into_notebook(nb)
    assert merged.cells[1].outputs[0]["text"] == "42\n"
    assert record.data["execution_seconds"] > 0
    # Its project record names MyST-NB's reader, as MyST-NB's own would.
    (project,) = [r for r in cache.list_project_records() if r.uri.endswith("a.md")]
    assert project.read_data == read_fmt == execute_pages.MYST_READER
    assert cache.get_project_notebook(project.uri).nb.cells[1].source == nb.cells[1].source
    times = json.loads((book / "_build" / "execution-seconds.json").read_text())
    assert set(times) == {"a", "a_details", "b"}  # by page name (tools/schedule.py)
    # A second run finds every page cached and runs none.
    for ran in (book / "book").glob("ran-*"):
        ran.unlink()
    capsys.readouterr()
    assert _run(book) == 0
    assert not list((book / "book").glob("ran-*"))
    assert capsys.readouterr().out.count("cached ") == 3


@needs_cache
def test_a_failing_page_fails_the_run_and_is_named(book, capsys):
    _page(book / "book" / "b.md", "raise ValueError('guard failed: 1 > 2')")
    assert _run(book) == 1
    err = capsys.readouterr().err
    assert "FAIL book/b.md" in err and "guard failed" in err


@needs_cache
def test_negative_jobs_is_refused(book):
    with pytest.raises(SystemExit):
        _run(book, "--jobs", "-1")


@needs_cache
def test_guards_are_recorded_per_page_and_merged_into_the_margin_report(book, capsys):
    _page(
        book / "book" / "a.md",
        "from eigprec_book.helpers import guard, check\n"
        "guard('wide', 3.0, '>', 1.0)\nguard('thin', 1.05, '>', 1.0)\ncheck(True, 'flag')",
    )
    _page(
        book / "book" / "b.md",
        "from eigprec_book.helpers import guard\nguard('fails', 0.5, '>', 1.0)",
    )
    assert _run(book) == 1
    out = capsys.readouterr().out
    report = json.loads((book / "_build" / "guard-margins.json").read_text())
    rows = {(r["page"], r["name"]): r for r in report["guards"]}
    assert rows["a", "thin"]["margin"] == pytest.approx(0.05)
    assert rows["b", "fails"]["passed"] is False
    assert "THIN" in out and "FAILED" in out
    assert report["configuration"]["name"] == "default"
    # A cached page keeps the guard records of its execution; a failed one is re-run.
    _page(
        book / "book" / "b.md",
        "from eigprec_book.helpers import guard\nguard('fixed', 2.0, '>', 1.0)",
    )
    assert _run(book) == 0
    report = json.loads((book / "_build" / "guard-margins.json").read_text())
    names = {(r["page"], r["name"]) for r in report["guards"]}
    assert ("a", "thin") in names and ("b", "fixed") in names and ("b", "fails") not in names


@needs_cache
def test_every_kernel_gets_one_thread_however_many_pages_are_left(book, monkeypatch):
    # Threads change float32 sums: a page alone must compute what it computes beside others.
    monkeypatch.setenv("OMP_NUM_THREADS", "unset")  # restored after the test, then removed
    monkeypatch.delenv("OMP_NUM_THREADS")
    for name in ("a", "a_details", "b"):
        _page(
            book / "book" / f"{name}.md",
            f"import os\nopen('threads-{name}', 'w').write(os.environ['OMP_NUM_THREADS'])",
        )
    assert _run(book, "--jobs", "1") == 0
    threads = {p.name: p.read_text() for p in (book / "book").glob("threads-*")}
    assert threads == {"threads-a": "1", "threads-a_details": "1", "threads-b": "1"}


@needs_cache
def test_each_kernel_talks_over_its_own_ipc_sockets(book, monkeypatch):
    # Kernels started at once over TCP can be handed the same free port: in a full `make
    # test` one kernel died at start-up ("Address already in use", then "Kernel died before
    # replying to kernel_info"). Each page's kernel now binds IPC sockets in a folder of its
    # own, so no two kernels can pick the same address, and the sockets go with the run.
    import jupyter_cache.executors.utils as utils

    seen = []

    def fake(nb, **kwargs):
        km = kwargs["km"]
        seen.append((km.transport, km.ip, Path(km.ip).parent.is_dir()))
        return utils.ExecutionResult(nb, kwargs["cwd"], 0.0, None, None)

    monkeypatch.setattr(utils, "single_nb_execution", fake)
    for page in ("a", "b"):
        execute_pages._execute(str(book / "book" / f"{page}.md"), timeout=60)
    assert [t for t, _, _ in seen] == ["ipc", "ipc"]
    assert seen[0][1] != seen[1][1] and all(made for _, _, made in seen)
    assert not any(Path(ip).parent.exists() for _, ip, _ in seen)  # removed after the run


@needs_cache
def test_each_page_s_kernel_is_stopped_with_its_page(book, monkeypatch):
    # nbclient does not stop a kernel whose manager it was handed; _execute must.
    from jupyter_client.manager import KernelManager

    stopped = []
    original = KernelManager.shutdown_kernel

    def shutdown(self, *args, **kwargs):
        stopped.append(self.transport)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(KernelManager, "shutdown_kernel", shutdown)
    _, _, _, error = execute_pages._execute(str(book / "book" / "b.md"), timeout=60)
    assert error is None and stopped == ["ipc"]
    assert (book / "book" / "ran-b").is_file()
