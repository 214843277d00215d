"""tools/gpu/gpu_record.sh without a GPU: the refusal, the dry run's environment, the output.

The dry run runs under a stand-in for the machine's interpreter: a virtual environment (as
``python3`` is on the recording machine) holding a stub ``torch`` and nothing else of the
shared venv's, so torch imports in a step only if the step really runs on that interpreter's
site-packages.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT, needs, notebook, write_page

sys.path.insert(0, str(ROOT / "tools" / "gpu"))
import gpu_record

SCRIPT = ROOT / "tools" / "gpu" / "gpu_record.sh"


def make_wheel(folder: Path, name: str = "gpurecfake", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel, so that installing it needs no index and no network."""
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text)}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def fake_bin(tmp_path: Path, nvidia_smi: str | None) -> Path:
    """A PATH folder with the few tools the wrapper calls, and the given nvidia-smi script."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("dirname",):
        os.symlink(shutil.which(tool), folder / tool)
    if nvidia_smi is not None:
        smi = folder / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        smi.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("smi", "expected"),
    [
        (None, "nvidia-smi is not on PATH"),
        ("echo 'No devices were found'; exit 6", "exited with status 6"),
    ],
)
def test_refuses_at_once_without_a_gpu(tmp_path, smi, expected):
    out = tmp_path / "out"
    env = {
        "PATH": str(fake_bin(tmp_path, smi)),
        "PYTHON": sys.executable,
        "OUT": str(out),
        "HOME": str(tmp_path),
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        ["/bin/bash", str(SCRIPT)], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == gpu_record.NO_GPU_EXIT, proc.stderr
    assert expected in proc.stderr and "--dry-run" not in proc.stdout
    assert time.monotonic() - t0 < 30
    assert not out.exists()  # refused before any work


STUB_TORCH = {
    "__init__.py": "from . import cuda, version\n__version__ = '2.11.0+stub'\n",
    "version.py": "cuda = None\n",
    "cuda.py": "def is_available():\n    return False\n",
}


def stand_in_python(folder: Path, with_torch: bool) -> Path:
    """A virtual environment like the machine's python3, with a stub torch (or none)."""
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(folder)], capture_output=True, timeout=300, check=False
    )
    if made.returncode != 0:  # a Python without ensurepip (Debian's, without python3-venv)
        pytest.skip(f"cannot make a stand-in venv here: {made.stderr.decode()[-200:]}")
    python = folder / "bin" / "python"
    if with_torch:
        site = subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name, text in STUB_TORCH.items():
            (Path(site) / "torch").mkdir(exist_ok=True)
            (Path(site) / "torch" / name).write_text(text)
    return python


ALL_STEPS = "tf32,complex64,eig,ops,degeneracy,tests,notebooks:tf32,notebooks:clarke"


def run_dry(
    tmp: Path, python: Path, steps: str = ALL_STEPS, call: list[str] | None = None
) -> tuple:
    """A dry run of the script: ``--steps steps`` with a wheel folder, or ``call`` without."""
    wheels = tmp / "wheels"
    if call is None:
        make_wheel(wheels)
        make_wheel(wheels, "eigprec", "0.0.1")  # a stale package wheel: must not be installed
        call = ["--steps", steps]
    out, site, work = tmp / "out", tmp / "site", tmp / "work"
    env = {**os.environ, "PYTHON": str(python), "EIGPREC_GPU_RECORD_DRYRUN": "1"}
    env.pop("OUT", None)
    env.pop("PYTHONPATH", None)  # the script sets the steps' path itself
    proc = subprocess.run(
        [
            *("/bin/bash", str(SCRIPT), "--out", str(out), "--wheels", str(wheels)),
            *("--site", str(site), "--work", str(work), *call),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    return proc, out, site, work


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    return stand_in_python(tmp_path_factory.mktemp("machine") / "venv", with_torch=True)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, stand_in):
    return (*run_dry(tmp_path_factory.mktemp("dry"), stand_in), stand_in)


def test_dry_run_installs_offline_without_a_child_venv(dry_run):
    proc, _, site, work, python = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "gpurecfake" / "__init__.py").is_file()  # pip --target, offline
    assert not (site / "pyvenv.cfg").exists() and not list(site.glob("eigprec*"))
    summary = json.loads((work / "summary.json").read_text())
    probe = (
        "import gpurecfake, torch, importlib.util as u; "
        "print(gpurecfake.VALUE, torch.__version__, u.find_spec('eigprec').origin)"
    )
    env = {**os.environ, **gpu_record.step_environment(str(python), site)["vars"]}
    got = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    value, version, origin = got.stdout.split()
    assert (value, version) == ("42", "2.11.0+stub")
    assert Path(origin) == ROOT / "src" / "eigprec" / "__init__.py"  # the checkout, not the wheel
    assert summary["install"]["python"] == str(python)


