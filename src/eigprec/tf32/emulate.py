"""The emulator: float32 products run as a TF32 GPU runs them, on any hardware.

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
the value cuBLAS reads (``python -m eigprec_book.record tf32`` checks this on a real GPU).
On the CPU 'medium' lets oneDNN use bf16; the emulation pins float32 accumulation
there instead, so it models the GPU, not that CPU path.
"""

from __future__ import annotations

import contextvars
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_leaves

from eigprec._context import reusable
from eigprec.precision import _pinned
from eigprec.tf32 import core, opaque, plain, settings
from eigprec.tf32.dispatch import (
    CONVS,
    GUARDED_JVP_FUNCS,
    IN_GUARDED_LINALG,
    composite,
    in_no_tf32_formula,
    run_composite,
    triage,
)
from eigprec.tf32.onednn import ieee_cpu as _ieee_cpu
from eigprec.tf32.rounding import check_rounding

__all__ = [
    "BackwardAfterExitWarning",
    "GraphMarker",
    "NotEmulatedWarning",
    "TF32EmulationMode",
    "emulate_tf32",
    "saved_tensor_hooks",
]

_aten = torch.ops.aten

_IN_RNN: contextvars.ContextVar[bool] = contextvars.ContextVar("_tf32_in_rnn", default=False)
_RNN_FUNCS = (torch.gru, torch.rnn_tanh, torch.rnn_relu, torch.lstm)


class NotEmulatedWarning(UserWarning):
    """An operator ran float32 products the emulator cannot reach; it ran unchanged.

    Emitted once per operator and block by :func:`eigprec.emulate_tf32` (fused attention,
    the fused transformer fast path, oneDNN's LSTM when TF32 would not apply...).

    Example:
        >>> issubclass(NotEmulatedWarning, UserWarning)
        True
    """


# Set while an emulating mode decides about and runs one product, so that an outer
# emulating mode (nested contexts) leaves the decision to the innermost one.
_DECIDED: contextvars.ContextVar[bool] = contextvars.ContextVar("_tf32_decided", default=False)


