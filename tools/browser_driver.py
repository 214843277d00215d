"""Headless Chromium driven over the DevTools protocol (``websocket-client``), and a
loopback-only server for the site it loads. Used by ``check_browser.py``.

No browser is downloaded: the check uses the Chromium (or Chrome) installed on the
machine, found by :func:`find_chromium`. Chromium cannot resolve any host name, so a
page can reach nothing but the local server.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1280,1000",
    # Any host name fails to resolve, so nothing but the loopback server is reachable.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)
PAGE_TIMEOUT_S = 30.0


def find_chromium() -> str | None:
    """Path of a Chromium (or Chrome) executable, honouring ``$CHROMIUM``."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 (a free port) for the duration of the block."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class DevTools:
    """A minimal synchronous DevTools-protocol client for one page target."""

    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client; imported here so --help works without it

        self._ws = websocket.create_connection(ws_url, timeout=PAGE_TIMEOUT_S, suppress_origin=True)
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        self._ws.close()

    def call(self, method: str, wait_s: float | None = None, **params: object) -> dict:
        """Send one DevTools command and return its result.

        ``wait_s``: how long to wait for the answer (default :data:`PAGE_TIMEOUT_S`); a
        ``TimeoutError`` naming the command and the wait when none comes (on a loaded
        machine a long script, such as axe-core's run on a large page, took over 30 s).
        Events that arrive meanwhile are kept in :attr:`events`.
        """
        import websocket

        wait = PAGE_TIMEOUT_S if wait_s is None else wait_s
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        self._ws.settimeout(wait)  # wait_for may have left a short one
        while True:
            try:
                raw = self._ws.recv()
            except (websocket.WebSocketTimeoutException, TimeoutError) as exc:
                raise TimeoutError(
                    f"{method}: no answer from Chromium within {wait:.0f} s"
                ) from exc
            msg = json.loads(raw)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float) -> bool:
        """Collect events until ``method`` arrives (True) or ``timeout`` passes (False)."""
        if any(e["method"] == method for e in self.events):
            return True
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self._ws.settimeout(left)
            try:
                msg = json.loads(self._ws.recv())
            except Exception:  # websocket timeout
                return False
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return True
        return False

    def drain(self, seconds: float) -> None:
        self.wait_for("__never__", seconds)


@contextlib.contextmanager
def chromium(executable: str) -> Iterator[DevTools]:
    """Start headless Chromium and connect to its first page."""
    profile = tempfile.mkdtemp(prefix="eigprec-chromium-")
    proc = subprocess.Popen(
        [
            executable,
            *CHROMIUM_FLAGS,
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = None
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{executable} did not start (exit code {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t.get("type") == "page")
        client = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            client.call(f"{domain}.enable")
        yield client
    finally:
        if client is not None:
            client.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
