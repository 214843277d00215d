"""Which devices have TF32 tensor cores (private; re-exported by :mod:`eigprec.tf32`).

Kept apart so that :mod:`eigprec.tf32` stays a readable size.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

__all__ = ["has_real_tf32", "is_tf32_capability"]


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
