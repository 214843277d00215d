"""The execution cache's key (tools/cache_key.py, Makefile: cache-key) changes with any
input's content or time, and `make cache-key` runs with POSIX tools alone, as on macOS
(issue 23.11: the key used GNU `find -printf` and `sha256sum`).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_makefile import MAKE, _installed, fake_venv  # noqa: F401 (fixture)

sys.path.insert(0, str(ROOT / "tools"))
import cache_key as ck


@pytest.fixture
def inputs(tmp_path) -> Path:
    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (src / "pkg.egg-info").mkdir()
    (src / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    (tmp_path / "requirements.txt").write_text("torch\n")
    return tmp_path


def _key(root: Path, **kwargs) -> str:
    return ck.cache_key([root / "src", root / "requirements.txt", root / "missing"], **kwargs)


def test_content_and_time_change_the_key_build_leftovers_do_not(inputs):
    first = _key(inputs)
    assert len(first) == 16 and int(first, 16) >= 0
    (inputs / "src" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\1")
    (inputs / "src" / "pkg.egg-info" / "PKG-INFO").write_text("Name: other\n")
    assert _key(inputs) == first
    stat = (inputs / "requirements.txt").stat()
    os.utime(inputs / "requirements.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    touched = _key(inputs)
    assert touched != first  # touch counts, as for make
    assert _key(inputs, content_only=True) == _key(inputs, content_only=True)
    (inputs / "src" / "pkg" / "a.py").write_text("x = 2\n")
    assert _key(inputs) != touched


def test_content_only_ignores_times_and_hashes_the_extras(inputs):
    key = _key(inputs, content_only=True)
    os.utime(inputs / "requirements.txt", ns=(0, 10**18))
    assert _key(inputs, content_only=True) == key
    assert _key(inputs, content_only=True, extra=["full=1"]) != key
    (inputs / "src" / "pkg" / "b.py").write_text("")
    assert _key(inputs, content_only=True) != key  # a new, empty file counts


POSIX_SHIM = """#!/bin/sh
# A POSIX-only {name}: refuses the GNU extensions (long options, find -printf).
for arg in "$@"; do
  case "$arg" in
    --*|-printf|-printf0|-fprintf) echo "{name}: GNU-only option $arg" >&2; exit 2 ;;
  esac
done
exec {real} "$@"
"""


@pytest.mark.skipif(MAKE is None, reason="make not installed")
def test_make_cache_key_runs_with_posix_tools_only(fake_venv, inputs, tmp_path):  # noqa: F811
    # PATH holds only POSIX utilities that refuse GNU extensions; no sha256sum (not POSIX).
    posix = tmp_path / "posix-bin"
    posix.mkdir()
    for name in ("cat", "rm", "mkdir", "find", "sort", "cut", "echo", "test"):
        real = shutil.which(name)
        if real is not None:
            (posix / name).write_text(POSIX_SHIM.format(name=name, real=real))
            (posix / name).chmod(0o755)
    _installed(fake_venv)
    build = tmp_path / "build"
    (build / ".jupyter_cache").mkdir(parents=True)

    def make() -> subprocess.CompletedProcess:
        args = [MAKE, "--no-print-directory", "cache-key", f"VENV={fake_venv}", f"BUILD={build}"]
        args.append(f"CACHE_INPUTS={inputs / 'src'} {inputs / 'requirements.txt'}")
        env = {"PATH": str(posix), "HOME": str(tmp_path)}
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    result = make()
    assert result.returncode == 0, result.stdout + result.stderr
    key = (build / ".eigprec-cache-key").read_text().strip()
    assert len(key) == 16
    assert not (build / ".jupyter_cache").exists()  # a new key empties the cache
    (build / ".jupyter_cache").mkdir()
    assert make().returncode == 0
    assert (build / ".jupyter_cache").exists()  # same key: the cache is kept
    os.utime(inputs / "requirements.txt", ns=(0, 10**18))  # touch
    result = make()
    assert result.returncode == 0, result.stdout + result.stderr
    assert (build / ".eigprec-cache-key").read_text().strip() != key
    assert not (build / ".jupyter_cache").exists()
