"""Where TF32 applies: which devices have it, and which of torch's switches turn it on."""

from __future__ import annotations

import numbers

import numpy as np
import torch

from eigprec.precision import MATMUL_PRECISIONS, _effective

__all__ = [
    "has_real_tf32",
    "is_tf32_capability",
    "tf32_conv_enabled",
    "tf32_matmul_enabled",
    "tf32_mode",
    "tf32_rnn_enabled",
]


def has_real_tf32(device: torch.device | str) -> bool:
    """Whether float32 matmuls on ``device`` can run on TF32 tensor cores.

    True for CUDA devices of compute capability 8.0 or higher (Ampere and later) in a
    CUDA (not ROCm) build of torch; False for the CPU, for "cuda" (or a bare index such
    as ``0``, which torch reads as the current accelerator) where no CUDA device is
    available (a CPU-only build included) and everything else.

    Args:
        device: a torch device, device string or CUDA device index.

    Returns:
        True when real TF32 hardware backs float32 matmuls on ``device``.

    Raises:
        TypeError: if ``device`` is none of those (a bool included).
        ValueError: on a negative index or a string torch cannot parse as a device.

    Example:
        >>> has_real_tf32("cpu")
        False
    """
    if type(device) is torch.device and device.type != "cuda":
        return False  # (the audit asks once per product: the common answer, kept cheap)
    if isinstance(device, bool | np.bool_) or not isinstance(
        device, torch.device | str | numbers.Integral
    ):
        raise TypeError(
            f"device must be a torch.device, a device string or a CUDA index, got "
            f"{type(device).__name__} {device!r}"
        )
    if isinstance(device, numbers.Integral):
        device = int(device)
        if device < 0:
            raise ValueError(f"a CUDA device index must be ≥ 0, got {device}")
        if not torch.cuda.is_available():  # torch.device(0) itself fails without CUDA
            return False
        device = torch.device("cuda", device)
    try:
        device = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"not a device: {device!r} ({e})") from None
    if device.type != "cuda" or not torch.cuda.is_available():
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

    Raises:
        TypeError: unless ``capability`` is a pair of ints (``(8,)`` and ``8.6`` are not).

    Example:
        >>> is_tf32_capability((7, 5)), is_tf32_capability((9, 0))  # a T4; an H100
        (False, True)
    """
    if (
        not isinstance(capability, tuple | list)
        or len(capability) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in capability)
    ):
        raise TypeError(
            "capability must be a (major, minor) pair of ints, as "
            f"torch.cuda.get_device_capability() returns, got {capability!r}"
        )
    # ROCm builds also answer torch.cuda; TF32 as discussed here is NVIDIA's.
    return torch.version.hip is None and tuple(int(v) for v in capability) >= (8, 0)


_CAPABILITIES: dict[int, tuple[int, int]] = {}


def _capability(index: int) -> tuple[int, int]:
    if index not in _CAPABILITIES:
        _CAPABILITIES[index] = tuple(torch.cuda.get_device_capability(index))
    return _CAPABILITIES[index]


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


def tf32_rnn_enabled() -> bool:
    """Whether cuDNN would run float32 RNNs in TF32 now (``cudnn.rnn``; default: yes)."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is None or not hasattr(rnn, "fp32_precision"):
        return bool(torch.backends.cudnn.allow_tf32)
    paths = (("cudnn", "rnn", "fp32_precision"), ("cudnn", "fp32_precision"), ("fp32_precision",))
    return _effective(*paths) == "tf32"


def tf32_conv_enabled() -> bool:
    """Whether cuDNN would run float32 convolutions in TF32 now (its default: yes)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is None or not hasattr(conv, "fp32_precision"):
        return bool(torch.backends.cudnn.allow_tf32)
    # ATen's Context::allowTF32CuDNN(CONV): the effective cuda/conv precision.
    paths = (("cudnn", "conv", "fp32_precision"), ("cudnn", "fp32_precision"), ("fp32_precision",))
    return _effective(*paths) == "tf32"


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
