"""Companion package of the Eigen-Precision book."""

from eigprec.tf32 import (
    emulate_tf32,
    has_real_tf32,
    matmul_3xtf32,
    round_tf32,
    split_tf32,
    tf32_matmul_enabled,
)

__all__: list[str] = [
    "emulate_tf32",
    "has_real_tf32",
    "matmul_3xtf32",
    "round_tf32",
    "split_tf32",
    "tf32_matmul_enabled",
]
__version__ = "0.1.0"
