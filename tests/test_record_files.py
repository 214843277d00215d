"""Writing a user's file: never truncated by a failure, and checked before any work.

Issue 47, item 3: ``write_record`` wrote in place (``Path.write_text``), so a failure half-way
(``ulimit -f 16``: ``OSError: [Errno 27] File too large``) left a 153,971-byte record cut to
16,384 bytes that no longer parsed. Decided: every file the packages write for a user goes
through :func:`eigprec._files.write_text_atomic` (a temporary file in the same folder,
``os.replace``d over the old one), so a failure leaves the old file as it was and no
temporary file behind.

Item 4: the recorders checked ``--out`` only after measuring (``eig --dry-run --out <a
folder>``: 34 s, then ``IsADirectoryError``). Decided: every recorder checks ``--out``
before it measures, and refuses with exit status 2 and a message on stderr.

Item 12: ``degeneracy_remedies --merge`` with no files ran the full CPU recording. (Item 13,
``eig``'s no-GPU refusal on stdout: ``tests/test_bench_eig.py``.)
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from eigprec_book.record import _record, degeneracy_remedies
from eigprec_book.record import degeneracy as degeneracy_record
from eigprec_book.record import eig as eig_record
from eigprec_book.record import ops as ops_record
from eigprec_book.record import tf32 as tf32_record
from eigprec_book.record.cli import main

from eigprec._files import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
BIG = {"rows": [{"i": i, "value": i / 7} for i in range(4000)]}  # about 150 kB of JSON


def _precious(folder: Path) -> tuple[Path, bytes]:
    path = folder / "precious.json"
    _record.write_record({"kept": list(range(20000))}, path)
    return path, path.read_bytes()


def test_a_write_cut_short_by_the_file_size_limit_leaves_the_old_record_whole(tmp_path):
    # As in the issue: the process may write at most 16 kB per file (ulimit -f 16).
    path, old = _precious(tmp_path)
    assert len(old) > 16384
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
        from eigprec_book.record._record import write_record
        big = {{"rows": [{{"i": i, "value": i / 7}} for i in range(4000)]}}
        try:
            write_record(big, {str(path)!r})
        except OSError as e:
            print(e.errno)
            sys.exit(3)
        """
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'bookpkg'}"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 3, proc.stderr  # the write failed: File too large (27)...
    assert proc.stdout.strip() == "27"
    assert path.read_bytes() == old  # ...and the old record is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.json"]  # no temporary


def test_a_failure_before_the_replace_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path, old = _precious(tmp_path)

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        _record.write_record(BIG, path)
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.json"]


def test_the_replaced_file_keeps_its_mode_and_a_link_is_written_through(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{}")
    path.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_new_file_gets_the_umask_default_mode(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_text_atomic(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_text() == "x"


def test_a_folder_or_a_device_is_not_replaced(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_text_atomic(tmp_path, "x")
    with pytest.raises(ValueError, match="not a regular file"):
        write_text_atomic("/dev/null", "x")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert list(tmp_path.iterdir()) == []


# --- item 4: --out checked before any work ------------------------------------------------


def _never(*args, **kwargs):
    raise AssertionError("measured before --out was checked")


RECORDERS = {
    "tf32": (tf32_record, "measure", []),
    "eig": (eig_record, "record", ["--dry-run"]),
    "degeneracy": (degeneracy_record, "record", []),
    "ops": (ops_record, "sweep", ["--dry-run"]),
}


@pytest.mark.parametrize("name", list(RECORDERS))
@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_recorders_refuse_a_bad_out_before_measuring(name, where, tmp_path, monkeypatch, capsys):
    module, measure, extra = RECORDERS[name]
    monkeypatch.setattr(module, measure, _never)
    if hasattr(module, "refusal"):  # as on a machine with the GPU it needs (ops: dry run)
        monkeypatch.setattr(module, "refusal", lambda *a: None)
    (tmp_path / "file").write_text("")
    out = tmp_path if where == "folder" else tmp_path / "file" / "x.json"
    assert main([name, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and str(out) in err


@pytest.mark.parametrize("name", list(RECORDERS))
def test_recorders_accept_an_out_in_a_folder_still_to_make(name, tmp_path, monkeypatch):
    # write_record makes missing folders: the check must not refuse them.
    module, measure, extra = RECORDERS[name]
    monkeypatch.setattr(module, measure, _never)
    if hasattr(module, "refusal"):
        monkeypatch.setattr(module, "refusal", lambda *a: None)
    with pytest.raises(AssertionError, match="measured"):
        main([name, "--out", str(tmp_path / "new" / "x.json"), *extra])


def test_remedies_refuse_a_bad_out_before_recording(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(degeneracy_remedies, "record_remedies", _never)
    monkeypatch.setattr(degeneracy_remedies, "record_lm", _never)
    for extra in ([], ["--lm"]):
        with pytest.raises(SystemExit) as info:
            degeneracy_remedies.main(["--out", str(tmp_path), *extra])
        assert info.value.code == 2
        assert "--out" in capsys.readouterr().err


# --- item 12: --merge with no files -------------------------------------------------------


def test_merge_without_files_is_refused_not_a_full_recording(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(degeneracy_remedies, "record_remedies", _never)
    out = tmp_path / "m.json"
    with pytest.raises(SystemExit) as info:
        degeneracy_remedies.main(["--merge", "--out", str(out)])
    assert info.value.code == 2
    assert "--merge" in capsys.readouterr().err
    assert not out.exists()


def test_merge_of_a_missing_file_is_refused_before_writing(tmp_path):
    out = tmp_path / "m.json"
    out.write_text('{"old": true}')
    with pytest.raises((OSError, ValueError)):
        degeneracy_remedies.main(["--merge", str(tmp_path / "absent.json"), "--out", str(out)])
    assert json.loads(out.read_text()) == {"old": True}
