"""glue, progress and load_record outside a notebook."""

import json

import pytest
from eigprec_book.helpers import glue, load_record, progress
from eigprec_book.helpers import notebook as book_module


def test_glue_validates_name_and_returns_nothing_to_display():
    assert glue("a_name-1", 3.5) is None
    with pytest.raises(ValueError, match="glue name"):
        glue("bad name", 1)
    with pytest.raises(ValueError, match="glue name"):
        glue("", 1)


def test_progress_yields_everything_as_text_on_the_terminal(monkeypatch, capsys):
    # Outside a kernel: on stderr, the terminal's, never on stdout (what a page prints).
    monkeypatch.setenv("EIGPREC_PROGRESS", "text")
    assert list(progress(range(5), desc="count")) == [0, 1, 2, 3, 4]
    captured = capsys.readouterr()
    assert "count" in captured.err and "5/5" in captured.err
    assert captured.out == ""


def test_progress_off(monkeypatch, capsys):
    monkeypatch.setenv("EIGPREC_PROGRESS", "off")
    assert list(progress(range(3), desc="quiet")) == [0, 1, 2]
    assert capsys.readouterr() == ("", "")


def test_progress_never_lands_in_an_executed_cell(monkeypatch):
    # As the book build runs a chapter (EIGPREC_PROGRESS=text, nbclient, ipykernel, which
    # captures sys.stdout, sys.stderr and the process's file descriptors 1 and 2 into
    # the cell's output): the bar must not be in the stored outputs (issue 23.4).
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("EIGPREC_PROGRESS", "text")
    code = (
        "from eigprec_book.helpers import progress\n"
        "total = sum(progress(range(4), desc='bar-in-page', mininterval=0))\n"
        "print('total', total)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = json.dumps(nb.cells[0].outputs)
    assert "total 6" in outputs  # the cell ran and its print is kept
    assert "bar-in-page" not in outputs and "it/s" not in outputs, outputs


def test_load_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(book_module, "record_dirs", lambda: [tmp_path])
    assert load_record("gpu_run") is None
    (tmp_path / "gpu_run.json").write_text(json.dumps({"gpu": "H100", "value": 1}))
    assert load_record("gpu_run") == {"gpu": "H100", "value": 1}
    assert load_record("gpu_run.json")["gpu"] == "H100"
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_record("list")
    with pytest.raises(ValueError, match="plain file name"):
        load_record("../etc/passwd")


# -- the one table renderer -------------------------------------------------------------------


def test_markdown_table_formats_aligns_and_checks():
    from eigprec_book.helpers import markdown_table

    text = markdown_table([{"a": 1.23456, "b": "x"}], [("a", "A"), ("b", "B")])
    assert text.splitlines() == ["| A | B |", "|---:|---|", "| 1.235 | x |"]
    text = markdown_table([{"v": [0.5, 2.0]}, {"v": [1.0]}], float_format=".3f")
    assert text.splitlines()[2:] == ["| 0.500, 2.000 |", "| 1.000 |"]
    assert markdown_table([{"n": 3}], fmt={"n": lambda v: f"n={v}"}).endswith("| n=3 |")
    assert markdown_table([]) == ""
    with pytest.raises(KeyError):
        markdown_table([{"a": 1}], [("b", "B")])
    with pytest.raises(TypeError, match="mappings"):
        markdown_table({"a": 1})


def test_note_renders_an_admonition_and_escapes_the_title():
    from eigprec_book.helpers import note

    box = note("<b>", "body <code>x</code>")
    assert '<p class="admonition-title">&lt;b&gt;</p>' in box.data
    assert "<code>x</code>" in box.data
    with pytest.raises(TypeError):
        note("title", 3)


def _installed_from(monkeypatch, direct_url):
    """Pretend eigprec-book was installed by pip from ``direct_url`` (PEP 610's record)."""
    monkeypatch.setattr(
        book_module, "_direct_url", lambda: None if direct_url is None else dict(direct_url)
    )


def test_load_record_from_where_the_package_was_installed(tmp_path, monkeypatch):
    # Colab: the notebook runs in an empty folder and the package came from the repository
    # (here a copy of a checkout, as the Colab check installs it: file://<copy>/bookpkg), so
    # the record is read from that source's book/data, not from the running folder.
    copy = tmp_path / "copy"
    (copy / "book" / "data").mkdir(parents=True)
    (copy / "bookpkg").mkdir()
    (copy / "book" / "data" / "run.json").write_text(json.dumps({"gpu": "cpu", "n": 3}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(book_module, "record_dirs", lambda: [])
    _installed_from(monkeypatch, {"url": (copy / "bookpkg").as_uri(), "dir_info": {}})
    assert load_record("run") == {"gpu": "cpu", "n": 3}
    assert load_record("absent") is None
    # An editable install is the checkout itself: record_dirs already looked there.
    _installed_from(monkeypatch, {"url": copy.as_uri(), "dir_info": {"editable": True}})
    assert load_record("run") is None
    _installed_from(monkeypatch, None)
    assert load_record("run") is None


def test_record_url_of_a_git_install(monkeypatch):
    # pip's record of `eigprec-book @ git+https://github.com/o/r@ref#subdirectory=bookpkg`
    info = {
        "url": "https://github.com/o/r.git",
        "vcs_info": {"vcs": "git", "commit_id": "a" * 40, "requested_revision": "ref"},
        "subdirectory": "bookpkg",
    }
    _installed_from(monkeypatch, info)
    assert book_module.record_source("x.json") == (
        f"https://raw.githubusercontent.com/o/r/{'a' * 40}/book/data/x.json"
    )
    _installed_from(monkeypatch, {**info, "url": "https://example.org/o/r"})
    assert book_module.record_source("x.json") is None  # only GitHub's raw files are known


def test_load_record_offline_says_so(monkeypatch, capsys):
    info = {"url": "https://github.com/o/r", "vcs_info": {"vcs": "git", "commit_id": "b" * 40}}
    _installed_from(monkeypatch, info)
    monkeypatch.setattr(book_module, "record_dirs", lambda: [])

    def offline(url, timeout):
        raise OSError("Temporary failure in name resolution")

    monkeypatch.setattr(book_module, "_urlopen", offline)
    assert load_record("run") is None
    err = capsys.readouterr().err
    assert "run.json" in err and "Temporary failure in name resolution" in err


def test_seeds_keep_their_first_at_the_colab_checks_scale(monkeypatch):
    # make test's Colab check (EIGPREC_SCALE=quick) proves that every cell runs; a page's
    # seed set is then its first seed, shifted as always. The whole set stays available.
    from eigprec_book.helpers import seed_set, seeds

    monkeypatch.setenv("EIGPREC_SEED_OFFSET", "1000")
    monkeypatch.delenv("EIGPREC_SCALE", raising=False)
    assert seeds(5) == seed_set(5) == (1000, 1001, 1002, 1003, 1004)
    assert seeds((3, 7)) == (1003, 1007)
    monkeypatch.setenv("EIGPREC_SCALE", "quick")
    assert seeds(5) == (1000,) and seeds((3, 7)) == (1003,) and seeds(range(2, 4)) == (1002,)
    assert seed_set(5) == (1000, 1001, 1002, 1003, 1004)
    with pytest.raises(ValueError, match="at least one seed"):
        seeds(0)