def test_dry_run_sees_the_machines_torch_in_every_step(dry_run):
    _, out, _, _, python = dry_run
    summary = json.loads((out / "summary.json").read_text())
    gpu_record.validate_summary(summary)
    assert summary["dry_run"] is True and summary["exit_status"] == 0
    names = [s["name"] for s in summary["steps"]]
    assert names == ["install", "versions", *ALL_STEPS.split(",")]
    stub = str(python.parent.parent / "lib")
    assert summary["torch"] == "2.11.0+stub" and summary["torch_file"].startswith(stub)
    for step in summary["steps"][2:]:
        assert step["status"] == "skipped" and "dry run" in step["reason"], step
        # the stand-in's own torch, from its own site-packages (where cuda-pathfinder looks)
        assert step["torch"].startswith(stub), step
        assert any(step["torch"].startswith(p) for p in step["site_packages"]), step
        assert step["eigprec"] == str(ROOT / "src" / "eigprec" / "__init__.py")
        # the recorders are `python -m eigprec_book.record ...`: the book's package, from here
        assert step["eigprec_book"] == str(ROOT / "bookpkg" / "eigprec_book" / "__init__.py")
    assert summary["install"]["wheels"][0].endswith("gpurecfake-1.0-py3-none-any.whl")
    assert all("eigprec-" not in w for w in summary["install"]["wheels"])
    assert summary["install"]["notebooks_ready"] in (True, False)


def test_dry_run_returns_at_most_eight_files_two_folders_down(dry_run):
    _, out, _, work, _ = dry_run
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 1 <= len(files) <= 8
    assert all(len(p.relative_to(out).parts) <= 3 for p in files)  # $OUT/a/b/file at most
    assert {p.name for p in files} == {"summary.json", gpu_record.ARCHIVE}
    summary = json.loads((out / "summary.json").read_text())
    with tarfile.open(out / gpu_record.ARCHIVE) as tar:
        inside = set(tar.getnames())
    assert "environment.json" in inside and "summary.json" in inside
    for step in summary["steps"]:
        if step["log"]:
            assert step["log"] in inside and (work / step["log"]).is_file()
    env = json.loads((work / "environment.json").read_text())
    assert env["python"].count(".") == 2 and env["torch"] == "2.11.0+stub"


def test_dry_run_fails_where_torch_does_not_import(tmp_path):
    python = stand_in_python(tmp_path / "venv", with_torch=False)
    proc, out, _, _ = run_dry(tmp_path, python, steps="eig,notebooks:tf32")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    by_name = {s["name"]: s for s in summary["steps"]}
    assert by_name["versions"]["status"] == "failed" and "torch" in by_name["versions"]["reason"]
    for name in ("eig", "notebooks:tf32"):
        assert by_name[name]["status"] == "failed"
        assert "torch does not import" in by_name[name]["reason"]


