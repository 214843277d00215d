"""eigprec — the numerics of eigenproblems on GPUs: TF32 emulation, k-th eigenvalues with
Clarke subgradients, eigenbasis geometry and SOAP/REKLS.

``eigprec.__all__`` is the library, the part meant for reuse. Three packages sit on top of
it and are never imported by it: :mod:`eigprec_book.helpers` (how the book's pages talk to their
reader), ``eigprec_book.chapters`` (each chapter's experiments and plots) and
``eigprec_book.record`` (the command line that records GPU runs).
"""

from eigprec.audit import (
    Attribution,
    AuditRecord,
    AuditReport,
    SiteEffect,
    tf32_attribution,
    tf32_audit,
)
from eigprec.eig import default_cluster_tol, kth_eigvalsh
from eigprec.precision import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision
from eigprec.runtime import RuntimeInfo, describe_runtime
from eigprec.soap import REKLS, SOAP, FactorSignals, SOAPMonitor, SOAPSignals, ema_first_weight
from eigprec.subspace import (
    ClusterAngle,
    cluster_angles,
    davis_kahan_bound,
    eigenvalue_clusters,
    principal_angles,
    subspace_angle,
    top1_angle,
)
from eigprec.tf32 import (
    BackwardAfterExitWarning,
    NotEmulatedWarning,
    emulate_tf32,
    has_real_tf32,
    is_tf32_capability,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
    tf32_mode,
)
from eigprec.timing import time_side_by_side

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
