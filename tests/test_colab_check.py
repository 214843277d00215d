"""tools/colab_check.py runs a notebook as Colab would, and fails when Colab would.

The chapters themselves are run this way by `make test` (target colab-check); here
small notebooks show that the environment really lacks eigprec until the setup cell
installs it, and that a raising cell fails the check, naming notebook and cell.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, needs_in_site_packages, read_page

sys.path.insert(0, str(ROOT / "tools"))
import colab_check

URL = "https://github.com/eigprec/eigen-precision"
# The notebooks run in a kernel of the fresh environment, which sees site-packages only.
needs_kernel = needs_in_site_packages("ipykernel", "jupyter_client")


def _setup() -> str:
    """The chapters' Colab setup cell (the first cell of book/tf32.md)."""
    return read_page(ROOT / "book" / "tf32.md").cells[0].source


def _notebook(tmp_path: Path, name: str, setup: str, *cells: str) -> Path:
    def code(src: str, tags=()) -> dict:
        return {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{abs(hash(src)) % 10**8}",
            "metadata": {"tags": list(tags)},
            "outputs": [],
            "source": src,
        }

    nb = {
        "cells": [code(setup, ["remove-cell"]), *(code(c) for c in cells)],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


def _run(
    tmp_path: Path, *notebooks: Path, options: tuple[str, ...] = (), env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "colab_check.py"),
            *map(str, notebooks),
            *("--workdir", str(tmp_path / "work"), "--timeout", "300"),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=None if env is None else {**os.environ, **env},
    )


def test_replace_install_url_changes_only_the_url(tmp_path):
    source = _setup()
    replaced = colab_check.replace_install_url(source, URL, tmp_path)
    root = tmp_path.resolve()
    expected = source.replace(f"git+{URL}#subdirectory=bookpkg", (root / "bookpkg").as_uri())
    assert replaced == expected.replace(f"git+{URL}", root.as_uri())
    with pytest.raises(colab_check.ColabCheckError, match="once each"):
        colab_check.replace_install_url("%pip install eigprec", URL, tmp_path)
    with pytest.raises(colab_check.ColabCheckError, match="once each"):
        colab_check.replace_install_url(f'%pip install "eigprec @ git+{URL}"', URL, tmp_path)


@pytest.mark.parametrize(
    ("name", "hidden"),
    [
        ("eigprec", True),
        ("eigprec-0.1.0.dist-info", True),
        ("__editable__.eigprec-0.1.0.pth", True),
        ("__editable___eigprec_0_1_0_finder.py", True),
        ("myst_nb", True),
        ("distutils-precedence.pth", True),
        ("torch", False),
        ("numpy-2.4.6.dist-info", False),
        ("ipykernel", False),
        ("pip", False),
    ],
)
def test_mirror_leaves_out_only_the_package_and_myst_nb(name, hidden):
    assert bool(colab_check.HIDDEN.search(name)) is hidden


@needs_kernel
def test_setup_cell_is_what_provides_the_package(tmp_path):
    ok = _notebook(
        tmp_path,
        "installs",
        _setup(),
        "import eigprec\neigprec.describe_runtime()",
        "import eigprec_book.helpers\n"
        "eigprec_book.helpers.glue('x', 1)  # the Colab path: no MyST-NB",
        # No book/data beside the notebook: the record is found through pip's record of
        # where the package was installed from (a git commit in Colab, a folder here). From
        # a wheel built once it was not, and the pages that read records failed (issue 45).
        "assert eigprec_book.helpers.load_record('eig_gpu') is not None",
    )
    # The same setup cell with its condition inverted never installs anything.
    never = _setup().replace('"google.colab" in sys.modules', '"google.colab" not in sys.modules')
    skipped = _notebook(tmp_path, "no_install", never, "import eigprec")
    result = _run(tmp_path, ok, skipped)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "ok   installs.ipynb" in out
    assert "FAIL no_install.ipynb" in out
    assert "cell 1 failed in Colab" in out and "No module named 'eigprec'" in out
    assert "1 of 2 notebooks ran as in Colab" in out