def _empty_summary() -> dict:
    """A dry run's summary with no steps, as ``finish`` receives it."""
    return {
        "schema": gpu_record.SCHEMA,
        "started": "t",
        "finished": "t",
        "seconds": 0.0,
        "dry_run": True,
        "exit_status": 0,
        "wheels": {},
        "install": {},
        "steps": [],
    }


def test_finish_leaves_out_notebooks_from_an_archive_too_large(tmp_path, monkeypatch):
    run = gpu_record.Run(tmp_path / "work", budget=10, dry_run=True)
    (run.out / "notebooks" / "clarke.ipynb").write_bytes(os.urandom(4000))
    (run.out / "logs" / "a.log").write_text("log\n")
    monkeypatch.setattr(gpu_record, "MAX_OUT_BYTES", 3000)
    summary = _empty_summary()
    files = gpu_record.finish(run, tmp_path / "out", summary)
    assert files == [gpu_record.ARCHIVE, "summary.json"]
    with tarfile.open(tmp_path / "out" / gpu_record.ARCHIVE) as tar:
        names = tar.getnames()
    assert "logs/a.log" in names and not any(n.startswith("notebooks") for n in names)
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "notebooks/" in saved["archive_left_out"]


def test_finish_refuses_more_files_than_the_machine_returns(tmp_path):
    run = gpu_record.Run(tmp_path / "work", budget=10, dry_run=True)
    out = tmp_path / "out"
    out.mkdir()
    for i in range(7):
        (out / f"stray{i}.txt").write_text("x")
    summary = _empty_summary()
    with pytest.raises(RuntimeError, match="at most 8"):
        gpu_record.finish(run, out, summary)


def test_validate_summary_rejects_bad_reports():
    good = {
        "schema": gpu_record.SCHEMA,
        "started": "t",
        "finished": "t",
        "seconds": 1.0,
        "dry_run": False,
        "exit_status": 0,
        "wheels": {},
        "install": {},
        "archive": gpu_record.ARCHIVE,
        "steps": [
            {"name": "eig", "status": "ok", "seconds": 1, "reason": "", "log": None, "outputs": []}
        ],
    }
    gpu_record.validate_summary(good)
    with pytest.raises(ValueError, match="'steps'"):
        gpu_record.validate_summary({k: v for k, v in good.items() if k != "steps"})
    bad = json.loads(json.dumps(good))
    bad["steps"][0]["status"] = "skipped"
    with pytest.raises(ValueError, match="without a reason"):
        gpu_record.validate_summary(bad)
    bad["steps"][0]["status"] = "maybe"
    with pytest.raises(ValueError, match="status 'maybe'"):
        gpu_record.validate_summary(bad)
    with pytest.raises(ValueError, match="schema"):
        gpu_record.validate_summary({**good, "schema": "other/1"})


def test_parse_steps_orders_and_rejects():
    assert gpu_record.parse_steps("tests,eig") == ["eig", "tests"]
    assert gpu_record.parse_steps("all") == list(gpu_record.STEPS)
    assert gpu_record.parse_steps("notebooks:clarke,tests") == ["tests", "notebooks:clarke"]
    assert set(gpu_record.CHAPTERS) >= {"tf32", "clarke", "degeneracy"}
    with pytest.raises(Exception, match="unknown step"):
        gpu_record.parse_steps("eig,gpu")
    with pytest.raises(Exception, match="notebooks:nochapter"):
        gpu_record.parse_steps("notebooks:nochapter")


def test_dry_run_from_the_environment_and_default_out(monkeypatch):
    monkeypatch.setenv("EIGPREC_GPU_RECORD_DRYRUN", "1")
    assert gpu_record.build_parser().parse_args([]).dry_run is True
    monkeypatch.delenv("EIGPREC_GPU_RECORD_DRYRUN")
    assert gpu_record.build_parser().parse_args([]).dry_run is False
    monkeypatch.setenv("OUT", "/somewhere/out")
    assert gpu_record.default_out() == Path("/somewhere/out")
    monkeypatch.delenv("OUT")
    assert gpu_record.default_out() == ROOT / "_build" / "gpu-record"


