"""Run the GPU half of the book on a bare, offline NVIDIA machine, one 10-minute call at a time.

``bash tools/gpu/gpu_record.sh`` (or ``make gpu-record``) calls this file with the machine's own
``python3`` (3.12 with torch and CuPy preinstalled, itself a virtual environment's
interpreter). It

1. refuses at once, exit status 3, where no NVIDIA GPU is visible;
2. installs the wheels carried in ``gpu-wheels/`` (made by ``tools/gpu/gpu_wheels.py``) with
   ``pip install --no-index --no-deps --target <site>`` and runs every step with that same
   interpreter and ``PYTHONPATH=<site>:src:bookpkg``. No child virtual environment: one made with
   ``--system-site-packages`` from a venv's python builds on the *base* interpreter and
   would not see the machine's torch, and CuPy's cuda-pathfinder looks for the NVIDIA
   libraries only in ``site.getsitepackages()``, which stays the machine's own here;
3. checks that ``torch`` imports in that environment (the step fails, and the run with it,
   where it does not), prints and stores the GPU, driver, torch, CUDA and CuPy versions;
4. runs the steps asked for (``--steps``): the recorders ``python -m eigprec_book.record
   tf32|eig|ops|degeneracy``, the unit suite (JUnit XML and a JSON digest), and chapters with
   nbclient (``notebooks`` for all, ``notebooks:<chapter>`` for one);
5. leaves at most 8 files in ``--out`` (default ``$OUT`` where set, else
   ``_build/gpu-record``), the most the device machine returns: ``summary.json``,
   ``records/*_gpu.json`` and ``details.tar.gz`` (logs, reports, executed notebooks,
   ``environment.json``); the loose files are kept in ``--work``.

Every step runs in its own process group under a time limit taken from one overall budget
(``--budget``, default 540 s, so a 10-minute machine call leaves room for its start); on
time-out the group gets SIGINT and, after a grace period, SIGKILL, so pytest still writes its
report. Later steps are skipped, saying so, once the budget is spent. ``--dry-run`` (or
``EIGPREC_GPU_RECORD_DRYRUN=1``) skips the GPU check and every GPU step but builds the
environment, checks that torch imports in the environment of every step asked for and
writes the output: that is what ``tests/test_gpu_record.py`` exercises.

Only the standard library is used here: this file runs before anything is installed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # (book_pages: how the book reads its pages)

from book_pages import page_paths, read_page  # noqa: E402

SCHEMA = "eigprec.gpu-record/2"
NO_GPU_EXIT = 3
#: What a full run does, in this order: recorders first, the slowest parts last.
STEPS = ("tf32", "complex64", "eig", "ops", "degeneracy", "tests", "notebooks")
#: The chapters ``notebooks:<chapter>`` may name (``book/<chapter>.md``, MyST notebooks).
CHAPTERS = tuple(p.stem for p in page_paths(ROOT / "book"))
#: What the device machine returns from $OUT: at most this many files, two folders down.
MAX_OUT_FILES = 8
MAX_OUT_DEPTH = 2
ARCHIVE = "details.tar.gz"
#: The largest file the device machine returns.
MAX_OUT_BYTES = 16 * 2**20
#: Seconds between SIGINT and SIGKILL on time-out (pytest writes its report on SIGINT).
GRACE_S = 20.0
RECORDERS = {
    "tf32": "tf32_gpu.json",
    "complex64": "complex64_gpu.json",
    "eig": "eig_gpu.json",
    "ops": "ops_gpu.json",
    "degeneracy": "degeneracy_gpu.json",
}
#: Most seconds each step may take (less where the overall budget has less left).
STEP_LIMITS = {
    "install": 150,
    "versions": 60,
    "tf32": 90,
    "complex64": 60,
    "eig": 200,
    "ops": 240,
    "degeneracy": 150,
    "tests": 300,
    "notebooks": 300,
}
#: Prepared calls, each one device call of at most 10 minutes: name -> its steps, in order.
#: "questions" answers the three open GPU questions of the book (issue 50): does TF32 round
#: complex64 products, and how (a minute); the k-th eigenvalue's accuracy and speed grid,
#: small shapes included (its full 200 s); the operator sweep on every op_db sample (the
#: rest; the last step, so it gets what is left, and it keeps a partial record).
PLANS = {"questions": ("complex64", "eig", "ops")}
#: What the set-up before the first step takes at most: the install step's checks (its pip
#: run has the usual 120 s where wheels are carried) and the version probe with nvidia-smi.
SETUP_LIMITS = {"install": 60, "install-wheels": 120, "versions": 90}
#: A recorder that accepts ``--budget`` stops starting new work this long before its limit.
RECORDER_MARGIN_S = 20
STATUSES = ("ok", "failed", "skipped", "timeout")
#: A step is not started with less time than this left.
MIN_STEP_S = 15.0
# The Makefile's settings for executing chapters (progress as text, kernels from the venv).
NOTEBOOK_ENV = {
    "EIGPREC_PROGRESS": "text",
    "JUPYTER_PREFER_ENV_PATH": "1",
    "JUPYTER_PLATFORM_DIRS": "1",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}
# myst_nb: its reader turns a chapter's MyST text into the notebook the book executes.
NOTEBOOK_MODULES = ("nbclient", "nbformat", "ipykernel", "jupyter_client", "myst_nb")

_VERSIONS_SCRIPT = r"""
import importlib, importlib.metadata as md, json, platform, site, sys
out = {"python": platform.python_version(), "executable": sys.executable}
out["site_packages"] = site.getsitepackages()
try:
    import torch
    out["torch_file"] = torch.__file__
    out["torch_in_site_packages"] = any(torch.__file__.startswith(p) for p in out["site_packages"])
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability(0)
        out["gpu"] = torch.cuda.get_device_name(0)
        out["compute_capability"] = f"{cap[0]}.{cap[1]}"
        out["tf32_hardware"] = cap >= (8, 0)
        out["cudnn"] = torch.backends.cudnn.version()
