"""Companion package of the Eigen-Precision book.

Every chapter imports it; the book shows its code with :func:`show_source`.
"""

from .book import glue, load_record, progress
from .degeneracy_experiments import (
    RotationResult,
    SpikeRun,
    eigvec_rotation_experiment,
    spike_angle_table,
    spike_experiment,
)
from .eig import default_cluster_tol, kth_eigvalsh
from .precision import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision
from .runtime import RuntimeInfo, describe_runtime, full_scale
from .soap import REKLS, SOAP
from .source import SourceListing, show_source
from .subspace import (
    ClusterAngle,
    cluster_angles,
    davis_kahan_bound,
    eigenvalue_clusters,
    principal_angles,
    subspace_angle,
    top1_angle,
)
from .tf32 import (
    emulate_tf32,
    has_real_tf32,
    is_tf32_capability,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
)

__all__ = [
    "MATMUL_PRECISIONS",
    "REKLS",
    "SOAP",
    "ClusterAngle",
    "RotationResult",
    "RuntimeInfo",
    "SourceListing",
    "SpikeRun",
    "cluster_angles",
    "current_matmul_precision",
    "davis_kahan_bound",
    "default_cluster_tol",
    "describe_runtime",
    "eigenvalue_clusters",
    "eigvec_rotation_experiment",
    "emulate_tf32",
    "full_scale",
    "glue",
    "has_real_tf32",
    "is_tf32_capability",
    "kth_eigvalsh",
    "load_record",
    "matmul_3xtf32",
    "matmul_precision",
    "principal_angles",
    "progress",
    "round_tf32",
    "show_source",
    "spike_angle_table",
    "spike_experiment",
    "split_tf32",
    "subspace_angle",
    "tf32_matmul_enabled",
    "top1_angle",
]
__version__ = "0.1.0"
