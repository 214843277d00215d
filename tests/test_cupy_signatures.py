"""The CuPy bridge and the fake CuPy held to CuPy 14.2's real bindings (issue 22).

``tests/data/cupy_signatures.json`` was written by ``tools/cupy_signatures.py --stub-cuda``
from ``cupy-cuda13x`` 14.2.0 installed in a throw-away venv (its CUDA libraries stubbed so
that the Cython modules import; nothing was called). Three checks: the fake has every name
with the same parameters and constants; every call written in ``_cupy_bridge.py`` names a
binding in the table with an argument count it accepts; every call the bridge makes at run
time (through the fake) does too.
"""

from __future__ import annotations

import ast
import inspect
import json

import pytest
import torch

from eigprec.eig import cupy_solver as _cupy_bridge

from ._fake_cupy import FakeCupy, on_fake_gpu
from .conftest import ROOT

TABLE = json.loads((ROOT / "tests" / "data" / "cupy_signatures.json").read_text())
BRIDGE = ROOT / "src" / "eigprec" / "eig" / "cupy_solver.py"
#: How the bridge's local names map to the table's module paths.
ALIASES = {
    "cupy": "cupy",
    "cupy_device": "cupy.cuda.device",
    "cusolver": "cupy_backends.cuda.libs.cusolver",
    "cublas": "cupy_backends.cuda.libs.cublas",
}


def _accepts(name: str, n_positional: int, keywords: set[str]) -> str | None:
    sig = TABLE["functions"].get(name)
    if sig is None:
        return f"{name} is not in CuPy {TABLE['cupy']}'s table"
    if not sig["required"] <= n_positional <= len(sig["positional"]):
        return (
            f"{name} called with {n_positional} positional arguments; CuPy {TABLE['cupy']} "
            f"takes {sig['required']}..{len(sig['positional'])} ({sig['text']})"
        )
    allowed = set(sig["positional"][n_positional:]) | set(sig["keyword_only"])
    if not keywords <= allowed:
        return f"{name} called with keywords {sorted(keywords - allowed)} ({sig['text']})"
    return None


def test_table_is_cupy_14_2():
    assert TABLE["schema"] == "eigprec.cupy-signatures/1"
    assert TABLE["cupy"].startswith("14.2.")
    solve = TABLE["functions"]["cupy_backends.cuda.libs.cusolver.ssyevjBatched"]
    assert solve["positional"][:4] == ["handle", "jobz", "uplo", "n"] and solve["required"] == 12


@pytest.mark.parametrize("name", sorted(TABLE["functions"]))
def test_fake_has_the_real_parameters(name):
    real = TABLE["functions"][name]
    fake = FakeCupy().resolve(name)
    target = fake.__init__ if inspect.isclass(fake) else fake
    params = [p for p in inspect.signature(target).parameters.values() if p.name != "self"]
    kinds = inspect.Parameter
    positional = [p.name for p in params if p.kind is kinds.POSITIONAL_OR_KEYWORD]
    keyword_only = [p.name for p in params if p.kind is kinds.KEYWORD_ONLY]
    required = sum(
        p.default is kinds.empty for p in params if p.kind is kinds.POSITIONAL_OR_KEYWORD
    )
    assert (positional, required, keyword_only) == (
        real["positional"],
        real["required"],
        real["keyword_only"],
    ), real["text"]


@pytest.mark.parametrize("name", sorted(TABLE["constants"]))
def test_fake_constants_have_the_real_values(name):
    assert FakeCupy().resolve(name) == TABLE["constants"][name]


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in ALIASES:
        return None
    return ".".join([ALIASES[node.id], *reversed(parts)])


def test_every_call_written_in_the_bridge_matches_the_bindings():
    tree = ast.parse(BRIDGE.read_text())
    # ``solve_fn = cusolver.ssyevjBatched if single else cusolver.dsyevjBatched``: a call
    # through such a local name is a call of each binding it may hold.
    local: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [type(t) for t in node.targets] == [ast.Name]:
            value = node.value
            options = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
            names = [_dotted(o) for o in options]
            if all(names):
                local[node.targets[0].id] = names
    calls, constants, problems = [], [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names = local.get(func.id, []) if isinstance(func, ast.Name) else [_dotted(func)]
            for name in filter(None, names):
                calls.append(name)
                problem = _accepts(name, len(node.args), {k.arg for k in node.keywords})
                if problem:
                    problems.append(f"line {node.lineno}: {problem}")
        elif isinstance(node, ast.Attribute) and node.attr.isupper():
            name = _dotted(node)
            if name is not None:
                constants.append(name)
                if name not in TABLE["constants"]:
                    problems.append(f"line {node.lineno}: constant {name} is not in the table")
    assert not problems, "\n".join(problems)
    # The scan saw the hand-off (guards against an alias the scan would silently miss).
    assert {
        "cupy_backends.cuda.libs.cusolver.dsyevjBatched",
        "cupy.cuda.Stream.from_external",
    } <= set(calls)
    assert "cupy_backends.cuda.libs.cusolver.xsyevjSetSortEig" in calls
    assert len(set(constants)) == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_call_the_bridge_makes_matches_the_bindings(monkeypatch, dtype):
    fake = FakeCupy()
    on_fake_gpu(monkeypatch, fake)
    A = torch.eye(3, dtype=dtype).expand(2, 3, 3)
    _cupy_bridge.solve(A, True, vectors=True, max_sweeps=50)
    _cupy_bridge.solve(A, False, vectors=False)
    assert fake.calls
    problems = [
        p for name, args, kwargs in fake.calls if (p := _accepts(name, len(args), set(kwargs)))
    ]
    assert not problems, "\n".join(problems)
    made = {name.rsplit(".", 1)[-1] for name, _, _ in fake.calls}
    assert {"xsyevjSetSortEig", "xsyevjSetMaxSweeps", "from_external", "from_dlpack"} <= made
