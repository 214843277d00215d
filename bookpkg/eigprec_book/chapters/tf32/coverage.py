"""What TF32 touches on a GPU, and what the emulator does with each operation.

:data:`TF32_COVERAGE` records, per family of float32 operations, whether PyTorch runs it
in TF32 on an Ampere-or-later NVIDIA GPU, which switch decides, and where that is
written (a bibliography key of the chapter). Those are facts about GPUs and PyTorch's
source, cited, not measured here. :func:`emulator_coverage` measures the other column:
whether :func:`~eigprec.tf32.emulate_tf32` rounds the operands of each family on this
machine.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from eigprec import NotEmulatedWarning
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32
from eigprec.tf32.gpus import profile

# What the book's H200 kept in float32 (book/data/ops_gpu.json, through the library's
# "hopper" profile, which tests/test_tf32_gpu_profile.py holds to that record).
_HOPPER = profile("hopper")
_N, _C = _HOPPER.batched_up_to, _HOPPER.conv_up_to[2]

__all__ = ["TF32_COVERAGE", "emulator_coverage"]

#: One row per operation family: ``op``, ``gpu`` (what a TF32 GPU does at 'high'),
#: ``switch`` (the torch setting that decides), ``probe`` (key of
#: :func:`emulator_coverage`, or None) and ``cite`` (bibliography keys).
TF32_COVERAGE: tuple[dict[str, str | None], ...] = (
    {
        "op": "matmul family: @, matmul, mm, bmm, addmm, baddbmm, einsum, nn.Linear",
        "gpu": f"TF32; on the H200 recorded for the book bmm and baddbmm (einsum, 3-D matmul, "
        f"attention's math path) stayed float32 up to {_N}×{_N}×{_N}, and one-row products "
        "at every length; the emulator rounds those unless told the GPU (gpu='hopper')",
        "switch": "cuda.matmul.fp32_precision ('high', 'medium')",
        "probe": "mm",
        "cite": "pytorch_cuda_notes",
    },
    {
        "op": "vector @ matrix, F.linear on a 1-D input",
        "gpu": "float32 (measured: H100, H200), though ATen makes them one-row GEMMs",
        "switch": "cuda.matmul.fp32_precision",
        "probe": "vecmat",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "matrix @ vector (mv, addmv), dot",
        "gpu": "float32: cuBLAS gemv runs under NoTF32Guard; dot is a vector routine",
        "switch": "none",
        "probe": "mv",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "convolutions (cuDNN)",
        "gpu": f"TF32 by default, even at 'highest'; on the H200 conv1d, conv2d and "
        f"conv_transpose2d stayed float32 up to {_C} channels (conv3d was TF32 from 4), "
        "which the emulator rounds unless told the GPU (gpu='hopper')",
        "switch": "cudnn.conv.fp32_precision (legacy cudnn.allow_tf32)",
        "probe": "conv",
        "cite": "pytorch_cuda_notes",
    },
    {
        "op": "RNN, LSTM, GRU (cuDNN)",
        "gpu": "TF32 by default, even at 'highest'",
        "switch": "cudnn.rnn.fp32_precision (legacy cudnn.allow_tf32)",
        "probe": "lstm",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "scaled_dot_product_attention, float32",
        "gpu": "memory-efficient kernel: 3xTF32 (CUTLASS fast float32) whatever the "
        "switches; math path (sdpa_kernel(SDPBackend.MATH)): matmuls as above, emulated",
        "switch": "none for that kernel",
        "probe": "sdpa",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "cdist, Euclidean, above 25 rows (matmul path)",
        "gpu": "TF32; autocast runs cdist in float32, so also inside autocast",
        "switch": "cuda.matmul.fp32_precision",
        "probe": "cdist",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "torch.linalg backward formulas (eigh, svd, cholesky, pinv, qr, det, solve, lu, "
        "triangular solve)",
        "gpu": "float32: NoTF32Guard",
        "switch": "none",
        "probe": "eigh_backward",
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "CPU and XPU matmuls through oneDNN",
        "gpu": "'high' sets mkldnn fp32_precision to 'tf32': oneDNN may convert to TF32 "
        "where the hardware has it",
        "switch": "mkldnn.matmul.fp32_precision",
        "probe": None,
        "cite": "pytorch_source_tf32",
    },
    {
        "op": "AMD GPUs (ROCm, hipBLASLt)",
        "gpu": "XF32 only with HIPBLASLT_ALLOW_TF32=1 set, and TF32 allowed in torch",
        "switch": "environment variable plus cuda.matmul.fp32_precision",
        "probe": None,
        "cite": "rocm_pytorch1803",
    },
)

_OFF = 1 + 2.0**-12  # its last bit is below TF32's ten: rounding to TF32 gives 1


def _verdict(rounded: bool, caught: list[warnings.WarningMessage]) -> str:
    if rounded:
        return "rounds"
    named = any(issubclass(w.category, NotEmulatedWarning) for w in caught)
    return "float32, with a warning" if named else "float32"


def _probe_exact(run: Callable[[], torch.Tensor]) -> str:
    # rounded when the 2**-12 was lost: the operand was rounded to TF32
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with matmul_precision("high"), emulate_tf32(force=True):
            rounded = float(run().flatten()[0]) == 1.0
    return _verdict(rounded, caught)


def _probe_changed(run: Callable[[], torch.Tensor]) -> str:
    # rounded when emulation changes the result at all
    with matmul_precision("highest"):
        plain = run()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with matmul_precision("high"), emulate_tf32(force=True):
            emulated = run()
    return _verdict(not torch.equal(plain, emulated), caught)


def _all_round(*verdicts: str) -> str:
    not_rounded = [v for v in verdicts if v != "rounds"]
    return not_rounded[0] if not_rounded else "rounds"


def _any_rounds(*verdicts: str) -> str:
    return "rounds" if "rounds" in verdicts else verdicts[0]


def emulator_coverage() -> dict[str, str]:
    """Measure whether :func:`~eigprec.tf32.emulate_tf32` rounds each operation family.

    Exact probes multiply ``1 + 2**-12`` by one (the result is 1 exactly when the
    operand was rounded to TF32); the others compare a seeded random run with and
    without the emulator. A :class:`~eigprec.NotEmulatedWarning` (an operator the
    emulator names as run but not covered) is caught and reported.

    Returns:
        Probe key of :data:`TF32_COVERAGE` -> ``"rounds"``, ``"float32"`` or
        ``"float32, with a warning"`` (named as not emulated).

    Example:
        >>> cov = emulator_coverage()
        >>> cov["mm"], cov["mv"]
        ('rounds', 'float32')
    """
    g = torch.Generator().manual_seed(0)
    x = torch.tensor([_OFF])
    one = torch.ones(1, 1)
    lstm = torch.nn.LSTM(8, 8, batch_first=True)
    with torch.no_grad():
        for p in lstm.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    seq = torch.randn(1, 5, 8, generator=g)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    pts = torch.randn(30, 4, generator=g) + 100.0
    sym = torch.randn(6, 6, generator=g, dtype=torch.float32)
    sym = sym @ sym.T + torch.eye(6)

    def eigh_grad() -> torch.Tensor:
        a = sym.clone().requires_grad_(True)
        torch.linalg.eigh(a).eigenvectors.pow(3).sum().backward()
        return a.grad

    def lstm_out() -> torch.Tensor:
        with torch.no_grad():
            return lstm(seq)[0]

    return {
        "mm": _probe_exact(lambda: x.reshape(1, 1) @ one),
        "vecmat": _all_round(_probe_exact(lambda: x @ one), _probe_exact(lambda: F.linear(x, one))),
        "mv": _any_rounds(
            _probe_exact(lambda: x.reshape(1, 1) @ torch.ones(1)),
            _probe_exact(lambda: torch.dot(x, torch.ones(1))),
        ),
        "conv": _probe_exact(lambda: F.conv2d(x.reshape(1, 1, 1, 1), one.reshape(1, 1, 1, 1))),
        "lstm": _probe_changed(lstm_out),
        "sdpa": _probe_changed(lambda: F.scaled_dot_product_attention(q, k, v)),
        "cdist": _probe_changed(lambda: torch.cdist(pts, pts[:27] * 1.001)),
        "eigh_backward": _probe_changed(eigh_grad),
    }
