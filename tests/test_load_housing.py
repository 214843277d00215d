"""load_housing never waits on the network on an offline machine (issue 22)."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
from eigprec_book.chapters.clarke import regression

sklearn_datasets = pytest.importorskip("sklearn.datasets")


def _bunch():
    from sklearn.utils import Bunch

    return Bunch(data=np.ones((4, 8)), target=np.arange(4.0), feature_names=list("abcdefgh"))


def _fetcher(monkeypatch, cached: bool) -> dict[str, int]:
    calls = {"downloads": 0, "cache_reads": 0}

    def fetch(download_if_missing: bool = True, **kwargs):
        if not download_if_missing:
            calls["cache_reads"] += 1
            if not cached:
                raise OSError("Data not found and `download_if_missing` is False")
            return _bunch()
        calls["downloads"] += 1
        return _bunch()

    monkeypatch.setattr(sklearn_datasets, "fetch_california_housing", fetch)
    return calls


def test_offline_without_cache_uses_the_stand_in_without_downloading(monkeypatch):
    calls = _fetcher(monkeypatch, cached=False)
    probed = []
    monkeypatch.setattr(
        regression,
        "_host_unreachable",
        lambda url, timeout: probed.append((url, timeout)) or "offline: no route",
    )
    d = regression.load_housing(seed=0)
    assert d["source"] == "synthetic" and "offline: no route" in d["note"]
    assert calls == {"downloads": 0, "cache_reads": 1}
    assert probed and probed[0][1] == regression.HOUSING_CONNECT_TIMEOUT_S
    assert probed[0][0].startswith("https://")


def test_cached_copy_needs_no_network(monkeypatch):
    calls = _fetcher(monkeypatch, cached=True)
    monkeypatch.setattr(regression, "_host_unreachable", lambda url, timeout: pytest.fail("probed"))
    d = regression.load_housing()
    assert d["source"] == "california_housing" and d["note"] == ""
    assert calls == {"downloads": 0, "cache_reads": 1}


def test_reachable_host_downloads(monkeypatch):
    calls = _fetcher(monkeypatch, cached=False)
    monkeypatch.setattr(regression, "_host_unreachable", lambda url, timeout: None)
    assert regression.load_housing()["source"] == "california_housing"
    assert calls["downloads"] == 1


def test_probe_reports_a_refused_and_a_hanging_host():
    with socket.socket() as s:  # a port nothing listens on: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = regression._host_unreachable(f"http://127.0.0.1:{port}/x", 2.0)
    assert refused is not None and "127.0.0.1" in refused

    released = threading.Event()

    def hang(*args, **kwargs):
        # Hangs past the probe's timeout, then fails as a connection would. (It used to
        # return None after 30 s, and the probe's thread then raised inside whichever
        # test was running: PytestUnhandledThreadExceptionWarning.)
        released.wait(30)
        raise TimeoutError("the fake connection gave up")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "create_connection", hang)
        hung = regression._host_unreachable("https://example.invalid/data", 0.2)
    released.set()
    assert hung == "offline: example.invalid did not answer within 0.2 s"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert regression._host_unreachable(f"http://127.0.0.1:{port}/", 2.0) is None