def test_junit_digest(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="4">'
        '<testcase classname="tests.test_a" name="test_ok" time="0.1"/>'
        '<testcase classname="tests.test_a" name="test_bad"><failure message="boom"/></testcase>'
        '<testcase classname="tests.test_b" name="test_gpu">'
        '<skipped message="needs CuPy"/></testcase>'
        '<testcase classname="tests.test_b" name="test_err"><error message="fixture"/></testcase>'
        "</testsuite></testsuites>"
    )
    d = gpu_record.junit_digest(xml)
    assert (d["tests"], d["passed"], d["failed"], d["skipped"], d["errors"]) == (4, 1, 1, 1, 1)
    assert {c["test"]: c["message"] for c in d["cases"]} == {
        "tests.test_a::test_bad": "boom",
        "tests.test_b::test_gpu": "needs CuPy",
        "tests.test_b::test_err": "fixture",
    }
    xml.write_text("<html/>")
    with pytest.raises(ValueError, match="not a JUnit"):
        gpu_record.junit_digest(xml)


def test_cell_timeout_follows_the_book_config(tmp_path):
    assert gpu_record.cell_timeout() == 600  # _config.yml, execute.timeout
    cfg = tmp_path / "_config.yml"
    cfg.write_text("title: x\nexecute:\n  cache: ''\n  timeout: 77\nsphinx:\n  timeout: 5\n")
    assert gpu_record.cell_timeout(cfg) == 77
    assert gpu_record.cell_timeout(tmp_path / "missing.yml", default=9) == 9


def test_wheel_requirements_prefers_the_manifest(tmp_path):
    make_wheel(tmp_path, "aaa", "1.0")
    make_wheel(tmp_path, "eigprec", "0.1.0")
    reqs, how = gpu_record.wheel_requirements(tmp_path)
    assert how == "every *.whl" and [Path(r).name for r in reqs] == ["aaa-1.0-py3-none-any.whl"]
    (tmp_path / "manifest.json").write_text(
        json.dumps({"packages": [{"name": "aaa", "version": "1.0"}]})
    )
    assert gpu_record.wheel_requirements(tmp_path) == (["aaa==1.0"], "manifest.json")


