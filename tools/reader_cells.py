"""Which code of a page's hidden cells its reader's notebook must keep.

Used by tools/reader_notebooks.py. ``remove-cell`` cells (guards, glue) are dropped
from the reader's notebook, but a later visible cell may need a name one of them
defines. Each cell is split into top-level statements; a visible statement's free
names are looked up in the statements of earlier dropped cells, and the definitions
found are kept (with what they need in turn, and what hidden cells add to the object
before the visible cell reads it). A definition inside an assertion or a glue call
cannot be kept, and a name that nothing earlier defines is a reader's NameError: both
are a :class:`GenerationError` naming the cell.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from reader_markdown import GenerationError

__all__ = ["kept_definitions"]

# Names an IPython kernel provides without a definition in any cell.
KERNEL_NAMES = frozenset(dir(builtins)) | {"display", "get_ipython", "In", "Out", "_", "__"}


@dataclass
class Statement:
    """A top-level statement of a dropped cell that may have to be kept."""

    cell: int
    source: str
    defines: set[str]
    needs: set[str]
    lazy: set[str]  # names used inside function bodies: needed only when called
    plumbing: bool  # an assertion or a glue call: never shown to the reader
    mutates: set[str] = field(default_factory=set)  # rows.append(...), shown["x"] = ...
    write_only: set[str] = field(default_factory=set)  # read only to be changed
    kept: bool = False


@dataclass
class Analysis:
    defined: set[str] = field(default_factory=set)
    dropped: list[Statement] = field(default_factory=list)
    star: bool = False


def _python(source: str) -> str:
    """The cell as the kernel runs it (magics turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _names(node: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """Names a statement binds, names it reads at once, names read in function bodies."""
    defines: set[str] = set()
    reads: set[str] = set()
    lazy: set[str] = set()
    local: set[str] = set()

    def visit(n: ast.AST, in_function: bool) -> None:
        if isinstance(n, ast.Name):
            if isinstance(n.ctx, ast.Load):
                (lazy if in_function else reads).add(n.id)
            elif not in_function:
                defines.add(n.id)
            else:
                local.add(n.id)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            for alias in n.names:
                (local if in_function else defines).add((alias.asname or alias.name).split(".")[0])
        elif isinstance(n, ast.arg):
            local.add(n.arg)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            (local if in_function else defines).add(n.name)
            for d in n.decorator_list:
                visit(d, in_function)
            inner = in_function or not isinstance(n, ast.ClassDef)
            for child in ast.iter_child_nodes(n):
                if child not in n.decorator_list:
                    visit(child, inner)
            return
        if isinstance(n, ast.Lambda):
            for child in ast.iter_child_nodes(n):
                visit(child, True)
            return
        for child in ast.iter_child_nodes(n):
            visit(child, in_function)

    visit(node, False)
    # A name the statement binds itself (a loop target, a comprehension variable, an
    # assignment in one branch read after it) is taken to be bound before it is read.
    return defines, reads - defines - _bound_in(node), lazy - local - defines


def _bound_in(node: ast.AST) -> set[str]:
    bound = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension | ast.For | ast.With | ast.NamedExpr):
            bound |= {
                x.id
                for x in ast.walk(n)
                if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)
            }
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
    return bound


MUTATORS = frozenset(
    "append extend insert update add setdefault pop popitem remove discard clear sort "
    "reverse".split()
)


def _mutated(node: ast.AST) -> set[str]:
    """Names whose object the statement changes in place (not rebinds)."""
    return set(_mutation_bases(node))


def _write_only(node: ast.AST) -> set[str]:
    """Names the statement reads only to change their object (``shown["x"] = v``): it
    needs the object to exist, not what hidden cells put in it."""
    loads: dict[str, int] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads[n.id] = loads.get(n.id, 0) + 1
    # Reading back a constant key the statement itself stored (shown["x"] = v; …shown["x"])
    # needs nothing the hidden cells put there either.
    stored = {
        (n.value.id, n.slice.value)
        for n in ast.walk(node)
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and isinstance(n.slice, ast.Constant)
    }
    for n in ast.walk(node):
        if (
            isinstance(n, ast.Subscript)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and isinstance(n.slice, ast.Constant)
            and (n.value.id, n.slice.value) in stored
        ):
            loads[n.value.id] -= 1
    bases = _mutation_bases(node, direct=True)
    return {name for name, count in bases.items() if loads.get(name) == count}


