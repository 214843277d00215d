"""Prepare the wheels an offline GPU machine lacks, for ``tools/gpu/gpu_record.sh``.

The GPU machines of this project have Python 3.12 with torch (CUDA 13), CuPy, numpy, scipy,
matplotlib, pytest and hypothesis, and no network. What the book's GPU run needs beyond
that — nbclient, nbformat, ipykernel and jupyter-client to execute the chapters, MyST-NB's
reader to read them (their MyST Markdown text), PyYAML for
the test suite, tqdm and Pygments for the package, emerging-optimizers for the degeneracy
chapter, transformers for the TF32 chapter's four architectures (with its dependencies 26
MiB of the bundle's 43; 17 without them, 27 November) — is resolved here, on a machine with
PyPI, for CPython 3.12 on manylinux x86_64, pinned to ``requirements.txt``; the packages the
GPU machine has already (the preinstalled ones and everything they depend on) are left out.
The wheels, the eigprec wheel and a ``manifest.json`` go into one folder (default
``gpu-wheels/``), which must stay under the machine's 64 MiB limit on carried files.

Usage: ``python tools/gpu/gpu_wheels.py [--out gpu-wheels]``. Only ``pip`` is needed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "eigprec.gpu-wheels/1"
LIMIT_MIB = 64.0
PYTHON_VERSION = "3.12"
# pip expands a manylinux tag to the older ones, so _2_28 also admits _2_17 (= 2014) wheels.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")
#: Carried always (even where a preinstalled package happens to depend on one of them).
ROOTS = (
    "nbclient",
    "nbformat",
    "ipykernel",
    "jupyter-client",
    "jupyter-core",
    "pyyaml",
    "tqdm",
    "pygments",
    "transformers",
)
#: Pure-Python packages whose dependencies are torch or each other: carried at their pins
#: without resolution (resolving torch's CUDA packages for another machine is slow and brittle).
#: MyST-NB's reader of the chapters' text (myst_nb.core.read, tools/book_pages.py) needs
#: myst-parser, markdown-it-py and docutils, not the Sphinx, jupyter-cache and SQLAlchemy
#: that myst-nb declares for building a book.
NO_DEPS = (
    "emerging-optimizers",
    "absl-py",
    "myst-nb",
    "myst-parser",
    "markdown-it-py",
    "mdit-py-plugins",
    "mdurl",
    "docutils",
)
#: What torch brings along (its CUDA wheels not counted), so never carried.
TORCH_DEPS = (
    "filelock",
    "fsspec",
    "jinja2",
    "markupsafe",
    "mpmath",
    "networkx",
    "setuptools",
    "sympy",
    "typing-extensions",
)
#: On the GPU machine already (with torch); these and all they depend on are not carried.
PREINSTALLED = ("numpy", "scipy", "matplotlib", "pytest", "hypothesis")


def normalize(name: str) -> str:
    """PEP 503 normalised project name (``PyYAML`` -> ``pyyaml``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirements(text: str) -> dict[str, str]:
    """``name -> version`` for every ``name==version`` line (markers and comments dropped).

    Args:
        text: the contents of ``requirements.txt``.

    Returns:
        Normalised names mapped to the pinned version (``2.13.*`` kept as written).

    Raises:
        ValueError: on a line that is neither blank, a comment nor ``name==version``.

    Example:
        >>> parse_requirements('PyYAML==6.0.3\\nx==1; python_version >= "3.12"  # why')
        {'pyyaml': '6.0.3', 'x': '1'}
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.*+!_-]+)", line)
        if m is None:
            raise ValueError(f"requirements line {number} is not name==version: {raw!r}")
        pins[normalize(m.group(1))] = m.group(2)
    return pins


def _requirement_name(spec: str) -> tuple[str, str]:
    """``(normalised name, marker text)`` of a ``Requires-Dist`` entry."""
    body, _, marker = spec.partition(";")
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", body)
    if name is None:
        raise ValueError(f"cannot read a requirement name from {spec!r}")
    return normalize(name.group(1)), marker.strip()


def _marker_holds(marker: str) -> bool:
    """Whether a dependency marker holds on CPython 3.12 / Linux x86_64, without extras."""
    if not marker:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:  # pip's own copy
        from pip._vendor.packaging.markers import Marker
    env = {
        "python_version": PYTHON_VERSION,
        "python_full_version": PYTHON_VERSION + ".0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "extra": "",
    }
    return bool(Marker(marker).evaluate(env))


def dependency_closure(graph: dict[str, list[str]], roots: Iterable[str]) -> set[str]:
    """Every name reachable from ``roots`` in ``graph`` (roots included where present).

    Example:
        >>> sorted(dependency_closure({"a": ["b"], "b": ["c"], "c": [], "d": []}, ["a"]))
        ['a', 'b', 'c']
    """
    seen: set[str] = set()
    todo = [normalize(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name not in graph:
            continue
        seen.add(name)
        todo.extend(graph[name])
    return seen


def select(report: dict[str, Any], pins: dict[str, str]) -> dict[str, Any]:
    """From a ``pip install --dry-run --report`` resolution, the packages to carry.

    Args:
        report: the decoded report (its ``install`` list with each item's ``metadata``).
        pins: ``requirements.txt`` pins from :func:`parse_requirements`.

    Returns:
        ``{"carry": [{"name", "version"}...], "left_out": [...], "unpinned": [...]}``:
        ``left_out`` is what the preinstalled packages bring (and not a root),
        ``unpinned`` the carried packages that ``requirements.txt`` does not pin or pins
        to another version.
    """
    versions: dict[str, str] = {}
    graph: dict[str, list[str]] = {}
    for item in report.get("install", []):
        meta = item["metadata"]
        name = normalize(meta["name"])
        versions[name] = meta["version"]
        deps = []
        for spec in meta.get("requires_dist") or []:
            dep, marker = _requirement_name(spec)
            if _marker_holds(marker):
                deps.append(dep)
        graph[name] = deps
    there = dependency_closure(graph, PREINSTALLED) | {"torch", *TORCH_DEPS}
    roots = {normalize(r) for r in ROOTS}
    needed = dependency_closure(graph, roots)
    carry = sorted(n for n in needed if n in roots or n not in there)
    for name in NO_DEPS:
        if name not in pins:
            raise ValueError(f"requirements.txt must pin {name} (carried without resolution)")
        versions[name] = pins[name]
        if name not in carry:
            carry.append(name)
    carry.sort()
    unpinned = [n for n in carry if n not in pins or not _version_matches(versions[n], pins[n])]
    return {
        "carry": [{"name": n, "version": versions[n]} for n in carry],
        "left_out": sorted(needed - set(carry)),
        "unpinned": unpinned,
    }


def _version_matches(version: str, pin: str) -> bool:
    if pin.endswith(".*"):
        return version == pin[:-2] or version.startswith(pin[:-1])
    return version == pin


def check_size(paths: Iterable[Path], limit_mib: float = LIMIT_MIB) -> int:
    """Total bytes of ``paths``; raise if they exceed ``limit_mib``.

    Raises:
        ValueError: naming the total and the largest files, when over the limit.

    Example:
        >>> check_size([], 1.0)
        0
    """
    sizes = sorted(((p.stat().st_size, p.name) for p in paths), reverse=True)
    total = sum(s for s, _ in sizes)
    if total > limit_mib * 2**20:
        largest = ", ".join(f"{n} ({s / 2**20:.1f} MiB)" for s, n in sizes[:5])
        raise ValueError(
            f"the bundle is {total / 2**20:.1f} MiB, over the {limit_mib:g} MiB a GPU call may "
            f"carry; largest: {largest}"
        )
    return total


def _target_options() -> list[str]:
    opts = ["--only-binary=:all:", "--python-version", PYTHON_VERSION]
    opts += ["--implementation", "cp", "--abi", "cp312"]
    for plat in PLATFORMS:
        opts += ["--platform", plat]
    return opts


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def resolve(pins: dict[str, str], work: Path) -> dict[str, Any]:
    """Resolve ROOTS + PREINSTALLED for the GPU machine's Python (metadata only)."""
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    report = work / "report.json"
    _pip(
        [
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--report",
            str(report),
            "--target",
            str(work / "target"),
            *_target_options(),
            "-c",
            str(constraints),
            *ROOTS,
            *PREINSTALLED,
        ]
    )
    return json.loads(report.read_text())


def build(out: Path, requirements: Path, limit_mib: float, with_eigprec: bool) -> dict[str, Any]:
    """Resolve, download, add the eigprec wheel, check the size, write ``manifest.json``."""
    pins = parse_requirements(requirements.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        chosen = select(resolve(pins, Path(tmp)), pins)
    if chosen["unpinned"]:
        raise ValueError(
            f"requirements.txt does not pin {chosen['unpinned']}: pin them so the GPU run "
            "uses the versions the book is built with"
        )
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.whl"), out / "manifest.json"]:
        old.unlink(missing_ok=True)
    reqs = [f"{p['name']}=={p['version']}" for p in chosen["carry"]]
    _pip(["download", "--no-deps", "--quiet", "-d", str(out), *_target_options(), *reqs])
    if with_eigprec:
        _eigprec_wheel(out)
    files = sorted(out.glob("*.whl"))
    total = check_size(files, limit_mib)
    by_name = {normalize(f.name.split("-")[0]): f for f in files}
    packages = []
    for p in chosen["carry"]:
        f = by_name.get(p["name"])
        if f is None:
            raise ValueError(f"pip did not download a wheel for {p['name']}=={p['version']}")
        packages.append({**p, "file": f.name, "bytes": f.stat().st_size, "sha256": _sha256(f)})
    eig = by_name.get("eigprec")
    manifest = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python_version": PYTHON_VERSION,
        "platforms": list(PLATFORMS),
        "preinstalled_assumed": ["torch", *PREINSTALLED],
        "left_out": chosen["left_out"],
        "packages": packages,
        "eigprec_wheel": eig.name if eig else None,
        "total_bytes": total,
        "limit_bytes": int(limit_mib * 2**20),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _eigprec_wheel(out: Path) -> None:
    """Build the package's wheel from a copy, so the checkout gets no build/ or egg-info."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("pyproject.toml", "README.md", "LICENSE"):  # LICENSE: license-files
            shutil.copy2(ROOT / name, Path(tmp) / name)
        junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(ROOT / "src", Path(tmp) / "src", ignore=junk)
        _pip(["wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), tmp])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Command line: build the bundle and report its size."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "gpu-wheels", help="bundle folder")
    p.add_argument("--requirements", type=Path, default=ROOT / "requirements.txt")
    p.add_argument("--limit-mib", type=float, default=LIMIT_MIB, help="size limit (MiB)")
    p.add_argument("--no-eigprec", action="store_true", help="leave the eigprec wheel out")
    args = p.parse_args(argv)
    if (
        shutil.which("pip") is None
        and subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True
        ).returncode
    ):
        print("gpu_wheels: pip is not available to this Python", file=sys.stderr)
        return 2
    try:
        manifest = build(args.out, args.requirements, args.limit_mib, not args.no_eigprec)
    except (ValueError, subprocess.CalledProcessError) as exc:
        print(f"gpu_wheels: {exc}", file=sys.stderr)
        return 1
    mib = manifest["total_bytes"] / 2**20
    names = ", ".join(f"{p['name']} {p['version']}" for p in manifest["packages"])
    print(f"gpu_wheels: {len(manifest['packages'])} wheels + eigprec, {mib:.1f} MiB in {args.out}")
    print(f"  {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
