"""Which of your float32 products would TF32 hurt? The audit, per line of your code.

``report`` holds :func:`tf32_audit` and what it reports; ``verdict`` what a site's error
means (ordinary rounding, cancellation, inf/NaN); ``attribution`` :func:`tf32_attribution`
(each site alone in TF32); ``mode`` the dispatch mode both run; ``measures``, ``operands``,
``rows``, ``recent`` and ``options`` its error measures, what a product reads and
differentiates, table rows, call history and argument checks; ``cli`` the command line,
``python -m eigprec.audit``, with ``script`` (running a script as python does), ``stops``
(--steps, --max-seconds, SIGTERM), ``unfuse`` and ``writes`` (report files).
"""

from eigprec.audit.attribution import Attribution, SiteEffect, tf32_attribution
from eigprec.audit.report import ENTRY_FLOOR, RANKINGS, AuditRecord, AuditReport, tf32_audit

__all__ = [
    "ENTRY_FLOOR",
    "RANKINGS",
    "Attribution",
    "AuditRecord",
    "AuditReport",
    "SiteEffect",
    "tf32_attribution",
    "tf32_audit",
]
