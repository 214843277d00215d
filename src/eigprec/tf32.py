"""Exact TF32 emulation: rounding, an emulating context manager and the 3xTF32 product.

TF32 ("TensorFloat-32") is the operand format of NVIDIA tensor cores from Ampere
(compute capability 8.0) on: float32's sign and 8-bit exponent with only 10 of its 23
explicit mantissa bits. Products of two TF32 values are exact in float32 (11 x 11
significant bits fit into float32's 24), so a TF32 matmul equals a float32 matmul of
operands rounded to TF32, accumulated in float32. That identity is what
:func:`emulate_tf32` relies on.

Which knob turns TF32 on? On torch >= 2.9 cuBLAS reads one value only,
``torch.backends.cuda.matmul.fp32_precision`` (``"tf32"`` or not), which
``torch.set_float32_matmul_precision('high' | 'medium')``, the legacy
``torch.backends.cuda.matmul.allow_tf32 = True`` and the generic
``torch.backends.fp32_precision = "tf32"`` all feed. On older torch the legacy flag is
the only one. :func:`tf32_matmul_enabled` reads it the same way.

'medium' is emulated as TF32: torch records it as cuBLAS matmul precision ``"tf32"``,
the value cuBLAS reads (``python -m eigprec.bench tf32`` checks this on a real GPU).
On the CPU 'medium' lets oneDNN use bf16; the emulation pins float32 accumulation
there instead, so it models the GPU, not that CPU path.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "ROUNDINGS",
    "TF32_MANTISSA_BITS",
    "emulate_tf32",
    "has_real_tf32",
    "is_tf32_capability",
    "matmul_3xtf32",
    "round_tf32",
    "split_tf32",
    "tf32_matmul_enabled",
    "tf32_mode",
]

#: Explicit mantissa bits kept by TF32 (float32 keeps 23).
TF32_MANTISSA_BITS = 10

#: The rounding rules :func:`round_tf32` implements.
ROUNDINGS = ("rna", "rne", "rz")

# The 13 low mantissa bits that TF32 drops, and half of the unit they leave behind.
_DROPPED_BITS = 23 - TF32_MANTISSA_BITS
_KEEP_MASK = -(1 << _DROPPED_BITS)  # 0xFFFFE000 as a signed int32
_HALF_ULP = 1 << (_DROPPED_BITS - 1)  # 0x1000


def _check_rounding(rounding: object) -> str:
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return rounding


def _round_bits(x: torch.Tensor, rounding: str) -> torch.Tensor:
    # Rounding the magnitude field of the IEEE pattern as an integer is exact for
    # normal and subnormal numbers alike: a carry out of the mantissa increments the
    # exponent (the next binade, or +-inf past the largest finite value), and the sign
    # bit is never reached because finite magnitudes stay below 0x7F800000 + 0x1000.
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
    # NaN payloads may sit in the dropped bits (rounding could turn them into inf or
    # even -0.0). On the CPU a NaN makes the sum NaN, so one read-only reduction screens
    # for them and the select runs only when needed (also on inf + -inf, harmlessly).
    # On a GPU that screen would be a host synchronisation, so the select always runs.
    if x.device.type != "cpu" or (x.numel() and bool(torch.isnan(x.sum()))):
        result = torch.where(torch.isnan(x), x, result)
    return result


class _RoundTF32(torch.autograd.Function):
    # Straight-through gradient: TF32 rounding is a storage effect, not part of the model.
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rounding: str) -> torch.Tensor:
        return _round_bits(x, rounding)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def round_tf32(x: torch.Tensor, rounding: str = "rna") -> torch.Tensor:
    """Round a float32 tensor to the nearest TF32 values (kept in float32 storage).

    The 13 low mantissa bits are rounded away: ``"rna"`` to nearest with ties away
    from zero (cuBLAS on Ampere, CUTLASS's pre-Hopper conversion), ``"rne"`` to
    nearest with ties to even, ``"rz"`` towards zero (truncation). Signed zeros,
    subnormals (TF32 has float32's exponent range, so subnormals keep their top 10
    mantissa bits), carries into the next binade and overflow to +-inf beyond the
    largest TF32 value ``(2 - 2**-10) * 2**127`` behave as IEEE rounding prescribes;
    NaN and +-inf are returned unchanged. Works on any device and shape; the
    gradient, if any, passes straight through.

    Args:
        x: float32 tensor.
        rounding: ``"rna"``, ``"rne"`` or ``"rz"``.

    Returns:
        A new float32 tensor of the same shape and device, every value representable
        in TF32.

    Raises:
        TypeError: if ``x`` is not a float32 tensor.
        ValueError: if ``rounding`` is not one of :data:`ROUNDINGS`.

    Example:
        >>> import torch
        >>> round_tf32(torch.tensor([1 + 2**-11, 1 + 3 * 2**-11]), "rne").tolist()
        [1.0, 1.001953125]
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"round_tf32 expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"round_tf32 expects a float32 tensor, got dtype {x.dtype}")
    _check_rounding(rounding)
    if x.requires_grad and torch.is_grad_enabled():
        return _RoundTF32.apply(x, rounding)
    return _round_bits(x.detach(), rounding)


def split_tf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a float32 tensor into a TF32 ``big`` part and a TF32 ``small`` remainder.

    ``big = round_tf32(x, "rne")`` and ``small = round_tf32(x - big, "rne")``;
    ``x - big`` is exact in float32, so ``big + small`` matches ``x`` to about 22 of
    its 24 significant bits (relative error at most ``2**-22`` for normal numbers).

    Args:
        x: float32 tensor.

    Returns:
        ``(big, small)``, float32 tensors whose values are representable in TF32.

    Raises:
        TypeError: if ``x`` is not a float32 tensor.

    Example:
        >>> import torch
        >>> big, small = split_tf32(torch.tensor([1 + 2**-20]))
        >>> (big.item(), small.item() == 2**-20)
        (1.0, True)
    """
    # [show:split]
    big = round_tf32(x, "rne")
    small = round_tf32(x - big, "rne")
    # [/show:split]
    return big, small


def matmul_3xtf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Error-compensated "3xTF32" product: three TF32 matmuls give near-float32 accuracy.

    With ``a = a_big + a_small`` and ``b = b_big + b_small`` (:func:`split_tf32`), the
    result is ``a_big @ b_big + (a_big @ b_small + a_small @ b_big)``; the dropped
    ``a_small @ b_small`` is about ``2**-22`` times the product. Every operand is
    already representable in TF32, so each of the three matmuls is exact up to float32
    accumulation whichever way the matmul runs: real TF32 tensor cores (their input
    conversion leaves TF32 values unchanged), :func:`emulate_tf32` (rounding is the
    identity on them) or plain float32. The small terms are summed first so that
    their sum is not swamped before it meets the big one.

    Args:
        a: float32 tensor with at least one dimension.
        b: float32 tensor with at least one dimension, ``torch.matmul``-compatible
            with ``a``.

    Returns:
        float32 tensor, ``torch.matmul(a, b)`` computed from TF32 pieces.

    Raises:
        TypeError: if ``a`` or ``b`` is not a float32 tensor.
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
    return torch.matmul(a_big, b_big) + corrections
    # [/show:products]


def tf32_matmul_enabled() -> bool:
    """Whether torch's current settings make cuBLAS run float32 matmuls in TF32.

    Reads ``torch.backends.cuda.matmul.fp32_precision == "tf32"`` where it exists
    (torch >= 2.9: the value cuBLAS itself consults; it follows
    ``set_float32_matmul_precision``, the legacy ``allow_tf32`` flag and the generic
    ``torch.backends.fp32_precision``), else the legacy ``allow_tf32`` flag. Unlike
    ``torch.get_float32_matmul_precision()`` it never raises when old and new APIs
    were mixed.

    Returns:
        True when a TF32-capable NVIDIA GPU would use TF32 for a float32 matmul now.

    Example:
        >>> import torch
        >>> torch.backends.cuda.matmul.fp32_precision = "none"  # torch's default
        >>> tf32_matmul_enabled()
        False
    """
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", None)
    if precision is not None:
        return precision == "tf32"
    return bool(matmul.allow_tf32)


def has_real_tf32(device: torch.device | str) -> bool:
    """Whether float32 matmuls on ``device`` can run on TF32 tensor cores.

    True for CUDA devices of compute capability 8.0 or higher (Ampere and later) in a
    CUDA (not ROCm) build of torch; False for the CPU and everything else.

    Args:
        device: a torch device or device string.

    Returns:
        True when real TF32 hardware backs float32 matmuls on ``device``.

    Example:
        >>> has_real_tf32("cpu")
        False
    """
    device = torch.device(device)
    if device.type != "cuda":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return is_tf32_capability(_capability(index))


def is_tf32_capability(capability: tuple[int, int]) -> bool:
    """Whether a CUDA device of this compute capability has TF32 tensor cores.

    The one definition the package uses (the provenance box, the emulator, the GPU
    recorder): an NVIDIA device, i.e. a CUDA rather than a ROCm build of torch, of
    compute capability 8.0 (Ampere) or later.

    Args:
        capability: ``(major, minor)``, as :func:`torch.cuda.get_device_capability`.

    Returns:
        True when TF32 exists in hardware.

    Example:
        >>> is_tf32_capability((7, 5)), is_tf32_capability((9, 0))  # a T4; an H100
        (False, True)
    """
    # ROCm builds also answer torch.cuda; TF32 as discussed here is NVIDIA's.
    return torch.version.hip is None and tuple(capability) >= (8, 0)


_CAPABILITIES: dict[int, tuple[int, int]] = {}


def _capability(index: int) -> tuple[int, int]:
    if index not in _CAPABILITIES:
        _CAPABILITIES[index] = tuple(torch.cuda.get_device_capability(index))
    return _CAPABILITIES[index]


# --- the emulating mode -------------------------------------------------------------

# The mode works at the level of ATen operators, below autograd, autocast and the
# Python-level wrappers: `@`, `matmul`, `einsum`, `tensordot`, `linear`, `multi_dot`,
# `cdist`, attention's math path and autograd's own backward products all reach the
# GEMM kernels below, so rounding there treats every real GEMM (intermediate
# products of a chain included) as cuBLAS does, and nothing else: `mv` and `dot` run
# on CUDA cores without TF32 on a GPU, reductions are not products, and autocast has
# already cast to fp16/bf16 by the time an op arrives here.
_aten = torch.ops.aten

# ATen GEMM overload packet -> positions of the multiplied operands (the additive
# `self` of addmm-style ops is not multiplied and stays float32, as in cuBLAS).
_GEMMS: dict[Any, tuple[int, ...]] = {
    _aten.mm: (0, 1),
    _aten.bmm: (0, 1),
    _aten.addmm: (1, 2),
    _aten.addmm_: (1, 2),
    _aten.baddbmm: (1, 2),
    _aten.baddbmm_: (1, 2),
    _aten.addbmm: (1, 2),
    _aten.addbmm_: (1, 2),
    _aten._addmm_activation: (1, 2),
}

# Set while an emulating mode decides about and runs one GEMM, so that an outer
# emulating mode (nested contexts) leaves the decision to the innermost one.
_DECIDED: contextvars.ContextVar[bool] = contextvars.ContextVar("_tf32_decided", default=False)


class _TF32EmulationMode(TorchDispatchMode):
    def __init__(self, rounding: str, force: bool) -> None:
        super().__init__()
        self.rounding = rounding
        self.force = force

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        operands = _GEMMS.get(func.overloadpacket)
        if operands is None or _DECIDED.get():
            return func(*args, **kwargs)
        token = _DECIDED.set(True)
        try:
            if self._wants(args, operands):
                args = tuple(
                    _round_bits(a, self.rounding) if i in operands else a
                    for i, a in enumerate(args)
                )
                with _ieee_cpu_matmul(args[operands[0]]):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
        finally:
            _DECIDED.reset(token)

    def _wants(self, args: tuple[Any, ...], operands: tuple[int, ...]) -> bool:
        mats = [args[i] for i in operands if i < len(args)]
        if len(mats) != 2 or not all(
            isinstance(m, torch.Tensor) and m.dtype == torch.float32 for m in mats
        ):
            return False
        if not tf32_matmul_enabled():
            return False
        return self.force or not has_real_tf32(mats[0].device)


@contextlib.contextmanager
def _ieee_cpu_matmul(operand: torch.Tensor) -> Iterator[None]:
    # At 'medium' (or 'high' on CPUs with reduced-precision units) oneDNN may run the
    # float32 product in bf16; the emulation promises float32 accumulation, so pin it.
    mkldnn = getattr(torch.backends.mkldnn, "matmul", None)
    old = getattr(mkldnn, "fp32_precision", None)
    if operand.device.type != "cpu" or old in (None, "ieee", "none"):
        yield
        return
    mkldnn.fp32_precision = "ieee"
    try:
        yield
    finally:
        mkldnn.fp32_precision = old


@contextlib.contextmanager
def emulate_tf32(rounding: str = "rna", force: bool = False) -> Iterator[None]:
    """Make float32 matmuls behave as on a TF32 GPU, on hardware that has no TF32.

    Inside the context every float32 GEMM -- whatever Python call led to it: ``@``,
    ``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``, ``einsum``,
    ``tensordot``, ``linalg.multi_dot``, ``nn.functional.linear``, their Tensor-method
    forms, and the products autograd computes in a backward pass -- rounds its two
    multiplied float32 operands with :func:`round_tf32` and accumulates in float32,
    but only when :func:`tf32_matmul_enabled` says a TF32-capable GPU would use TF32.
    The mode intercepts ATen's GEMM operators (``mm``, ``bmm``, ``addmm``,
    ``baddbmm``, ``addbmm``), so a chain such as ``multi_dot`` rounds each
    intermediate product as the GPU does, and the additive term of ``addmm``-style ops
    (``linear``'s bias) stays float32, as in cuBLAS. The settings are read at every
    call, so code that switches precision inside the context is emulated faithfully.
    Devices with real TF32 (CUDA, compute capability >= 8.0) are left to the hardware
    unless ``force=True``. Other dtypes are never touched (under autocast the operands
    arrive already cast to fp16/bf16), and matrix-vector or vector-vector products
    (``mv``/``dot``, which run without tensor cores on a GPU) and reductions are not
    rounded. Nested contexts: the innermost one decides.

    Args:
        rounding: how operands are rounded to TF32 (``"rna"`` matches Ampere cuBLAS).
        force: emulate on devices with real TF32 too.

    Yields:
        None.

    Raises:
        ValueError: if ``rounding`` is not one of :data:`ROUNDINGS`.
        TypeError: if ``force`` is not a bool.

    Example:
        >>> import torch
        >>> a = torch.tensor([[1 + 2**-11]])
        >>> torch.backends.cuda.matmul.fp32_precision = "tf32"  # as 'high' does
        >>> with emulate_tf32():
        ...     (a @ a).item()  # (1 + 2**-10)**2: the operand was rounded
        1.0019540786743164
        >>> torch.backends.cuda.matmul.fp32_precision = "none"
    """
    _check_rounding(rounding)
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    with _TF32EmulationMode(rounding, force):
        yield


def tf32_mode(device: torch.device | str, fp32_matmul_prec: str, dtype: torch.dtype) -> str:
    """How TF32 enters a run: ``"none"``, ``"hardware"`` or ``"emulated"``.

    Args:
        device: Device the run uses.
        fp32_matmul_prec: ``'highest'``, ``'high'`` or ``'medium'``.
        dtype: Optimizer dtype; float64 products never use TF32.

    Returns:
        ``"none"`` at ``'highest'`` or in float64; ``"hardware"`` on an NVIDIA GPU of
        compute capability ≥ 8.0; ``"emulated"`` otherwise (the run uses
        :func:`eigprec.emulate_tf32`).

    Example:
        >>> import torch
        >>> tf32_mode("cpu", "high", torch.float32)
        'emulated'
    """
    if fp32_matmul_prec == "highest" or dtype != torch.float32:
        return "none"
    return "hardware" if has_real_tf32(device) else "emulated"
