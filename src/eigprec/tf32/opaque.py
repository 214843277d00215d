"""ATen operators that run float32 products out of the dispatcher's sight (private).

Their kernels multiply inside C++ (oneDNN, fused attention, fused transformer layers), so a
dispatch mode sees the operator but not its GEMMs. :mod:`eigprec.tf32.dispatch` emulates
the two it can rebuild from visible pieces (``_euclidean_dist``, ``_trilinear``) and, with
:mod:`eigprec.audit.mode`, names every other one as *run but not covered*, with what a TF32
GPU does for it. Facts, from torch's source (pytorch/pytorch):

* cuDNN RNNs set their math type from ``allowTF32CuDNN(Float32Op::RNN)``
  (``aten/src/ATen/native/cudnn/RNN.cpp``), i.e. ``torch.backends.cudnn.rnn.fp32_precision``
  (``'tf32'`` by default in torch 2.13, like convolutions) -- not the matmul switch;
* the memory-efficient attention kernel picks CUTLASS's ``OpMultiplyAddFastF32`` (3xTF32,
  about float32 accuracy) for float32 on compute capability >= 8.0 at compile time
  (``mem_eff_attention/gemm_kernel_utils.h``, ``DefaultGemmType``), whatever the switches;
  flash attention has no float32 kernel; the math path is ``bmm``s (matmul switch);
* autocast runs ``cdist``/``pdist``/``dist`` in float32 (``autocast_mode.cpp``:
  ``KERNEL_CUDA(cdist, fp32)``), so their GEMMs are float32 products even under autocast.
"""

from __future__ import annotations

import string
from typing import Any

import torch

__all__ = [
    "DECOMPOSABLE",
    "FUSED_ATTENTION",
    "ONEDNN_RNN",
    "OPAQUE",
    "SOLVES",
    "SOLVE_EFFECT",
    "euclidean_dist",
    "lstm_native",
    "tf32_applies",
    "trilinear",
]

_aten = torch.ops.aten

_FASTPATH = (
    "fused transformer fast path (eval or no_grad): on a GPU its GEMMs follow the matmul "
    "TF32 switch; torch.backends.mha.set_fastpath_enabled(False) makes it run the "
    "emulated path"
)
_ATTENTION = (
    "fused attention: on a TF32 GPU float32 runs the memory-efficient kernel, whose CUTLASS "
    "GEMMs use 3xTF32 (about float32 accuracy) whatever the switches, or the math path "
    "(bmm, matmul switch); here it runs in float32. Under "
    "torch.nn.attention.sdpa_kernel(SDPBackend.MATH) the math path's bmm's run here and "
    "are covered"
)
_RNN = (
    "fused RNN (oneDNN on the CPU): on a GPU cuDNN runs it in TF32 when "
    "torch.backends.cudnn.rnn.fp32_precision is 'tf32' (the default); here it runs in float32"
)


# Measured on H200s: TF32 switch off vs on, each setting repeatable bit for bit (issue 34's
# review; the operator-sweep record book/data/ops_gpu.json, 4 right-hand sides, n <= 1024).
SOLVE_EFFECT = (
    "measured on an H200: relative change ~1e-4 (solve 9.9e-5, inv 8.9e-5, "
    "solve_triangular 7.0e-5, lu_solve 9.9e-5); in the book's sweep record inv (1.2e-4) and "
    "solve_triangular (9.2e-5) changed at n = 1024 and not at n <= 256, solve with 4 "
    "right-hand sides, lu_factor and lu_solve not up to n = 1024"
)
_SOLVES = (
    "a solve, inverse or LU factorisation: LAPACK here; on a TF32 GPU a blocked algorithm whose "
    f"GEMM updates follow the matmul TF32 switch, {SOLVE_EFFECT}; cholesky, cholesky_solve, qr, "
    "lstsq, eigvalsh and svdvals did not change. Put matmul_precision('highest') around GPU "
    "solves and inverses"
)


def _ops(names: tuple[str, ...], note: str) -> dict[Any, str]:
    found = (getattr(_aten, n, None) for n in names)
    return {op: note for op in found if op is not None}


# packet -> what a TF32 GPU does with it (operators absent from this torch are skipped).
OPAQUE: dict[Any, str] = {
    **_ops(("_transformer_encoder_layer_fwd", "_native_multi_head_attention"), _FASTPATH),
    **_ops(
        (
            "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_efficient_attention_backward",
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_cudnn_attention_backward",
            "_efficient_attention_forward",
            "_efficient_attention_backward",
            "_flash_attention_forward",
            "_flash_attention_backward",
        ),
        _ATTENTION,
    ),
    **_ops(
        ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward", "_cudnn_rnn", "_cudnn_rnn_backward"),
        _RNN,
    ),
    **_ops(
        (
            "_linalg_solve_ex",
            "linalg_inv_ex",
            "linalg_solve_triangular",
            "triangular_solve",
            "linalg_lu_solve",
            "linalg_lu_factor_ex",
            "linalg_lu",
        ),
        _SOLVES,
    ),
}

