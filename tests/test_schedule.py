"""tools/schedule.py: how the page runners share the machine (jobs, threads, longest first)."""

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from schedule import load_times, longest_first, plan


@given(jobs=st.integers(0, 64), items=st.integers(0, 64), cpus=st.integers(1, 64))
def test_plan_uses_the_cores_once_and_never_more_processes_than_items(jobs, items, cpus):
    processes, threads = plan(jobs, items, cpus)
    assert processes >= 1 and threads >= 1
    assert processes <= max(1, items) and processes <= (jobs or cpus)
    assert processes * threads <= max(cpus, processes)


def test_plan_refuses_negative_numbers():
    with pytest.raises(ValueError, match="jobs"):
        plan(-1, 3, 2)


def test_longest_first_by_last_times_then_size(tmp_path):
    small, big, timed = (tmp_path / n for n in ("small.ipynb", "big.ipynb", "timed.ipynb"))
    small.write_text("x")
    big.write_text("x" * 100)
    timed.write_text("x")
    times = tmp_path / "execution-seconds.json"
    times.write_text(json.dumps({"timed": 12.0}))  # by page name: tf32.md and tf32.ipynb
    assert longest_first([small, big, timed], load_times(times)) == [timed, big, small]


def test_unreadable_times_are_no_times(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    assert load_times(bad) == {} and load_times(tmp_path / "absent.json") == {}
    bad.write_text("[1, 2]")
    assert load_times(bad) == {}


def test_a_fresh_clone_starts_the_longest_pages_first(tmp_path):
    # A clean clone (CI) has no last run's times: ordered by file size, the strict build
    # started the two shortest-running pages first and the longest-running (the 22 kB
    # degeneracy_training, 81 s) last, and its kernel ran alone for the last 43 s.
    import execute_pages
    from schedule import TYPICAL_TIMES, page_order

    pages = execute_pages.toc_notebooks(ROOT / "_toc.yml")
    typical = load_times(TYPICAL_TIMES)
    assert set(typical) == {p.stem for p in pages}, "tools/page-seconds.json: one entry a page"
    order = page_order(pages, load_times(tmp_path / "absent.json"))
    assert [p.stem for p in order] == sorted(typical, key=typical.get, reverse=True)
    # The last run's times, where there are some, come first.
    last = tmp_path / "execution-seconds.json"
    last.write_text(json.dumps({"tf32": 1e6}))
    assert page_order(pages, load_times(last))[0].name == "tf32.md"
