""".ci/run, CI's entry point, on a machine without Chromium: it installs Debian's chromium
while `make env` sets up .venv, and runs `make test` only once both have finished.

The commands it calls are stand-ins on a PATH of their own (no real apt-get, make or
Chromium): each writes when it started and ended to a log, so the test reads the order.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

# What .ci/run needs from the system besides the stand-ins.
SYSTEM = ("bash", "cat", "dirname", "env", "mktemp", "rm", "sleep")


def _stand_in(path: Path, body: str) -> None:
    path.write_text(f'#!/bin/bash\necho "$(basename "$0") $* start" >> "$CI_LOG"\n{body}\n')
    path.chmod(0o755)


@pytest.fixture
def ci(tmp_path):
    if os.name != "posix" or any(shutil.which(t) is None for t in SYSTEM):
        pytest.skip("needs a POSIX shell and its tools")
    checkout = tmp_path / "checkout"
    (checkout / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "run", checkout / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in SYSTEM:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "basename").write_text('#!/bin/bash\necho "${1##*/}"\n')  # for the stand-ins
    (bin_dir / "basename").chmod(0o755)
    _stand_in(bin_dir / "id", "echo 0")  # root: no sudo needed
    log = tmp_path / "log"

    def run(apt: str = "true", make_env: str = "true") -> subprocess.CompletedProcess:
        _stand_in(bin_dir / "apt-get", f'sleep 0.5\necho "apt-get $* end" >> "$CI_LOG"\n{apt}')
        _stand_in(
            bin_dir / "make",
            f'sleep 0.2\necho "make $* end" >> "$CI_LOG"\nif [ "$1" = env ]; then {make_env}; fi',
        )
        log.write_text("")
        return subprocess.run(
            [str(bin_dir / "bash"), str(checkout / ".ci" / "run")],
            capture_output=True,
            text=True,
            env={"PATH": str(bin_dir), "CI_LOG": str(log), "HOME": str(tmp_path)},
            timeout=60,
        )

    return run, log


def test_chromium_installs_beside_make_env_and_make_test_waits_for_both(ci):
    run, log = ci
    result = run()
    assert result.returncode == 0, result.stderr
    events = log.read_text().splitlines()
    assert events.index("make env start") < events.index("apt-get install -y -qq chromium end")
    assert events.index("apt-get update -qq start") < events.index("make env end")
    installed = events.index("apt-get install -y -qq chromium end")
    assert events.index("make test start") > max(events.index("make env end"), installed)
    assert "chromium installed" in result.stdout


def test_a_failed_chromium_install_fails_the_run_with_its_output(ci):
    run, log = ci
    result = run(apt='echo "E: Unable to locate package chromium"; exit 100')
    assert result.returncode != 0
    assert "Unable to locate package chromium" in result.stderr
    assert "make test start" not in log.read_text()


def test_a_failed_make_env_fails_the_run_once_the_install_is_done(ci):
    run, log = ci
    result = run(make_env="exit 2")
    assert result.returncode == 2
    events = log.read_text().splitlines()
    assert "apt-get install -y -qq chromium end" in events and "make test start" not in events
