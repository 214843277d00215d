"""Companion package of the Eigen-Precision book.

Every chapter imports it; the book shows its code with :func:`show_source`.
"""

from .book import glue, load_record, progress
from .eig import default_cluster_tol, kth_eigvalsh
from .precision import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision
from .runtime import RuntimeInfo, describe_runtime, full_scale
from .source import SourceListing, show_source
from .tf32 import (
    emulate_tf32,
    has_real_tf32,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
)

__all__ = [
    "MATMUL_PRECISIONS",
    "RuntimeInfo",
    "SourceListing",
    "current_matmul_precision",
    "default_cluster_tol",
    "describe_runtime",
    "emulate_tf32",
    "full_scale",
    "glue",
    "has_real_tf32",
    "kth_eigvalsh",
    "load_record",
    "matmul_3xtf32",
    "matmul_precision",
    "progress",
    "round_tf32",
    "show_source",
    "split_tf32",
    "tf32_matmul_enabled",
]
__version__ = "0.1.0"
