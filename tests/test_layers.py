"""The package's layers import one way: library ← book ← chapters ← bench.

Read from the source (every ``import`` and ``from … import`` statement, at any depth, of every
module under ``src/eigprec``), so a lazy import inside a function counts as much as one at the
top of a file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import eigprec

SRC = Path(eigprec.__file__).parent
LAYERS = ("book", "chapters", "bench")
# Which upper layers each layer may import (the library, layer None, imports none of them).
ALLOWED = {None: set(), "book": set(), "chapters": {"book"}, "bench": {"book", "chapters"}}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
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
            found.append((node.lineno, target))
            # ``from eigprec import book`` imports a layer too
            if target == "eigprec":
                found += [(node.lineno, f"eigprec.{a.name}") for a in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "eigprec"]


def violations(root: Path = SRC) -> list[str]:
    """Every import that runs against the layers' direction, as ``file:line: a -> b``."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        src = _layer(_module_name(path))
        for line, target in _imports(path):
            dst = _layer(target)
            if dst is not None and dst != src and dst not in ALLOWED[src]:
                bad.append(f"{path.relative_to(root.parent)}:{line}: {src or 'library'} -> {dst}")
    return bad


def test_layers_import_one_way():
    assert violations() == []


def test_the_check_sees_a_wrong_way_import(tmp_path):
    pkg = tmp_path / "eigprec"
    (pkg / "book").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "book" / "__init__.py").write_text("def f():\n    from eigprec.bench import cli\n")
    (pkg / "tf32.py").write_text("from .book import glue\nfrom eigprec import chapters\n")
    global SRC
    saved, SRC = SRC, pkg
    try:
        found = violations(pkg)
    finally:
        SRC = saved
    assert found == [
        "eigprec/book/__init__.py:2: book -> bench",
        "eigprec/tf32.py:1: library -> book",
        "eigprec/tf32.py:2: library -> chapters",
    ]


def test_library_all_holds_library_names_only():
    for name in eigprec.__all__:
        module = (
            getattr(eigprec, name).__module__
            if hasattr(getattr(eigprec, name), "__module__")
            else "eigprec"
        )
        assert _layer(module) is None, f"eigprec.{name} comes from {module}"


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_is_over_600_lines(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= 600, f"{path.name} has {lines} lines; split it"
