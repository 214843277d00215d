"""glue, progress and load_record outside a notebook."""

import json

import pytest

from eigprec import book as book_module
from eigprec import glue, load_record, progress


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
