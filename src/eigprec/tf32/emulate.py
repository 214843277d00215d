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
from eigprec.tf32 import core, gpus, opaque, plain, settings
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
        gpu: the GPU modelled (:mod:`eigprec.tf32.gpus`): products it keeps in float32 run
            unchanged; None rounds every product the switches allow.
    """

    def __init__(
        self,
        rounding: str,
        force: bool,
        convolutions: bool | None = None,
        matmuls: bool | None = None,
        gpu: gpus.GPUProfile | None = None,
    ) -> None:
        super().__init__()
        self.rounding = rounding
        self.force = force
        self.convolutions = convolutions  # None: follow cuDNN's convolution switch
        self.matmuls = matmuls  # None: follow the matmul switch (the audit's side run: True)
        self.gpu = gpu
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
                if gpus.complex64_operands(args, operands) and self._wants(
                    args, operands, is_conv, torch.complex64
                ):
                    self._complex64(packet)
                return func(*args, **kwargs)
            if self.gpu is not None and self.gpu.keeps_float32(packet, args):
                return func(*args, **kwargs)  # (as the named GPU runs it: float32)
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

    def _complex64(self, packet: Any) -> None:
        # Once per operator and block, as for the operators the emulator cannot reach.
        name = f"{packet.__name__}[complex64]"
        self.not_covered[name] = self.not_covered.get(name, 0) + 1
        if self.not_covered[name] == 1:
            warnings.warn(
                f"emulate_tf32: aten.{packet.__name__} of complex64 operands ran unchanged: "
                f"{gpus.COMPLEX64_GAP}.",
                NotEmulatedWarning,
                stacklevel=3,
            )

    def _wants(
        self,
        args: tuple[Any, ...],
        operands: tuple[int, ...],
        is_conv: bool,
        dtype: torch.dtype = torch.float32,
    ) -> bool:
        mats = [args[i] for i in operands if i < len(args)]
        if len(mats) != len(operands) or not all(
            isinstance(m, torch.Tensor) and m.dtype == dtype for m in mats
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
    rounding: object = None,
    force: object = False,
    convolutions: object = None,
    gpu: object = None,
) -> None:
    # Run when emulate_tf32(...) is called, before any ``with`` (see _context.reusable).
    check_rounding(rounding)
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {type(force).__name__}")
    if convolutions is not None and not isinstance(convolutions, bool):
        raise TypeError(f"convolutions must be a bool or None, got {type(convolutions).__name__}")
    gpus.check_gpu(gpu)


@reusable(check=_check_emulate_args)
def emulate_tf32(
    rounding: str | None = None,
    force: bool = False,
    convolutions: bool | None = None,
    gpu: str | None = None,
) -> Iterator[None]:
    r"""Run float32 matmuls and convolutions as a TF32 GPU runs them, on hardware without TF32.

    In the block every float32 GEMM that reaches ATen (``@``, ``mm``, ``bmm``, ``einsum``,
    ``linear``, autograd's backward products; under ``no_grad`` and ``inference_mode`` too)
    has its two operands rounded with :func:`round_tf32` and sums in float32, as a tensor
    core does, wherever :func:`tf32_matmul_enabled` says a TF32 GPU would use TF32 now;
    convolutions and RNNs follow cuDNN's switches (TF32 by default even at 'highest'). As on
    a GPU, matrix-vector products, ``vector @ matrix`` and the derivative formulas torch runs
    under ``NoTF32Guard`` stay float32. Products it cannot reach (fused attention and
    transformer paths, fused RNNs, GPU solves, complex64) run unchanged with a
    :class:`NotEmulatedWarning`, once per operator and block; a backward run after the block
    warns (:class:`BackwardAfterExitWarning`). While an emulated product runs on the CPU,
    oneDNN's process-wide float32 setting is held at ``'ieee'``: other threads then run
    theirs in IEEE float32 too. In full (threads, decorators, settings read at each call):
    the API page, "decided behaviour".

    Args:
        rounding: ``"rna"`` (ties away, as observed on Ampere), ``"rne"`` (ties to even, as
            the book's H100) or ``"rz"``; None: the ``gpu``'s rule, else ``"rna"`` unless
            ``EIGPREC_TF32_ROUNDING`` says otherwise.
        force: emulate on devices with real TF32 (compute capability >= 8.0) too.
        convolutions: emulate convolutions; None follows cuDNN's switch.
        gpu: ``"hopper"``: ties to even, and the small batched products and convolutions the
            book's H200 kept in float32 stay float32; ``"ampere"``: ties away; None: all
            products the switches allow are rounded, an upper bound at small sizes.

    Raises:
        ValueError: for an unknown ``rounding`` or ``gpu``.
        TypeError: for a ``force`` or ``convolutions`` that is not a bool (or None).
        RuntimeError: where ``torch.func``'s reverse-mode transforms run in the block.

    Example:
        >>> import torch
        >>> from eigprec import matmul_precision
        >>> a = torch.tensor([[1 + 2**-11]])
        >>> with matmul_precision("high"), emulate_tf32():
        ...     (a @ a).item()  # (1 + 2**-10)**2: the operand was rounded
        1.0019540786743164
    """
    model = gpus.profile(gpu)
    if rounding is None and model is not None:
        rounding = model.rounding
    mode = TF32EmulationMode(check_rounding(rounding), force, convolutions, gpu=model)
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
