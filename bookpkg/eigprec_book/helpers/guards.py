"""The hidden guards of a chapter page, with the margin each one stands on.

Every quantitative sentence of the book is checked by a hidden cell. A bare ``assert``
says only pass or fail; :func:`guard` also records how far the measured value was from
its bound, so that a claim resting on a thin margin shows up before another machine (a
thread count, an instruction set, a BLAS, the TF32 rounding rule) crosses it. The build
(``tools/execute_pages.py``) points ``EIGPREC_GUARD_LOG`` at one file per page and
merges them into ``_build/guard-margins.json``; ``make robustness`` merges them across
configurations. Without the variable (a reader's own Jupyter) the guards still check and
keep their records in memory (:func:`guard_records`).
"""

from __future__ import annotations

import ast
import json
import math
import numbers
import os
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

from eigprec_book.helpers import notebook

__all__ = [
    "GUARD_LOG_ENV",
    "GUARD_MEASURE_ENV",
    "GuardRecord",
    "between",
    "check",
    "claim",
    "guard",
    "guard_records",
    "live_and_recorded",
]

#: The environment variable naming the file (JSON lines) each guard is appended to.
GUARD_LOG_ENV = "EIGPREC_GUARD_LOG"
#: Set to ``1`` by ``make robustness``: a failing guard is recorded (``passed: false``)
#: and the page goes on, so that every later guard of the page is measured too; the
#: robustness run fails afterwards on any failed record. Never set for a build.
GUARD_MEASURE_ENV = "EIGPREC_GUARD_MEASURE_ONLY"

_OPS = {
    "<": lambda v, b: v < b,
    "<=": lambda v, b: v <= b,
    ">": lambda v, b: v > b,
    ">=": lambda v, b: v >= b,
    "==": lambda v, b: v == b,
    "!=": lambda v, b: v != b,
}
_RECORDS: list[GuardRecord] = []
_LOCK = threading.Lock()


@dataclass(frozen=True)
class GuardRecord:
    """One guard as it was checked.

    Attributes:
        name: what the guard checks, in a few words (unique on its page by convention).
        value: the measured value (``None`` for a yes/no :func:`check`).
        op: the comparison, one of ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``, or
            ``"true"`` for :func:`check`.
        bound: the bound the value was compared with (``None`` for :func:`check`).
        margin: the relative margin: how far the value may move, as a fraction of the
            bound's size, before the guard fails (negative when it failed); ``None``
            where no margin applies (an equality, a yes/no check, an exact bound).
        exact: why the bound is exact and a thin margin is no risk (``""`` if it is not).
        passed: whether the guard held.
        runs_margin: for a count (or share) of runs, how many runs would have to change for
            the guard to fail (``inf`` if none could; negative, the runs it missed by, when it
            failed); ``None`` for other guards.

    Example:
        >>> guard("a turn", 88.0, ">", 80.0)
        >>> record = guard_records()[-1]
        >>> (record.name, record.passed, round(record.margin, 2))
        ('a turn', True, 0.1)
    """

    name: str
    value: float | None
    op: str
    bound: float | None
    margin: float | None
    exact: str
    passed: bool
    runs_margin: float | None = None


def _real(x: Any, what: str, name: str) -> float | int:
    """``x`` as a Python float, or as an int where it is an integer (compared exactly)."""
    numel = getattr(x, "numel", None)
    if callable(numel) and numel() != 1:
        raise TypeError(
            f"guard {name!r}: {what} must be one number, got a tensor of {numel()} elements "
            "(reduce it first: .max(), .min(), or use check() for an all/any condition)"
        )
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, int | float):
        x = x.item()  # one-element tensors and NumPy scalars
    if isinstance(x, str | complex) or not hasattr(x, "__float__"):
        raise TypeError(f"guard {name!r}: {what} must be a real number, got {type(x).__name__}")
    if isinstance(x, numbers.Integral):
        return int(x)
    return float(x)


