"""The library apart from the book (issue 44): layers import one way, no cycle, copyable cores.

Read from the source (every ``import`` and ``from … import`` statement, at any depth, of every
module of ``src/eigprec`` and ``bookpkg/eigprec_book``), so a lazy import inside a function
counts as much as one at the top of a file. The layers, bottom up: the library ``eigprec`` ←
the page helpers ``eigprec_book.helpers`` ← each chapter's experiments
``eigprec_book.chapters`` ← the recorders ``eigprec_book.record``.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import eigprec_book
import pytest

import eigprec

from .conftest import ROOT

LIBRARY = Path(eigprec.__file__).parent
BOOK = Path(eigprec_book.__file__).parent
LAYERS = ("library", "helpers", "chapters", "record")
#: The three headline ideas, each one file that needs only torch and the standard library.
CORES = ("tf32/core.py", "eig/core.py", "soap/core.py")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "eigprec":
        return "library"
    if parts[0] == "eigprec_book":
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "helpers"
    return None


def _module_name(path: Path) -> str:
    root = LIBRARY.parent if path.is_relative_to(LIBRARY) else BOOK.parent
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_module(name: str) -> bool:
    for root in (LIBRARY.parent, BOOK.parent):
        base = root.joinpath(*name.split("."))
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of ``path``; ``from p import m`` names ``p.m`` where
    ``m`` is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            found += [(node.lineno, s) for s in subs] or [(node.lineno, target)]
    return [
        (line, name) for line, name in found if name.split(".")[0] in ("eigprec", "eigprec_book")
    ]


def _sources() -> list[Path]:
    return sorted([*LIBRARY.rglob("*.py"), *BOOK.rglob("*.py")])


def violations(paths: list[Path] | None = None) -> list[str]:
    """Every import that runs against the layers' direction, as ``file:line: a -> b``."""
    bad = []
    for path in paths or _sources():
        src = _layer(_module_name(path))
        for line, target in _imports(path):
            dst = _layer(target)
            if dst is not None and LAYERS.index(dst) > LAYERS.index(src):
                bad.append(f"{_module_name(path)}:{line}: {src} -> {dst}")
    return bad


def test_layers_import_one_way():
    assert violations() == []


def test_the_check_sees_a_wrong_way_import(tmp_path, monkeypatch):
    lib, book = tmp_path / "src" / "eigprec", tmp_path / "book" / "eigprec_book"
    (lib / "tf32").mkdir(parents=True)
    (book / "helpers").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "tf32" / "__init__.py").write_text("from eigprec_book.helpers import glue\n")
    (book / "__init__.py").write_text("")
    (book / "helpers" / "__init__.py").write_text(
        "def f():\n    from eigprec_book.record import cli\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "LIBRARY", lib)
    monkeypatch.setattr(sys.modules[__name__], "BOOK", book)
    found = violations([lib / "tf32" / "__init__.py", book / "helpers" / "__init__.py"])
    assert found == [
        "eigprec.tf32:1: library -> helpers",
        "eigprec_book.helpers:2: helpers -> record",
    ]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in LIBRARY.rglob("*.py"):
        graph[_module_name(path)] = {t for _, t in _imports(path) if t.startswith("eigprec")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt in graph and state.get(nxt) is None and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state.get(node) is None and (found := visit(node)):
            return found
    return None


def test_the_library_has_no_import_cycle():
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_audit_runs_as_a_package_main_without_the_path_work_around():
    assert (LIBRARY / "audit" / "__main__.py").is_file()
    assert not any("__path__" in p.read_text() for p in LIBRARY.rglob("*.py"))


def test_library_all_holds_library_names_only():
    for name in eigprec.__all__:
        module = getattr(getattr(eigprec, name), "__module__", "eigprec")
        assert _layer(module) == "library", f"eigprec.{name} comes from {module}"


def test_import_eigprec_imports_no_book_module():
    code = (
        "import sys, eigprec; print(sorted(m for m in sys.modules if m.startswith('eigprec_book')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_library_module_reads_a_book_variable():
    for path in LIBRARY.rglob("*.py"):
        names = set(re.findall(r"EIGPREC_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
        assert names <= {"EIGPREC_TF32_ROUNDING"}, f"{path.relative_to(LIBRARY)} reads {names}"


@pytest.mark.slow
def test_the_library_wheel_holds_the_library_alone(tmp_path):
    # What `pip install "eigprec @ git+…"` installs: built from the repository root.
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(tmp_path)],
        check=True, capture_output=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )  # fmt: skip
    (wheel,) = out.glob("eigprec-*.whl")
    packages = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert packages == {
        "eigprec",
        wheel.name.split("-py3")[0].replace("-", "_") + ".dist-info",
    } or (packages - {p for p in packages if p.endswith(".dist-info")} == {"eigprec"})
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if re.search(r"(chapters|record|helpers|bench|book)/", n)]


@pytest.mark.parametrize("core", CORES)
def test_each_core_file_imports_only_torch_and_the_standard_library(core):
    tree = ast.parse((LIBRARY / core).read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            roots.add((node.module or "").split(".")[0])
    assert roots - {"__future__", "torch"} <= set(sys.stdlib_module_names), roots


@pytest.mark.parametrize("core", CORES)
def test_each_core_file_runs_its_examples_copied_alone_into_an_empty_folder(core, tmp_path):
    shutil.copy(LIBRARY / core, tmp_path / "core.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for args in (["-m", "doctest", "core.py"], ["core.py"]):
        result = subprocess.run(
            [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, env=env
        )
        assert result.returncode == 0 and "Failed" not in result.stdout, (
            result.stdout + result.stderr
        )


@pytest.mark.parametrize("core", CORES)
def test_each_core_file_is_a_readable_size(core):
    lines = (LIBRARY / core).read_text(encoding="utf-8").count("\n")
    assert lines <= 230, f"{core} has {lines} lines"


def test_the_readme_names_the_core_files():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for core in CORES:
        assert f"src/eigprec/{core}" in readme, core


def _page_code(page: Path) -> list[str]:
    import json

    if page.suffix == ".ipynb":
        cells = json.loads(page.read_text(encoding="utf-8"))["cells"]
        return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    from myst_nb.core.read import read_myst_markdown_notebook

    nb = read_myst_markdown_notebook(page.read_text(encoding="utf-8"))
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_pages_import_no_private_name():
    private = re.compile(r"\beigprec(?:_book)?(?:\.\w+)*\._\w+|from eigprec\S* import [^\n]*\b_\w+")
    pages = sorted([*(ROOT / "book").glob("*.ipynb"), *(ROOT / "book").glob("*.md")])
    found = [
        f"{p.name}: {m.group(0)}" for p in pages for c in _page_code(p) for m in private.finditer(c)
    ]
    assert found == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: _module_name(p))
def test_no_module_is_over_600_lines(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= 600, f"{path.name} has {lines} lines; split it"
