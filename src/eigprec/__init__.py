"""eigprec — the numerics of eigenproblems on GPUs: TF32 emulation, k-th eigenvalues with
Clarke subgradients, eigenbasis geometry and SOAP/REKLS.

``eigprec.__all__`` is the library, the part meant for reuse. Three packages sit on top of
it and are never imported by it: :mod:`eigprec_book.helpers` (how the book's pages talk to their
reader), ``eigprec_book.chapters`` (each chapter's experiments and plots) and
``eigprec_book.record`` (the command line that records GPU runs).
"""

import importlib
from typing import Any

# Each public name is imported from its subpackage on first use (PEP 562), so that
# ``import eigprec.audit`` or ``import eigprec.tf32`` loads that subpackage alone: the
# eigenvalue code imports torch._dynamo (``torch.compiler`` decorators), seconds of start-up
# that ``python -m eigprec.audit`` does not need.
_WHERE = {
    "Attribution": "eigprec.audit",
    "AuditRecord": "eigprec.audit",
    "AuditReport": "eigprec.audit",
    "SiteEffect": "eigprec.audit",
    "tf32_attribution": "eigprec.audit",
    "tf32_audit": "eigprec.audit",
    "default_cluster_tol": "eigprec.eig",
    "kth_eigvalsh": "eigprec.eig",
    "MATMUL_PRECISIONS": "eigprec.precision",
    "current_matmul_precision": "eigprec.precision",
    "matmul_precision": "eigprec.precision",
    "RuntimeInfo": "eigprec.runtime",
    "describe_runtime": "eigprec.runtime",
    "FactorSignals": "eigprec.soap",
    "REKLS": "eigprec.soap",
    "SOAP": "eigprec.soap",
    "SOAPMonitor": "eigprec.soap",
    "SOAPSignals": "eigprec.soap",
    "ema_first_weight": "eigprec.soap",
    "ClusterAngle": "eigprec.subspace",
    "cluster_angles": "eigprec.subspace",
    "davis_kahan_bound": "eigprec.subspace",
    "eigenvalue_clusters": "eigprec.subspace",
    "principal_angles": "eigprec.subspace",
    "subspace_angle": "eigprec.subspace",
    "top1_angle": "eigprec.subspace",
    "BackwardAfterExitWarning": "eigprec.tf32",
    "NotEmulatedWarning": "eigprec.tf32",
    "emulate_tf32": "eigprec.tf32",
    "has_real_tf32": "eigprec.tf32",
    "is_tf32_capability": "eigprec.tf32",
    "matmul_3xtf32": "eigprec.tf32",
    "round_tf32": "eigprec.tf32",
    "split_tf32": "eigprec.tf32",
    "tf32_matmul_enabled": "eigprec.tf32",
    "tf32_mode": "eigprec.tf32",
    "time_side_by_side": "eigprec.timing",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'eigprec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


__all__ = [
    "MATMUL_PRECISIONS",
    "REKLS",
    "SOAP",
    "Attribution",
    "AuditRecord",
    "AuditReport",
    "BackwardAfterExitWarning",
    "ClusterAngle",
    "FactorSignals",
    "NotEmulatedWarning",
    "RuntimeInfo",
    "SOAPMonitor",
    "SOAPSignals",
    "SiteEffect",
    "cluster_angles",
    "current_matmul_precision",
    "davis_kahan_bound",
    "default_cluster_tol",
    "describe_runtime",
    "eigenvalue_clusters",
    "ema_first_weight",
    "emulate_tf32",
    "has_real_tf32",
    "is_tf32_capability",
    "kth_eigvalsh",
    "matmul_3xtf32",
    "matmul_precision",
    "principal_angles",
    "round_tf32",
    "split_tf32",
    "subspace_angle",
    "tf32_attribution",
    "tf32_audit",
    "tf32_matmul_enabled",
    "tf32_mode",
    "time_side_by_side",
    "top1_angle",
]
__version__ = "0.1.0"