def test_make_target_calls_the_script():
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    proc = subprocess.run(
        [make, "-n", "gpu-record", "GPU_RECORD_ARGS=--steps eig"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "bash tools/gpu/gpu_record.sh --steps eig" in proc.stdout


FAKE_PYTHON = """#!{real}
# Stands in for the venv's interpreter: the recorders and pytest act as FAKE_MODE says;
# everything else (the probes run with -c) goes to the real interpreter.
import os, subprocess, sys, time
args = sys.argv[1:]
mode = os.environ.get("FAKE_MODE", "ok")
if args[:2] == ["-m", "eigprec_book.record"]:
    out = args[args.index("--out") + 1]
    if mode == "refuse":
        print("eigprec_book.record: no CuPy here", file=sys.stderr)
        sys.exit(2)
    if mode == "hang":
        child = subprocess.Popen(["sleep", "120"])
        open(os.environ["FAKE_PIDS"], "w").write(str(child.pid))
        time.sleep(120)
    if mode == "crash":
        raise RuntimeError("CUDA error: an illegal memory access")
    open(out, "w").write('{{"args": %r}}' % " ".join(args).replace('"', ""))
    sys.exit(0)
if mode == "hang-versions" and args[:1] == ["-c"] and "site_packages" in args[1]:
    time.sleep(60)
if args[:2] == ["-m", "pytest"]:
    junit = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
    open(junit + ".args", "w").write("\\n".join(args))
    if mode == "slow":
        try:
            time.sleep(120)
        except KeyboardInterrupt:  # what pytest does on SIGINT: report what ran, exit 2
            open(junit, "w").write(
                '<testsuites><testsuite name="pytest">'
                '<testcase classname="tests.test_eig" name="test_first"/>'
                "</testsuite></testsuites>"
            )
            sys.exit(2)
    open(junit, "w").write(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_eig" name="test_cupy_path"/>'
        '<testcase classname="tests.test_tf32" name="test_real"><failure message="off"/>'
        "</testcase></testsuite></testsuites>"
    )
    print("1 failed, 1 passed")
    sys.exit(1)
os.execv({real!r}, [{real!r}, *args])
"""


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(real=sys.executable))
    python.chmod(0o755)
    monkeypatch.setenv("FAKE_PIDS", str(tmp_path / "pids"))
    return {"python": str(python), "vars": {}}


def test_recorder_steps_report_ok_refused_failed_and_timeout(tmp_path, fake_env, monkeypatch):
    run = gpu_record.Run(tmp_path / "out", budget=300, dry_run=False)
    monkeypatch.setenv("FAKE_MODE", "ok")
    gpu_record.record(run, fake_env, "eig")
    monkeypatch.setenv("FAKE_MODE", "refuse")
    gpu_record.record(run, fake_env, "tf32")
    monkeypatch.setenv("FAKE_MODE", "crash")
    gpu_record.record(run, fake_env, "degeneracy")
    ok, refused, crashed = run.steps
    assert ok["status"] == "ok" and ok["outputs"] == ["records/eig_gpu.json"]
    assert "--budget" in (run.out / "records" / "eig_gpu.json").read_text()
    assert refused["status"] == "skipped" and "no CuPy here" in refused["reason"]
    assert crashed["status"] == "failed" and "exit status 1" in crashed["reason"]
    assert "illegal memory access" in (run.out / crashed["log"]).read_text()

    monkeypatch.setenv("FAKE_MODE", "hang")
    monkeypatch.setattr(gpu_record, "MIN_STEP_S", 1.0)
    monkeypatch.setitem(gpu_record.STEP_LIMITS, "tf32", 4)
    t0 = time.monotonic()
    gpu_record.record(run, fake_env, "tf32")
    assert time.monotonic() - t0 < 30
    hung = run.steps[-1]
    assert hung["status"] == "timeout" and "timed out" in hung["reason"]
    child = int((tmp_path / "pids").read_text())
    time.sleep(0.5)
    status = Path(f"/proc/{child}/status")
    # The recorder's own child was killed too: gone, or a zombie nobody has reaped yet.
    assert not status.exists() or "State:\tZ" in status.read_text()
    run.budget = 0  # nothing left: the next step is skipped, saying why
    gpu_record.record(run, fake_env, "eig")
    assert run.steps[-1]["status"] == "skipped" and "budget" in run.steps[-1]["reason"]


def test_unit_test_step_writes_junit_and_digest(tmp_path, fake_env):
    run = gpu_record.Run(tmp_path / "out", budget=300, dry_run=False)
    gpu_record.unit_tests(run, fake_env)
    (step,) = run.steps
    assert step["status"] == "failed" and (step["failed"], step["passed"]) == (1, 1)
    # A test module that cannot be collected (a tool missing on the GPU machine) must not
    # stop the rest of the suite: the GPU call is too dear to lose to one import.
    args = (run.out / "reports" / "junit.xml.args").read_text().splitlines()
    assert "--continue-on-collection-errors" in args
    digest = json.loads((run.out / "reports" / "tests.json").read_text())
    assert digest["cases"] == [
        {"test": "tests.test_tf32::test_real", "outcome": "failed", "message": "off"}
    ]
    assert step["outputs"] == ["reports/junit.xml", "reports/tests.json"]


@needs("myst_nb", "nbclient", "ipykernel")
def test_execute_notebook_runs_a_myst_page_and_saves_it_executed(tmp_path):
    # The chapters are MyST Markdown (book/<page>.md): read as MyST-NB reads them, run,
    # saved as the notebook the GPU run returns (notebooks/<page>.ipynb).
    page = write_page(tmp_path / "book" / "p.md", notebook(["print(6 * 7)"]))
    target = tmp_path / "out" / "notebooks" / "p.ipynb"
    assert gpu_record.execute_notebook(page, target, timeout=120) == 0
    (cell,) = json.loads(target.read_text())["cells"]
    assert "".join(cell["outputs"][0]["text"]) == "42\n"
    assert set(gpu_record.CHAPTERS) == {p.stem for p in (ROOT / "book").glob("*.md")} - {
        "intro",
        "glossary",
        "api",
        "references",
    }


def test_notebook_step_skips_without_nbclient(tmp_path, fake_env, monkeypatch):
    run = gpu_record.Run(tmp_path / "out", budget=300, dry_run=False)
    monkeypatch.setattr(gpu_record, "NOTEBOOK_MODULES", ("no_such_module_for_eigprec",))
    gpu_record.notebooks(run, fake_env, full=False)
    (step,) = run.steps
    assert step["status"] == "skipped" and "tools/gpu/gpu_wheels.py" in step["reason"]


@pytest.mark.parametrize(
    "inherited", [signal.default_int_handler, signal.SIG_IGN], ids=["handled", "ignored"]
)
def test_timed_out_tests_are_interrupted_so_pytest_writes_its_report(
    tmp_path, fake_env, monkeypatch, inherited
):
    # SIG_IGN: the recorder started where SIGINT is ignored, as a shell's background job is
    # (bash without job control); its pytest inherited that, slept through the SIGINT and
    # was killed without writing its report.
    previous = signal.signal(signal.SIGINT, inherited)
    try:
        _interrupted_tests(tmp_path, fake_env, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_tests(tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "slow")
    monkeypatch.setattr(gpu_record, "GRACE_S", 5.0)
    monkeypatch.setattr(gpu_record, "MIN_STEP_S", 1.0)
    run = gpu_record.Run(tmp_path / "out", budget=300, dry_run=False)
    monkeypatch.setitem(gpu_record.STEP_LIMITS, "tests", 12)
    t0 = time.monotonic()
    gpu_record.unit_tests(run, {**fake_env, "vars": {}})
    assert time.monotonic() - t0 < 60
    (step,) = run.steps
    assert step["status"] == "timeout" and "interrupted" in step["reason"]
    assert (step["tests"], step["passed"]) == (1, 1)  # the report of what ran, written on SIGINT


def test_versions_survives_a_hanging_probe(tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "hang-versions")
    monkeypatch.setitem(gpu_record.STEP_LIMITS, "versions", 2)
    run = gpu_record.Run(tmp_path / "out", budget=300, dry_run=False)
    data = gpu_record.versions(run, fake_env)
    assert "over 2 s" in data["error"]
    assert run.steps[-1]["status"] == "failed"


def _readme_calls() -> list[argparse.Namespace]:
    text = (ROOT / "tools" / "gpu" / "README.md").read_text()
    section = text.split("## Every call, one command each", 1)[1].split("\n## ", 1)[0]
    calls = re.findall(r"^\s*bash tools/gpu/gpu_record\.sh (.+?)(?:\s+#.*)?$", section, re.M)
    return [gpu_record.build_parser().parse_args(call.split()) for call in calls]


def test_the_readme_calls_cover_every_step_once_within_the_budget():
    calls = _readme_calls()
    assert len(calls) >= 2
    covered = []
    for args in calls:
        assert args.budget <= 540  # a 10-minute call less the machine's start and transfers
        covered += list(gpu_record.PLANS[args.plan]) if args.plan else args.steps
    chapters = [f"notebooks:{c}" for c in gpu_record.CHAPTERS]
    assert sorted(covered) == sorted([*gpu_record.RECORDERS, "tests", *chapters])
    assert "tools/gpu/README.md" in (ROOT / "CONTRIBUTING.md").read_text()


def test_the_prepared_call_records_the_three_questions_in_order_within_the_limits():
    # Issue 50: complex64 under TF32, the k-th eigenvalue's grid (small shapes too) and the
    # all-sample operator sweep, in ONE call of a 10-minute device tool with 15 minutes in all.
    steps = list(gpu_record.PLANS["questions"])
    assert steps == ["complex64", "eig", "ops"]
    assert gpu_record.parse_steps(",".join(reversed(steps))) == steps  # the canonical order
    assert _readme_calls()[0].plan == "questions"
    worst = dict(gpu_record.plan(steps, 540, wheels=False))
    assert worst["complex64"] == gpu_record.STEP_LIMITS["complex64"] == 60
    assert worst["eig"] == gpu_record.STEP_LIMITS["eig"] == 200  # its measured 175 s fits
    assert worst["ops"] >= 100  # the last step: what is left, at worst
    assert sum(worst.values()) <= 540 <= 600 - 60
    usual = dict(gpu_record.plan(steps, 540, wheels=False, setup_s=20))
    assert usual["ops"] >= 240
    # what comes back: summary, archive and one record per recorder
    assert len(gpu_record.RECORDERS) + 2 <= gpu_record.MAX_OUT_FILES
    # each step's command line is one its recorder accepts (with --budget where it takes one)
    from eigprec_book.record.cli import build_parser

    for name in steps:
        extra = ["--budget", "100"] if name in ("eig", "ops") else []
        build_parser().parse_args([name, "--out", "x.json", *extra])


def test_the_prepared_call_carries_only_the_checkout():
    # No wheel bundle: the recorders import nothing the GPU machine lacks (the bundle's
    # packages are blocked here), and the tracked tree is far under the 64 MiB carried.
    bundle = ["tqdm", "pygments", "yaml", "nbclient", "nbformat", "ipykernel", "transformers"]
    bundle += ["myst_nb", "emerging_optimizers", "jupyter_client"]
    probe = (
        "import sys\n"
        f"for m in {bundle!r}: sys.modules[m] = None\n"
        "import eigprec_book.record.complex64, eigprec_book.record.eig, eigprec_book.record.ops\n"
        "from eigprec_book.record.cli import build_parser\n"
        "build_parser()\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'bookpkg'}"}
    got = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert got.stdout.strip() == "ok", got.stderr[-2000:]
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], capture_output=True, check=True, cwd=ROOT
    ).stdout.split(b"\0")
    size = sum(
        (ROOT / p.decode()).stat().st_size for p in tracked if p and (ROOT / p.decode()).is_file()
    )
    assert size < 16 * 2**20


