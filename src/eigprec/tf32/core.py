"""TF32 rounding and a TF32 matrix product, exactly as a TF32 tensor core computes them.

TF32 keeps float32's sign and 8-bit exponent but only 10 of its 23 mantissa bits. A TF32
tensor core rounds each float32 operand to TF32, multiplies (two 11-bit significands give at
most 22 bits: exact in float32) and accumulates in float32. So a TF32 product equals a
float32 product of operands rounded to TF32, which any CPU can compute.

This file needs only torch: copy it alone into a project, or run it to see an example.

Example:
    >>> import torch
    >>> x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11])  # both exactly halfway
    >>> round_tf32(x, "rna").tolist(), round_tf32(x, "rne").tolist()
    ([1.0009765625, 1.001953125], [1.0, 1.001953125])
    >>> a = torch.tensor([[1 + 2**-11]])
    >>> (tf32_matmul(a, a) - a @ a).item() > 0  # the operand was rounded up first
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["ROUNDINGS", "TF32_MANTISSA_BITS", "round_bits", "round_tf32", "tf32_matmul"]

#: Explicit mantissa bits kept by TF32 (float32 keeps 23).
TF32_MANTISSA_BITS = 10
#: Ties away from zero (cuBLAS on Ampere), ties to even (measured on H100/H200), truncation.
ROUNDINGS = ("rna", "rne", "rz")

_DROPPED_BITS = 23 - TF32_MANTISSA_BITS  # the 13 low mantissa bits TF32 drops
_KEEP_MASK = -(1 << _DROPPED_BITS)  # 0xFFFFE000 as a signed int32
_HALF_ULP = 1 << (_DROPPED_BITS - 1)  # 0x1000


def round_bits(
    x: torch.Tensor, rounding: str = "rna", screen: bool = True, nan_free: bool = False
) -> torch.Tensor:
    """Round a float32 tensor to TF32 values by integer arithmetic on its bit patterns.

    Args:
        x: dense float32 tensor (not checked here: see :func:`round_tf32`).
        rounding: one of :data:`ROUNDINGS`.
        screen: on the CPU, look for NaN with one sum first and skip the select if none.
        nan_free: the caller knows ``x`` holds no NaN: neither screen nor select.

    Returns:
        A new float32 tensor of TF32 values; NaN and +-inf unchanged.
    """
    # Rounding the magnitude field of the IEEE pattern as an integer is exact for normal and
    # subnormal numbers alike: a carry out of the mantissa increments the exponent (the next
    # binade, or +-inf past the largest finite value), and the sign bit is never reached
    # because finite magnitudes stay below 0x7F800000 + 0x1000.
    # [show:bits]
    bits = x.view(torch.int32)
    if rounding == "rna":
        out = bits + _HALF_ULP
    elif rounding == "rne":
        # Add just under half an ulp, plus one when the kept part is odd: ties go even.
        out = bits >> _DROPPED_BITS
        out.bitwise_and_(1).add_(_HALF_ULP - 1).add_(bits)
    else:  # "rz": truncation needs no addition
        out = bits.clone()
    out.bitwise_and_(_KEEP_MASK)
    result = out.view(torch.float32)
    # [/show:bits]
    # NaN payloads may sit in the dropped bits (rounding could turn them into inf or -0.0).
    # On a GPU the screen would be a host synchronisation, and torch.func transforms refuse
    # data-dependent control flow, so there the select always runs.
    if nan_free:
        return result
    if not screen or x.device.type != "cpu" or (x.numel() and math.isnan(float(x.sum()))):
        result = torch.where(torch.isnan(x), x, result)
    return result


class _RoundTF32(torch.autograd.Function):
    # Straight-through gradient: TF32 rounding is a storage effect, not part of the model.
    # A branch-free forward with setup_context works under torch.func (grad, jvp); vmap has
    # its own rule because torch 2.11 has no batching rule for the bit reinterpretation.

    @staticmethod
    def forward(x: torch.Tensor, rounding: str) -> torch.Tensor:
        return round_bits(x, rounding, screen=False)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, rounding: str) -> Any:
        return _RoundTF32.apply(x, rounding), in_dims[0]  # elementwise: the batch as it is

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor, _: None) -> torch.Tensor:
        return x_tangent


def round_tf32(x: torch.Tensor, rounding: str = "rna") -> torch.Tensor:
    """Round a float32 tensor to the nearest TF32 values, kept in float32 storage.

    Signed zeros, subnormals, carries into the next binade and overflow to +-inf behave as
    IEEE rounding prescribes; NaN and +-inf are returned unchanged. The gradient, if any,
    passes straight through (also under ``torch.func`` transforms).

    Args:
        x: dense float32 tensor.
        rounding: ``"rna"`` (ties away from zero), ``"rne"`` (ties to even) or ``"rz"``.

    Returns:
        A new float32 tensor whose every value is representable in TF32.

    Raises:
        TypeError: if ``x`` is not a dense float32 tensor.
        ValueError: if ``rounding`` is not one of :data:`ROUNDINGS`.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        what = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"round_tf32 expects a float32 tensor, got {what}")
    if x.layout != torch.strided:
        raise TypeError(
            f"round_tf32 expects a dense (strided) tensor, got layout {x.layout}; "
            "round the values of a sparse tensor (x.values()) or convert it with to_dense()"
        )
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    x = x.resolve_neg()  # a negated view (z.conj().imag) cannot be reinterpreted bit by bit
    under_transform = torch._C._functorch.peek_interpreter_stack() is not None
    if under_transform or (x.requires_grad and torch.is_grad_enabled()):
        return _RoundTF32.apply(x, rounding)
    return round_bits(x.detach(), rounding)


def tf32_matmul(a: torch.Tensor, b: torch.Tensor, rounding: str = "rna") -> torch.Tensor:
    """``a @ b`` as a TF32 tensor core computes it: operands rounded, float32 accumulation.

    Args:
        a: float32 tensor with at least one dimension.
        b: float32 tensor, ``torch.matmul``-compatible with ``a``.
        rounding: how the operands are rounded (:data:`ROUNDINGS`).

    Returns:
        The float32 product of the TF32-rounded operands. It is exact up to the order of the
        float32 sums, which differs between tensor cores and a CPU. (On a CPU at torch's
        'medium' precision oneDNN may multiply in bf16: run it at 'highest'.)

    Raises:
        TypeError, ValueError: as :func:`round_tf32` for either operand.
    """
    # [show:product]
    return torch.matmul(round_tf32(a, rounding), round_tf32(b, rounding))
    # [/show:product]


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    # Eigenvalues from 1 to 1e-6, read back through diag(Q^T A Q): TF32's error is absolute.
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))
    lam = torch.logspace(0, -6, 64, dtype=torch.float64)
    a, q32 = (q * lam) @ q.T, q.float()
    for name, mm in (("float32", torch.matmul), ("TF32", tf32_matmul)):
        back = (mm(mm(q32.T, a.float()), q32)).diagonal().double()
        worst = ((back - lam).abs() / lam).max().item()
        print(f"{name}: worst relative error of the 64 eigenvalues {worst:.2e}")
