"""Argument checks shared by :mod:`eigprec.soap` and :mod:`eigprec.subspace`.

One rule for every public function: a number is a real Python or NumPy scalar but never a
bool (``True`` is an ``int`` to Python, not a learning rate), a flag is a real bool (a
truthy string such as ``"no"`` must not switch an option on), a wrong type raises
``TypeError`` and a wrong value ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np
import torch

__all__ = [
    "check_flag",
    "check_int",
    "check_real",
    "check_soap_gradient",
    "check_soap_hyperparameters",
    "check_soap_parameter",
]


def check_flag(name: str, value: object) -> bool:
    """``value`` as a Python bool; ``TypeError`` unless it is a bool or a NumPy bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_real(
    name: str,
    value: object,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> float:
    """``value`` as a Python float inside the stated interval.

    Raises:
        TypeError: if ``value`` is a bool or not a real number (Python or NumPy scalar).
        ValueError: if it is NaN, not finite while ``finite``, or outside the interval.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float's range, such as 10**400
        x = math.inf if value > 0 else -math.inf
    below = x <= low if low_open else x < low
    above = x >= high if high_open else x > high
    if math.isnan(x) or (finite and not math.isfinite(x)) or below or above:
        if high == math.inf:
            where = f"{'>' if low_open else '≥'} {low:g}"
        else:
            where = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        what = "a finite number" if finite else "a number"
        raise ValueError(f"{name} must be {what} {where}, got {value!r}")
    return x


def check_int(name: str, value: object, *, low: int | None = None) -> int:
    """``value`` as a Python int ≥ ``low``; NumPy integers count, bools and floats do not."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    k = operator.index(value)
    if low is not None and k < low:
        raise ValueError(f"{name} must be ≥ {low}, got {k}")
    return k


def check_soap_hyperparameters(group: dict[str, Any], where: str) -> dict[str, Any]:
    """The per-group hyperparameters of ``group``, checked and as Python floats."""
    betas = group["betas"]
    if not isinstance(betas, tuple | list):
        raise TypeError(f"{where}: betas must be a pair (beta1, beta2), got {betas!r}")
    if len(betas) != 2:
        raise ValueError(f"{where}: betas must be a pair (beta1, beta2), got {betas!r}")
    unit = {"low": 0.0, "high": 1.0, "high_open": True}
    return {
        "lr": check_real(f"{where}: lr", group["lr"], low=0.0),
        "betas": (
            check_real(f"{where}: betas[0]", betas[0], **unit),
            check_real(f"{where}: betas[1]", betas[1], **unit),
        ),
        "shampoo_beta": check_real(f"{where}: shampoo_beta", group["shampoo_beta"], **unit),
        "eps": check_real(f"{where}: eps", group["eps"], low=0.0, low_open=True),
        "weight_decay": check_real(f"{where}: weight_decay", group["weight_decay"], low=0.0),
    }


def check_soap_parameter(p: object) -> None:
    """Refuse what SOAP cannot precondition: all but dense, real 2-D tensors.

    A named parameter ``(name, tensor)`` (torch ≥ 2.6's ``named_parameters()`` input) is
    checked by its tensor. Complex parameters are refused: the real-valued factors and
    moments would drop the imaginary part of every gradient.
    """
    if isinstance(p, tuple):
        p = p[1] if len(p) == 2 and isinstance(p[0], str) else None
    if not isinstance(p, torch.Tensor) or p.dim() != 2:
        shape = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
        raise TypeError(f"SOAP preconditions 2-D parameters only; got shape {shape}")
    if p.is_complex() or p.layout != torch.strided:
        dtype = str(p.dtype).removeprefix("torch.")
        raise TypeError(
            f"SOAP preconditions dense real parameters only; got {dtype}, layout {p.layout}"
        )


def check_soap_gradient(g: torch.Tensor, where: str) -> None:
    """Refuse a sparse, complex or data-less (meta) gradient before a step does any work."""
    if g.layout != torch.strided or g.is_complex() or g.device.type == "meta":
        raise TypeError(
            f"SOAP needs a dense real gradient with data; the gradient of {where} is "
            f"{str(g.dtype).removeprefix('torch.')}, layout {g.layout}, on {g.device.type}"
        )
