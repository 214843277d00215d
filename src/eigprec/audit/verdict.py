"""What an audited site's TF32 error means: ordinary rounding, cancellation, or inf/NaN.

TF32 rounds each operand to 11 significant bits: a relative error of at most ``u = 2**-11``
per entry (ties to nearest, ``rna`` and ``rne``; ``2**-10`` for truncation, ``rz``). Each
term ``a_ik b_kj`` of a product then errs by at most ``(2u + u²)|a_ik b_kj|``, so
``‖C_tf32 − C‖_F ≤ (2u + u²) ‖|A||B|‖_F`` (float32's own accumulation error, about
``√k · 2**-24``, is orders of magnitude smaller). Where the terms do not cancel,
``|A||B| = |C|`` and the norm-wise error is at most ``2u + u²`` ≈ ``2**-10`` (9.8e-4);
random signs make it about ``2**-12`` (2.4e-4) in practice. A larger norm-wise error is
proof of cancellation: the result is smaller than its terms, ``‖|A||B|‖_F / ‖C‖_F`` at
least the error over the bound, and TF32's error is that much larger relative to it. The
same bound holds term by term for a convolution.

A verdict per site, from its worst call:

* ``"ordinary"``: norm-wise error within the bound. Nothing to fix; the ranking among such
  sites is noise.
* ``"cancellation ≥N×"``: above the bound, by at least that factor of cancellation. Fix:
  run the site at full float32 (``eigprec.matmul_precision('highest')`` around it, or
  ``torch.backends.cuda.matmul.fp32_precision = 'ieee'`` there), or use 3xTF32
  (``eigprec.matmul_3xtf32``), float32 accuracy at TF32 speed on tensor cores.
* ``"inf/NaN"``: TF32 gave inf or NaN where float32 did not (an operand within 2**-11 of
  float32's largest value rounds up to 2**128). Fix: the same, or rescale the operands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from eigprec.tf32.rounding import check_rounding

__all__ = ["CANCELLATION", "NONFINITE", "ORDINARY", "ordinary_bound", "site_verdict", "summary"]

ORDINARY = "ordinary"
CANCELLATION = "cancellation"
NONFINITE = "inf/NaN"


def ordinary_bound(rounding: str | None = None) -> float:
    """The largest norm-wise TF32 error of a product without cancellation: ``2u + u²``.

    Args:
        rounding: ``"rna"``, ``"rne"`` (``u = 2**-11``) or ``"rz"`` (``u = 2**-10``);
            None: the default rounding (``EIGPREC_TF32_ROUNDING``, else ``"rna"``).

    Returns:
        The bound, ``2**-10 + 2**-22`` for rounding to nearest.

    Raises:
        ValueError: for an unknown ``rounding``.

    Example:
        >>> ordinary_bound("rna") == 2**-10 + 2**-22, ordinary_bound("rz") == 2**-9 + 2**-20
        (True, True)
    """
    u = 2.0**-10 if check_rounding(rounding) == "rz" else 2.0**-11
    return 2 * u + u * u


def site_verdict(record: Any, rounding: str | None = None) -> str:
    """The verdict on one :class:`~eigprec.audit.AuditRecord` (see the module docstring).

    Args:
        record: the site's record (its ``norm_error`` and ``tf32_nonfinite`` are read).
        rounding: the audit's TF32 rounding (``"rz"`` doubles the bound).

    Returns:
        ``"ordinary"``, ``"cancellation ≥N×"`` (N: the least factor by which the site's
        result is smaller than its terms, rounded down, to a tenth below 10) or
        ``"inf/NaN"``.

    Example:
        >>> from types import SimpleNamespace as Site
        >>> [site_verdict(Site(norm_error=e, tf32_nonfinite=0)) for e in (2.4e-4, 2e-3, 0.03)]
        ['ordinary', 'cancellation ≥2.0×', 'cancellation ≥30×']
    """
    error = record.norm_error
    if record.tf32_nonfinite or not math.isfinite(error):
        return NONFINITE
    bound = ordinary_bound(rounding)
    if error <= bound:
        return ORDINARY
    ratio = error / bound
    least = f"{math.floor(ratio * 10) / 10:.1f}" if ratio < 10 else f"{math.floor(ratio):,}"
    return f"{CANCELLATION} ≥{least}×"


def summary(records: Sequence[Any], rounding: str | None = None) -> str:
    """One line: whether every site is within ordinary TF32 rounding, or how many are not.

    Args:
        records: the report's records.
        rounding: the audit's TF32 rounding.

    Returns:
        ``"Verdict: all N sites within ordinary TF32 rounding ..."`` or
        ``"Verdict: K of N sites lose more than ordinary TF32 rounding ..."``.

    Example:
        >>> from types import SimpleNamespace as Site
        >>> summary([Site(norm_error=2e-4, tf32_nonfinite=0)])[:46]
        'Verdict: all 1 sites within ordinary TF32 roun'
    """
    verdicts = [site_verdict(r, rounding) for r in records]
    if not verdicts:
        return "Verdict: no float32 product was audited"
    bound = ordinary_bound(rounding)
    worse = [v for v in verdicts if v != ORDINARY]
    if not worse:
        return (
            f"Verdict: all {len(verdicts)} sites within ordinary TF32 rounding (norm-wise "
            f"error ≤ {_short(bound)}, typically ≈ 2.4e-4): nothing to fix, and their order "
            "means nothing"
        )
    kinds = [
        f"{n} {name}"
        for name, n in (
            (CANCELLATION, sum(v.startswith(CANCELLATION) for v in worse)),
            (NONFINITE, sum(v == NONFINITE for v in worse)),
        )
        if n
    ]
    return (
        f"Verdict: {len(worse)} of {len(verdicts)} sites lose more than ordinary TF32 "
        f"rounding ({', '.join(kinds)}): the verdict column names them; remedy: "
        "matmul_precision('highest') around the site, or 3xTF32"
    )


def _short(x: float) -> str:
    return f"{x:.1e}".replace("e-0", "e-")
