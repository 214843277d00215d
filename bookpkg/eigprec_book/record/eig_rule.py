"""The rule ``kth_eigvalsh(backend="auto")`` is held to, read against a recorded GPU grid.

At each ``(batch, n)``, ``auto`` must use a solver whose error is within :data:`ERROR_FACTOR`
(10×) of the most accurate solver's and whose time is within :data:`TIME_FACTOR` (1.2×) of
the fastest of those accurate ones (:func:`acceptable`). The library's policy
(:func:`eigprec.eig.auto.auto_uses_cupy`) is checked against it by
``tests/test_eig_auto_choice.py`` and by the GPU recorder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ERROR_FACTOR",
    "SOLVER_OF_BACKEND",
    "TIME_FACTOR",
    "acceptable",
    "meets_rule",
    "rows_from_timing_grid",
]

ERROR_FACTOR = 10.0
TIME_FACTOR = 1.2
#: The solver each ``kth_eigvalsh`` backend runs, in a grid record's names.
SOLVER_OF_BACKEND = {"cupy": "cupy.syevjBatched", "torch": "torch.eigh"}
_PHASES = {"forward": "value_error", "train": "residual"}


def _error(entry: Mapping[str, Any], key: str) -> float | None:
    """The error a solver reports for a phase: the value's, or the eigenvector's worst."""
    if key == "value_error":
        return entry.get("value_error")
    errs = [entry.get(k) for k in ("value_error", "residual", "orthogonality")]
    known = [e for e in errs if e is not None]
    return max(known) if known else None


def acceptable(row: Mapping[str, Any], phase: str = "forward") -> list[str]:
    """The solvers that meet the rule at one grid point, in the row's order.

    Among the solvers whose error is within :data:`ERROR_FACTOR` of the smallest error, those
    within :data:`TIME_FACTOR` of the fastest. Errors are ‖A‖-relative: for ``"forward"`` the
    k-th value's, for ``"train"`` the worst of the value's, the k-th eigenvector's residual
    and its orthogonality. A solver without an error (None or absent) is not excluded by it;
    a row without errors is decided on time alone.

    Args:
        row: ``{"n", "batch", "solvers": {name: {"seconds", "value_error", "residual",
            "orthogonality", "train_seconds"?}}}``; ``"train"`` uses ``train_seconds``
            where given.
        phase: ``"forward"`` or ``"train"``.

    Returns:
        The acceptable solvers' names (never empty for a row with solvers).

    Raises:
        ValueError: an unknown phase, or a row with no solver.

    Example:
        >>> row = {"n": 8, "batch": 1, "solvers": {
        ...     "a": {"seconds": 1.0, "value_error": 1e-7},
        ...     "b": {"seconds": 0.1, "value_error": 1e-5}}}
        >>> acceptable(row)
        ['a']
    """
    if phase not in _PHASES:
        raise ValueError(f"acceptable: phase must be 'forward' or 'train', got {phase!r}")
    solvers = row.get("solvers") or {}
    if not solvers:
        raise ValueError(f"acceptable: no solver at n={row.get('n')}, batch={row.get('batch')}")
    accurate, fastest = _accurate(solvers, phase)
    return [name for name in accurate if _seconds(solvers[name], phase) <= TIME_FACTOR * fastest]


def _seconds(entry: Mapping[str, Any], phase: str) -> float:
    if phase == "train" and entry.get("train_seconds") is not None:
        return float(entry["train_seconds"])
    return float(entry["seconds"])


def _accurate(solvers: Mapping[str, Any], phase: str) -> tuple[list[str], float]:
    """The solvers within ERROR_FACTOR of the best error, and the fastest time among them."""
    key = _PHASES[phase]
    # The gradient needs the eigenvector: a solver that reports no residual gave none.
    usable = {
        name: entry
        for name, entry in solvers.items()
        if phase == "forward" or not ("residual" in entry and entry["residual"] is None)
    }
    if not usable:
        raise ValueError(f"acceptable: no solver gives what the {phase} phase needs")
    errors = {name: _error(entry, key) for name, entry in usable.items()}
    known = [e for e in errors.values() if e is not None]
    best = min(known) if known else None
    accurate = [
        name for name, e in errors.items() if e is None or best is None or e <= ERROR_FACTOR * best
    ]
    return accurate, min(_seconds(usable[name], phase) for name in accurate)


def meets_rule(row: Mapping[str, Any], entry: Mapping[str, Any], phase: str = "forward") -> bool:
    """Whether a measured call (``auto``'s) meets the rule against the row's solvers.

    Its error must be within :data:`ERROR_FACTOR` of the best solver's and its time within
    :data:`TIME_FACTOR` of the fastest accurate solver's.

    Args:
        row: as for :func:`acceptable` (the candidates, without ``entry`` itself).
        entry: ``{"seconds", "value_error", "residual", "orthogonality"}`` of the call.
        phase: ``"forward"`` or ``"train"``.

    Returns:
        True where both bounds hold.

    Raises:
        ValueError: as for :func:`acceptable`.

    Example:
        >>> row = {"n": 8, "batch": 1, "solvers": {"a": {"seconds": 1.0, "value_error": 1e-7}}}
        >>> meets_rule(row, {"seconds": 1.1, "value_error": 5e-7})
        True
    """
    if phase not in _PHASES:
        raise ValueError(f"meets_rule: phase must be 'forward' or 'train', got {phase!r}")
    solvers = row.get("solvers") or {}
    if not solvers:
        raise ValueError(f"meets_rule: no solver at n={row.get('n')}, batch={row.get('batch')}")
    accurate, fastest = _accurate(solvers, phase)
    key = _PHASES[phase]
    known = [e for e in (_error(solvers[name], key) for name in accurate) if e is not None]
    mine = _error(entry, key)
    ok_error = mine is None or not known or mine <= ERROR_FACTOR * min(known)
    return ok_error and _seconds(entry, phase) <= TIME_FACTOR * fastest


def rows_from_timing_grid(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for :func:`acceptable` from an ``eigprec_book.record.eig`` record's timing grid.

    The timing grid (schemas 3 to 5) times ``kth_eigvalsh`` on each backend, forward
    (``kth[b]``) and forward + backward (``kth[b]+backward[eigenvector]``), beside
    ``torch.linalg.eigvalsh`` and ``eigh`` + backward, and records no error: the rows carry
    times alone. CuPy's solver is timed as ``kth[cupy]``; torch's as ``torch.linalg`` itself,
    which is what ``kth_eigvalsh`` runs on torch's solver since issue 49 (its thin path), where
    the records' ``kth[torch]`` carried the custom op's overhead of before.

    Args:
        record: a decoded ``eigprec_book.record.eig`` record.

    Returns:
        One row per timing-grid entry, solvers named as in :data:`SOLVER_OF_BACKEND`.

    Raises:
        ValueError: a record of another schema.
    """
    schema = str(record.get("schema", ""))
    if not schema.startswith("eigprec.bench.eig/") or schema.endswith(("/1", "/2")):
        raise ValueError(f"rows_from_timing_grid: not an eig timing record (schema {schema!r})")
    rows = []
    for entry in record["grid"]:
        s = entry["seconds"]
        solvers = {}
        for b in record["settings"]["backends"]:
            if b == "torch":
                times = {"seconds": s["torch.eigvalsh"], "train_seconds": s["torch.eigh+backward"]}
            else:
                times = {
                    "seconds": s[f"kth[{b}]"],
                    "train_seconds": s[f"kth[{b}]+backward[eigenvector]"],
                }
            solvers[SOLVER_OF_BACKEND[b]] = times
        rows.append({"n": entry["n"], "batch": entry["batch"], "solvers": solvers})
    return rows
