"""The arguments of :func:`eigprec.audit.tf32_audit` and
:func:`eigprec.audit.tf32_attribution`, checked (private; kept apart so that
:mod:`eigprec.audit` stays a readable size).
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np

from eigprec.tf32.gpus import check_gpu
from eigprec.tf32.rounding import check_rounding

__all__: list[str] = []


def check_options(
    rounding: Any = None,
    float64_limit: Any = 0,
    only_enabled: Any = False,
    skip: Any = (),
    depth: Any = 1,
) -> tuple[int, int]:
    # ``(float64_limit, depth)`` as Python ints: NumPy integers count, as elsewhere in the API.
    check_rounding(rounding)  # None: the process default (EIGPREC_TF32_ROUNDING, else "rna")
    float64_limit = _int("float64_limit", float64_limit, 0)
    if not isinstance(only_enabled, bool):
        raise TypeError(f"only_enabled must be a bool, got {type(only_enabled).__name__}")
    if not isinstance(skip, tuple) or not all(isinstance(s, str) and s for s in skip):
        raise TypeError(f"skip must be a tuple of non-empty module names, got {skip!r}")
    return float64_limit, _int("depth", depth, 1)


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = operator.index(value)
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def check_sample(sample: Any) -> int | None:
    # ``sample`` as a Python int (>= 1), or None (every call measured).
    return None if sample is None else _int("sample", sample, 1)


def check_audit_args(
    *,
    rounding: Any = None,
    float64_limit: Any = 2**18,
    only_enabled: Any = False,
    skip: Any = ("torch", "eigprec"),
    depth: Any = 1,
    gpu: Any = None,
    sample: Any = None,
) -> None:
    check_options(rounding, float64_limit, only_enabled, skip, depth)
    check_gpu(gpu)
    check_sample(sample)
