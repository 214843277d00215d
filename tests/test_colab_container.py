"""tools/colab_container.sh, the weekly workflow's run inside Colab's runtime image,
run here against a stand-in: a fresh environment without eigprec (the one
tools/colab_check.py builds) and a stand-in google.colab module.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, missing_from_site_packages, notebook, site_packages_reason

sys.path.insert(0, str(ROOT / "tools"))
import colab_check

SCRIPT = ROOT / "tools" / "colab_container.sh"


def _notebook(path: Path, *cells: str) -> Path:
    path.write_text(json.dumps(notebook(list(cells))))
    return path


# Stands in for the setup cell's %pip install: puts an `eigprec` into the kernel's
# environment, and checks that the kernel started with google.colab imported.
SETUP = """\
import pathlib, sys, sysconfig
assert "google.colab" in sys.modules
pathlib.Path(sysconfig.get_paths()["purelib"], "eigprec.py").write_text("")
"""


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> dict:
    # The script runs nbclient, jupyter_client and the kernel in the fresh environment.
    lacking = missing_from_site_packages("ipykernel", "jupyter_client", "nbclient")
    if lacking:
        pytest.skip(site_packages_reason(lacking))
    work = tmp_path_factory.mktemp("colab")
    python, jupyter = colab_check.make_environment(work)
    return {
        "PATH": f"{python.parent}:/usr/bin:/bin",
        "JUPYTER_PATH": str(jupyter),
        "COLAB_KERNEL": colab_check.KERNEL_NAME,
        "PYTHONPATH": str(work / "colab-shim"),
        "IPYTHONDIR": str(work / "ipython"),
        "HOME": str(work),
        "purelib": str(python),
    }


def _run(colab: dict, out: Path, *notebooks: Path, **env: str):
    environ = {k: v for k, v in colab.items() if k != "purelib"} | env
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), *map(str, notebooks)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _forget_eigprec(colab: dict) -> None:
    python = colab["purelib"]
    code = "import sysconfig, pathlib; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    (Path(purelib.stdout.strip()) / "eigprec.py").unlink(missing_ok=True)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_runs_every_notebook_and_needs_the_setup_cell(colab, tmp_path):
    _forget_eigprec(colab)
    first = _notebook(tmp_path / "one.ipynb", SETUP, "import eigprec\nprint('ran one')")
    second = _notebook(tmp_path / "two.ipynb", "import os\nprint(sorted(os.listdir('.')))")
    result = _run(colab, tmp_path / "out", first, second)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    executed = json.loads((tmp_path / "out" / "one.ipynb").read_text())
    assert "ran one" in "".join(executed["cells"][1]["outputs"][0]["text"])
    # Each notebook in an empty folder of its own, as Colab's /content.
    listing = json.loads((tmp_path / "out" / "two.ipynb").read_text())["cells"][0]["outputs"]
    assert "".join(listing[0]["text"]).strip() == "['two.ipynb']"
    assert "eigprec installed by the setup cell at" in out


def test_a_failing_cell_fails_the_run_and_stops_it(colab, tmp_path):
    _forget_eigprec(colab)
    broken = _notebook(tmp_path / "broken.ipynb", SETUP, "raise ValueError('chapter broke')")
    later = _notebook(tmp_path / "later.ipynb", "print('never')")
    result = _run(colab, tmp_path / "out", broken, later)
    assert result.returncode != 0
    assert "chapter broke" in result.stdout + result.stderr
    assert not (tmp_path / "out" / "later.ipynb").exists()
    # The failing notebook is kept, with its traceback, for the workflow's artifact.
    assert "chapter broke" in (tmp_path / "out" / "broken.ipynb").read_text()


def test_refuses_an_image_without_google_colab(colab, tmp_path):
    _forget_eigprec(colab)
    nb = _notebook(tmp_path / "x.ipynb", "1")
    result = _run(colab, tmp_path / "out", nb, PYTHONPATH="")
    assert result.returncode == 1
    assert "google.colab is missing" in result.stderr


def test_refuses_an_environment_that_already_has_eigprec(colab, tmp_path):
    _forget_eigprec(colab)
    nb = _notebook(tmp_path / "x.ipynb", "1")
    result = _run(colab, tmp_path / "out", nb, PYTHONPATH=f"{colab['PYTHONPATH']}:{ROOT / 'src'}")
    assert result.returncode == 1
    assert "eigprec is importable before any setup cell ran" in result.stderr


@pytest.mark.parametrize("args", [[], ["out"], ["out", "missing.ipynb"]])
def test_usage_errors(tmp_path, args):
    result = subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    assert "usage:" in result.stderr or "no notebook" in result.stderr