def test_a_dry_run_of_the_prepared_call(tmp_path, stand_in):
    # no wheel folder: the prepared call carries nothing but the checkout
    proc, out, _, _ = run_dry(tmp_path, stand_in, call=["--plan", "questions"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "at worst setup 150 s, complex64 60 s, eig 200 s, ops 125 s" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    names = [s["name"] for s in summary["steps"]]
    assert names == ["install", "versions", "complex64", "eig", "ops"]
    assert all(s["status"] == "skipped" for s in summary["steps"][2:])


def test_the_steps_find_the_books_package_of_this_checkout(tmp_path):
    # The layout split the recorders into bookpkg/ (eigprec_book.record); a step environment
    # of <site>:src alone could not run `python -m eigprec_book.record` on the GPU machine.
    env = gpu_record.step_environment(sys.executable, tmp_path / "site")
    path = env["vars"]["PYTHONPATH"].split(os.pathsep)
    assert path == [str(tmp_path / "site"), str(ROOT / "src"), str(ROOT / "bookpkg")]
    probe = "import importlib.util as u; print(u.find_spec('eigprec_book.record').origin)"
    got = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={**os.environ, **env["vars"]},
    )
    assert got.stdout.strip() == str(ROOT / "bookpkg" / "eigprec_book" / "record" / "__init__.py")
