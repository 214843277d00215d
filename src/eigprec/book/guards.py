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

import json
import math
import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "GUARD_LOG_ENV",
    "GUARD_MEASURE_ENV",
    "GuardRecord",
    "between",
    "check",
    "guard",
    "guard_records",
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


def _real(x: Any, what: str, name: str) -> float:
    if isinstance(x, str) or not hasattr(x, "__float__"):
        raise TypeError(f"guard {name!r}: {what} must be a real number, got {type(x).__name__}")
    numel = getattr(x, "numel", None)
    if callable(numel) and numel() != 1:
        raise TypeError(
            f"guard {name!r}: {what} must be one number, got a tensor of {numel()} elements "
            "(reduce it first: .max(), .min(), or use check() for an all/any condition)"
        )
    return float(x)


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


def _log(record: GuardRecord) -> None:
    with _LOCK:
        _RECORDS.append(record)
        path = os.environ.get(GUARD_LOG_ENV)
        if not path:
            return
        row = asdict(record)
        for key in ("value", "bound", "margin"):
            v = row[key]
            if isinstance(v, float) and not math.isfinite(v):
                row[key] = repr(v)  # JSON has no inf or NaN
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def guard(name: str, value: Any, op: str, bound: Any, *, exact: str = "") -> None:
    """Check ``value op bound`` as an ``assert`` would, and record its margin.

    Args:
        name: what the guard checks, a few words (e.g. ``"top-8 angle after the spike"``).
        value: the measured number (a Python or NumPy number, or a one-element tensor).
        op: one of ``"<"``, ``"<="``, ``">"``, ``">="``, ``"=="``, ``"!="``.
        bound: the number it is compared with.
        exact: where a thin margin is no risk, why (e.g. ``"printed rounding of the same
            value"``, ``"a count"``); the margin report then lists the guard apart.

    Raises:
        AssertionError: if the comparison is false (or NaN), naming the guard, the value
            and the bound.
        TypeError: if ``name`` is not a non-empty string, or ``value``/``bound`` is not one
            real number.
        ValueError: if ``op`` is not one of the six comparisons.

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
    passed = bool(_OPS[op](v, b))
    margin = None if (exact or op in ("==", "!=")) else relative_margin(v, op, b)
    _log(GuardRecord(name, v, op, b, margin, exact, passed))
    if not passed and not _measure_only():
        raise AssertionError(f"guard {name!r} failed: {v!r} {op} {b!r} is false")


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
    else:
        # A zero end ("positive, and small") has no scale: that side counts as a sign check.
        half = (b - a) / 2
        low = math.copysign(1.0, v - a) if a == 0 else (v - a) / half
        high = math.copysign(1.0, b - v) if b == 0 else (b - v) / half
        margin = min(low, high)
    op = "in [lo, hi]" if closed else "in (lo, hi)"
    _log(GuardRecord(name, v, op, b, margin, exact, passed))
    if not passed and not _measure_only():
        raise AssertionError(f"guard {name!r} failed: {v!r} not {op} with lo={a!r}, hi={b!r}")


def check(name: str, condition: Any) -> None:
    """Check a yes/no condition as an ``assert`` would, and record it.

    For what has no margin: an ``allclose``, an ``.all()`` over a tensor, a set equality,
    a flag. Prefer :func:`guard` with the deciding number where there is one (a maximum
    error against its tolerance).

    Args:
        name: what is checked, a few words.
        condition: anything ``bool()`` accepts (a one-element tensor included).

    Raises:
        AssertionError: if ``bool(condition)`` is false, naming the check.
        TypeError: if ``name`` is not a non-empty string.

    Example:
        >>> check("every weight finite", True)
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"check needs a name, a non-empty string, got {name!r}")
    passed = bool(condition)
    _log(GuardRecord(name, None, "true", None, None, "a yes/no check", passed))
    if not passed and not _measure_only():
        raise AssertionError(f"check {name!r} failed")


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
