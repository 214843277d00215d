"""tests/conftest.py's once_per_run: one worker builds an expensive fixture, the others read it."""

import pytest

from .conftest import once_per_run


class _Factory:
    """A stand-in for pytest's tmp_path_factory under xdist: a basetemp per worker."""

    def __init__(self, run, worker):
        self.run, self.worker = run, worker

    def getbasetemp(self):
        return self.run / f"popen-{self.worker}"


def test_workers_share_one_build(tmp_path, monkeypatch):
    calls = []

    def produce():
        calls.append(1)
        return {"value": [1.5, "x"]}

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = once_per_run(_Factory(tmp_path, "gw0"), "thing", produce)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = once_per_run(_Factory(tmp_path, "gw1"), "thing", produce)
    assert first == second == {"value": [1.5, "x"]} and len(calls) == 1
    other = once_per_run(_Factory(tmp_path, "gw1"), "other", produce)
    assert other == first and len(calls) == 2  # another name is another value


def test_without_xdist_it_just_builds(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    calls = []
    for _ in range(2):
        once_per_run(_Factory(tmp_path, "gw0"), "thing", lambda: calls.append(1))
    assert len(calls) == 2 and not list(tmp_path.rglob("*.pickle"))


def test_a_failed_build_leaves_nothing_and_the_next_worker_meets_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def broken():
        raise RuntimeError("no chromium")

    for worker in ("gw0", "gw1"):
        with pytest.raises(RuntimeError, match="no chromium"):
            once_per_run(_Factory(tmp_path, worker), "thing", broken)
    assert not list(tmp_path.rglob("*.pickle"))
