"""Execute chapter notebooks the way Google Colab would, and fail if any cell errors.

What Colab does, and how it is imitated here without a network or a GPU:

- The kernel runs in a **fresh virtual environment** that does not have ``eigprec``.
  Its site-packages holds one ``.pth`` line pointing at a mirror of this project's
  ``.venv`` site-packages (symlinks, so torch & co. are not reinstalled) from which
  ``eigprec`` (the editable install) and ``myst_nb`` (absent in Colab, so
  ``eigprec_book.helpers.glue`` takes its Colab path) are left out. The check first proves that
  ``import eigprec`` fails there.
- ``google.colab`` is importable (a stand-in module) and imported when the kernel
  starts, as in Colab, so the setup cell's ``if "google.colab" in sys.modules:`` is
  true and its ``%pip install`` runs.
- The setup cell (the first code cell) installs ``git+<repository URL>``, pinned to a
  commit (``@<ref>``, the reader's notebooks of tools/reader_notebooks.py) or not (the
  chapter sources); that is replaced by ``file://`` and a copy of the local checkout
  (the files git would publish: tracked and not-ignored ones), so the package comes
  from this working tree; nothing else in the notebook changes. Each session builds both
  from source: a wheel built once would install faster, but pip's record of a folder
  install (``direct_url.json``) is how ``eigprec_book.helpers.load_record`` finds
  ``book/data`` there, as it finds the commit of a ``git+`` install in Colab; from a wheel
  the pages that read records fail (tried in issue 45). The builds run without pip's build
  isolation (``PIP_NO_BUILD_ISOLATION=0`` in the kernel) where this environment already
  satisfies both projects' ``build-system.requires`` (:func:`build_requirements_met`; torch
  itself requires setuptools >= 77.0.3): pip then skips installing setuptools into two
  throw-away environments, which took 10 of a session's 28 CPU-seconds (an install of both
  projects: 18 s isolated, 8 s not). That the isolated builds work is what every
  ``make env`` shows, which installs both projects editable, isolated.
- Each notebook runs in its own empty folder (Colab's ``/content``): no ``book/data``.
- After the last cell a check cell confirms that ``eigprec`` was imported from the
  fresh environment (installed by the setup cell) and that ``google.colab`` was seen.
- ``--quick`` (``make test``): ``EIGPREC_SCALE=quick`` in the kernels, so the degeneracy
  chapter's experiments run one seed and smaller grids (:func:`eigprec_book.helpers.quick_scale`):
  every cell still runs, in about half the CPU time of the strict build's execution. What
  the pages find is checked by the strict build at chapter scale; a reader's Colab runs at
  chapter scale, as the weekly job in Colab's own image does (.github/workflows/weekly.yml).
  The check cell confirms the scale the kernel ran at.
- A notebook that fails leaves its executed copy (the error output in the failing
  cell) and the traceback in ``<workdir>/failed/`` (``_build/colab/failed/`` in
  ``make test``), so the failure can be read after the run.

Usage: ``python tools/colab_check.py _build/notebooks/book/*.ipynb --workdir _build/colab``
(``make colab-check`` runs the reader's notebooks that ``make notebooks`` wrote). Notebooks
run side by side, one Colab session (environment, checkout copy, folder, kernel) each,
``--jobs`` at once (default: one per CPU, one thread per kernel), longest first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from schedule import load_times, page_order, plan

ROOT = Path(__file__).resolve().parents[1]
KERNEL_NAME = "eigprec-colab-sim"
# Left out of the fresh environment: the two packages (only the setup cell may provide
# them) and MyST-NB, which Colab does not have.
HIDDEN = re.compile(
    r"^(eigprec|eigprec_book|_?_editable__.*eigprec.*|eigprec(_|-)?.*\.dist-info"
    r"|myst_nb|myst_nb-.*\.dist-info)$"
    r"|\.pth$",
    re.I,
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CHECK_CELL = """\
import json as _json, sys as _sys
import eigprec as _eigprec
import eigprec_book.helpers as _helpers
print("COLAB-CHECK " + _json.dumps({
    "eigprec_file": _eigprec.__file__,
    "prefix": _sys.prefix,
    "colab": "google.colab" in _sys.modules,
    "myst_nb": "myst_nb" in _sys.modules,
    "tf32_emulated": _eigprec.describe_runtime().tf32_emulated,
    "scale": _helpers.scale(),
    "quick": _helpers.quick_scale(),
}))
"""


class ColabCheckError(RuntimeError):
    """A notebook failed to run as it would in Colab."""


def repository_url(config: Path) -> str:
    import yaml

    return yaml.safe_load(config.read_text())["repository"]["url"]


def replace_install_url(setup_source: str, url: str, local: Path) -> str:
    """The setup cell with ``git+<url>`` (or ``git+<url>@<ref>``, each optionally
    ``#subdirectory=<dir>``) replaced by ``file://<local>`` (``file://<local>/<dir>``);
    nothing else. The library and the book's package are installed once each."""
    needle = re.compile(rf"git\+{re.escape(url)}(@[\w./-]+)?(#subdirectory=([\w./-]+))?(?![\w/])")
    found = needle.findall(setup_source)
    if sorted(sub for _, _, sub in found) != ["", "bookpkg"]:
        raise ColabCheckError(
            f"the setup cell must install git+{url} (the library) and "
            f"git+{url}#subdirectory=bookpkg (the book's package) once each; it reads:\n"
            f"{setup_source}"
        )
    root = local.resolve()
    return needle.sub(lambda m: (root / m[3] if m[3] else root).as_uri(), setup_source)


def publishable_copy(root: Path, dest: Path) -> Path:
    """Copy the files git would publish (tracked, and untracked but not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    if dest.exists():
        shutil.rmtree(dest)
    for raw in filter(None, listed):
        rel = raw.decode()
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def build_requirements_met(projects: list[Path]) -> bool:
    """Whether this environment satisfies every project's ``build-system.requires``.

    The sessions' environments see this one's packages (the mirror), so where this is true
    pip can build the projects there without an isolated build environment.

    Args:
        projects: folders holding a ``pyproject.toml``.

    Returns:
        False if a project lacks ``pyproject.toml`` or a requirement (its marker true here)
        names a distribution not installed here or at a version outside its specifier.

    Raises:
        tomllib.TOMLDecodeError: for a ``pyproject.toml`` that is not TOML.
        packaging.requirements.InvalidRequirement: for a requirement that is not PEP 508.

    Example:
        >>> build_requirements_met([ROOT])  # setuptools >= 77: torch requires it too
        True
    """
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    for project in projects:
        config = project / "pyproject.toml"
        if not config.is_file():
            return False
        table = tomllib.loads(config.read_text()).get("build-system", {})
        for text in table.get("requires", []):
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate():
                continue
            try:
                have = version(req.name)
            except PackageNotFoundError:
                return False
            if not req.specifier.contains(have, prereleases=True):
                return False
    return True


def make_environment(workdir: Path, isolated_builds: bool = True) -> tuple[Path, Path]:
    """A fresh venv seeing the project's packages except eigprec/myst_nb; its kernelspec.

    ``isolated_builds=False``: the kernel's pip builds local projects in this environment
    (``PIP_NO_BUILD_ISOLATION=0``), for projects whose build requirements it meets.

    Returns the venv's python and the folder to use as ``JUPYTER_PATH``.
    """
    source = Path(sysconfig.get_paths()["purelib"])
    mirror = workdir / "site-mirror"
    if mirror.exists():
        shutil.rmtree(mirror)
    mirror.mkdir(parents=True)
    for entry in source.iterdir():
        if not HIDDEN.search(entry.name):
            (mirror / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    venv = workdir / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    # No pip of its own: `python -m pip` (what %pip runs) finds the mirror's pip and
    # installs into this environment's own site-packages.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A directory added by a .pth line does not get its own .pth files processed, so
    # the editable install's finder in .venv stays inactive here.
    (Path(purelib) / "_eigprec_colab_mirror.pth").write_text(f"{mirror}\n")

    shim = workdir / "colab-shim" / "google" / "colab"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "__init__.py").write_text('"""Stand-in for Colab\'s google.colab module."""\n')
    jupyter = workdir / "jupyter"
    spec_dir = jupyter / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [
            str(python),
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            # Colab's kernel has google.colab imported before the first cell runs.
            "--IPKernelApp.exec_lines=['import google.colab']",
        ],
        "display_name": "Colab stand-in",
        "language": "python",
        "env": {
            "PYTHONPATH": str(workdir / "colab-shim"),
            # pip reads "0" for a PIP_NO_* switch as "no" to the isolation.
            **({} if isolated_builds else {"PIP_NO_BUILD_ISOLATION": "0"}),
        },
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))

    probe = subprocess.run(
        [str(python), "-c", "import eigprec"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if probe.returncode == 0 or "No module named 'eigprec'" not in probe.stderr:
        raise ColabCheckError(
            "the fresh environment can already import eigprec, so the check would not "
            f"prove that the setup cell installs it:\n{probe.stderr}"
        )
    return python, jupyter


def run_notebook(path: Path, url: str, package: Path, workdir: Path, timeout: int) -> dict:
    """Execute one notebook as Colab would; returns what the check cell saw."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    setup = next((c for c in nb.cells if c.cell_type == "code"), None)
    if setup is None:
        raise ColabCheckError(f"{path.name}: no code cell, so no setup cell")
    setup.source = replace_install_url(setup.source, url, package)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    run_dir = workdir / "content" / path.stem
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=timeout,
        allow_errors=False,
        resources={"metadata": {"path": str(run_dir)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        index = next(
            (i for i, c in enumerate(nb.cells) if c.cell_type == "code" and _errored(c)), None
        )
        report = ANSI.sub("", str(exc))  # the kernel's coloured traceback, made plain
        copy, trace = _keep_failure(nb, path, workdir, report)
        raise ColabCheckError(
            f"{path.name}: cell {index} failed in Colab:\n{report}\n"
            f"executed copy: {copy}\ntraceback: {trace}"
        ) from exc
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    match = re.search(r"COLAB-CHECK (\{.*\})", text)
    if match is None:
        raise ColabCheckError(f"{path.name}: the check cell printed nothing:\n{text}")
    seen = json.loads(match.group(1))
    if not seen["colab"]:
        raise ColabCheckError(f"{path.name}: google.colab was not imported in the kernel")
    if not Path(seen["eigprec_file"]).resolve().is_relative_to(Path(seen["prefix"]).resolve()):
        raise ColabCheckError(
            f"{path.name}: eigprec came from {seen['eigprec_file']}, not from the "
            f"setup cell's install into {seen['prefix']}"
        )
    return seen


def _keep_failure(nb, path: Path, workdir: Path, report: str) -> tuple[Path, Path]:
    """Write the executed notebook and the traceback where they can be read afterwards."""
    import nbformat

    failed = workdir / "failed"
    failed.mkdir(parents=True, exist_ok=True)
    copy, trace = failed / path.name, failed / f"{path.stem}.traceback.txt"
    nbformat.write(nb, copy)
    trace.write_text(report + "\n", encoding="utf-8")
    return copy, trace


def _errored(cell: dict) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def _check_one(
    path: Path,
    url: str,
    package: Path,
    workdir: Path,
    timeout: int,
    threads: int,
    isolated: bool = True,
):
    """One notebook in its own Colab session (a process of its own): its own fresh
    environment, its own copy of the checkout (pip builds a local project in place, so
    two sessions must not share one), its own folder. ``isolated``: pip's isolated builds
    (:func:`build_requirements_met`, decided once per run). Returns (ok, message, seconds)."""
    t0 = time.monotonic()
    # A failure kept from an earlier run must not outlive a run that passes.
    for stale in (f"{path.stem}.ipynb", f"{path.stem}.traceback.txt"):
        (workdir / "failed" / stale).unlink(missing_ok=True)
    session = workdir / "sessions" / path.stem
    try:
        if session.exists():
            shutil.rmtree(session)
        session.mkdir(parents=True)
        own_package = shutil.copytree(package, session / "checkout", symlinks=True)
        _, jupyter = make_environment(session, isolated_builds=isolated)
        os.environ["JUPYTER_PATH"] = str(jupyter)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        seen = run_notebook(path.resolve(), url, own_package, workdir, timeout)
        if seen["quick"] != (os.environ.get("EIGPREC_SCALE") == "quick"):
            raise ColabCheckError(f"{path.name}: the kernel ran at scale {seen['scale']!r}")
    except ColabCheckError as exc:
        return False, f"FAIL {path.name} ({time.monotonic() - t0:.0f} s)\n{exc}", 0.0
    seconds = time.monotonic() - t0
    return (
        True,
        f"ok   {path.name}: every cell ran in {seconds:.0f} s in a fresh "
        "environment where `import eigprec` failed before the setup cell installed it; "
        f"TF32 emulated: {seen['tf32_emulated']}; scale: {seen['scale']}",
        seconds,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--workdir", type=Path, default=ROOT / "_build" / "colab")
    parser.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument(
        "--jobs", type=int, default=0, help="notebooks at once, each its own session (0: CPUs)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="EIGPREC_SCALE=quick: the degeneracy chapter's experiments at one seed, smaller grids",
    )
    parser.add_argument(
        "--times",
        type=Path,
        default=ROOT / "_build" / "execution-seconds.json",
        help="the build's execution times per page (tools/execute_pages.py): longest first",
    )
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error(f"--jobs must be >= 0, got {args.jobs}")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    url = repository_url(args.config)
    package = publishable_copy(ROOT, workdir / "checkout")
    # What a Colab kernel's environment has and has not: none of the book build's settings.
    for name in ("EIGPREC_PROGRESS", "EIGPREC_SCALE", "EIGPREC_SEED_OFFSET", "PYTHONPATH"):
        os.environ.pop(name, None)
    if args.quick:
        os.environ["EIGPREC_SCALE"] = "quick"
    notebooks = page_order(args.notebooks, load_times(args.times))
    jobs, threads = plan(args.jobs, len(notebooks))
    # Every session's checkout is a copy of this one: one answer for all of them.
    isolated = not build_requirements_met([package, package / "bookpkg"])
    scale = "one seed, smaller grids (--quick)" if args.quick else "chapter scale"
    print(f"colab check: {len(notebooks)} notebooks, {jobs} sessions at once, {scale}")
    failures = []
    # A new Colab session per notebook: none sees another's install.
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(_check_one, p, url, package, workdir, args.timeout, threads, isolated): p
            for p in notebooks
        }
        for future, path in futures.items():
            ok, message, _ = future.result()
            print(message, flush=True)
            if not ok:
                failures.append(path.name)
    total = time.monotonic() - started
    print(
        f"colab check: {len(notebooks) - len(failures)} of {len(notebooks)} "
        f"notebooks ran as in Colab, {total:.0f} s in all"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
