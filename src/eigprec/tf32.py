"""Exact TF32 emulation: rounding, an emulating context manager and the 3xTF32 product.

TF32 ("TensorFloat-32") is the operand format of NVIDIA tensor cores from Ampere
(compute capability 8.0) on: float32's sign and 8-bit exponent with only 10 of its 23
explicit mantissa bits. Products of two TF32 values are exact in float32 (11 x 11
significant bits fit into float32's 24), so a TF32 matmul equals a float32 matmul of
operands rounded to TF32, accumulated in float32. That identity is what
:func:`emulate_tf32` relies on.

Which knob turns TF32 on? cuBLAS reads the effective
``torch.backends.cuda.matmul.fp32_precision`` (``"none"`` inherits from
``torch.backends.cudnn.fp32_precision``, then ``torch.backends.fp32_precision``);
``torch.set_float32_matmul_precision('high' | 'medium')`` and the legacy
``torch.backends.cuda.matmul.allow_tf32 = True`` set it too, together with ATen's
legacy level. The two are not interchangeable: on torch 2.13, setting only
``torch.backends.cuda.matmul.fp32_precision = "tf32"`` leaves the legacy level at
'highest', and from then on ``torch.get_float32_matmul_precision()`` and the
``allow_tf32`` getter raise ``RuntimeError`` (ATen ``Context::allowTF32CuBLAS`` checks
that old and new settings agree) until a legacy setter is called.
:func:`tf32_matmul_enabled` reads the new setting and never raises. Two environment
variables act before any of this: ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (set in
NVIDIA's NGC containers) makes torch start at 'high' instead of 'highest', and
``NVIDIA_TF32_OVERRIDE=0`` makes NVIDIA's libraries ignore TF32 requests altogether
(:func:`eigprec.describe_runtime` reports both). Convolutions have their own switch,
``torch.backends.cudnn.allow_tf32`` (new API: ``torch.backends.cudnn.conv.fp32_precision``),
which is on by default, even at 'highest'.

'medium' is emulated as TF32: torch records it as cuBLAS matmul precision ``"tf32"``,
the value cuBLAS reads (``python -m eigprec.bench tf32`` checks this on a real GPU).
On the CPU 'medium' lets oneDNN use bf16; the emulation pins float32 accumulation
there instead, so it models the GPU, not that CPU path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from eigprec._context import reusable

from . import _tf32_dispatch
from ._tf32_device import has_real_tf32, is_tf32_capability
from ._tf32_rounding import ROUNDING_ENV, ROUNDINGS, _check_rounding, default_rounding
from .precision import MATMUL_PRECISIONS, _effective, _pinned

__all__ = [
    "ROUNDINGS",
    "ROUNDING_ENV",
    "TF32_MANTISSA_BITS",
    "BackwardAfterExitWarning",
    "NotEmulatedWarning",
    "default_rounding",
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

# The 13 low mantissa bits that TF32 drops, and half of the unit they leave behind.
_DROPPED_BITS = 23 - TF32_MANTISSA_BITS
_KEEP_MASK = -(1 << _DROPPED_BITS)  # 0xFFFFE000 as a signed int32
_HALF_ULP = 1 << (_DROPPED_BITS - 1)  # 0x1000
_MAX_TF32 = (2 - 2**-TF32_MANTISSA_BITS) * 2.0**127


def _check_dense(func: str, x: torch.Tensor) -> None:
    # Bit-level rounding needs the values in memory: sparse tensors have no such storage.
    # Meta tensors pass (shapes propagate), so do views of any stride.
    if x.layout != torch.strided:
        raise TypeError(
            f"{func} expects a dense (strided) tensor, got layout {x.layout}; "
            "round the values of a sparse tensor (x.values()) or convert it with to_dense()"
        )


def _round_bits(
    x: torch.Tensor, rounding: str, screen: bool = True, nan_free: bool = False
) -> torch.Tensor:
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
    # On a GPU that screen would be a host synchronisation, and under torch.func
    # transforms data-dependent control flow is refused, so there the select always runs.
    # nan_free: the caller has already read that x holds no NaN (the audit, from the
    # operands' row and column norms): neither the screen nor the select is needed.
    if nan_free:
        return result
    if not screen or x.device.type != "cpu" or (x.numel() and math.isnan(float(x.sum()))):
        result = torch.where(torch.isnan(x), x, result)
    return result


class _RoundTF32(torch.autograd.Function):
    # Straight-through gradient: TF32 rounding is a storage effect, not part of the model.
    # setup_context and a branch-free forward make it usable under torch.func (grad, jvp).
    # vmap gets its own rule rather than one generated from the forward: torch 2.11 (and
    # older; 2.13 has one) has no batching rule for the bit reinterpretation
    # (aten::view.dtype), so a generated rule fails there. Rounding is elementwise, so the
    # batched call is the same call on the whole batch, its batch dimension left in place.

    @staticmethod
    def forward(x: torch.Tensor, rounding: str) -> torch.Tensor:
        return _round_bits(x, rounding, screen=False)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], x: torch.Tensor, rounding: str) -> Any:
        # x arrives unwrapped by one vmap level; apply() again handles any level around it.
        return _RoundTF32.apply(x, rounding), in_dims[0]

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor, _: None) -> torch.Tensor:
        return x_tangent


def _under_functorch() -> bool:
    return torch._C._functorch.peek_interpreter_stack() is not None


def round_tf32(x: torch.Tensor, rounding: str | None = None) -> torch.Tensor:
    """Round a float32 tensor to the nearest TF32 values (kept in float32 storage).

    The 13 low mantissa bits are rounded away: ``"rna"`` to nearest with ties away
    from zero (cuBLAS on Ampere, CUTLASS's pre-Hopper conversion), ``"rne"`` to
    nearest with ties to even, ``"rz"`` towards zero (truncation). Signed zeros,
    subnormals (TF32 has float32's exponent range, so subnormals keep their top 10
    mantissa bits), carries into the next binade and overflow to +-inf beyond the
    largest TF32 value ``(2 - 2**-10) * 2**127`` behave as IEEE rounding prescribes;
    NaN and +-inf are returned unchanged. Works on any device and shape; the
    gradient, if any, passes straight through (also under ``torch.func.grad``,
    ``jvp`` and ``vmap``, which it supports).

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
    _check_dense("round_tf32", x)
    rounding = _check_rounding(rounding)
    # A negated view (``z.conj().imag``) cannot be reinterpreted bit by bit; negate for real.
    x = x.resolve_neg()
    if _under_functorch() or (x.requires_grad and torch.is_grad_enabled()):
        return _RoundTF32.apply(x, rounding)
    return _round_bits(x.detach(), rounding)


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
    big = round_tf32(torch.where(finite, x.clamp(-_MAX_TF32, _MAX_TF32), x), "rne")
    small = round_tf32(torch.where(finite, x - big, torch.zeros_like(x)), "rne")
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


def tf32_matmul_enabled() -> bool:
    """Whether torch's current settings make cuBLAS run float32 matmuls in TF32.

    Reads the effective ``torch.backends.cuda.matmul.fp32_precision == "tf32"``
    where it exists (torch >= 2.9: the value cuBLAS itself consults, ``"none"``
    inheriting from its parents; it follows
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
    if not hasattr(matmul, "fp32_precision"):
        return bool(matmul.allow_tf32)
    paths = (("cuda", "matmul", "fp32_precision"), ("cudnn", "fp32_precision"), ("fp32_precision",))
    return _effective(*paths) == "tf32"


# --- the emulating mode (its machinery lives in _tf32_dispatch) --------------------------

BackwardAfterExitWarning = _tf32_dispatch.BackwardAfterExitWarning
NotEmulatedWarning = _tf32_dispatch.NotEmulatedWarning


def _real_tf32(device: torch.device) -> bool:
    return has_real_tf32(device)  # looked up at call time, so tests can stand in for a GPU


def _check_emulate_args(
    rounding: object = None, force: object = False, convolutions: object = None
) -> None:
    # Run when emulate_tf32(...) is called, before any ``with`` (see _context.reusable).
    _check_rounding(rounding)
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    if convolutions is not None and not isinstance(convolutions, bool):
        raise TypeError(f"convolutions must be a bool or None, got {type(convolutions).__name__}")


@reusable(check=_check_emulate_args)
def emulate_tf32(
    rounding: str | None = None, force: bool = False, convolutions: bool | None = None
) -> Iterator[None]:
    r"""Make float32 matmuls and convolutions behave as on a TF32 GPU, on hardware without TF32.

    Inside the context every float32 GEMM -- whatever Python call led to it: ``@``,
    ``matmul``, ``mm``, ``bmm``, ``addmm``, ``baddbmm``, ``addbmm``, ``einsum``,
    ``tensordot``, ``linalg.multi_dot``, ``nn.functional.linear``, their Tensor-method
    forms, and the products autograd computes in a backward pass -- rounds its two
    multiplied float32 operands with :func:`round_tf32` and accumulates in float32,
    but only when :func:`tf32_matmul_enabled` says a TF32-capable GPU would use TF32.
    The mode intercepts ATen's GEMM operators (``mm``, ``bmm``, ``addmm``,
    ``baddbmm``, ``addbmm``), so a chain such as ``multi_dot`` rounds each
    intermediate product as the GPU does, and the additive term of ``addmm``-style ops
    (``linear``'s bias) stays float32, as in cuBLAS. It works the same under
    ``torch.no_grad()`` and ``torch.inference_mode()``.

    Convolutions (``conv1d/2d/3d``, transposed ones, ``nn.Conv*``; forward and
    backward) are emulated as cuDNN's TF32 path runs them: input and weight (in the
    backward pass also the output gradient) rounded to TF32, float32 accumulation,
    bias added in float32 and its gradient an unrounded sum. cuDNN has its own switch,
    ``torch.backends.cudnn.allow_tf32`` (``cudnn.conv.fp32_precision``), which is on by
    default even at 'highest'; with ``convolutions=None`` convolutions are emulated
    exactly when it is on, ``True``/``False`` override it.

    As on a GPU, nothing is rounded inside the derivative formulas that torch runs under
    ``at::NoTF32Guard`` (``torch/csrc/autograd/FunctionsManual.cpp``): the backwards of
    ``eigh``/``eig``, ``svd``, ``cholesky``, ``cholesky_inverse``, ``pinv``, ``lstsq``,
    ``qr``, ``matrix_exp``, ``det``, ``solve_triangular``/``triangular_solve`` and
    ``cholesky_solve``, ``linalg.solve``, ``lu_solve``, ``lu`` and ``lu_factor`` keep their
    products in float32, and so do the forward-mode (jvp) formulas guarded there: products
    inside a call of ``linalg.solve``, ``lu_solve``, ``lu``, ``lu_factor``, ``cholesky``,
    ``svd``/``svdvals``, ``eig``/``eigvals``, ``eigh``/``eigvalsh``, ``qr``, ``lstsq``,
    ``solve_triangular``, ``pinv``, ``matrix_exp``, ``torch.cholesky_solve`` or
    ``torch.cholesky_inverse`` (their ``_ex`` forms included;
    ``_tf32_dispatch.GUARDED_JVP_FUNCS``; the list is torch 2.13.0's). Recurrent layers
    (``nn.RNN``, ``nn.GRU``, ``nn.LSTM``) follow cuDNN's RNN switch,
    ``torch.backends.cudnn.rnn.fp32_precision`` (``'tf32'`` by default), not the matmul
    switch, as cuDNN does; on the CPU ``nn.LSTM`` runs oneDNN's fused kernel, so where TF32
    applies it is run through a copy of ATen's native cell loop made of visible pieces (bit
    for bit what torch runs with oneDNN off; no process-wide switch is touched).
    ``torch.cdist``'s matrix-product path and ``nn.Bilinear`` (``_trilinear``) are
    rebuilt from visible pieces and emulated.


    Run but not covered (a :class:`NotEmulatedWarning` names each, once per block, where
    TF32 would apply): fused attention (``F.scaled_dot_product_attention`` forward and
    backward; on a TF32 GPU float32 runs the memory-efficient kernel, whose CUTLASS GEMMs
    use 3xTF32 -- about float32 accuracy -- whatever the switches, so float32 is close to
    what the GPU does; the GPU uses TF32 in attention only on the math path, and under
    ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`` the same ``bmm``s run here and are
    emulated), the fused transformer fast path of ``nn.TransformerEncoderLayer``
    /``nn.MultiheadAttention`` in eval or ``no_grad`` (its GEMMs follow the matmul switch on
    a GPU; ``torch.backends.mha.set_fastpath_enabled(False)`` makes it emulated),
    fused RNN kernels where they still run, and float32 solves, inverses and LU
    factorisations (``linalg.solve``, ``inv``, ``solve_triangular``, ``triangular_solve``,
    ``lu_solve``, ``lu_factor``, ``lu``): LAPACK here, blocked algorithms with TF32 GEMM
    updates on a GPU (measured on an H200: relative change ~1e-4; the warning gives the
    figures), so put ``'highest'`` around GPU solves. ``cholesky``, ``cholesky_solve``,
    ``qr``, ``lstsq``, ``eigh`` and ``svd`` did not change there and run unwarned.
    Sparse and nested tensors pass through untouched (cuSPARSE is not the cuBLAS path
    emulated here). Autocast runs ``cdist``,
    ``pdist`` and ``dist`` in float32 (``autocast_mode.cpp``), so their products are
    emulated under autocast too.

    Not rounded: matrix-vector and vector-vector products (``mv``, ``addmv``, ``dot``,
    ``matrix @ vector``), which PyTorch keeps out of TF32 on a GPU (``NoTF32Guard`` in
    its gemv path); ``vector @ matrix`` and ``F.linear`` of a 1-D input, one-row GEMMs in
    ATen that the measured H100 and H200 ran in float32 at 'high'; reductions; other
    dtypes (under autocast the operands arrive already cast to fp16/bf16). Left exactly
    as without the context: eigenvalues and singular values without vectors
    (``eigvalsh``, ``svdvals``, ``eigvals`` and the spectral norms, ``cond`` and
    ``matrix_rank`` built on them), which a TF32 GPU does not change but which ATen would
    compute through the vector path whenever a dispatch mode is active. Not covered:
    ``torch.compile``d code (Inductor's
    Triton kernels choose their own ``tl.dot`` input precision, which may round
    differently from cuBLAS; compiling under this context is untested -- do not rely
    on it) and products computed inside custom kernels that bypass ATen's
    dispatcher. The settings are read at every call, so code that switches precision
    inside the context is emulated faithfully. Devices with real TF32 (CUDA, compute
    capability >= 8.0) are left to the hardware unless ``force=True``. Nested
    contexts: the innermost one decides.

    ``torch.func``: forward-mode transforms (``jvp``, ``jacfwd``, ``vmap`` of them) run
    inside the block and are emulated; the reverse-mode ones (``grad``, ``vjp``, ``jacrev``,
    ``hessian``, ``vmap(grad(...))``) refuse the block's saved-tensor hooks, and the block
    raises ``RuntimeError`` naming the ways around: ``torch.autograd.grad`` or
    ``.backward()`` inside the block (per sample in a loop), or forward mode.

    Scope (what "inside" means): emulation covers the operators that run while the
    block is active *in the thread that entered it*, as torch's dispatch modes are
    thread-local. A backward pass started inside the block is emulated (autograd
    runs it under the calling thread's thread-local state). A backward pass of a
    graph recorded inside the block but run after the block has exited is not
    emulated -- like a real GPU whose TF32 setting was switched off before
    ``backward()`` -- and emits a :class:`BackwardAfterExitWarning` so that it cannot
    go unnoticed (custom ``autograd.Function``\ s and reentrant checkpointing included).
    Threads started inside the block are not emulated; enter ``emulate_tf32`` in each of them. While
    the block is active, other threads' :func:`eigprec.matmul_precision` blocks that
    would change the precision wait until it exits, so they cannot switch the
    emulation off midway (torch's setters called directly can).

    Args:
        rounding: how operands are rounded to TF32: ``"rna"`` matches the public
            observations of cuBLAS on Ampere GPUs; an H100 (torch 2.11, CUDA 13) recorded
            for the book rounded ties to even, ``"rne"``. The tie rule is the GPU's.
            None: ``eigprec.tf32.default_rounding()`` (``"rna"`` unless the environment variable
            ``EIGPREC_TF32_ROUNDING`` says otherwise), read when the block is entered.
        force: emulate on devices with real TF32 too.
        convolutions: emulate convolutions; None follows cuDNN's TF32 switch.

    Yields:
        None.

    Raises:
        ValueError: if ``rounding`` is not one of ``ROUNDINGS`` (``"rna"``, ``"rne"``, ``"rz"``).
        TypeError: if ``force`` is not a bool or ``convolutions`` neither a bool nor None.
        RuntimeError: where ``torch.func.grad``, ``vjp``, ``jacrev`` or ``hessian`` runs in
            the block (see above).

    Example:
        >>> import torch
        >>> a = torch.tensor([[1 + 2**-11]])
        >>> torch.backends.cuda.matmul.fp32_precision = "tf32"  # as 'high' does
        >>> with emulate_tf32():
        ...     (a @ a).item()  # (1 + 2**-10)**2: the operand was rounded
        1.0019540786743164
        >>> torch.backends.cuda.matmul.fp32_precision = "none"
    """
    mode = _tf32_dispatch.TF32EmulationMode(
        _check_rounding(rounding), force, convolutions, _round_bits, tf32_matmul_enabled, _real_tf32
    )
    hooks = torch.autograd.graph.saved_tensors_hooks(*_tf32_dispatch.saved_tensor_hooks(mode))
    with _pinned(), mode, _tf32_dispatch.GraphMarker(mode), hooks:
        try:
            yield
        except RuntimeError as e:
            if "don't yet support saved tensor hooks" not in str(e):
                raise
            raise RuntimeError(_NO_REVERSE_TORCH_FUNC) from e


_NO_REVERSE_TORCH_FUNC = (
    "emulate_tf32 does not support torch.func's reverse-mode transforms (grad, vjp, jacrev, "
    "hessian, and vmap of them): the block's saved-tensor hooks, which catch a backward run "
    "after the block, are refused by torch.func. Ways around: take gradients with "
    "torch.autograd.grad (or .backward()) inside the block, per sample in a loop if need "
    "be; forward-mode transforms (torch.func.jvp, jacfwd, and vmap of them) work inside it."
)


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

    Raises:
        TypeError: if ``fp32_matmul_prec`` is not a str, ``dtype`` not a ``torch.dtype``
            or ``device`` not a device (see :func:`has_real_tf32`).
        ValueError: if ``fp32_matmul_prec`` is not exactly one of ``MATMUL_PRECISIONS``.

    Example:
        >>> import torch
        >>> tf32_mode("cpu", "high", torch.float32)
        'emulated'
    """
    if not isinstance(fp32_matmul_prec, str):
        raise TypeError(
            f"fp32_matmul_prec must be a str, got {type(fp32_matmul_prec).__name__} "
            f"{fp32_matmul_prec!r}"
        )
    if fp32_matmul_prec not in MATMUL_PRECISIONS:
        raise ValueError(
            f"fp32_matmul_prec must be one of {MATMUL_PRECISIONS}, got {fp32_matmul_prec!r}"
        )
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    hardware = has_real_tf32(device)  # also checks the device argument
    if fp32_matmul_prec == "highest" or dtype != torch.float32:
        return "none"
    return "hardware" if hardware else "emulated"
