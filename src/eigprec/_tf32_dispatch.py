"""The dispatch mode behind :func:`eigprec.emulate_tf32` (private).

The mode works at the level of ATen operators, below autograd, autocast and the
Python-level wrappers: `@`, `matmul`, `einsum`, `tensordot`, `linear`, `multi_dot`,
attention's math path and autograd's own backward products all reach the GEMM
kernels listed below, and convolutions reach ``aten.convolution`` (backward:
``aten.convolution_backward``). Rounding there treats every real GEMM (intermediate
products of a chain included) as cuBLAS does, and every convolution as cuDNN's TF32
path does, and nothing else: ``mv``/``addmv`` and ``dot`` run without TF32 on a GPU
(ATen's ``NoTF32Guard`` in its gemv path), reductions are not products, and autocast
has already cast to fp16/bf16 by the time an op arrives here.

Under ``torch.inference_mode()`` autograd's dispatch keys are skipped, so
CompositeImplicitAutograd operators (``aten.matmul``, ``aten.linear``,
``aten.einsum``, ``aten.conv2d``, ...) arrive here whole; the mode decomposes them
into their ATen pieces, exactly as autograd would have, and sees the GEMMs inside.
"""

from __future__ import annotations

import contextvars
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_leaves

from . import _tf32_opaque, _tf32_plain
from . import precision as _precision
from ._onednn import ieee_cpu as _ieee_cpu

__all__ = [
    "CONVS",
    "GEMMS",
    "GUARDED_JVP_FUNCS",
    "NO_TF32_NODES",
    "BackwardAfterExitWarning",
    "GraphMarker",
    "NotEmulatedWarning",
    "TF32EmulationMode",
    "composite",
    "in_no_tf32_formula",
    "passes_through",
    "run_composite",
    "saved_tensor_hooks",
    "tf32_conv_enabled",
    "tf32_rnn_enabled",
    "triage",
]

_aten = torch.ops.aten

# ATen GEMM overload packet -> positions of the multiplied operands (the additive
# `self` of addmm-style ops is not multiplied and stays float32, as in cuBLAS).
GEMMS: dict[Any, tuple[int, ...]] = {
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

# Convolutions: input and weight are multiplied; bias is added in float32. In the
# backward op grad_output, input and weight all enter products (data and weight
# gradients); the bias gradient is a plain sum of grad_output and is left alone.
CONVS: dict[Any, tuple[int, ...]] = {
    _aten.convolution: (0, 1),
    _aten.convolution_backward: (0, 1, 2),
}

# Autograd nodes whose derivative formula torch runs under ``at::NoTF32Guard``, so that
# on a TF32 GPU every product inside them stays float32 (torch/csrc/autograd/
# FunctionsManual.cpp: svd_backward, linalg_eig_backward -- eig and eigh --,
# cholesky_backward, cholesky_inverse_backward, pinv_backward, linalg_lstsq_backward,
# linalg_qr_backward, linalg_matrix_exp_differential, linalg_det_backward,
# triangular_solve_backward, linalg_solve_triangular_backward, cholesky_solve_backward,
# linalg_solve_backward, linalg_lu_solve_LU, linalg_lu_backward -- which
# lu_factor_ex_backward calls --; node names as torch 2.13 names them). Read in the source
# at pytorch/pytorch@002ca67 and checked for the pinned torch 2.13.0 (git cf30153) in its
# libtorch_cpu.so: exactly these backward formulas call NoTF32Guard's constructor
# (objdump of every torch::autograd::generated::details function), and its packaged
# derivatives.yaml maps the nodes below to them. Not guarded: the backward of inv (a
# derivatives.yaml formula). The forward-mode (jvp) formulas: see GUARDED_JVP_FUNCS below.
NO_TF32_NODES = frozenset(
    {
        "LinalgSvdBackward0",
        "LinalgEigBackward0",
        "LinalgEighBackward0",
        "CholeskyBackward0",
        "LinalgCholeskyExBackward0",
        "CholeskyInverseBackward0",
        "LinalgPinvBackward0",
        "LinalgLstsqBackward0",
        "LinalgQrBackward0",
        "LinalgMatrixExpBackward0",
        "LinalgDetBackward0",
        "TriangularSolveBackward0",
        "LinalgSolveTriangularBackward0",
        "CholeskySolveBackward0",
        "LinalgSolveExBackward0",
        "LinalgLuSolveBackward0",
        "LinalgLuBackward0",
        "LinalgLuFactorExBackward0",
    }
)


def in_no_tf32_formula() -> bool:
    """Whether the running autograd node's formula runs under torch's NoTF32Guard, or a
    guarded forward-mode formula may be running (inside one of ``GUARDED_JVP_FUNCS``)."""
    if _IN_GUARDED_LINALG.get():
        return True
    node = torch._C._current_autograd_node()
    return node is not None and node.name() in NO_TF32_NODES


# Forward-mode (jvp) formulas torch runs under NoTF32Guard (FunctionsManual.cpp; the calls
# of NoTF32Guard's constructor in torch 2.13.0's libtorch_cpu.so, as above): linalg_solve_jvp,
# linalg_lu_solve_jvp, linalg_lu_jvp -- lu_factor_ex_jvp calls it --, cholesky_jvp,
# linalg_svd_jvp, linalg_eig_jvp (eig and eigh), linalg_qr_jvp, linalg_lstsq_solution_jvp
# and _residuals_jvp, linalg_solve_triangular_forward_AD, cholesky_solve_jvp,
# cholesky_inverse_jvp, pinv_jvp and linalg_matrix_exp_differential (matrix_exp's jvp).
# Not guarded: triangular_solve_jvp, linalg_det_jvp. The jvps run inside the primal
# operator's autograd kernel, outside any node, so the call is marked from Python instead.
# The primal kernels of these functions multiply out of a dispatch mode's sight (LAPACK/
# cuSOLVER, or pinv's and matrix_exp's own kernels, which torch also runs under the guard),
# so every product seen inside the call belongs to the jvp formula
# (tests/test_tf32_notf32guard.py checks that no GEMM of theirs reaches a mode).
_IN_GUARDED_LINALG: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "_tf32_in_guarded_linalg", default=False
)
GUARDED_JVP_FUNCS = frozenset(
    [
        *(
            getattr(torch.linalg, name)
            for name in (
                "solve",
                "solve_ex",
                "lu_solve",
                "lu",
                "lu_factor",
                "lu_factor_ex",
                "cholesky",
                "cholesky_ex",
                "svd",
                "svdvals",
                "eig",
                "eigvals",
                "eigh",
                "eigvalsh",
                "qr",
                "lstsq",
                "solve_triangular",
                "pinv",
                "matrix_exp",
            )
        ),
        torch.cholesky_solve,
        torch.cholesky_inverse,
    ]
)