def _mutation_bases(node: ast.AST, direct: bool = False) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in ast.walk(node):
        target = None
        if isinstance(n, ast.Subscript | ast.Attribute) and isinstance(n.ctx, ast.Store | ast.Del):
            target = n.value
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Subscript | ast.Attribute):
            target = n.target.value
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in MUTATORS
        ):
            target = n.func.value
        while not direct and isinstance(target, ast.Subscript | ast.Attribute):
            target = target.value
        if isinstance(target, ast.Name):
            out[target.id] = out.get(target.id, 0) + 1
    return out


def _is_plumbing(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Assert):
            return True
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) and f.id == "glue") or (
                isinstance(f, ast.Attribute) and f.attr == "glue"
            ):
                return True
    return False


def _statements(source: str, cell: int) -> list[tuple[ast.stmt, str]]:
    code = _python(source)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise GenerationError(f"cell {cell}: cannot parse its code ({exc})") from exc
    lines = code.splitlines()
    out = []
    for stmt in tree.body:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
        out.append((stmt, "\n".join(lines[first - 1 : stmt.end_lineno])))
    return out


def _require(
    names: set[str],
    state: Analysis,
    before: int,
    who: str,
    strict: bool,
    write_only: frozenset[str] | set[str] = frozenset(),
) -> None:
    """Keep the dropped statements defining ``names`` (and, unless the reader only
    writes into it, changing their object); fail where none can be kept."""
    for name in sorted(names - state.defined - KERNEL_NAMES):
        providers = [s for s in state.dropped if s.cell < before and name in s.defines]
        if not providers:
            if strict and not state.star:
                raise GenerationError(
                    f"{who} uses `{name}`, which no earlier cell of the reader's notebook defines"
                )
            continue
        stmt = providers[-1]
        if stmt.kept:
            continue
        if stmt.plumbing:
            raise GenerationError(
                f"{who} needs `{name}`, defined in remove-cell cell {stmt.cell} by a "
                "statement that also asserts or glues, so it cannot be kept for the reader; "
                f"move the definition out of it:\n{stmt.source}"
            )
        stmt.kept = True
        _require(
            stmt.needs,
            state,
            stmt.cell + 1,
            f"{who} (through cell {stmt.cell})",
            strict,
            stmt.write_only,
        )
        _require(stmt.lazy, state, stmt.cell + 1, f"{who} (through cell {stmt.cell})", False)
        # What dropped cells add to the object before the visible cell reads it counts too
        # (a table's rows appended in a hidden loop).
        start = state.dropped.index(stmt)
        for later in state.dropped[start + 1 :] if name not in write_only else ():
            if later.cell >= before or later.kept or name not in later.mutates:
                continue
            if later.defines & {name}:
                break  # rebound: what came before is no longer the object read
            if later.plumbing:
                raise GenerationError(
                    f"{who} needs `{name}`, which remove-cell cell {later.cell} changes in a "
                    f"statement that also asserts or glues, so it cannot be kept for the "
                    f"reader; move the change out of it:\n{later.source}"
                )
            later.kept = True
            _require(
                later.needs,
                state,
                later.cell + 1,
                f"{who} (through cell {later.cell})",
                strict,
                later.write_only,
            )
            _require(later.lazy, state, later.cell + 1, f"{who} (through cell {later.cell})", False)


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def kept_definitions(cells: list[dict], install: str) -> dict[int, list[str]]:
    """The statements of dropped cells that the visible cells need, by cell index.

    Args:
        cells: the executed page's cells (nbformat 4, as JSON).
        install: the install cell the reader's notebook opens with.

    Returns:
        For each ``remove-cell`` cell with something to keep, the statements' sources.

    Raises:
        GenerationError: a visible cell needs a definition that cannot be kept, or uses
            a name that no earlier cell defines.
    """
    state = Analysis()
    for stmt, _ in _statements(install, -1):
        state.defined |= _names(stmt)[0]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        who = f"cell {i} (id {cell.get('id', '?')})"
        for stmt, text in _statements("".join(cell["source"]), i):
            defines, reads, lazy = _names(stmt)
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                state.star = True
            if "remove-cell" in _tags(cell):
                state.dropped.append(
                    Statement(
                        i,
                        text,
                        defines,
                        reads,
                        lazy,
                        _is_plumbing(stmt),
                        _mutated(stmt) - defines,
                        _write_only(stmt),
                    )
                )
                continue
            _require(reads, state, i, who, strict=True, write_only=_write_only(stmt))
            _require(lazy, state, i, who, strict=False)
            state.defined |= defines
    kept: dict[int, list[str]] = {}
    for s in state.dropped:
        if s.kept:
            kept.setdefault(s.cell, []).append(s.source)
    return kept
