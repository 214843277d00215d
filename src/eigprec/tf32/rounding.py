"""Which TF32 rounding rule a call uses, and :func:`round_tf32` with that default.

The rounding itself is :func:`eigprec.tf32.core.round_bits`; this module adds the rule a
call gets when it names none (``rounding=None``), which the environment variable
``EIGPREC_TF32_ROUNDING`` may set (the book's configuration matrix runs every page with
``rne`` too).
"""

from __future__ import annotations

import os

import torch

from eigprec.tf32 import core
from eigprec.tf32.core import ROUNDINGS

__all__ = ["ROUNDINGS", "ROUNDING_ENV", "default_rounding", "round_tf32"]

#: The environment variable that sets the rounding used where a call leaves it unset
#: (``rounding=None``); ``"rna"`` where it is unset.
ROUNDING_ENV = "EIGPREC_TF32_ROUNDING"


def default_rounding() -> str:
    """The TF32 rounding used where a call leaves ``rounding`` unset (``None``).

    Returns:
        The value of the environment variable ``EIGPREC_TF32_ROUNDING`` if it is set,
        else ``"rna"``.

    Raises:
        ValueError: if ``EIGPREC_TF32_ROUNDING`` is set to something other than one of
            ``ROUNDINGS``.

    Example:
        >>> import os
        >>> default_rounding() == os.environ.get("EIGPREC_TF32_ROUNDING", "rna")
        True
    """
    value = os.environ.get(ROUNDING_ENV)
    if value is None:
        return "rna"
    if value not in ROUNDINGS:
        raise ValueError(f"{ROUNDING_ENV} must be one of {ROUNDINGS}, got {value!r}")
    return value


def check_rounding(rounding: object) -> str:
    """``rounding`` itself if it is one of ``ROUNDINGS``, :func:`default_rounding` for None.

    Raises:
        ValueError: for anything else.
    """
    if rounding is None:
        return default_rounding()
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return rounding


def round_tf32(x: torch.Tensor, rounding: str | None = None) -> torch.Tensor:
    """Round a float32 tensor to the nearest TF32 values (kept in float32 storage).

    The 13 low mantissa bits are rounded away: ``"rna"`` to nearest with ties away
    from zero (cuBLAS on Ampere, CUTLASS's pre-Hopper conversion), ``"rne"`` to
    nearest with ties to even (the H100 and H200 recorded for the book), ``"rz"`` towards
    zero (truncation). Signed zeros, subnormals (TF32 has float32's exponent range, so
    subnormals keep their top 10 mantissa bits), carries into the next binade and overflow
    to +-inf beyond the largest TF32 value ``(2 - 2**-10) * 2**127`` behave as IEEE
    rounding prescribes; NaN and +-inf are returned unchanged. Works on any device and
    shape; the gradient, if any, passes straight through (also under ``torch.func.grad``,
    ``jvp`` and ``vmap``). The work is ``eigprec.tf32.core.round_tf32``.

    Args:
        x: float32 tensor.
        rounding: ``"rna"``, ``"rne"`` or ``"rz"``; None: ``eigprec.tf32.default_rounding()``
            (``"rna"`` unless ``EIGPREC_TF32_ROUNDING`` says otherwise).

    Returns:
        A new float32 tensor of the same shape and device, every value representable
        in TF32.

    Raises:
        TypeError: if ``x`` is not a dense (strided) float32 tensor.
        ValueError: if ``rounding`` is not one of ``ROUNDINGS`` (``"rna"``, ``"rne"``, ``"rz"``).

    Example:
        >>> import torch
        >>> round_tf32(torch.tensor([1 + 2**-11, 1 + 3 * 2**-11]), "rne").tolist()
        [1.0, 1.001953125]
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"round_tf32 expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"round_tf32 expects a float32 tensor, got dtype {x.dtype}")
    return core.round_tf32(x, check_rounding(rounding))
