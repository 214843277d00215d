"""Which ATen operators a TF32 GPU runs in TF32: shared by the emulator and the audit.

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
from typing import Any

import torch

from eigprec.tf32 import opaque

__all__ = [
    "CONVS",
    "GEMMS",
    "GUARDED_JVP_FUNCS",
    "IN_GUARDED_LINALG",
    "NO_TF32_NODES",
    "composite",
    "in_no_tf32_formula",
    "passes_through",
    "run_composite",
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
    if IN_GUARDED_LINALG.get():
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
IN_GUARDED_LINALG: contextvars.ContextVar[bool] = contextvars.ContextVar(
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
_OPAQUE_OR_REBUILT = frozenset({**opaque.OPAQUE, **opaque.DECOMPOSABLE})
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
