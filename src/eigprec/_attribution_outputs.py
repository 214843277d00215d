"""The outputs of a block under :func:`eigprec.audit.tf32_attribution`, and their checks
(private; kept apart so that :mod:`eigprec.audit` stays a readable size).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__: list[str] = []


def _outputs(value: Any) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        value = {"output": value}
    elif isinstance(value, (tuple, list)):
        value = {f"output {i}": v for i, v in enumerate(value)}
    if not isinstance(value, dict) or not value:
        raise TypeError(
            "block must return a tensor, a non-empty tuple/list of tensors or a dict "
            f"name -> tensor, got {type(value).__name__}"
        )
    for name, v in value.items():
        if not isinstance(v, torch.Tensor) or not v.is_floating_point():
            raise TypeError(f"output {name!r} must be a floating-point tensor, got {v!r:.60}")
    return {str(k): v.detach().double() for k, v in value.items()}


def _equal_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bit for bit but for NaN payloads: a deterministic block may return NaN, and NaN != NaN.
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _check_same(first: dict[str, torch.Tensor], run: dict[str, torch.Tensor], what: str) -> None:
    # Every run of the block must return the same names and shapes: a difference would be
    # broadcast or missed silently by the comparison.
    if list(run) != list(first):
        raise ValueError(
            f"block returned other output names in its {what} ({list(run)}) than in its "
            f"first float32 run ({list(first)}): it must be deterministic"
        )
    for name, value in run.items():
        if value.shape != first[name].shape:
            raise ValueError(
                f"block's output {name!r} changed shape from {tuple(first[name].shape)} to "
                f"{tuple(value.shape)} in its {what}: it must be deterministic"
            )


def _change(new: dict[str, torch.Tensor], old: dict[str, torch.Tensor]) -> dict[str, float]:
    out = {}
    for name, ref in old.items():
        size = float(torch.linalg.vector_norm(ref))
        dist = float(torch.linalg.vector_norm(new[name] - ref))
        out[name] = (0.0 if dist == 0 else math.inf) if size == 0 else dist / size
    return out
