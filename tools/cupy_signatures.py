"""Write the table of CuPy binding signatures that the CPU tests hold the CuPy bridge to.

``src/eigprec/eig/cupy_solver.py`` calls cuSOLVER through CuPy's Cython bindings, which no CPU
test can run. ``tests/test_cupy_signatures.py`` compares every call the bridge makes, and the
fake CuPy the other tests use, with ``tests/data/cupy_signatures.json``, which this script
writes from an *installed* CuPy: the names the bridge uses, each one's parameters (from the
signature Cython embeds in the docstring, or ``inspect.signature``) and the values of the
constants.

CuPy imports only where its CUDA libraries load. On a machine without them::

    python3 -m venv /tmp/cupy-venv && /tmp/cupy-venv/bin/pip install 'cupy-cuda13x==14.2.*'
    /tmp/cupy-venv/bin/python tools/cupy_signatures.py --stub-cuda

``--stub-cuda`` builds empty shared libraries under the sonames the bindings link against
(with ``cc``), sets ``CUPY_CI=1`` (CuPy then lets cuda-pathfinder's misses pass) and loads
extension modules lazily, so the modules import and their signatures and constants can be
read; nothing is called. Only the standard library and CuPy are needed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "data" / "cupy_signatures.json"
SCHEMA = "eigprec.cupy-signatures/1"
#: What the bindings link against or cuda-pathfinder loads first (CuPy 14.2 for CUDA 13).
STUB_SONAMES = (
    "libcusolver.so.12",
    "libcublas.so.13",
    "libcublasLt.so.13",
    "libcusparse.so.12",
    "libnvJitLink.so.13",
    "libcudart.so.13",
    "libcurand.so.10",
)
#: Callables: the bindings the bridge and the recorders call, and their neighbours.
FUNCTIONS = (
    "cupy.empty",
    "cupy.zeros",
    "cupy.from_dlpack",
    "cupy.cuda.Device",
    "cupy.cuda.Stream.from_external",
    "cupy.cuda.device.get_cusolver_handle",
    "cupy.cuda.runtime.getDeviceCount",
    "cupy_backends.cuda.libs.cusolver.createSyevjInfo",
    "cupy_backends.cuda.libs.cusolver.destroySyevjInfo",
    "cupy_backends.cuda.libs.cusolver.xsyevjSetSortEig",
    "cupy_backends.cuda.libs.cusolver.xsyevjSetMaxSweeps",
    "cupy_backends.cuda.libs.cusolver.xsyevjSetTolerance",
    "cupy_backends.cuda.libs.cusolver.ssyevjBatched_bufferSize",
    "cupy_backends.cuda.libs.cusolver.dsyevjBatched_bufferSize",
    "cupy_backends.cuda.libs.cusolver.ssyevjBatched",
    "cupy_backends.cuda.libs.cusolver.dsyevjBatched",
)
#: Integer constants, with their values.
CONSTANTS = (
    "cupy_backends.cuda.libs.cublas.CUBLAS_FILL_MODE_LOWER",
    "cupy_backends.cuda.libs.cublas.CUBLAS_FILL_MODE_UPPER",
    "cupy_backends.cuda.libs.cusolver.CUSOLVER_EIG_MODE_NOVECTOR",
    "cupy_backends.cuda.libs.cusolver.CUSOLVER_EIG_MODE_VECTOR",
)


def resolve(dotted: str) -> Any:
    """The object named by ``dotted``: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"cannot import any prefix of {dotted}")


def parse_params(text: str) -> dict[str, Any]:
    """Parameters of a ``name(type a, b=1, *, c=None) -> ret`` signature line.

    Returns:
        ``{"positional": [names], "required": count, "keyword_only": [names]}``; ``self``
        and ``cls`` are dropped.

    Example:
        >>> parse_params("f(intptr_t info, int sort_eig)")
        {'positional': ['info', 'sort_eig'], 'required': 2, 'keyword_only': []}
        >>> parse_params("Stream.from_external(cls, obj)")["positional"]
        ['obj']
    """
    inner = re.match(r"^[\w.]+\((.*)\)", text.strip())
    if inner is None:
        raise ValueError(f"not a signature: {text!r}")
    positional: list[str] = []
    keyword_only: list[str] = []
    required = 0
    star = False
    for raw in (p.strip() for p in inner.group(1).split(",")):
        if not raw:
            continue
        if raw == "*":
            star = True
            continue
        head, _, default = raw.partition("=")
        name = head.split()[-1].lstrip("*")
        if name in ("self", "cls"):
            continue
        if star:
            keyword_only.append(name)
        else:
            positional.append(name)
            required += not default
    return {"positional": positional, "required": required, "keyword_only": keyword_only}


def signature_of(obj: Any, name: str) -> dict[str, Any]:
    """The parameters of ``obj``: Python's own signature, else the one Cython embeds."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        doc = (getattr(obj, "__doc__", "") or "").strip().splitlines()
        line = next((d for d in doc if re.match(r"^[\w.]+\(", d)), None)
        if line is None:
            raise ValueError(f"{name}: no signature and no embedded one") from None
        return {**parse_params(line), "text": line.strip()}
    kinds = inspect.Parameter
    pos = [
        p
        for p in sig.parameters.values()
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    return {
        "positional": [p.name for p in pos if p.name not in ("self", "cls")],
        "required": sum(p.default is kinds.empty for p in pos if p.name not in ("self", "cls")),
        "keyword_only": [p.name for p in sig.parameters.values() if p.kind is kinds.KEYWORD_ONLY],
        "text": f"{name.rsplit('.', 1)[-1]}{sig}",
    }


def table() -> dict[str, Any]:
    """Read every name in :data:`FUNCTIONS` and :data:`CONSTANTS` from the installed CuPy."""
    import cupy

    return {
        "schema": SCHEMA,
        "cupy": cupy.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
        "generated_by": "tools/cupy_signatures.py",
        "functions": {name: signature_of(resolve(name), name) for name in FUNCTIONS},
        "constants": {name: int(resolve(name)) for name in CONSTANTS},
    }


def stub_environment(folder: Path) -> dict[str, str]:
    """Empty shared libraries under :data:`STUB_SONAMES`; the environment that loads them."""
    source = folder / "empty.c"
    source.write_text("\n")
    for soname in STUB_SONAMES:
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                "-o",
                str(folder / soname),
                f"-Wl,-soname,{soname}",
                str(source),
            ],
            check=True,
        )
    path = os.environ.get("LD_LIBRARY_PATH", "")
    return {
        "LD_LIBRARY_PATH": f"{folder}:{path}" if path else str(folder),
        "CUPY_CI": "1",
        "EIGPREC_CUPY_SIGNATURES_LAZY": "1",
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: write the table (``--stub-cuda`` re-runs itself on stub libraries)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--stub-cuda", action="store_true", help="import CuPy on empty CUDA libraries")
    args = p.parse_args(argv)
    if args.stub_cuda and not os.environ.get("EIGPREC_CUPY_SIGNATURES_LAZY"):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, **stub_environment(Path(tmp))}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(args.out)]
            return subprocess.run(cmd, env=env, check=False).returncode
    if os.environ.get("EIGPREC_CUPY_SIGNATURES_LAZY"):
        # The stubs define no symbols: bind each on first call (never made here), not at load.
        sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
    data = table()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(
        f"cupy_signatures: CuPy {data['cupy']}, {len(data['functions'])} functions, "
        f"{len(data['constants'])} constants -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
