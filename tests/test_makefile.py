"""What the Makefile's set-up and maintenance targets do, run for real with `make`.

`make env` runs against a stand-in virtual environment whose `python` records each
`pip install` it is asked for (and runs everything else with this Python), so the
tests see exactly which index pip would be given for torch, without installing.
"""

import functools
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, needs

sys.path.insert(0, str(ROOT / "tools"))
import torch_index
from book_pages import page_paths

MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="make not installed")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: connections are refused


@pytest.fixture
def index_server(tmp_path):
    """A loopback 'package index' that has a torch/ page."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html></html>")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index")
    )
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    """A folder for stand-in commands, with no nvidia-smi yet."""
    path = tmp_path / "fakebin"
    path.mkdir()
    return path


def _fake_nvidia_smi(fake_bin: Path, *, works: bool) -> None:
    script = fake_bin / "nvidia-smi"
    if works:
        script.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0)'\n")
    else:
        script.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    script.chmod(0o755)


def _path(fake_bin: Path) -> str:
    return f"{fake_bin}:/usr/bin:/bin"


# --- tools/torch_index.py --------------------------------------------------------------


def test_cpu_index_when_no_gpu_and_the_index_answers(index_server, fake_bin, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_bin))  # no nvidia-smi, even on a GPU machine
    index, why = torch_index.choose(index_server, timeout=5, platform="linux")
    assert index == index_server
    assert "CPU build" in why


def test_no_extra_index_when_the_cpu_index_is_unreachable(fake_bin, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_bin))  # no nvidia-smi, even on a GPU machine
    url = f"http://127.0.0.1:{_closed_port()}"
    index, why = torch_index.choose(url, timeout=5, platform="linux")
    assert index == ""
    assert "not reachable" in why and url in why


@pytest.mark.parametrize("works", [True, False])
def test_gpu_present_means_no_cpu_index(index_server, fake_bin, monkeypatch, works):
    _fake_nvidia_smi(fake_bin, works=works)
    monkeypatch.setenv("PATH", _path(fake_bin))
    index, _ = torch_index.choose(index_server, timeout=5, platform="linux")
    # A driver without a working GPU (nvidia-smi fails) counts as no GPU.
    assert index == ("" if works else index_server)


def test_no_cpu_index_off_linux(index_server, fake_bin, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_bin))
    assert torch_index.choose(index_server, timeout=5, platform="darwin")[0] == ""


def test_cli_rejects_a_non_positive_timeout(capsys):
    with pytest.raises(SystemExit) as exc:
        torch_index.main(["--timeout", "0"])
    assert exc.value.code == 2
    assert "--timeout must be positive" in capsys.readouterr().err


# --- make env --------------------------------------------------------------------------


@pytest.fixture
def fake_venv(tmp_path) -> Path:
    """A .venv whose python logs `-m pip`/`-m ipykernel` calls and the page execution
    (tools/execute_pages.py: the chapters are not executed here) and runs the rest."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls.jsonl"
    (venv / "bin" / "python").write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "if sys.argv[1:2] == ['-m'] and sys.argv[2] in ('pip', 'ipykernel', 'compileall'):\n"
        f"    open({str(log)!r}, 'a').write(json.dumps(sys.argv[2:]) + '\\n')\n"
        "    sys.exit(0)\n"
        "if sys.argv[1:2] and sys.argv[1].endswith('execute_pages.py'):\n"
        f"    open({str(log)!r}, 'a').write(json.dumps(['execute_pages', *sys.argv[2:]]) + '\\n')\n"
        "    sys.exit(0)\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])\n"
    )
    (venv / "bin" / "python").chmod(0o755)
    return venv


def _make(target: str, venv: Path, fake_bin: Path, *, only: bool = False, **variables: str):
    """`make target` with the stand-in venv; ``only``: PATH is ``fake_bin`` alone."""
    args = [MAKE, "--no-print-directory", target, f"VENV={venv}"]
    args += [f"{k}={v}" for k, v in variables.items()]
    env = {"PATH": str(fake_bin) if only else _path(fake_bin), "HOME": str(venv.parent)}
    if "PYTHONPATH" in os.environ:  # where this Python finds its packages
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _pip_calls(venv: Path) -> list[list[str]]:
    log = venv.parent / "calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [c[1:] for c in calls if c[0] == "pip"]