def _fails_on_nan(*xs: float | int) -> bool:
    return any(isinstance(x, float) and math.isnan(x) for x in xs)


def _runs_margin(k: int, n: int, test: Any) -> float:
    """How many of ``n`` runs must change from ``k`` for ``test(count)`` to change its answer."""
    passed = test(k)
    flips = [abs(j - k) for j in range(n + 1) if test(j) != passed]
    best = min(flips) if flips else math.inf
    return best if passed else -best


def _count(name: str, value: float | int, runs: Any, share_of: Any) -> tuple[int, int, bool]:
    """(k, n, is_share) of a guard on a count or share of runs, checked."""
    if runs is not None and share_of is not None:
        raise TypeError(f"guard {name!r}: give runs or share_of, not both")
    n = runs if runs is not None else share_of
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"guard {name!r}: the number of runs must be an int >= 1, got {n!r}")
    n = int(n)
    count = value if runs is not None else value * n
    k = round(count)
    if runs is None and abs(count - k) > 1e-9 * n:
        raise ValueError(
            f"guard {name!r}: {value!r} of {n} runs is not a whole number of runs ({count!r})"
        )
    if runs is not None and count != k:
        raise ValueError(f"guard {name!r}: a count of runs must be a whole number, got {value!r}")
    if not 0 <= k <= n:
        raise ValueError(f"guard {name!r}: a count of runs must lie between 0 and {n}, got {k}")
    return k, n, runs is None


def relative_margin(value: float, op: str, bound: float) -> float | None:
    """How far ``value`` may move before ``value op bound`` fails, relative to ``|bound|``.

    Args:
        value: the measured value.
        op: ``<``, ``<=``, ``>`` or ``>=`` (``==`` and ``!=`` have no margin).
        bound: the bound.

    Returns:
        ``(bound - value) / |bound|`` for ``<``/``<=``, ``(value - bound) / |bound|`` for
        ``>``/``>=`` (negative when the guard fails); with a zero bound the distance is
        relative to ``|value|`` instead (so 1.0 on the right side of zero); ``None`` for
        ``==``, ``!=`` or a NaN.

    Example:
        >>> relative_margin(88.0, ">", 80.0)
        0.1
        >>> relative_margin(0.5, "<", 1.0)
        0.5
    """
    if op in ("==", "!=") or math.isnan(value) or math.isnan(bound):
        return None
    gap = (bound - value) if op in ("<", "<=") else (value - bound)
    if math.isinf(gap):
        return math.copysign(math.inf, gap)
    scale = abs(bound) if bound != 0 else abs(value)
    if scale == 0:
        return 0.0
    return gap / scale


def _measure_only() -> bool:
    return os.environ.get(GUARD_MEASURE_ENV) == "1" and bool(os.environ.get(GUARD_LOG_ENV))


def _log(record: GuardRecord) -> OSError | None:
    """Keep the record, and append it to the build's log; the error if it cannot be written."""
    with _LOCK:
        _RECORDS.append(record)
        path = os.environ.get(GUARD_LOG_ENV)
        if not path:
            return None
        row = asdict(record)
        for key in ("value", "bound", "margin", "runs_margin"):
            v = row[key]
            if isinstance(v, float) and not math.isfinite(v):
                row[key] = repr(v)  # JSON has no inf or NaN
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as e:
            return e
        return None


def _outcome(record: GuardRecord, message: str) -> None:
    """Log ``record``; raise if it failed (unless measuring only) or could not be logged."""
    error = _log(record)
    where = os.environ.get(GUARD_LOG_ENV)
    if not record.passed and (error is not None or not _measure_only()):
        if error is not None:
            message += f" (and its record could not be written to {where}: {error})"
        raise AssertionError(message) from error
    if error is not None:
        raise OSError(
            f"guard {record.name!r}: its record could not be written to {where} "
            f"({GUARD_LOG_ENV}): {error}"
        ) from error


