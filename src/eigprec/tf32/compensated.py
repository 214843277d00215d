"""The 3xTF32 product: three TF32 matmuls that give nearly float32's accuracy (a remedy).

Each float32 operand is split into a TF32 ``big`` part and a TF32 ``small`` remainder
(:func:`split_tf32`); the three products that matter are then exact in TF32 arithmetic up to
float32 accumulation, whether tensor cores, :func:`eigprec.emulate_tf32` or plain float32 run
them.
"""

from __future__ import annotations

import torch

from eigprec.tf32 import core

__all__ = ["matmul_3xtf32", "split_tf32"]

_MAX_TF32 = (2 - 2**-core.TF32_MANTISSA_BITS) * 2.0**127


def _check_dense(func: str, x: torch.Tensor) -> None:
    # Bit-level rounding needs the values in memory: sparse tensors have no such storage.
    # Meta tensors pass (shapes propagate), so do views of any stride.
    if x.layout != torch.strided:
        raise TypeError(
            f"{func} expects a dense (strided) tensor, got layout {x.layout}; "
            "round the values of a sparse tensor (x.values()) or convert it with to_dense()"
        )


def split_tf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a float32 tensor into a TF32 ``big`` part and a TF32 ``small`` remainder.

    ``big = round_tf32(x, "rne")`` and ``small = round_tf32(x - big, "rne")``;
    ``x - big`` is exact in float32, so (summed exactly) ``big + small`` matches
    ``x`` to 23 of its 24 significant bits: the relative error is at most ``2**-23``
    for ``2**-114 <= |x| <= (2 - 2**-10) * 2**127`` (below, the remainder is
    subnormal and TF32's fixed subnormal spacing ``2**-136`` bounds the absolute error
    instead). Magnitudes above the largest TF32 value, which would round to inf, keep
    ``big`` at that value instead (the largest float32 splits into
    ``(2 - 2**-10) * 2**127`` and ``2**117``), with an absolute error of at most
    ``2**105``, a hair above ``2**-23`` relative; +-inf splits into ``(+-inf, 0)``
    and NaN into ``(NaN, NaN)``.

    Args:
        x: float32 tensor.

    Returns:
        ``(big, small)``, float32 tensors whose values are representable in TF32.

    Raises:
        TypeError: if ``x`` is not a dense (strided) float32 tensor.

    Example:
        >>> import torch
        >>> big, small = split_tf32(torch.tensor([1 + 2**-20]))
        >>> (big.item(), small.item() == 2**-20)
        (1.0, True)
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        what = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"split_tf32 expects a float32 tensor, got {what}")
    _check_dense("split_tf32", x)
    # Clamping keeps finite values from rounding to inf (the clamp changes only values
    # beyond the largest TF32 number, which then truncate to it); infinities pass.
    finite = torch.isfinite(x)
    # [show:split]
    big = core.round_tf32(torch.where(finite, x.clamp(-_MAX_TF32, _MAX_TF32), x), "rne")
    small = core.round_tf32(torch.where(finite, x - big, torch.zeros_like(x)), "rne")
    # [/show:split]
    return big, torch.where(torch.isnan(x), x, small)


def matmul_3xtf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Error-compensated "3xTF32" product: three TF32 matmuls give near-float32 accuracy.

    With ``a = a_big + a_small`` and ``b = b_big + b_small`` (:func:`split_tf32`), the
    result is ``a_big @ b_big + (a_big @ b_small + a_small @ b_big)``; the dropped
    ``a_small @ b_small`` is at most about ``2**-22`` times the product (each small
    part is at most ``2**-11`` of its value). Infinite operands and overflow give inf
    (or NaN) where the float32 product does: where ``a_big @ b_big`` is not finite it
    is returned as is, so the correction products (``inf * 0``) add no NaN. Every operand is
    already representable in TF32, so each of the three matmuls is exact up to float32
    accumulation whichever way the matmul runs: real TF32 tensor cores (their input
    conversion leaves TF32 values unchanged), :func:`emulate_tf32` (rounding is the
    identity on them) or plain float32. The small terms are summed first so that
    their sum is not swamped before it meets the big one.

    Overflow near float32's largest value: the big parts are rounded to nearest, so each
    may exceed its operand by a factor up to ``1 + 2**-11``, and ``a_big @ b_big`` may
    overflow to inf where ``a @ b`` in float32 does not. This happens only for an entry
    whose terms ``|a_ik b_kj|`` sum (in float32) to more than about
    ``2**128 / (1 + 2**-11)**2 ≈ (1 - 2**-10) * 2**128``, i.e. within 0.1 % of the
    largest float32 (3.4028e38). Example: ``a = 2**64 - 2**40`` has big part ``2**64``,
    so ``a * 2**64`` is the largest float32 in float32 but inf here. Scale such
    operands down by a power of two (exact) if results that large matter.

    Args:
        a: float32 tensor with at least one dimension.
        b: float32 tensor with at least one dimension, ``torch.matmul``-compatible
            with ``a``.

    Returns:
        float32 tensor, ``torch.matmul(a, b)`` computed from TF32 pieces.

    Raises:
        TypeError: if ``a`` or ``b`` is not a dense (strided) float32 tensor.
        ValueError: if the inner dimensions do not match or an operand is 0-d.

    Example:
        >>> import torch
        >>> a = torch.tensor([[1 + 2**-20]])
        >>> (matmul_3xtf32(a, a) == a @ a).item()
        True
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            what = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"matmul_3xtf32 expects float32 tensors, {name} is {what}")
        _check_dense("matmul_3xtf32", t)
        if t.dim() == 0:
            raise ValueError(f"matmul_3xtf32 needs at least 1-d operands, {name} is 0-d")
    inner_b = b.shape[0] if b.dim() == 1 else b.shape[-2]
    if a.shape[-1] != inner_b:
        raise ValueError(
            f"matmul_3xtf32: inner dimensions differ, a is {tuple(a.shape)}, b is {tuple(b.shape)}"
        )
    # [show:products]
    a_big, a_small = split_tf32(a)
    b_big, b_small = split_tf32(b)
    corrections = torch.matmul(a_big, b_small) + torch.matmul(a_small, b_big)
    main = torch.matmul(a_big, b_big)
    return torch.where(torch.isfinite(main), main + corrections, main)
    # [/show:products]
