"""The table rows of an audit report (private helper of :mod:`eigprec.audit`).

Kept apart so that :mod:`eigprec.audit` stays a readable size; the public entry point is
:meth:`eigprec.audit.AuditReport.rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eigprec.audit.verdict import site_verdict

__all__ = ["record_rows"]


def record_rows(
    records: Sequence[Any], depth: int, rounding: str | None = None
) -> list[dict[str, str]]:
    """Format audit records as table rows of strings.

    Args:
        records: :class:`eigprec.audit.AuditRecord` objects, in the order to show.
        depth: the audit's ``depth``; above 1 a row names all recorded frames.
        rounding: the audit's TF32 rounding, for the verdict (:mod:`eigprec.audit.verdict`).

    Returns:
        One dict per record: site (with the module path in brackets), op, shapes, calls
        (with the measured ones in brackets where sampling left calls unmeasured),
        whether the settings asked for TF32 ("TF32 on": ``yes``, ``no`` or ``k/n`` calls),
        the verdict, TF32 error norm-wise, worst entry against its row·column scale
        ``‖A_i,:‖‖B_:,j‖`` (``–`` for convolutions), worst entry against its own size,
        float32's norm-wise error, and, when any record has one, the count of calls where
        TF32 gave inf/NaN.

    Example:
        >>> record_rows([], depth=1)
        []
    """
    rows = [
        {
            "site": (r.where if depth > 1 else r.site) + (f" [{r.module}]" if r.module else ""),
            "op": r.op if r.phase == "forward" else f"{r.op} in {r.phase[10:-1]}",
            "shapes": " × ".join("x".join(map(str, s)) for s in r.shapes),
            "calls": str(r.calls),
            "TF32 on": _tf32_on(r.tf32_calls, r.calls),
            "verdict": site_verdict(r, rounding),
            "TF32 err. (norm)": f"{r.norm_error:.1e}",
            # the entry's error against the largest value its row and column could give:
            # about 2**-12 for any GEMM; far below the entry column where C cancels
            "TF32 err. (row·col)": (
                "–" if r.scaled_entry_error is None else f"{r.scaled_entry_error:.1e}"
            ),
            "TF32 err. (entry)": f"{r.entry_error:.1e}",
            "fp32 err. (norm)": "–" if r.fp32_norm_error is None else f"{r.fp32_norm_error:.1e}",
        }
        for r in records
    ]
    if any(r.measured_calls is not None and r.measured_calls < r.calls for r in records):
        for row, r in zip(rows, records, strict=True):  # only where sampling left calls out
            row["calls"] = f"{r.calls} ({r.measured_calls} measured)"
    if any(r.tf32_nonfinite for r in records):  # only then, so that it cannot be missed
        for row, r in zip(rows, records, strict=True):
            row["TF32 inf/NaN calls"] = str(r.tf32_nonfinite)
    return rows


def _tf32_on(tf32_calls: int, calls: int) -> str:
    # Whether the script's own settings asked for TF32 at this site (what a TF32 GPU does).
    if tf32_calls == 0:
        return "no"
    return "yes" if tf32_calls == calls else f"{tf32_calls}/{calls}"