def guard(
    name: str,
    value: Any,
    op: str,
    bound: Any,
    *,
    exact: str = "",
    runs: int | None = None,
    share_of: int | None = None,
) -> None:
    """Check ``value op bound`` as an ``assert`` would, and record its margin.

    Args:
        name: what the guard checks, a few words (e.g. ``"top-8 angle after the spike"``).
        value: the measured number (a Python or NumPy number, or a one-element tensor).
        op: one of ``"<"``, ``"<="``, ``">"``, ``">="``, ``"=="``, ``"!="``.
        bound: the number it is compared with.
        exact: where a thin margin is no risk, why (e.g. ``"printed rounding of the same
            value"``); the margin report then lists the guard apart.
        runs: ``value`` counts runs out of this many (chaotic runs, seeds): the margin is
            also recorded in runs, the number that would have to change for the guard to
            fail (``GuardRecord.runs_margin``); under 2 runs the report calls it thin.
        share_of: ``value`` is a share of this many runs (``k / n``); as ``runs``.

    Raises:
        AssertionError: if the comparison is false (or either side is NaN, for ``!=`` too),
            naming the guard, the value and the bound.
        TypeError: if ``name`` is not a non-empty string, ``value``/``bound`` is not one
            real number (complex numbers are not), or both ``runs`` and ``share_of`` are given.
        ValueError: if ``op`` is not one of the six comparisons, or a count is not a whole
            number of runs between 0 and their number.

    Example:
        >>> guard("turn after the spike", 88.3, ">", 80.0)
        >>> guard("printed bound", 1.3e-5, ">=", 1.23e-5, exact="printed rounding")
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"guard needs a name, a non-empty string, got {name!r}")
    if op not in _OPS:
        raise ValueError(f"guard {name!r}: op must be one of {sorted(_OPS)}, got {op!r}")
    if not isinstance(exact, str):
        raise TypeError(f"guard {name!r}: exact must be a string (the reason), got {exact!r}")
    v = _real(value, "value", name)
    b = _real(bound, "bound", name)
    runs_margin = None
    if runs is not None or share_of is not None:
        k, n, share = _count(name, v, runs, share_of)
        b_num = b if not _fails_on_nan(b) else math.nan
        runs_margin = _runs_margin(
            k, n, lambda j: bool(_OPS[op](j / n if share else j, b_num)) and not _fails_on_nan(b)
        )
    passed = bool(_OPS[op](v, b)) and not _fails_on_nan(v, b)
    margin = None
    if not (exact or op in ("==", "!=")):
        margin = relative_margin(float(v), op, float(b))
    record = GuardRecord(name, v, op, b, margin, exact, passed, runs_margin)
    _outcome(record, f"guard {name!r} failed: {v!r} {op} {b!r} is false")


def between(
    name: str, value: Any, lo: Any, hi: Any, *, closed: bool = False, exact: str = ""
) -> None:
    """Check ``lo < value < hi`` as an ``assert`` would; the margin is relative to the window.

    A claim "about 0.74" checked as ``0.65 < x < 0.8`` would show a 7.6 % margin relative
    to the bound 0.8 with ``x`` near the window's middle; measured against the window's
    half-width it is 40 %, which is what another machine's arithmetic has to eat up.

    Args:
        name: what the guard checks, a few words.
        value: the measured number (a Python or NumPy number, or a one-element tensor).
        lo: the lower end of the window.
        hi: the upper end, above ``lo``.
        closed: whether the ends themselves pass (``<=``) rather than only the inside.
        exact: as for :func:`guard`.

    Raises:
        AssertionError: if ``value`` lies outside the window (or is NaN).
        TypeError: if ``name`` is not a non-empty string or a number is not one real number.
        ValueError: if ``hi`` is not above ``lo``.

    Example:
        >>> between("spread of the rounding errors", 0.74, 0.65, 0.8)
        >>> round(guard_records()[-1].margin, 2)
        0.8
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"between needs a name, a non-empty string, got {name!r}")
    v, a, b = _real(value, "value", name), _real(lo, "lo", name), _real(hi, "hi", name)
    if not b > a:
        raise ValueError(f"guard {name!r}: hi must be above lo, got lo={a!r}, hi={b!r}")
    passed = bool(a <= v <= b) if closed else bool(a < v < b)
    if exact or math.isnan(v):
        margin = None
    elif math.isinf(a) or math.isinf(b):
        # An open-ended window is a one-sided bound: its margin is that bound's.
        ends = [relative_margin(v, ">", a)] if math.isfinite(a) else []
        ends += [relative_margin(v, "<", b)] if math.isfinite(b) else []
        margin = min(ends) if ends else math.inf
    else:
        # A zero end ("positive, and small") has no scale: that side counts as a sign check.
        half = (b - a) / 2
        low = math.copysign(1.0, v - a) if a == 0 else (v - a) / half
        high = math.copysign(1.0, b - v) if b == 0 else (b - v) / half
        margin = min(low, high)
    op = "in [lo, hi]" if closed else "in (lo, hi)"
    record = GuardRecord(name, v, op, b, margin, exact, passed)
    _outcome(record, f"guard {name!r} failed: {v!r} not {op} with lo={a!r}, hi={b!r}")


