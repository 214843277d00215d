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
    "describe_runtime",
    "eigenvalue_clusters",
    "eigvec_rotation_experiment",
    "full_scale",
    "glue",
    "load_record",
    "matmul_precision",
    "principal_angles",
    "progress",
    "show_source",
    "spike_angle_table",
    "spike_experiment",
    "subspace_angle",
    "top1_angle",
]
__version__ = "0.1.0"