# The solves above change under TF32 only for float32 (and complex64) operands, and not
# inside the derivative formulas torch runs under NoTF32Guard.
SOLVES = frozenset(op for op, note in OPAQUE.items() if note is _SOLVES)
# Fused attention and the transformer fast path; oneDNN's LSTM kernel (the CPU's only fused
# RNN): the operators eigprec.audit's --unfuse replaces by visible products.
FUSED_ATTENTION = frozenset(op for op, note in OPAQUE.items() if note in (_ATTENTION, _FASTPATH))
ONEDNN_RNN = frozenset(
    op
    for op in (getattr(_aten, n, None) for n in ("mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"))
    if op is not None
)


def tf32_applies(packet: Any, args: tuple[Any, ...]) -> bool:
    """Whether a TF32 GPU would run this opaque operator's products in TF32 (dtype-wise)."""
    if packet not in SOLVES:
        return True
    if torch._C._current_autograd_node() is not None:  # (backward: NoTF32Guard formulas)
        return False
    return any(
        isinstance(a, torch.Tensor) and a.dtype in (torch.float32, torch.complex64) for a in args
    )


def euclidean_dist(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """``aten._euclidean_dist`` (cdist's matrix-product path) from visible pieces.

    The same operations as ATen's ``_euclidean_dist`` (``aten/src/ATen/native/Distance.cpp``),
    bit for bit in float32; its one GEMM now reaches the dispatch modes.
    """
    x1_norm = x1.pow(2).sum(-1, True)
    x2_norm = x2.pow(2).sum(-1, True)
    left = torch.cat([x1.mul(-2), x1_norm, torch.ones_like(x1_norm)], -1)
    right = torch.cat([x2, torch.ones_like(x2_norm), x2_norm], -1)
    return left.matmul(right.mT).clamp_min_(0).sqrt_()


def trilinear(
    i1: torch.Tensor,
    i2: torch.Tensor,
    i3: torch.Tensor,
    expand1: list[int],
    expand2: list[int],
    expand3: list[int],
    sumdim: list[int],
    unroll_dim: int = 1,
) -> torch.Tensor:
    """``aten._trilinear`` (``nn.Bilinear``) as an einsum, whose pairwise products are GEMMs.

    ATen's kernel also contracts pairwise with ``bmm`` (``sumproduct_pair``); the order of
    the contractions may differ, so results agree to float32 rounding, not bit for bit.
    """
    del unroll_dim  # a loop-unrolling hint of the C++ kernel
    parts = []
    for t, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for d in sorted(expand):
            t = t.unsqueeze(d)
        parts.append(t)
    letters = string.ascii_letters[: parts[0].dim()]
    out = "".join(c for d, c in enumerate(letters) if d not in set(sumdim))
    # einsum broadcasts size-1 dimensions; keep them where _trilinear keeps them.
    result = torch.einsum(f"{letters},{letters},{letters}->{out}", *parts)
    return result


# packet -> its visible rebuild (emulated when TF32 applies to its float32 inputs)
DECOMPOSABLE: dict[Any, Any] = {_aten._euclidean_dist: euclidean_dist, _aten._trilinear: trilinear}


def lstm_native(
    x: torch.Tensor,
    hx: Any,
    params: Any,
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.lstm`` (unpacked input) as ATen's native CPU loop runs it, from visible pieces.

    On the CPU torch runs a float32 LSTM in oneDNN's fused kernel unless oneDNN is switched
    off process-wide; this is the loop it runs then (``aten/src/ATen/native/RNN.cpp``:
    ``FullLayer``/``FullBidirectionalLayer`` with the input products of the whole sequence
    computed first, ``LSTMCell``, ``apply_layer_stack``), operation for operation, so that
    its GEMMs reach the dispatch modes without touching any process-wide switch. Bit for
    bit the native result (``tests/test_tf32_threads.py`` checks it); differentiable.
    """
    dirs = 2 if bidirectional else 1
    per = len(params) // (num_layers * dirs)
    h0, c0 = hx
    layer_input = x.transpose(0, 1) if batch_first else x
    hs, cs = [], []
    for layer in range(num_layers):
        outputs = []
        for d in range(dirs):
            k = layer * dirs + d
            w = params[k * per : (k + 1) * per]
            w_ih, w_hh = w[0], w[1]
            b_ih, b_hh = (w[2], w[3]) if has_biases else (None, None)
            w_hr = w[4 if has_biases else 2] if len(w) > (4 if has_biases else 2) else None
            steps = list(torch.nn.functional.linear(layer_input, w_ih, b_ih).unbind(0))
            if d == 1:
                steps.reverse()
            h, c = h0[k], c0[k]
            out = []
            for step in steps:
                gates = torch.nn.functional.linear(h, w_hh, b_hh).add_(step)
                i, f, g, o = gates.unsafe_chunk(4, 1)
                i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
                c = (f * c).add_(i * g)
                h = o * c.tanh()
                if w_hr is not None:
                    h = torch.matmul(h, w_hr.t())
                out.append(h)
            if d == 1:
                out.reverse()
            outputs.append(torch.stack(out, 0))
            hs.append(h)
            cs.append(c)
        layer_input = outputs[0] if dirs == 1 else torch.cat(outputs, outputs[0].dim() - 1)
        if dropout != 0 and train and layer < num_layers - 1:
            layer_input = torch.dropout(layer_input, dropout, train)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    return output, torch.stack(hs, 0), torch.stack(cs, 0)