def _truth(condition: Any) -> bool:
    """``condition`` as one bool: a bool, a NumPy bool or a one-element bool tensor."""
    if isinstance(condition, bool):
        return condition
    if type(condition).__name__ == "bool_":  # NumPy's bool (numpy.bool_ / numpy.bool)
        return bool(condition)
    numel = getattr(condition, "numel", None)
    dtype = getattr(condition, "dtype", None)
    if callable(numel) and numel() == 1 and str(dtype) == "torch.bool":
        return bool(condition)
    raise TypeError(
        f"check: the condition must be one bool (a bool, a NumPy bool or a one-element bool "
        f"tensor), got {type(condition).__name__}: reduce it first (all(...), .all(), any(...))"
    )


def _source_of_condition(frame: Any) -> str:
    """The text of the first argument of the ``check(...)`` call running in ``frame``."""
    where = f"check at {frame.f_code.co_filename}:{frame.f_lineno}"
    try:
        import executing

        node = executing.Source.executing(frame).node
    except Exception:  # (no source: a frozen or exec'd frame)
        return where
    if not isinstance(node, ast.Call) or not node.args:
        return where
    source = executing.Source.for_frame(frame).text
    text = ast.get_source_segment(source, node.args[0])
    return " ".join(text.split()) if text else where


def check(condition: Any, words: str | None = None) -> None:
    """Check a yes/no condition as an ``assert`` would, and record it.

    For what has no margin: an ``allclose``, an ``.all()`` over a tensor, a set equality,
    a flag. Prefer :func:`guard` with the deciding number where there is one (a maximum
    error against its tolerance).

    Args:
        condition: one bool (a bool, a NumPy bool or a one-element bool tensor): a
            generator, a list or a string is refused rather than read as "true".
        words: what is checked, in a few words; without them the check is named by its
            own condition, as written in the call.

    Raises:
        AssertionError: if the condition is false, naming the check.
        TypeError: if the condition is not one bool, or ``words`` is given but is not a
            non-empty string.

    Example:
        >>> check(2 + 2 == 4)
        >>> guard_records()[-1].name
        '2 + 2 == 4'
    """
    if words is not None and (not isinstance(words, str) or not words.strip()):
        raise TypeError(f"check: words must be a non-empty string, got {words!r}")
    passed = _truth(condition)
    name = words if words is not None else _source_of_condition(sys._getframe(1))
    record = GuardRecord(name, None, "true", None, None, "a yes/no check", passed)
    _outcome(record, f"check {name!r} failed")


