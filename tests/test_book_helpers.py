"""glue, progress and load_record outside a notebook."""

import json

import pytest

from eigprec.book import glue, load_record, progress
from eigprec.book import notebook as book_module


def test_glue_validates_name_and_returns_nothing_to_display():
    assert glue("a_name-1", 3.5) is None
    with pytest.raises(ValueError, match="glue name"):
        glue("bad name", 1)
    with pytest.raises(ValueError, match="glue name"):
        glue("", 1)


def test_progress_yields_everything_as_text(monkeypatch, capsys):
    monkeypatch.setenv("EIGPREC_PROGRESS", "text")
    assert list(progress(range(5), desc="count")) == [0, 1, 2, 3, 4]
    out = capsys.readouterr().out
    assert "count" in out and "5/5" in out


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
    from eigprec.book import markdown_table

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
    from eigprec.book import note

    box = note("<b>", "body <code>x</code>")
    assert '<p class="admonition-title">&lt;b&gt;</p>' in box.data
    assert "<code>x</code>" in box.data
    with pytest.raises(TypeError):
        note("title", 3)
