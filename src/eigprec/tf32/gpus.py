"""Which TF32 GPU the emulator and the audit model: its tie rule, and what it keeps in float32.

A TF32 GPU does not run every float32 product it may run in TF32 in TF32: cuBLAS and cuDNN
choose a kernel per shape, and for small shapes they chose kernels without tensor cores on
the GPUs recorded for the book. Without a named GPU (``gpu=None``) the emulator rounds every
product the switches allow -- an upper bound on TF32's effect below those sizes. Naming one
(``gpu="hopper"``) keeps in float32 what that GPU's record kept in float32, and makes its tie
rule the default rounding.

The facts (``book/data`` of the book's repository):

* ``"hopper"``: ties to even (``"rne"``) on an H100 (``tf32_gpu.json``, both operands, at
  'high' and 'medium'; an H200 checked in an earlier review, without a record here, agreed);
  the sizes from the H200's operator sweep
  (``ops_gpu.json``: torch 2.11, CUDA 13.0, cuDNN 9.19, 27 November 2026). ``bmm`` and
  ``baddbmm`` (``einsum``, 3-D ``matmul`` and attention's math path reach them) were
  unchanged at 8 × 16 × 16 and changed from 8 × 64 × 64; ``conv1d``, ``conv2d`` and
  ``conv_transpose2d`` were unchanged at 4 and 16 channels (the transposed one's runs did not
  repeat at 64; changed at 256, the others from 64); a one-row ``mm`` (ATen runs
  ``vector @ matrix`` as exactly that call) was unchanged at every length from 16 to 1024,
  on the H100 at 256 too. ``mm``, ``addmm``, ``addbmm``, ``linear``, ``conv3d`` and cuDNN's
  LSTM changed at every size measured (from 2 × 2 and 4 channels), so no limit applies to
  them. Between the largest size kept and the smallest changed (16 and 64) the record says
  nothing; there the products are rounded.
* ``"ampere"``: ties away from zero (``"rna"``), as the public observations of cuBLAS on
  Ampere GPUs show; no sizes recorded, so every product is rounded.

Convolutions' backward products follow the same channel limits as the forward ones (only
the forward was measured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["COMPLEX64_GAP", "GPUS", "GPUProfile", "check_gpu", "complex64_operands", "profile"]


@dataclass(frozen=True)
class GPUProfile:
    """What a named TF32 GPU does: the rule it rounds ties with and its float32 limits.

    Attributes:
        name: ``"ampere"`` or ``"hopper"``.
        rounding: its tie rule, one of ``ROUNDINGS``.
        batched_up_to: ``bmm``/``baddbmm`` whose m, k and n are all at most this stay
            float32 (None: none do).
        conv_up_to: spatial dimensions (1, 2, 3) -> convolutions whose input and output
            channels are both at most this stay float32.
        transposed_up_to: the same for transposed convolutions.
        one_row: ``mm``/``addmm`` of one row (m = 1) stay float32.
        source: where the facts come from.

    Example:
        >>> hopper = profile("hopper")
        >>> hopper.rounding, hopper.batched_up_to, hopper.conv_up_to[2]
        ('rne', 16, 16)
    """

    name: str
    rounding: str
    batched_up_to: int | None
    conv_up_to: dict[int, int]
    transposed_up_to: dict[int, int]
    one_row: bool
    source: str

    def keeps_float32(self, packet: Any, args: tuple[Any, ...]) -> bool:
        """Whether this GPU runs the product ``packet(*args)`` in float32 despite TF32.

        Args:
            packet: an ATen overload packet of :data:`eigprec.tf32.dispatch.GEMMS` or
                ``CONVS`` (others: False).
            args: its positional arguments.

        Returns:
            True below the recorded sizes (see the module docstring).

        Example:
            >>> import torch
            >>> a = torch.ones(8, 16, 16)
            >>> profile("hopper").keeps_float32(torch.ops.aten.bmm, (a, a))
            True
        """
        name = packet.__name__.rstrip("_")
        if name in ("bmm", "baddbmm"):
            first, second = args[:2] if name == "bmm" else args[1:3]
            m, k = first.shape[-2:]
            return self.batched_up_to is not None and max(m, k, second.shape[-1]) <= (
                self.batched_up_to
            )
        if name in ("mm", "addmm", "_addmm_activation"):
            return self.one_row and args[0 if name == "mm" else 1].shape[0] == 1
        if name == "convolution":
            x, weight, transposed, groups = args[0], args[1], args[6], args[8]
            out = weight.shape[1] * groups if transposed else weight.shape[0]
            return self._small_conv(weight.dim() - 2, bool(transposed), x.shape[1], out)
        if name == "convolution_backward":
            grad_out, x, weight, transposed = args[0], args[1], args[2], args[7]
            return self._small_conv(
                weight.dim() - 2, bool(transposed), x.shape[1], grad_out.shape[1]
            )
        return False

    def _small_conv(self, dims: int, transposed: bool, channels_in: int, channels_out: int) -> bool:
        limit = (self.transposed_up_to if transposed else self.conv_up_to).get(dims)
        return limit is not None and max(channels_in, channels_out) <= limit


_H200 = "the H200's operator sweep (torch 2.11, CUDA 13.0, cuDNN 9.19; ops_gpu.json)"

_PROFILES = {
    "ampere": GPUProfile(
        name="ampere",
        rounding="rna",
        batched_up_to=None,
        conv_up_to={},
        transposed_up_to={},
        one_row=False,
        source="public observations of cuBLAS on Ampere GPUs (ties away); no sizes recorded",
    ),
    "hopper": GPUProfile(
        name="hopper",
        rounding="rne",
        batched_up_to=16,
        conv_up_to={1: 16, 2: 16},
        transposed_up_to={2: 16},
        one_row=True,
        source=f"ties to even on an H100 (tf32_gpu.json); sizes from {_H200}",
    ),
}

#: The GPUs ``emulate_tf32(gpu=...)`` and ``tf32_audit(gpu=...)`` can model.
GPUS = tuple(_PROFILES)


def check_gpu(gpu: object) -> None:
    """Refuse anything but None or one of :data:`GPUS`.

    Raises:
        ValueError: naming the choices.
    """
    if gpu is not None and (not isinstance(gpu, str) or gpu not in _PROFILES):
        raise ValueError(f"gpu must be None or one of {GPUS}, got {gpu!r}")


def profile(gpu: str | None) -> GPUProfile | None:
    """The :class:`GPUProfile` of a GPU name, or None for None.

    Args:
        gpu: None or one of :data:`GPUS`.

    Returns:
        Its profile (None: no GPU named).

    Raises:
        ValueError: for any other value.

    Example:
        >>> profile("ampere").rounding, profile(None)
        ('rna', None)
    """
    check_gpu(gpu)
    return None if gpu is None else _PROFILES[gpu]


#: What the emulator and the audit say of a complex64 GEMM where TF32 would apply.
COMPLEX64_GAP = (
    "a complex64 product: torch runs it through cuBLAS's complex GEMM on the handle whose "
    "TF32 math mode the matmul switch sets, and torch's own test helper tf32_on_and_off "
    "treats complex64 matmuls as TF32 on Ampere and later; whether and how a GPU rounds "
    "their operands is not measured yet (python -m eigprec_book.record complex64 on a TF32 "
    "GPU measures it), so here it runs unchanged, in complex64"
)


def complex64_operands(args: tuple[Any, ...], operands: tuple[int, ...]) -> bool:
    """Whether the multiplied operands ``args[i]`` (``i`` in ``operands``) are complex64.

    Example:
        >>> import torch
        >>> a = torch.ones(2, 2, dtype=torch.complex64)
        >>> complex64_operands((a, a), (0, 1)), complex64_operands((a.real, a.real), (0, 1))
        (True, False)
    """
    return len(args) > max(operands) and all(
        isinstance(args[i], torch.Tensor)
        and args[i].dtype == torch.complex64
        and args[i].layout == torch.strided
        for i in operands
    )
