"""tools/page_axe.py: the vendored axe-core is the published file, and the impacts
that fail a page are the documented ones (the browser runs are in test_check_browser)."""

import base64
import hashlib
import shutil
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import page_axe

# axe-core's own published subresource-integrity hash of axe.min.js 4.14.1
# (sri-history.json in the npm package), written here independently of page_axe.
PUBLISHED = "sha256-KTSJmUUM3yhJqOcLeRL8LahahJ2jnA0NU5T1HUqe2Vw="


def test_vendored_axe_is_the_published_file_with_its_licence():
    data = (page_axe.AXE_DIR / "axe.min.js").read_bytes()
    assert "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode() == PUBLISHED
    assert data.startswith(b"/*! axe v4.14.1")
    assert "Mozilla Public License" in (page_axe.AXE_DIR / "LICENSE").read_text()
    assert page_axe.axe_source().startswith("/*! axe v4.14.1")


def test_tampered_axe_is_refused(tmp_path, monkeypatch):
    shutil.copytree(page_axe.AXE_DIR, tmp_path / "axe-core")
    script = tmp_path / "axe-core" / "axe.min.js"
    script.write_bytes(script.read_bytes() + b"\n// changed")
    monkeypatch.setattr(page_axe, "AXE_DIR", tmp_path / "axe-core")
    page_axe.axe_source.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"is not axe-core 4\.14\.1"):
            page_axe.axe_source()
        script.unlink()
        page_axe.axe_source.cache_clear()
        with pytest.raises(RuntimeError, match="axe-core is missing"):
            page_axe.axe_source()
    finally:
        page_axe.axe_source.cache_clear()


def _v(rule, impact, dark=False):
    return {
        "id": rule,
        "impact": impact,
        "help": f"{rule} help",
        "nodes": 2,
        "targets": ["p.x", "p.y"],
        "summary": "",
        "dark": dark,
    }


def test_serious_and_critical_fail_by_default():
    found = [
        _v("region", "moderate"),
        _v("image-alt", "critical"),
        _v("color-contrast", "serious", dark=True),
        _v("x", "minor"),
    ]
    assert page_axe.axe_problems(found) == [
        "accessibility (critical, image-alt): image-alt help; 2 elements: p.x",
        "accessibility (serious, color-contrast) in the dark theme: color-contrast help; "
        "2 elements: p.x",
    ]
    assert len(page_axe.axe_problems(found, "minor")) == 4
    assert page_axe.axe_problems(found, "critical") == page_axe.axe_problems(found)[:1]
    assert page_axe.axe_summary(found).startswith(
        "axe 4.14.1: rules violated critical 1 serious 1 moderate 1 minor 1 ["
    )


def test_bad_threshold_is_refused():
    with pytest.raises(ValueError, match="failing_from must be one of"):
        page_axe.axe_problems([], "severe")


class _SilentSocket:
    """A DevTools websocket whose browser never answers (Chromium busy or hung)."""

    def __init__(self):
        self.timeouts = []

    def send(self, data):
        pass

    def settimeout(self, seconds):
        self.timeouts.append(seconds)

    def recv(self):
        import websocket

        raise websocket.WebSocketTimeoutException("Connection timed out")


def test_a_call_chromium_does_not_answer_names_the_call_and_its_wait():
    # make test on Python 3.12, beside the matrix run (load 5 on 2 cores): axe-core's run on a
    # page took over the 30-s wait, and the check died with websocket's bare
    # "Connection timed out" traceback, naming neither the page nor what it waited for.
    import browser_driver

    client = browser_driver.DevTools.__new__(browser_driver.DevTools)
    client._ws, client._next_id, client.events = _SilentSocket(), 0, []
    with pytest.raises(
        TimeoutError, match=r"Runtime\.evaluate: no answer from Chromium within 7 s"
    ):
        client.call("Runtime.evaluate", wait_s=7.0, expression="1")
    assert client._ws.timeouts[-1] == 7.0
    with pytest.raises(TimeoutError, match=r"Page\.navigate: .* within 30 s"):
        client.call("Page.navigate", url="about:blank")  # the default wait


class _RecordingClient:
    def __init__(self):
        self.waits = []

    def call(self, method, wait_s=None, **params):
        self.waits.append(wait_s)
        if "typeof axe" in params["expression"]:
            return {"result": {"value": "object"}}
        return {"result": {"value": []}}


def test_axe_gets_longer_than_a_page_load_to_run():
    client = _RecordingClient()
    assert page_axe.run_axe(client) == []
    assert client.waits[-1] == page_axe.AXE_TIMEOUT_S >= 120


def test_a_page_whose_axe_run_times_out_is_a_page_problem(monkeypatch):
    import check_browser

    def slow(client, dark=False):
        raise TimeoutError("Runtime.evaluate: no answer from Chromium within 180 s")

    monkeypatch.setattr(check_browser, "run_axe", slow)
    report = check_browser.PageReport(page="book/x.html")
    check_browser._check_axe(report, object(), "serious")
    assert (
        report.problems == ["axe-core: Runtime.evaluate: no answer from Chromium within 180 s"]
        and report.axe is None
    )