# Set while a recurrent layer (torch.gru/rnn_tanh/rnn_relu/lstm) runs: its products follow
# cuDNN's RNN switch on a GPU.
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

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


_COMPOSITE: dict[Any, bool] = {}


def _unusual(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.layout != torch.strided or t.is_nested)


def passes_through(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an operator has sparse or nested tensor arguments: run it untouched.

    Sparse products run in cuSPARSE on a GPU, not in the cuBLAS path emulated here, and
    their storage cannot be rounded; nested tensors (strided and jagged) multiply inside
    their own kernels. Both run untouched: not emulated, not audited.
    """
    for a in (*args, *kwargs.values()):
        if _unusual(a) or (isinstance(a, (list, tuple)) and any(_unusual(t) for t in a)):
            return True
    return False


def composite(func: Any) -> bool:
    """Whether ``func`` has a CompositeImplicitAutograd kernel (cached)."""
    known = _COMPOSITE.get(func)
    if known is None:
        known = _COMPOSITE[func] = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _CIA)
    return known


# Every operator a TF32 dispatch mode acts on besides the products: those that multiply out
# of its sight (named as not covered) or that it rebuilds from visible pieces.
_OPAQUE_OR_REBUILT = frozenset({**_tf32_opaque.OPAQUE, **_tf32_opaque.DECOMPOSABLE})
_PRODUCTS: dict[Any, tuple[int, ...]] = {**GEMMS, **CONVS}
_ORDINARY: dict[Any, bool] = {}  # OpOverload -> none of a product, opaque, composite


def triage(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> tuple[Any, tuple[int, ...] | None, dict[str, Any]] | None:
    """The first step of every TF32 dispatch mode (emulator, audit, attribution).

    Most operators that reach a mode are neither a float32 product nor anything it must
    look into: decided once per operator and cached, they cost one dict lookup. Calls
    with sparse or nested arguments are left alone too (see :func:`passes_through`).

    Args:
        func: the ATen ``OpOverload`` being dispatched.
        args: its positional arguments.
        kwargs: its keyword arguments (``None`` as torch may pass it).

    Returns:
        ``None`` where the mode runs the call untouched (``func(*args, **kwargs)``); else
        ``(packet, operands, kwargs)``: the overload packet, the positions of the multiplied
        operands for a GEMM or convolution (``None`` for an opaque, rebuilt or
        CompositeImplicitAutograd operator) and the keyword arguments as a dict.

    Example:
        >>> import torch
        >>> a = torch.ones(2, 2)
        >>> triage(torch.ops.aten.add.Tensor, (a, a), None) is None
        True
        >>> triage(torch.ops.aten.mm.default, (a, a), {})[1]
        (0, 1)
    """
    ordinary = _ORDINARY.get(func)
    if ordinary is None:
        packet = func.overloadpacket
        ordinary = _ORDINARY[func] = (
            packet not in _PRODUCTS and packet not in _OPAQUE_OR_REBUILT and not composite(func)
        )
    if ordinary:
        return None
    kwargs = kwargs or {}
    if passes_through(args, kwargs):  # sparse/nested: untouched
        return None
    packet = func.overloadpacket
    return packet, _PRODUCTS.get(packet), kwargs


def run_composite(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func``'s C++ CompositeImplicitAutograd kernel, as eager mode does.

    ``OpOverload.decompose`` prefers a Python decomposition registered for that key
    (``torch._decomp``, written for tracing: e.g. ``upsample_trilinear3d`` computes its
    weights differently and changes results); eager mode runs the C++ kernel, whose
    pieces come back through the dispatcher to the active modes.
    """
    return func._op_dk(_CIA, *args, **kwargs)


class TF32EmulationMode(_tf32_plain.TF32Mode, TorchDispatchMode):
    """Round the operands of float32 GEMMs and convolutions as a TF32 GPU would."""

    def __init__(
        self,
        rounding: str,
        force: bool,
        convolutions: bool | None,
        round_bits: Callable[[torch.Tensor, str], torch.Tensor],
        matmul_enabled: Callable[[], bool],
        real_tf32: Callable[[torch.device], bool],
    ) -> None:
        super().__init__()
        self.rounding = rounding
        self.force = force
        self.convolutions = convolutions
        self._round = round_bits
        self._matmul_enabled = matmul_enabled
        self._real_tf32 = real_tf32
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
            if packet in _tf32_opaque.DECOMPOSABLE and self._rebuild(args):
                with self:  # its visible pieces (one GEMM or einsum) come back here
                    return _tf32_opaque.DECOMPOSABLE[packet](*args, **kwargs)
            if packet in _tf32_opaque.OPAQUE and _tf32_opaque.tf32_applies(packet, args):
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
                self._round(a, self.rounding) if i in operands else a for i, a in enumerate(args)
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
        applies = tf32_rnn_enabled() if "rnn" in name else self._matmul_enabled()
        if self.not_covered[name] == 1 and applies:  # silent where TF32 would not apply
            warnings.warn(
                f"emulate_tf32: aten.{name} multiplies inside its own kernel, which the "
                f"emulator cannot reach; it ran unchanged. {_tf32_opaque.OPAQUE[packet]}.",
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
                wanted = tf32_conv_enabled()
        elif _tf32_plain.IN_VECTOR_PRODUCT.get():  # vector @ matrix: float32 on a GPU
            return False
        elif _IN_RNN.get():  # cuDNN runs RNNs under its own switch, not cuBLAS's
            wanted = tf32_rnn_enabled()
        else:
            wanted = self._matmul_enabled()
        return wanted and (self.force or not self._real_tf32(mats[0].device))


def tf32_rnn_enabled() -> bool:
    """Whether cuDNN would run float32 RNNs in TF32 now (``cudnn.rnn``; default: yes)."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is None or not hasattr(rnn, "fp32_precision"):
        return bool(torch.backends.cudnn.allow_tf32)
    paths = (("cudnn", "rnn", "fp32_precision"), ("cudnn", "fp32_precision"), ("fp32_precision",))
    return _precision._effective(*paths) == "tf32"


def tf32_conv_enabled() -> bool:
    """Whether cuDNN would run float32 convolutions in TF32 now (its default: yes)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is None or not hasattr(conv, "fp32_precision"):
        return bool(torch.backends.cudnn.allow_tf32)
    # ATen's Context::allowTF32CuDNN(CONV): the effective cuda/conv precision.
    paths = (("cudnn", "conv", "fp32_precision"), ("cudnn", "fp32_precision"), ("fp32_precision",))
    return _precision._effective(*paths) == "tf32"


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
        if _tf32_plain.wants_plain(func, args, kwargs):  # values-only: as without the modes
            return _tf32_plain.run_plain(func, args, kwargs)
        if _tf32_plain.vector_product(func, args):  # float32 on a GPU: nothing to round
            token = _tf32_plain.IN_VECTOR_PRODUCT.set(True)
            try:
                return func(*args, **kwargs)
            finally:
                _tf32_plain.IN_VECTOR_PRODUCT.reset(token)
        if func in _RNN_FUNCS:
            token = _IN_RNN.set(True)
            try:
                out = self._rnn(func, args, kwargs)
            finally:
                _IN_RNN.reset(token)
        elif func in GUARDED_JVP_FUNCS:
            token = _IN_GUARDED_LINALG.set(True)
            try:
                out = func(*args, **kwargs)
            finally:
                _IN_GUARDED_LINALG.reset(token)
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
            return _tf32_opaque.lstm_native(*args)
        return func(*args, **kwargs)