def claim(
    name: str,
    value: Any,
    op: str,
    bound: Any,
    *,
    exact: str = "",
    runs: int | None = None,
    share_of: int | None = None,
) -> None:
    """Glue ``value`` under ``name`` for the page's prose and guard ``value op bound``.

    The one call behind a number a sentence prints with a claim about it ("in 6 of 10
    runs", "at most 0.3"): :func:`eigprec_book.helpers.glue` and :func:`guard`, one name.

    Args:
        name: the glue key, also the guard's name.
        value, op, bound, exact, runs, share_of: as for :func:`guard`.

    Raises:
        AssertionError, TypeError, ValueError: as :func:`guard` (nothing is glued then);
            also if ``name`` is not a glue key (letters, digits, ``_`` and ``-``).

    Example:
        >>> claim("turn", 88.3, ">", 80.0)
    """
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"claim: name is a glue key (letters, digits, '_', '-'), got {name!r}")
    guard(name, value, op, bound, exact=exact, runs=runs, share_of=share_of)
    notebook.glue(name, value)


def live_and_recorded(
    name: str,
    live: Any,
    recorded: dict[str, Any],
    op: str,
    bound: Any,
    *,
    record: str,
    cell: str,
    runs: int | None = None,
) -> None:
    """Guard one sentence stated of a live run and of a record of the same cell.

    A chaotic run on another CPU is a run with other seeds: where a page runs a cell live
    and also reads a record of it (made elsewhere, once per seed set), its sentence must
    hold for both. Each value is guarded (margins recorded as :func:`guard` does); where
    the live run and the record disagree -- one passes and another fails -- the error
    says so, naming the record and the cell, so that the sentence is rewritten to what
    both show (a range, "in k of n") rather than the record remade to fit.

    Args:
        name: what the sentence claims, a few words.
        live: this build's value.
        recorded: the record's value per seed set (e.g. ``{"seeds 0-4": 5, ...}``).
        op, bound: the comparison the sentence makes, as for :func:`guard`.
        record: the record's name (``book/data/<record>.json``).
        cell: the cell, in words (``"REKLS 256x64 lr 0.1 x1000 'high'"``).
        runs: as for :func:`guard`, where the values count runs out of this many.

    Raises:
        AssertionError: if any value fails; the message names the record and the cell
            and, where the live run and the record disagree, says so.
        TypeError, ValueError: as :func:`guard`, and for an empty ``recorded``.

    Example:
        >>> live_and_recorded("harmed seeds", 5, {"seeds 0-4": 5, "seeds 1000-1004": 4},
        ...     ">=", 3, record="degeneracy_map_cpu", cell="REKLS 128x64 lr 0.1 x1000", runs=5)
    """
    if not isinstance(recorded, dict) or not recorded:
        raise ValueError(f"live_and_recorded {name!r}: recorded needs at least one seed set")
    values = {"this build's live run": live, **{f"{record} ({k})": v for k, v in recorded.items()}}
    failed = []
    for who, value in values.items():
        try:
            # The guard's own checks (types, op, counts) raise before any comparison fails.
            guard(f"{name} [{cell}; {who}]", value, op, bound, runs=runs)
        except AssertionError:
            failed.append(who)
    if not failed:
        return
    shown = ", ".join(f"{who}: {value!r}" for who, value in values.items())
    if len(failed) == len(values):
        verdict = "neither the live run nor the record holds it"
    else:
        verdict = "the live run and the record disagree"
    raise AssertionError(
        f"{name} ({op} {bound!r}) at {cell}: {verdict} ({shown}); the sentence must say what "
        f"both show, a range or a count, since a run on another CPU is a run with other seeds"
    )


def guard_records() -> list[GuardRecord]:
    """The guards checked so far in this process, oldest first (a copy).

    Returns:
        A list of :class:`GuardRecord`.

    Example:
        >>> guard("x", 1.0, "<", 2.0)
        >>> guard_records()[-1].margin
        0.5
    """
    with _LOCK:
        return list(_RECORDS)