@needs_kernel
def test_raising_cell_fails_naming_it(tmp_path):
    never = _setup().replace('"google.colab" in', '"google.colab" not in')
    broken = _notebook(tmp_path, "broken", never, "x = 1", "raise ValueError('chapter broke')")
    result = _run(tmp_path, broken)
    out = result.stdout + result.stderr
    assert result.returncode == 1
    assert "broken.ipynb: cell 2 failed in Colab" in out
    assert "ValueError: chapter broke" in out
    # The failure can be read afterwards: the executed copy, error output included, and
    # the traceback, under the work folder (_build/colab/failed/ in `make test`).
    failed = tmp_path / "work" / "failed"
    assert f"executed copy: {failed / 'broken.ipynb'}" in out
    kept = json.loads((failed / "broken.ipynb").read_text())
    errors = [o for c in kept["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert [e["evalue"] for e in errors] == ["chapter broke"]
    assert "ValueError: chapter broke" in (failed / "broken.traceback.txt").read_text()


def test_replace_install_url_accepts_a_pinned_install(tmp_path):
    pinned = (
        '%pip install -q "eigprec @ git+https://github.com/eigprec/eigen-precision@0a1b2c3"\n'
        '%pip install -q "eigprec-book @ git+https://github.com/eigprec/eigen-precision@0a1b2c3'
        '#subdirectory=bookpkg"'
    )
    replaced = colab_check.replace_install_url(pinned, URL, tmp_path)
    root = tmp_path.resolve()
    assert replaced == (
        f'%pip install -q "eigprec @ {root.as_uri()}"\n'
        f'%pip install -q "eigprec-book @ {(root / "bookpkg").as_uri()}"'
    )


@needs_kernel
def test_the_install_cell_may_follow_markdown_cells(tmp_path):
    # A reader's notebook opens with its provenance note; the install is the first code cell.
    path = _notebook(tmp_path, "reader", _setup(), "import eigprec")
    nb = json.loads(path.read_text())
    nb["cells"].insert(0, {"cell_type": "markdown", "id": "m0", "metadata": {}, "source": "# A"})
    path.write_text(json.dumps(nb))
    # An EIGPREC_SCALE of the calling shell does not reach a Colab kernel: only --quick does.
    result = _run(tmp_path, path, env={"EIGPREC_SCALE": "quick"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   reader.ipynb" in result.stdout
    assert "scale: chapter" in result.stdout


@needs_kernel
def test_quick_runs_the_degeneracy_experiments_with_one_seed(tmp_path):
    # make test's Colab check: the kernel sees EIGPREC_SCALE=quick, so the degeneracy chapter's
    # multi-seed experiments run their first seed; the check confirms the kernel's scale.
    path = _notebook(
        tmp_path,
        "quick",
        _setup(),
        "from eigprec_book.chapters.degeneracy.scale import experiment_kwargs\n"
        "assert experiment_kwargs('practice')['seeds'] == (0,)",
    )
    result = _run(tmp_path, path, options=("--quick",))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "one seed, smaller grids (--quick)" in result.stdout
    assert "ok   quick.ipynb" in result.stdout and "scale: quick" in result.stdout


def _project(tmp_path: Path, name: str, requires: list[str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "pyproject.toml").write_text(f"[build-system]\nrequires = {json.dumps(requires)}\n")
    return folder


def test_build_requirements_are_read_from_each_project(tmp_path):
    # Both of ours are met here (setuptools >= 77: torch requires it), so the sessions skip
    # pip's isolated build environments.
    assert colab_check.build_requirements_met([ROOT, ROOT / "bookpkg"])
    met = _project(tmp_path, "met", ["setuptools>=1", "nowhere-xyz; python_version < '3'"])
    assert colab_check.build_requirements_met([met])
    for name, requires in [
        ("too_old", ["setuptools>=999"]),
        ("missing", ["no-such-distribution-xyz"]),
    ]:
        assert not colab_check.build_requirements_met([met, _project(tmp_path, name, requires)])
    assert not colab_check.build_requirements_met([tmp_path])  # no pyproject.toml


@pytest.mark.parametrize("isolated", [True, False])
def test_kernel_builds_without_isolation_only_when_asked(tmp_path, isolated):
    _, jupyter = colab_check.make_environment(tmp_path, isolated_builds=isolated)
    spec = json.loads((jupyter / "kernels" / colab_check.KERNEL_NAME / "kernel.json").read_text())
    assert ("PIP_NO_BUILD_ISOLATION" in spec["env"]) is not isolated
    if not isolated:
        assert spec["env"]["PIP_NO_BUILD_ISOLATION"] == "0"
