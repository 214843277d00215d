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
    "SOAP_HYPERPARAMETERS",
    "check_flag",
    "check_int",
    "check_real",
    "check_soap_gradient",
    "check_soap_hyperparameters",
    "check_soap_parameter",
    "check_writable",
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


#: The hyperparameters every SOAP param group holds.
SOAP_HYPERPARAMETERS = ("lr", "betas", "shampoo_beta", "eps", "weight_decay")


def check_soap_hyperparameters(group: dict[str, Any], where: str) -> dict[str, Any]:
    """The per-group hyperparameters of ``group``, checked and as Python floats.

    Raises:
        ValueError: if one is missing (a group edited by hand, or a checkpoint's) or out of
            range.
        TypeError: if one is not a real number (``betas``: not a pair).
    """
    missing = [key for key in SOAP_HYPERPARAMETERS if key not in group]
    if missing:
        raise ValueError(f"{where} has no {', '.join(map(repr, missing))}")
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


def check_soap_parameter(p: object, where: str = "a parameter") -> None:
    """Refuse what SOAP cannot precondition: all but dense, real floating 2-D tensors.

    A named parameter ``(name, tensor)`` (torch ≥ 2.6's ``named_parameters()`` input) is
    checked by its tensor. Complex parameters are refused: the real-valued factors and
    moments would drop the imaginary part of every gradient; integer and bool ones have no
    fractional update (a step failed in ``torch.finfo``). So is a tensor a step could not
    write (:func:`check_writable`).
    """
    if isinstance(p, tuple):
        p = p[1] if len(p) == 2 and isinstance(p[0], str) else None
    if not isinstance(p, torch.Tensor) or p.dim() != 2:
        shape = tuple(p.shape) if isinstance(p, torch.Tensor) else type(p).__name__
        raise TypeError(f"SOAP preconditions 2-D parameters only; got shape {shape}")
    if not p.is_floating_point() or p.layout != torch.strided:
        dtype = str(p.dtype).removeprefix("torch.")
        raise TypeError(
            "SOAP preconditions dense real parameters only, of a floating dtype; "
            f"got {dtype}, layout {p.layout}"
        )
    check_writable(p, where)


def check_writable(p: torch.Tensor, where: str) -> None:
    """Refuse a parameter that a step could not write in place (issue 47, item 2).

    A step writes its parameters one after another, so one that fails half-way leaves the
    earlier ones updated; refusing these before the first write keeps a step all or nothing.
    """
    if p.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"SOAP cannot update {where} in place: it is an inference tensor (made under "
            "torch.inference_mode), which torch lets be written only inside inference mode. "
            "Make the parameter outside inference_mode, or pass a clone of it."
        )
    if _shares_memory(p):
        raise ValueError(
            f"SOAP cannot update {where} in place: elements of it share memory (an "
            f"expanded or overlapping view, shape {tuple(p.shape)}, strides {p.stride()}), "
            "so one cannot change without another. Pass a clone of it."
        )


def _shares_memory(p: torch.Tensor) -> bool:
    """Whether two elements of ``p`` are one memory location (an expanded or overlapping view).

    copy_ refuses a stride-0 dimension; other overlaps it writes in some order, which is
    no update of the parameter either.
    """
    dims = sorted(
        (stride, size) for size, stride in zip(p.shape, p.stride(), strict=True) if size > 1
    )
    if p.numel() == 0 or not dims:
        return False
    reach = 0  # the largest offset the dimensions with smaller strides can add
    for stride, size in dims:
        if stride == 0:
            return True
        if stride <= reach:
            break  # not proven apart: count the distinct offsets
        reach += stride * (size - 1)
    else:
        return False
    offsets = torch.zeros((), dtype=torch.int64)
    for size, stride in zip(p.shape, p.stride(), strict=True):
        offsets = offsets.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    return offsets.unique().numel() < p.numel()


def check_soap_gradient(g: torch.Tensor, where: str) -> None:
    """Refuse a sparse, complex or data-less (meta) gradient before a step does any work."""
    if g.layout != torch.strided or g.is_complex() or g.device.type == "meta":
        raise TypeError(
            f"SOAP needs a dense real gradient with data; the gradient of {where} is "
            f"{str(g.dtype).removeprefix('torch.')}, layout {g.layout}, on {g.device.type}"
        )