class TF32EmulationMode(plain.TF32Mode, TorchDispatchMode):
    """Round the operands of float32 GEMMs and convolutions as a TF32 GPU would.

    Args:
        rounding: one of ``ROUNDINGS``.
        force: emulate on devices with real TF32 too.
        convolutions: emulate convolutions; None follows cuDNN's switch.
        matmuls: emulate GEMMs; None follows the matmul switch (:func:`tf32_matmul_enabled`).
    """

    def __init__(
        self,
        rounding: str,
        force: bool,
        convolutions: bool | None = None,
        matmuls: bool | None = None,
    ) -> None:
        super().__init__()
        self.rounding = rounding
        self.force = force
        self.convolutions = convolutions  # None: follow cuDNN's convolution switch
        self.matmuls = matmuls  # None: follow the matmul switch (the audit's side run: True)
        self.graph_products = 0  # emulated forward products that autograd recorded
        self.forward_products = 0  # emulated products outside any backward, any grad mode
        self.not_covered: dict[str, int] = {}  # opaque operator -> calls (run unchanged)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        seen = triage(func, args, kwargs)
        if seen is None:
            return func(*args, **(kwargs or {}))
        packet, operands, kwargs = seen
        is_conv = packet in CONVS
        if operands is None:
            if packet in opaque.DECOMPOSABLE and self._rebuild(args):
                with self:  # its visible pieces (one GEMM or einsum) come back here
                    return opaque.DECOMPOSABLE[packet](*args, **kwargs)
            if packet in opaque.OPAQUE and opaque.tf32_applies(packet, args):
                self._not_covered(packet)
            if composite(func):  # (inference mode, or inside a rebuild: autograd skipped)
                with self:  # re-enter so that the pieces come back here
                    return run_composite(func, args, kwargs)
            return func(*args, **kwargs)
        if _DECIDED.get() or in_no_tf32_formula():
            return func(*args, **kwargs)
        token = _DECIDED.set(True)
        try:
            if not self._wants(args, operands, is_conv):
                return func(*args, **kwargs)
            if torch._C._current_autograd_node() is None:
                self.forward_products += 1  # (any grad mode: custom Functions run without)
                if torch.is_grad_enabled() and any(
                    isinstance(a, torch.Tensor) and a.requires_grad for a in args
                ):
                    self.graph_products += 1
            rounded = tuple(
                core.round_bits(a, self.rounding) if i in operands else a
                for i, a in enumerate(args)
            )
            if packet is _aten.convolution_backward:
                return self._conv_backward(func, args, rounded, kwargs)
            with _ieee_cpu(args[operands[0]], "conv" if is_conv else "matmul"):
                return func(*rounded, **kwargs)
        finally:
            _DECIDED.reset(token)

    def _conv_backward(
        self, func: Any, args: tuple[Any, ...], rounded: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        mask = list(args[10])
        with _ieee_cpu(args[0], "conv"):
            grad_input, grad_weight, _ = func(*rounded[:10], [mask[0], mask[1], False], **kwargs)
        grad_bias = None
        if mask[2]:  # a sum of the float32 grad_output, not a TF32 product
            grad_bias = func(*args[:10], [False, False, True], **kwargs)[2]
        return grad_input, grad_weight, grad_bias

    def _rebuild(self, args: tuple[Any, ...]) -> bool:
        # Rebuild an opaque operator from visible pieces only where they would be rounded.
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        return (
            not _DECIDED.get()
            and not in_no_tf32_formula()
            and all(t.dtype == torch.float32 and t.layout == torch.strided for t in tensors)
            and self._wants(tuple(tensors[:2]), (0, 1), False)
        )

    def _not_covered(self, packet: Any) -> None:
        name = packet.__name__
        self.not_covered[name] = self.not_covered.get(name, 0) + 1
        applies = settings.tf32_rnn_enabled() if "rnn" in name else self._matmuls_wanted()
        if self.not_covered[name] == 1 and applies:  # silent where TF32 would not apply
            warnings.warn(
                f"emulate_tf32: aten.{name} multiplies inside its own kernel, which the "
                f"emulator cannot reach; it ran unchanged. {opaque.OPAQUE[packet]}.",
                NotEmulatedWarning,
                stacklevel=3,
            )

    def _wants(self, args: tuple[Any, ...], operands: tuple[int, ...], is_conv: bool) -> bool:
        mats = [args[i] for i in operands if i < len(args)]
        if len(mats) != len(operands) or not all(
            isinstance(m, torch.Tensor) and m.dtype == torch.float32 for m in mats
        ):
            return False
        if is_conv:
            wanted = self.convolutions
            if wanted is None:
                wanted = settings.tf32_conv_enabled()
        elif plain.IN_VECTOR_PRODUCT.get():  # vector @ matrix: float32 on a GPU
            return False
        elif _IN_RNN.get():  # cuDNN runs RNNs under its own switch, not cuBLAS's
            wanted = settings.tf32_rnn_enabled()
        else:
            wanted = self._matmuls_wanted()
        return wanted and (self.force or not settings.has_real_tf32(mats[0].device))

    def _matmuls_wanted(self) -> bool:
        return settings.tf32_matmul_enabled() if self.matmuls is None else self.matmuls


# --- graphs built inside the block whose backward runs outside it ---------------------


class BackwardAfterExitWarning(UserWarning):
    """A graph recorded under emulate_tf32 runs its backward where nothing emulates.

    Emitted by the first autograd node of such a graph that runs outside an
    :func:`eigprec.emulate_tf32` block (after it exited, or in another thread). Turn
    it into an error with ``warnings.simplefilter("error", BackwardAfterExitWarning)``.

    Example:
        >>> import warnings
        >>> issubclass(BackwardAfterExitWarning, UserWarning)
        True
    """


def _emulating_here() -> bool:
    return any(isinstance(m, TF32EmulationMode) for m in _get_current_dispatch_mode_stack())


def _check_backward(grad_outputs: Any) -> None:
    if not _emulating_here():
        warnings.warn(
            "a graph whose forward products were emulated as TF32 inside emulate_tf32 is "
            "running its backward outside the block (or in another thread): the backward "
            "products are NOT emulated. Call backward() inside the `with emulate_tf32()` "
            "block to emulate them.",
            BackwardAfterExitWarning,
            stacklevel=2,
        )


def saved_tensor_hooks(mode: TF32EmulationMode) -> tuple[Callable, Callable]:
    r"""Pack/unpack hooks that check where the backward of a block's graph runs.

    Custom ``autograd.Function``\ s (reentrant checkpointing among them) run their forward
    with grad disabled, so :class:`GraphMarker` cannot tag their nodes; but whatever they
    save for backward is packed inside the block (after their forward, outside any torch
    call) and unpacked by their backward. Such a tensor, saved after the block emulated a
    product, warns when unpacked outside the block. A tensor saved by a torch call itself
    (``sigmoid`` saving its output) warns only if that call emulated a product: the nodes
    of products are tagged by :class:`GraphMarker`, and a graph without one has nothing
    emulated to lose.
    """

    def pack(t: torch.Tensor) -> tuple[torch.Tensor, Any]:
        call = _CALL.get()
        return t, (mode.forward_products > 0) if call is None else (call, mode)

    def unpack(packed: tuple[torch.Tensor, Any]) -> torch.Tensor:
        t, marked = packed
        if isinstance(marked, tuple):  # saved by a torch call: did it emulate a product?
            call, _ = marked
            marked = (call[1] if len(call) > 1 else mode.forward_products) != call[0]
        if marked:
            _check_backward(None)
        return t

    return pack, unpack


# The torch call GraphMarker is running in this context: [forward products at its start,
# and at its end once it returned].
_CALL: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("_tf32_call", default=None)


class GraphMarker(TorchFunctionMode):
    """Tag the autograd nodes of emulated forward products with a backward check, and mark
    calls of ``GUARDED_JVP_FUNCS`` (products inside them stay float32, see above).

    One torch-function layer for both jobs: it runs at every torch call in the block.
    """

    def __init__(self, mode: TF32EmulationMode) -> None:
        super().__init__()
        self.mode = mode

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        before = self.mode.graph_products
        kwargs = kwargs or {}
        call = [self.mode.forward_products]  # [at the start, at the end]: see the pack hook
        token = _CALL.set(call)
        try:
            return self._call(func, args, kwargs, before)
        finally:
            call.append(self.mode.forward_products)
            _CALL.reset(token)

    def _call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], before: int) -> Any:
        if plain.wants_plain(func, args, kwargs):  # values-only: as without the modes
            return plain.run_plain(func, args, kwargs)
        if plain.vector_product(func, args):  # float32 on a GPU: nothing to round
            token = plain.IN_VECTOR_PRODUCT.set(True)
            try:
                return func(*args, **kwargs)
            finally:
                plain.IN_VECTOR_PRODUCT.reset(token)
        if func in _RNN_FUNCS:
            token = _IN_RNN.set(True)
            try:
                out = self._rnn(func, args, kwargs)
            finally:
                _IN_RNN.reset(token)
        elif func in GUARDED_JVP_FUNCS:
            token = IN_GUARDED_LINALG.set(True)
            try:
                out = func(*args, **kwargs)
            finally:
                IN_GUARDED_LINALG.reset(token)
        else:
            out = func(*args, **kwargs)
        if self.mode.graph_products != before:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    t.grad_fn.register_prehook(_check_backward)
        return out

    def _rnn(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # On the CPU torch.lstm runs oneDNN's fused kernel (aten.mkldnn_rnn_layer), out of
        # the dispatcher's sight. Where TF32 would apply, run ATen's native cell loop instead,
        # rebuilt from visible pieces (bit for bit the loop torch runs with oneDNN off):
        # switching oneDNN off would be process-wide, seen by every thread, and lost to or
        # losing a concurrent torch.backends.mkldnn.flags block. Packed input already takes
        # the native loop; any other call form reaches oneDNN and is named as not covered.
        x = args[0] if args else None
        if (
            func is torch.lstm
            and not kwargs
            and len(args) == 9
            and not isinstance(args[1], torch.Tensor)  # (packed: batch_sizes)
            and isinstance(x, torch.Tensor)
            and x.dtype == torch.float32
            and x.device.type == "cpu"
            and torch._C._get_mkldnn_enabled()
            and self.mode._wants((x, x), (0, 1), False)
        ):
            return opaque.lstm_native(*args)
        return func(*args, **kwargs)


def _check_emulate_args(
    rounding: object = None, force: object = False, convolutions: object = None
) -> None:
    # Run when emulate_tf32(...) is called, before any ``with`` (see _context.reusable).
    check_rounding(rounding)
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
    ``eigprec.tf32.dispatch.GUARDED_JVP_FUNCS``; the list is torch 2.13.0's). Recurrent layers
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

    One process-wide setting is changed while an emulated product runs on the CPU. Where
    oneDNN may run float32 products in reduced precision (its float32 setting for the
    product, ``torch.backends.mkldnn.matmul.fp32_precision`` or
    ``torch.backends.mkldnn.conv.fp32_precision``, is ``'tf32'`` or ``'bf16'``;
    ``torch.set_float32_matmul_precision`` sets the matmul one to ``'tf32'`` at ``'high'``
    and ``'bf16'`` at ``'medium'``), each emulated product holds that setting at ``'ieee'``
    while it runs, for the float32 accumulation it promises, and the last of concurrent
    products puts it back exactly. Torch keeps this setting for the whole process, with no
    thread-local form, so meanwhile other threads that read the attribute see ``'ieee'``
    and their own float32 oneDNN products run in IEEE float32: more precise than their
    setting allows, never less. eigprec's readers see the value that was set throughout
    (:func:`eigprec.current_matmul_precision`, and what :func:`eigprec.matmul_precision`
    saves and restores). Where the setting is already ``'ieee'`` (the default, and
    ``'highest'``) nothing is changed.

    As a decorator (``@emulate_tf32()``) it runs every call of the function in a block. A
    generator function or an ``async def`` function is stepped: the block is entered each
    time the body runs and left each time the body yields or suspends at an ``await``, so
    the body's products are emulated and the caller's, between its steps, are not (a
    graph recorded in one step and backpropagated in another counts as after the block).
    A body that keeps a block of its own open across a yield or await is closed and
    ``RuntimeError`` raised; an async generator function is refused with ``TypeError``.

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
        TypeError: if ``force`` is not a bool or ``convolutions`` neither a bool nor None,
            or the object decorates an async generator function.
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
    mode = TF32EmulationMode(check_rounding(rounding), force, convolutions)
    hooks = torch.autograd.graph.saved_tensors_hooks(*saved_tensor_hooks(mode))
    with _pinned(), mode, GraphMarker(mode), hooks:
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
