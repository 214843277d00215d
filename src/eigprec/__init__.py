"""Companion package of the Eigen-Precision book.

Every chapter imports it; the book shows its code with :func:`show_source`.
"""

from .book import glue, load_record, progress
from .precision import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision
from .runtime import RuntimeInfo, describe_runtime, full_scale
from .source import SourceListing, show_source

__all__ = [
    "MATMUL_PRECISIONS",
    "RuntimeInfo",
    "SourceListing",
    "current_matmul_precision",
    "describe_runtime",
    "full_scale",
    "glue",
    "load_record",
    "matmul_precision",
    "progress",
    "show_source",
]
__version__ = "0.1.0"