except Exception as exc:
    out["torch_error"] = repr(exc)
try:
    import cupy
    out["cupy"] = cupy.__version__
    out["cupy_cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    out["cupy_cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    out["cupy_devices"] = cupy.cuda.runtime.getDeviceCount()
except Exception as exc:
    out["cupy_error"] = repr(exc)
try:
    import eigprec
    out["eigprec"] = eigprec.__file__
except Exception as exc:
    out["eigprec_error"] = repr(exc)
packages = {}
for name in ("numpy", "scipy", "matplotlib", "pytest", "hypothesis", "nbclient", "ipykernel",
             "nbformat", "jupyter_client", "myst-nb", "emerging-optimizers", "PyYAML", "tqdm",
             "Pygments"):
    try:
        packages[name] = md.version(name)
    except md.PackageNotFoundError:
        packages[name] = None
out["packages"] = packages
print(json.dumps(out))
"""


# --------------------------------------------------------------------------- small parts


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def default_out() -> Path:
    """``$OUT`` where set (the device machine's returned folder), else ``_build/gpu-record``."""
    env = os.environ.get("OUT", "").strip()
    return Path(env) if env else ROOT / "_build" / "gpu-record"


def parse_steps(text: str) -> list[str]:
    """Comma-separated step names, validated and put in the canonical order.

    Args:
        text: e.g. ``"eig,tests"``, ``"notebooks:tf32"`` or ``"all"``.

    Returns:
        The steps, in the order of :data:`STEPS` (``notebooks:<chapter>`` in the place of
        ``notebooks``, chapters in the order given).

    Raises:
        argparse.ArgumentTypeError: naming an unknown step or chapter.
    """
    if text.strip() == "all":
        return list(STEPS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    chapters = [n.split(":", 1)[1] for n in names if n.startswith("notebooks:")]
    unknown = [n for n in names if n not in STEPS and not n.startswith("notebooks:")]
    unknown += [f"notebooks:{c}" for c in chapters if c not in CHAPTERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {unknown or text!r}; choose from {', '.join(STEPS)}, "
            f"notebooks:<chapter> ({', '.join(CHAPTERS)}) or 'all'"
        )
    ordered = [s for s in STEPS if s in names]
    if chapters and "notebooks" not in ordered:
        ordered += [f"notebooks:{c}" for c in dict.fromkeys(chapters)]
    return ordered


def step_limit(name: str, last: bool, remaining: float) -> float:
    """A step's time limit: its own (:data:`STEP_LIMITS`), or for the last step requested
    whatever the budget has left; never more than what is left, less 5 s."""
    cap = math.inf if last else STEP_LIMITS.get(name, 120)
    return min(cap, remaining - 5)


def plan(steps: list[str], budget: float, wheels: bool, setup_s: float | None = None) -> list:
    """The time each step of a call gets when every part before it takes all it may.

    Args:
        steps: the steps, in the order they run.
        budget: the call's seconds (``--budget``).
        wheels: whether a wheel bundle is carried (its install may take 120 s).
        setup_s: the seconds the set-up takes (None: its worst case, :data:`SETUP_LIMITS`).

    Returns:
        ``[(step, seconds), ...]``: the set-up first, then each step with its limit.

    Example:
        >>> [name for name, _ in plan(["complex64", "eig", "ops"], 540, wheels=False)]
        ['setup', 'complex64', 'eig', 'ops']
    """
    if setup_s is None:
        setup_s = SETUP_LIMITS["versions"] + SETUP_LIMITS["install"]
        setup_s += SETUP_LIMITS["install-wheels"] if wheels else 0
    rows, left = [("setup", float(setup_s))], budget - setup_s
    for i, step in enumerate(steps):
        take = max(step_limit(step.split(":")[0], i == len(steps) - 1, left), 0.0)
        rows.append((step, take))
        left -= take
    return rows


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``tools/gpu/gpu_record.sh``."""
    p = argparse.ArgumentParser(
        prog="tools/gpu/gpu_record.sh",
        description="Record the book's GPU results on an offline NVIDIA machine.",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder ($OUT or _build/gpu-record)"
    )
    p.add_argument("--wheels", type=Path, default=ROOT / "gpu-wheels", help="carried wheels")
    p.add_argument(
        "--site",
        type=Path,
        default=ROOT / "_build" / "gpu-record-site",
        help="folder the carried wheels are installed into (pip --target)",
    )
    p.add_argument(
        "--work",
        type=Path,
        default=ROOT / "_build" / "gpu-record-work",
        help="logs, reports and notebooks before they are archived into --out",
    )
    p.add_argument(
        "--steps",
        type=parse_steps,
        default=list(STEPS),
        help="e.g. tf32,eig,degeneracy or tests or notebooks:clarke, or all",
    )
    p.add_argument(
        "--plan",
        choices=sorted(PLANS),
        default=None,
        help="a prepared call (its steps in their order; --steps is then ignored)",
    )
    p.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    p.add_argument("--full", action="store_true", help="EIGPREC_SCALE=full for the notebooks")
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=os.environ.get("EIGPREC_GPU_RECORD_DRYRUN", "") == "1",
        help="no GPU: build the environment, check torch imports in it, skip every GPU step",
    )
    p.add_argument(
        "--python", default=sys.executable, help="the machine's interpreter (holds torch)"
    )
    return p


def gpu_refusal(python: str) -> str | None:
    """Why this machine cannot record (no driver, no GPU, torch without CUDA), or None.

    Args:
        python: the interpreter whose torch must see the GPU.

    Returns:
        A message for the user, or None when an NVIDIA GPU is usable.
    """
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (
            "no NVIDIA GPU here: nvidia-smi is not on PATH (no NVIDIA driver). "
            "tools/gpu/gpu_record.sh records GPU results and has nothing to do on this machine; "
            "use --dry-run to check the environment set-up only."
        )
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"no usable NVIDIA GPU here: `nvidia-smi -L` failed ({exc})."
    if listing.returncode != 0 or "GPU " not in listing.stdout:
        said = (listing.stdout + listing.stderr).strip().splitlines()
        return (
            "no usable NVIDIA GPU here: `nvidia-smi -L` exited with status "
            f"{listing.returncode} ({said[0] if said else 'no output'})."
        )
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        ok = subprocess.run([python, "-c", probe], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{python} could not be asked whether torch sees the GPU ({exc})."
    if ok.returncode != 0:
        return (
            f"nvidia-smi lists a GPU, but torch under {python} does not see it "
            "(torch.cuda.is_available() is False, or torch is missing)."
        )
    return None


def cell_timeout(config: Path = ROOT / "_config.yml", default: int = 600) -> int:
    """The book's per-cell execution timeout (``execute.timeout`` in ``_config.yml``).

    Read with a regular expression: PyYAML may not be installed where this runs.
    """
    try:
        text = config.read_text(encoding="utf-8")
    except OSError:
        return default
    block = re.search(r"^execute:\n((?:[ \t]+.*\n|\s*\n)+)", text, re.MULTILINE)
    found = block and re.search(r"^\s+timeout:\s*(\d+)", block.group(1), re.MULTILINE)
    return int(found.group(1)) if found else default


def junit_digest(path: Path) -> dict[str, Any]:
    """Counts and the non-passing test cases of a pytest JUnit XML report.

    Args:
        path: the ``--junitxml`` file.

    Returns:
        ``{"tests", "passed", "failed", "errors", "skipped", "cases"}`` where ``cases`` lists
        each failed, erroneous or skipped case with its outcome and message.

    Raises:
        ValueError: if the file is not a JUnit report.
    """
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ValueError(f"{path} is not a readable JUnit XML report: {exc}") from exc
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag not in ("testsuite", "testsuites"):
        raise ValueError(f"{path}: root element is <{root.tag}>, not a JUnit test suite")
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    cases = []
    for suite in suites:
        for case in suite.iter("testcase"):
            counts["tests"] += 1
            outcome = "passed"
            message = ""
            for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
                child = case.find(tag)
                if child is not None:
                    outcome = name
                    message = child.get("message", "") or (child.text or "")[:500]
                    break
            counts[outcome] += 1
            if outcome != "passed":
                cases.append(
                    {
                        "test": f"{case.get('classname', '')}::{case.get('name', '')}",
                        "outcome": outcome,
                        "message": message.strip()[:500],
                    }
                )
    return {**counts, "cases": cases}


def validate_summary(summary: Any) -> None:
    """Check the structure of ``summary.json``.

    Raises:
        ValueError: naming the first missing or wrong field.
    """
    if not isinstance(summary, dict):
        raise ValueError("summary: expected a JSON object")
    for key, kind in (
        ("schema", str),
        ("started", str),
        ("finished", str),
        ("seconds", (int, float)),
        ("dry_run", bool),
        ("exit_status", int),
        ("steps", list),
        ("wheels", dict),
        ("install", dict),
    ):
        if not isinstance(summary.get(key), kind):
            raise ValueError(f"summary: {key!r} missing or not a {kind}")
    if summary.get("archive") != ARCHIVE:
        raise ValueError(f"summary: 'archive' is not {ARCHIVE!r}")
    if summary["schema"] != SCHEMA:
        raise ValueError(f"summary: schema {summary['schema']!r}, expected {SCHEMA!r}")
    for i, step in enumerate(summary["steps"]):
        for key in ("name", "status", "seconds", "reason", "log", "outputs"):
            if key not in step:
                raise ValueError(f"summary: steps[{i}] lacks {key!r}")
        if step["status"] not in STATUSES:
            raise ValueError(f"summary: steps[{i}] has status {step['status']!r}")
        if step["status"] != "ok" and not step["reason"]:
            raise ValueError(
                f"summary: steps[{i}] ({step['name']}) is {step['status']} without a reason"
            )


# --------------------------------------------------------------------------- running steps


def _default_sigint() -> None:
    # In the child, before exec: an ignored SIGINT stays ignored across exec (a recorder
    # started as a shell's background job has it ignored), and pytest would then sleep
    # through stop_in_time's SIGINT and be killed without writing its report.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_in_time(proc: subprocess.Popen, limit: float, grace: float | None = None) -> int | None:
    """Wait for ``proc`` at most ``limit`` seconds; then SIGINT its group, SIGKILL after grace.

    SIGINT first: pytest then stops, writes its JUnit report and exits; nbclient saves
    nothing, but its kernel is ended with the group. What still runs ``grace`` seconds later
    is killed. The grace comes out of ``limit``, where it fits (at most half of it).

    Returns:
        The exit status, or None when the process had to be interrupted or killed.
    """
    grace = min(GRACE_S if grace is None else grace, limit / 2)
    try:
        proc.wait(timeout=max(limit - grace, 1))
        return proc.returncode
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=max(grace, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()
    # The group may outlive its leader (a kernel, a worker): end it either way.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return None


class Run:
    """One recording session: the working folder, the time budget and the step log.

    ``out`` here is the working folder (``--work``): logs, reports, records and notebooks
    are written there; :func:`finish` then puts what comes back into the output folder.
    """

    def __init__(self, out: Path, budget: float, dry_run: bool) -> None:
        self.out = out
        self.start = time.monotonic()
        self.budget = budget
        self.dry_run = dry_run
        self.steps: list[dict[str, Any]] = []
        for sub in ("logs", "records", "reports", "notebooks"):
            (out / sub).mkdir(parents=True, exist_ok=True)

    def remaining(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def limit(self, name: str, last: bool = False) -> float:
        return step_limit(name, last, self.remaining())

    def note(self, name: str, status: str, reason: str = "", seconds: float = 0.0, **extra: Any):
        entry = {
            "name": name,
            "status": status,
            "seconds": round(seconds, 2),
            "reason": reason,
            "log": extra.pop("log", None),
            "outputs": extra.pop("outputs", []),
            **extra,
        }
        self.steps.append(entry)
        mark = {"ok": "ok  ", "failed": "FAIL", "skipped": "skip", "timeout": "TIME"}[status]
        print(f"[{mark}] {name} ({seconds:.0f} s){': ' + reason if reason else ''}", flush=True)
        return entry

    def execute(
        self, name: str, cmd: list[str], *, limit: float | None = None, env: dict | None = None
    ) -> tuple[str, int | None, str, float]:
        """Run ``cmd`` with its output in ``logs/<name>.log``; kill its process group on time-out.

        Returns:
            ``(status, returncode, log path relative to out, seconds)``; status ``"ok"``,
            ``"failed"`` or ``"timeout"``.
        """
        limit = self.limit(name) if limit is None else limit
        log = self.out / "logs" / f"{name.replace(':', '-')}.log"
        t0 = time.monotonic()
        with log.open("w", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(cmd)}\n(limit {limit:.0f} s, started {now()})\n\n")
            fh.flush()
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_default_sigint,
            )
            rc = stop_in_time(proc, limit)
            fh.write(f"\n(exit status {rc}, {time.monotonic() - t0:.1f} s)\n")
        status = "timeout" if rc is None else ("ok" if rc == 0 else "failed")
        return status, rc, str(log.relative_to(self.out)), time.monotonic() - t0

    def tail(self, log: str, lines: int = 15) -> str:
        text = (self.out / log).read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])


# --------------------------------------------------------------------------- environment


def wheel_requirements(wheels: Path) -> tuple[list[str], str]:
    """What to install from the carried folder: the manifest's pins, else every wheel there.

    The eigprec wheel is left out: the package runs from this checkout's ``src/``.

    Returns:
        ``(requirements or wheel paths, how they were chosen)``.
    """
    manifest = wheels / "manifest.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text(encoding="utf-8"))
        reqs = [f"{p['name']}=={p['version']}" for p in data.get("packages", [])]
        return reqs, "manifest.json"
    files = sorted(
        str(p) for p in wheels.glob("*.whl") if not p.name.lower().startswith("eigprec-")
    )
    return files, "every *.whl"


def step_environment(python: str, site: Path) -> dict[str, Any]:
    """The interpreter and variables every step runs with.

    The machine's own interpreter, with the carried packages and this checkout's ``src/``
    ahead of its site-packages; its site-packages (torch, CuPy, the NVIDIA libraries that
    CuPy's cuda-pathfinder looks for there) stay what they are.
    """
    return {
        "python": python,
        "vars": {
            "PYTHONPATH": os.pathsep.join(str(p) for p in (site, ROOT / "src", ROOT / "bookpkg")),
            "PYTHONNOUSERSITE": "1",
        },
        "site": str(site),
    }


def prepare(run: Run, python: str, site: Path, wheels: Path) -> tuple[dict, dict]:
    """Install the carried wheels into ``site`` (offline, ``--target``); no child venv.

    Returns:
        ``(environment for the steps, what happened, for the summary)``.
    """
    t0 = time.monotonic()
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    env = step_environment(python, site)
    info: dict[str, Any] = {"wheels_dir": str(wheels), "site": str(site), "python": python}
    reqs, how = wheel_requirements(wheels) if wheels.is_dir() else ([], "no folder")
    info["wheels_chosen_by"] = how
    info["wheels"] = reqs
    log = None
    if reqs:
        # --no-deps: the bundle is the dependency closure already, less what the machine has
        # (which --target could not see, and would install a second copy of).
        cmd = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
        cmd += ["--disable-pip-version-check", "--no-input", "--target", str(site)]
        cmd += ["--find-links", str(wheels), *reqs]
        info["wheels_status"], _, log, _ = run.execute("install-wheels", cmd)
        info["wheels_log"] = log
    else:
        info["wheels_status"] = "skipped"
    probe = "import importlib.util as u; print(u.find_spec('eigprec').origin)"
    check = subprocess.run(
        [python, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env["vars"]},
        timeout=60,
        check=False,
    )
    info["eigprec_file"] = check.stdout.strip() or None
    status, reason = "ok", ""
    if info["wheels_status"] not in ("ok", "skipped"):
        status, reason = "failed", f"the carried wheels did not install; see {log}"
    if not info["eigprec_file"]:
        status = "failed"
        reason = (reason + "; " if reason else "") + "eigprec is not found on PYTHONPATH"
    elif Path(info["eigprec_file"]) != ROOT / "src" / "eigprec" / "__init__.py":
        status = "failed"
        reason = f"eigprec imports from {info['eigprec_file']}, not from this checkout"
    if not reqs and not reason:
        reason = f"no carried wheels in {wheels} (tests and notebooks will be skipped)"
    run.note("install", status, reason, time.monotonic() - t0, log=log)
    return env, info


# eigprec is found, not imported: its import needs the real torch, which a dry run lacks.
_TORCH_PROBE = (
    "import json, site, importlib.util as u, torch; "
    "print(json.dumps({'torch': torch.__file__, 'version': getattr(torch, '__version__', None), "
    "'eigprec': u.find_spec('eigprec').origin, "
    "'eigprec_book': getattr(u.find_spec('eigprec_book'), 'origin', None), "
    "'site_packages': site.getsitepackages()}))"
)


def torch_visible(env: dict[str, Any], extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Where ``torch`` and ``eigprec`` import from in a step's environment.

    Args:
        env: from :func:`step_environment`.
        extra: the step's own variables (the notebooks' settings).

    Returns:
        ``{"torch", "version", "eigprec", "eigprec_book", "site_packages"}``, or
        ``{"error": ...}``.
    """
    try:
        proc = subprocess.run(
            [env["python"], "-c", _TORCH_PROBE],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env["vars"], **(extra or {})},
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": "the import of torch took over 120 s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def versions(run: Run, env: dict[str, Any]) -> dict[str, Any]:
    """GPU, driver, torch, CUDA, CuPy and package versions, printed and stored."""
    t0 = time.monotonic()
    data: dict[str, Any] = {}
    try:
        proc = subprocess.run(
            [env["python"], "-c", _VERSIONS_SCRIPT],
            capture_output=True,
            text=True,
            timeout=STEP_LIMITS["versions"],
            cwd=ROOT,
            env={**os.environ, **env["vars"]},
            check=False,
        )
        if proc.returncode == 0 and proc.stdout.strip():
            data = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            data["error"] = proc.stderr.strip()[-2000:]
    except subprocess.TimeoutExpired:
        data["error"] = f"the version probe took over {STEP_LIMITS['versions']} s"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            q = subprocess.run(
                [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            data["nvidia_smi"] = q.stdout.strip()
        except subprocess.TimeoutExpired:
            data["nvidia_smi"] = "nvidia-smi took over 30 s"
    (run.out / "environment.json").write_text(json.dumps(data, indent=2) + "\n")
    for key in ("gpu", "compute_capability", "nvidia_smi", "torch", "torch_cuda", "cupy", "python"):
        if key in data:
            print(f"    {key}: {data[key]}")
    status, reason = "ok", ""
    if "error" in data:
        status, reason = "failed", f"the version probe failed: {data['error'][-300:]}"
    elif "torch_error" in data:
        status, reason = "failed", f"torch does not import here: {data['torch_error']}"
    run.note("versions", status, reason, time.monotonic() - t0, outputs=["environment.json"])
    return data


# --------------------------------------------------------------------------- GPU steps


def record(run: Run, env: dict[str, Any], name: str, last: bool = False) -> None:
    """``python -m eigprec_book.record <name>`` into ``records/``; status 2 means refused."""
    limit = run.limit(name, last)
    if limit < MIN_STEP_S:
        run.note(name, "skipped", "time budget spent")
        return
    out = run.out / "records" / RECORDERS[name]
    cmd = [env["python"], "-m", "eigprec_book.record", name, "--out", str(out)]
    if name in ("eig", "ops", "degeneracy"):
        cmd += ["--budget", f"{max(limit - RECORDER_MARGIN_S, 5):.0f}"]
    status, rc, log, secs = run.execute(f"record-{name}", cmd, limit=limit, env=env["vars"])
    outputs = [str(out.relative_to(run.out))] if out.is_file() else []
    if status == "ok" and outputs:
        run.note(name, "ok", "", secs, log=log, outputs=outputs)
    elif rc == 2:
        run.note(name, "skipped", "refused: " + run.tail(log, 3).replace("\n", " "), secs, log=log)
    else:
        why = "timed out" if status == "timeout" else f"exit status {rc}"
        print(run.tail(log), flush=True)
        run.note(name, status if status != "ok" else "failed", f"{why}; see {log}", secs, log=log)


def unit_tests(run: Run, env: dict[str, Any], last: bool = False) -> None:
    """The whole unit suite on the GPU, with JUnit XML and a JSON digest."""
    limit = run.limit("tests", last)
    if limit < 2 * MIN_STEP_S:
        run.note("tests", "skipped", "time budget spent")
        return
    if missing_modules(env, ("yaml",)):
        run.note(
            "tests",
            "skipped",
            "PyYAML is not installed (tests/conftest.py imports it): carry the wheel bundle "
            "(python tools/gpu/gpu_wheels.py)",
        )
        return
    junit = run.out / "reports" / "junit.xml"
    cmd = [env["python"], "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs"]
    # One module that cannot be collected (a tool missing here) must not cost the whole run.
    cmd += ["--continue-on-collection-errors"]
    cmd += [f"--junitxml={junit}", "tests"]
    status, rc, log, secs = run.execute("tests", cmd, limit=limit, env=env["vars"])
    outputs, extra = [], {}
    if junit.is_file():
        digest = junit_digest(junit)
        (run.out / "reports" / "tests.json").write_text(json.dumps(digest, indent=2) + "\n")
        outputs = ["reports/junit.xml", "reports/tests.json"]
        extra = {k: digest[k] for k in ("tests", "passed", "failed", "errors", "skipped")}
    reason = ""
    if status == "timeout":
        reason = f"timed out after {limit:.0f} s; see {log}"
    if status == "timeout":
        reason += " (interrupted: the report holds what ran)" if junit.is_file() else ""
    elif status != "ok":
        reason = f"pytest exit status {rc}: {extra or 'no report'}; see {log}"
    print(run.tail(log, 4), flush=True)
    run.note("tests", status, reason, secs, log=log, outputs=outputs, **extra)


def missing_modules(env: dict[str, Any], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` are not found in a step's environment."""
    probe = (
        "import importlib.util, sys; "
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    )
    try:
        proc = subprocess.run(
            [env["python"], "-c", probe, *modules],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env["vars"]},
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return list(modules)
    return proc.stdout.split() if proc.returncode == 0 else list(modules)


def notebook_env(env: dict[str, Any], full: bool) -> dict[str, str]:
    """The variables a chapter runs with: the step's, and the Makefile's settings."""
    extra = {**env["vars"], **NOTEBOOK_ENV}
    if full:
        extra["EIGPREC_SCALE"] = "full"
    return extra


def notebooks(run: Run, env: dict[str, Any], full: bool, chapters: list[str] | None = None) -> None:
    """Execute chapters (all, or those named) with nbclient, as the book build would.

    Each chapter is its own step: a time-out ends that chapter only. For a call that fits
    10 minutes, name one chapter per call (``--steps notebooks:clarke``).
    """
    names = list(CHAPTERS) if chapters is None else chapters
    step = "notebooks" if chapters is None else ",".join(f"notebooks:{c}" for c in names)
    missing = missing_modules(env, NOTEBOOK_MODULES)
    if missing:
        run.note(
            step,
            "skipped",
            f"{', '.join(missing)} not installed: carry the wheel bundle "
            "(python tools/gpu/gpu_wheels.py) to execute the chapters",
        )
        return
    extra_env = notebook_env(env, full)
    for i, nb in enumerate(ROOT / "book" / f"{c}.md" for c in names):
        name = f"notebook-{nb.stem}"
        # A fair share of what is left, and never less than the usual limit where it fits.
        share = (run.remaining() - 5) / (len(names) - i)
        limit = min(max(share, STEP_LIMITS["notebooks"]), run.remaining() - 5)
        if limit < 2 * MIN_STEP_S:
            run.note(name, "skipped", "time budget spent")
            continue
        target = run.out / "notebooks" / f"{nb.stem}.ipynb"
        cmd = [env["python"], str(Path(__file__).resolve()), "execute-notebook", str(nb)]
        cmd += [str(target), "--timeout", str(cell_timeout())]
        status, rc, log, secs = run.execute(name, cmd, limit=limit, env=extra_env)
        outputs = [str(target.relative_to(run.out))] if target.is_file() else []
        reason = "" if status == "ok" else f"{status} (exit {rc}); see {log}"
        if status != "ok":
            print(run.tail(log, 8), flush=True)
        run.note(name, status, reason, secs, log=log, outputs=outputs)


def execute_notebook(source: Path, target: Path, timeout: int) -> int:
    """Run one chapter of ``book/`` (read as MyST-NB reads it) with nbclient; save the
    notebook, executed, even when a cell fails.

    Runs inside the venv (``python tools/gpu/gpu_record.py execute-notebook SRC DST``).
    """
    import nbclient
    import nbformat

    nb = read_page(source)
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(source.parent)}},
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        nbformat.write(nb, target)
        print(f"{source.name}: a cell failed:\n{exc}", file=sys.stderr)
        return 1
    nbformat.write(nb, target)
    print(f"{source.name}: executed, saved to {target}")
    return 0


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the whole recording (or one notebook, for the internal ``execute-notebook``)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["execute-notebook"]:
        p = argparse.ArgumentParser(prog="gpu_record.py execute-notebook")
        p.add_argument("source", type=Path)
        p.add_argument("target", type=Path)
        p.add_argument("--timeout", type=int, default=600)
        a = p.parse_args(argv[1:])
        return execute_notebook(a.source, a.target, a.timeout)
    args = build_parser().parse_args(argv)
    if args.plan is not None:
        args.steps = list(PLANS[args.plan])
    if not args.dry_run:
        reason = gpu_refusal(args.python)
        if reason is not None:
            print(f"gpu_record: {reason}", file=sys.stderr)
            return NO_GPU_EXIT
    out = (args.out or default_out()).resolve()
    work = args.work.resolve()
    if work == out or out in work.parents:
        print("gpu_record: --work must lie outside --out", file=sys.stderr)
        return 2
    if work.exists():
        shutil.rmtree(work)
    run = Run(work, args.budget, args.dry_run)
    started = now()
    print(f"gpu_record: writing to {out}{' (dry run)' if args.dry_run else ''}", flush=True)
    worst = plan(args.steps, args.budget, args.wheels.is_dir())
    print("gpu_record: at worst " + ", ".join(f"{n} {t:.0f} s" for n, t in worst), flush=True)
    env, install_info = prepare(run, args.python, args.site.resolve(), args.wheels.resolve())
    environment = versions(run, env)
    for step in args.steps:
        if args.dry_run:
            dry_step(run, env, step, args.full)
        elif step in RECORDERS:
            record(run, env, step, last=step == args.steps[-1])
        elif step == "tests":
            unit_tests(run, env, last=step == args.steps[-1])
        elif step == "notebooks":
            notebooks(run, env, args.full)
        else:
            notebooks(run, env, args.full, [step.split(":", 1)[1]])
    if args.dry_run and any(s.startswith("notebooks") for s in args.steps):
        missing = missing_modules(env, NOTEBOOK_MODULES)
        install_info["notebooks_ready"] = not missing
        install_info["notebooks_missing"] = missing
    failed = [s["name"] for s in run.steps if s["status"] in ("failed", "timeout")]
    summary = {
        "schema": SCHEMA,
        "started": started,
        "finished": now(),
        "seconds": round(time.monotonic() - run.start, 1),
        "dry_run": args.dry_run,
        "out": str(out),
        "work": str(work),
        "requested_steps": args.steps,
        "budget_s": args.budget,
        "gpu": environment.get("gpu"),
        "torch": environment.get("torch"),
        "torch_file": environment.get("torch_file"),
        "cupy": environment.get("cupy"),
        "wheels": {
            "dir": str(args.wheels),
            "present": args.wheels.is_dir(),
            "chosen_by": install_info.get("wheels_chosen_by"),
        },
        "install": install_info,
        "steps": run.steps,
        "failed": failed,
        "exit_status": 1 if failed else 0,
    }
    summary["returned"] = finish(run, out, summary)
    print(f"gpu_record: {len(failed)} failed step(s){': ' + ', '.join(failed) if failed else ''}")
    print(
        f"gpu_record: {len(summary['returned'])} files in {out}: {', '.join(summary['returned'])}"
    )
    return summary["exit_status"]


def dry_step(run: Run, env: dict[str, Any], step: str, full: bool) -> None:
    """A dry run's step: torch must import in the environment the step would run in."""
    t0 = time.monotonic()
    extra = notebook_env(env, full) if step.startswith("notebooks") else None
    seen = torch_visible(env, extra)
    if "error" in seen:
        reason = f"dry run: torch does not import in this step's environment: {seen['error']}"
        run.note(step, "failed", reason, time.monotonic() - t0, torch=None)
        return
    book = ROOT / "bookpkg" / "eigprec_book" / "__init__.py"
    if seen["eigprec_book"] != str(book):
        reason = f"dry run: eigprec_book is not found in this checkout ({seen['eigprec_book']})"
        run.note(step, "failed", reason, time.monotonic() - t0, torch=seen["torch"])
        return
    reason = f"dry run: no GPU step is executed; torch {seen['version']} from {seen['torch']}"
    run.note(
        step,
        "skipped",
        reason,
        time.monotonic() - t0,
        torch=seen["torch"],
        eigprec=seen["eigprec"],
        eigprec_book=seen["eigprec_book"],
        site_packages=seen["site_packages"],
    )


def out_files(out: Path) -> list[str]:
    """Every file under ``out``, relative, sorted."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def finish(run: Run, out: Path, summary: dict[str, Any]) -> list[str]:
    """Put what the device machine returns into ``out``: at most 8 files, two folders down.

    ``summary.json``, the records and one archive of everything else in the working folder.
    Files already in ``out`` (``$OUT`` is emptied before each call) count against the limit.

    Returns:
        The files in ``out`` afterwards, relative to it.

    Raises:
        RuntimeError: if ``out`` would hold more files than the machine returns.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(exist_ok=True)
    for name in RECORDERS.values():
        src = run.out / "records" / name
        if src.is_file():
            shutil.copy2(src, out / "records" / name)
    summary["archive"] = ARCHIVE
    validate_summary(summary)
    text = json.dumps(summary, indent=2) + "\n"
    (run.out / "summary.json").write_text(text)
    parts = ["environment.json", "summary.json", "logs", "reports", "notebooks"]
    for attempt in (parts, parts[:-1]):
        with tarfile.open(out / ARCHIVE, "w:gz") as tar:
            for part in attempt:
                if (run.out / part).exists():
                    tar.add(run.out / part, arcname=part)
        if (out / ARCHIVE).stat().st_size <= MAX_OUT_BYTES:
            break
        # Over what the machine returns: the executed notebooks are the bulk; keep the rest.
        summary["archive_left_out"] = f"notebooks/ (the archive was over {MAX_OUT_BYTES} bytes)"
        text = json.dumps(summary, indent=2) + "\n"
    (out / "summary.json").write_text(text)
    files = out_files(out)
    deep = [f for f in files if f.count("/") > MAX_OUT_DEPTH]
    if len(files) > MAX_OUT_FILES or deep:
        raise RuntimeError(
            f"{out} holds {len(files)} files ({deep or 'none too deep'}); the machine returns "
            f"at most {MAX_OUT_FILES}, {MAX_OUT_DEPTH} folders down"
        )
    return files


if __name__ == "__main__":
    sys.exit(main())