def _torch_install(venv: Path) -> list[str]:
    calls = _pip_calls(venv)
    (torch,) = [c for c in calls if c[-1] == "torch"]
    # torch first, held to the pins of requirements.txt; then the rest without an index.
    assert calls.index(torch) == 0
    assert torch[-3:] == ["-c", "requirements.txt", "torch"]
    rest = [c for c in calls if c is not torch]
    flags = ["install", "--disable-pip-version-check", "--no-compile", "--quiet"]
    assert [*flags, "-r", "requirements.txt"] in rest
    assert not any("--extra-index-url" in c for c in rest)
    return torch


def _extra_index(call: list[str]) -> str | None:
    return call[call.index("--extra-index-url") + 1] if "--extra-index-url" in call else None


@needs_make
def test_make_env_auto_takes_the_cpu_index_without_a_gpu(fake_venv, fake_bin, index_server):
    # make needs /usr/bin, where a GPU machine has nvidia-smi: a failing one shadows it
    # (a driver without a GPU counts as no GPU: test_gpu_present_means_no_cpu_index).
    _fake_nvidia_smi(fake_bin, works=False)
    result = _make("env", fake_venv, fake_bin, TORCH_CPU_INDEX=index_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _extra_index(_torch_install(fake_venv)) == index_server
    assert (fake_venv / ".eigprec-installed").exists()
    # pip installs without compiling; then every module is compiled on every core.
    calls = [json.loads(x) for x in (fake_venv.parent / "calls.jsonl").read_text().splitlines()]
    tools = [c[0] for c in calls]
    (compiled,) = [c for c in calls if c[0] == "compileall"]
    assert compiled[1:4] == ["-qq", "-j", "0"] and compiled[4].endswith("site-packages")
    assert tools.index("compileall") > max(i for i, t in enumerate(tools) if t == "pip")


@needs_make
def test_make_env_auto_falls_back_to_the_configured_index(fake_venv, fake_bin):
    _fake_nvidia_smi(fake_bin, works=False)  # no GPU, even on a GPU machine (see above)
    url = f"http://127.0.0.1:{_closed_port()}"
    result = _make("env", fake_venv, fake_bin, TORCH_CPU_INDEX=url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _extra_index(_torch_install(fake_venv)) is None
    assert "not reachable" in result.stderr
    assert "torch from the configured index" in result.stdout


@needs_make
def test_make_env_auto_with_a_gpu_takes_no_extra_index(fake_venv, fake_bin, index_server):
    _fake_nvidia_smi(fake_bin, works=True)
    result = _make("env", fake_venv, fake_bin, TORCH_CPU_INDEX=index_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _extra_index(_torch_install(fake_venv)) is None


@needs_make
@pytest.mark.parametrize("choice", ["", "https://download.pytorch.org/whl/cu126"])
def test_make_env_torch_index_overrides(fake_venv, fake_bin, index_server, choice):
    # An explicit choice is taken as given: no probe, whatever the machine has.
    result = _make("env", fake_venv, fake_bin, TORCH_INDEX=choice, TORCH_CPU_INDEX=index_server)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _extra_index(_torch_install(fake_venv)) == (choice or None)
    assert "torch_index:" not in result.stderr


def test_makefile_default_cpu_index_is_pytorchs():
    text = (ROOT / "Makefile").read_text()
    assert "TORCH_INDEX ?= auto\n" in text
    assert f"TORCH_CPU_INDEX ?= {CPU_INDEX}\n" in text
    assert torch_index.CPU_INDEX == CPU_INDEX


# --- make lint, make linkcheck ---------------------------------------------------------


def _installed(venv: Path) -> None:
    """Mark the stand-in venv as set up, so `env` has nothing to do."""
    (venv / ".eigprec-installed").touch()
    newest = max((ROOT / f).stat().st_mtime for f in ("requirements.txt", "pyproject.toml"))
    os.utime(venv / ".eigprec-installed", (newest + 10, newest + 10))


def test_lint_checks_the_code_cells_of_the_pages_too():
    # The pages are MyST Markdown, which ruff does not read (it read the .ipynb pages).
    recipe = (ROOT / "Makefile").read_text().split("\nlint:")[1].split("\n\n")[0]
    assert "ruff check ." in recipe and "ruff format --check ." in recipe
    assert "$(PY) tools/lint_pages.py" in recipe


@needs_make
def test_make_linkcheck_builds_links_only_without_executing(fake_venv, fake_bin, tmp_path):
    _installed(fake_venv)
    log = tmp_path / "jb-args.json"
    (fake_venv / "bin" / "jupyter-book").write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n"
    )
    (fake_venv / "bin" / "jupyter-book").chmod(0o755)
    build = tmp_path / "build"
    result = _make("linkcheck", fake_venv, fake_bin, BUILD=str(build))
    assert result.returncode == 0, result.stdout + result.stderr
    args = json.loads(log.read_text())
    config = build / "linkcheck" / "_config.yml"
    assert args[:3] == ["build", ".", "--builder"] and args[3] == "linkcheck"
    assert args[args.index("--config") + 1] == str(config)
    assert args[args.index("--path-output") + 1] == str(build / "linkcheck")
    original = yaml.safe_load((ROOT / "_config.yml").read_text())
    derived = yaml.safe_load(config.read_text())
    assert derived["execute"].pop("execute_notebooks") == "off"
    assert original["execute"].pop("execute_notebooks") == "cache"
    # jupyter-book resolves these against the config file's folder: absolute in the copy.
    local = derived["sphinx"].pop("local_extensions")
    assert local == {
        name: str((ROOT / path).resolve())
        for name, path in original["sphinx"].pop("local_extensions").items()
    }
    # Unexecuted chapters glue nothing: only those warnings are silenced.
    suppressed = derived["sphinx"]["config"].pop("suppress_warnings")
    assert suppressed == [*original["sphinx"]["config"].pop("suppress_warnings", []), "mystnb.glue"]
    assert derived == original


FAKE_BUILD = """\
import json, re, sys
from pathlib import Path

import nbformat

sys.path.insert(0, "tools")
from book_pages import page_paths, read_page

# Stands in for jupyter-book: an "executed" copy of each chapter (the MyST page as MyST-NB
# reads it), every glued value 1.
build = Path(sys.argv[1])
for source in page_paths(Path("book")):
    nb = json.loads(nbformat.writes(read_page(source)))
    text = "".join("".join(c["source"]) for c in nb["cells"]) + json.dumps(nb)
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\\n"}]
    keys = {m.split(":")[0] for m in re.findall(r"\\{glue(?::\\w*)?\\}`([^`]+)`", text)}
    glue = {k: {"data": {"text/plain": "1", "text/markdown": "1"}} for k in keys}
    out = build / "jupyter_execute" / "book"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{source.stem}.ipynb").write_text(json.dumps(nb))
    (out / f"{source.stem}.glue.json").write_text(json.dumps(glue))
"""


@needs_make
@needs("pybtex")  # tools/reader_notebooks.py reads the references with it
def test_make_book_writes_a_readers_notebook_per_chapter_from_the_build(
    fake_venv, fake_bin, tmp_path
):
    _installed(fake_venv)
    build = tmp_path / "build"
    (fake_venv / "bin" / "jupyter-book").write_text(
        f"#!{sys.executable}\n" + FAKE_BUILD.replace("sys.argv[1]", repr(str(build)))
    )
    (fake_venv / "bin" / "jupyter-book").chmod(0o755)
    result = _make("book", fake_venv, fake_bin, BUILD=str(build))
    assert result.returncode == 0, result.stdout + result.stderr
    # make book executes the pages with the tool make test uses (issue 32: one path)
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert any(c[0] == "execute_pages" for c in calls)
    chapters = sorted(p.stem for p in page_paths(ROOT / "book"))
    written = sorted(p.stem for p in (build / "notebooks" / "book").glob("*.ipynb"))
    assert written == chapters and len(chapters) >= 3
    for name in chapters:
        nb = json.loads((build / "notebooks" / "book" / f"{name}.ipynb").read_text())
        md = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
        assert not re.search(r"\{(glue|cite|numref|ref|doc|term|py:)[^}]*\}`", md), name
        assert not re.search(r"^\s*(`{3,}|:{3,})\{", md, re.M), name
        assert "%pip install" in next(c for c in nb["cells"] if c["cell_type"] == "code")["source"]
        assert not any("remove-cell" in c["metadata"].get("tags", []) for c in nb["cells"])


@needs_make
@needs("pybtex")  # tools/reader_notebooks.py reads the references with it
def test_make_book_fails_when_no_readers_notebook_can_be_made(fake_venv, fake_bin, tmp_path):
    _installed(fake_venv)
    (fake_venv / "bin" / "jupyter-book").write_text("#!/bin/sh\nexit 0\n")
    (fake_venv / "bin" / "jupyter-book").chmod(0o755)
    result = _make("book", fake_venv, fake_bin, BUILD=str(tmp_path / "build"))
    assert result.returncode != 0
    assert "reader notebooks: book/" in result.stderr and "no executed notebook" in result.stderr


def test_publish_and_the_strict_build_write_the_readers_notebooks_and_colab_runs_them():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("book", "strict-book", "publish"):
        recipe = makefile.split(f"\n{target}:")[1].split("\n\n")[0]
        assert "$(READER_NOTEBOOKS)" in recipe, target
    colab = makefile.split("\ncolab-check:")[1].split("\n\n")[0]
    assert "find $(BUILD)/notebooks" in colab and "book/*.ipynb" not in colab
    # `make test` executes the chapters twice (strict build, Colab run), not three times:
    # lint, the unit suite, the strict build, then the site checks beside the Colab run,
    # which needs the reader's notebooks the strict build writes. The Colab run is the
    # quick one (one seed, smaller grids); the strict build is not.
    recipe = makefile.split("\ntest:")[1].split("\n\n")[0].splitlines()
    assert recipe[0].split() == ["lint", "unit", "strict-book"]
    stages = [line.split()[1:] for line in recipe[1:] if line.startswith("\t$(PAIR) ")]
    assert stages == [["site-check", "colab-check", "COLAB_QUICK=1"]]
    assert "$(if $(COLAB_QUICK),--quick)" in colab
    assert re.search(r"^ifeq \(\$\(strip \$\(EIGPREC_SCALE\)\),quick\)$", makefile, re.M)
    assert re.search(r"^PAIR := \$\(MAKE\) .*-j2 --output-sync=target$", makefile, re.M)


@needs_make
def test_the_colab_checks_scale_never_reaches_a_build():
    # EIGPREC_SCALE=quick in the caller's shell would run the strict build at one seed, and
    # its guards would fail; make refuses it by name. Only `colab-check COLAB_QUICK=1`
    # passes --quick on, into the Colab check's own kernels.
    result = subprocess.run(
        [MAKE, "--no-print-directory", "-f", str(ROOT / "Makefile"), "--eval",
         'probe-quick: ; @echo "[$${EIGPREC_SCALE-unset}]"', "probe-quick"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "EIGPREC_SCALE": "quick"},
        timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "EIGPREC_SCALE=quick is the Colab check's scale" in result.stderr


@needs_make
def test_the_unit_suite_runs_a_worker_more_than_the_cores_each_on_one_thread():
    # Measured on the 2-core machine (Makefile): 3 one-thread workers 143-147 s, against
    # 181 s for `-n auto`'s 2 workers of 2 torch threads each; work stealing, so that no
    # worker is left alone with a chunk of slow tests at the end (405 against 467 s).
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nunit:")[1].split("\n\n")[0]
    assert "\tOMP_NUM_THREADS=1 $(PY) -m pytest -n $(UNIT_JOBS) --dist worksteal" in recipe
    result = subprocess.run(
        [MAKE, "--no-print-directory", "-f", str(ROOT / "Makefile"), "--eval",
         "probe-jobs: ; @echo $(UNIT_JOBS)", "probe-jobs", f"PY={sys.executable}"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == (os.cpu_count() or 1) + 1


@needs_make
def test_make_pdf_names_the_missing_tex_packages_before_any_work(fake_venv, tmp_path):
    # A PATH with a shell and coreutils but no TeX (this machine may have TeX installed).
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("bash", "sh", "cat", "rm", "mkdir", "cp", "env"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    _installed(fake_venv)
    log = tmp_path / "jb-args.json"
    (fake_venv / "bin" / "jupyter-book").write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(log)!r}, 'w'))\n"
    )
    (fake_venv / "bin" / "jupyter-book").chmod(0o755)
    result = _make("pdf", fake_venv, bare, only=True, BUILD=str(tmp_path / "_build"))
    assert result.returncode != 0
    assert "this machine lacks what the PDF build needs" in result.stderr
    assert "xelatex (command; Debian package texlive-xetex)" in result.stderr
    assert "make pdf-prerequisites" in result.stderr
    # Nothing executed, nothing built: no silent skip and no half-made PDF.
    calls = tmp_path / "calls.jsonl"
    assert not calls.exists() or "execute_pages" not in calls.read_text()
    assert not log.exists()
    assert not (tmp_path / "_build" / "pdf").exists()
