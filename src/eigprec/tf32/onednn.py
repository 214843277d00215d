"""oneDNN's float32 precision pinned to IEEE around one CPU product (private).

Used by the TF32 emulator and the audit, which both promise float32 accumulation for the
products they run on the CPU.
"""

from __future__ import annotations

import torch

from eigprec import precision

__all__ = ["ieee_cpu"]


class ieee_cpu:  # lower case: used as a function is, `with ieee_cpu(x, "matmul"):`
    """Run one CPU product with oneDNN's float32 ``op`` pinned to IEEE.

    At 'medium' (or 'high' on CPUs with reduced-precision units) oneDNN may run the
    float32 product in bf16/tf32; the emulation promises float32 accumulation, so pin it.
    The setting is process-wide: the pin is counted (concurrent products share it, the last
    one puts the setting back) and only switching it takes the precision lock, not the
    product; meanwhile :mod:`eigprec.precision` reads and writes the setting through the pin
    (:func:`eigprec.precision.current_matmul_precision` answers as set, other threads'
    blocks snapshot and restore what was set). Other threads' oneDNN products run at IEEE
    while a pin is in force, more precise than their setting allows. A class rather than a
    generator context manager: it runs once per product, and this is the cheaper form.
    """

    __slots__ = ("_path",)

    def __init__(self, operand: torch.Tensor, op: str) -> None:
        self._path: tuple[str, ...] | None = None
        if operand.device.type == "cpu" and op not in _ABSENT:
            if hasattr(getattr(torch.backends.mkldnn, op, None), "fp32_precision"):
                self._path = ("mkldnn", op, "fp32_precision")
            else:
                _ABSENT.add(op)

    def __enter__(self) -> None:
        if self._path is not None and not precision._pin_ieee(self._path):
            self._path = None  # already IEEE: nothing to put back

    def __exit__(self, *exc: object) -> None:
        if self._path is not None:
            precision._unpin(self._path)


# oneDNN ops without an fp32_precision switch in this torch (nothing to pin).
_ABSENT: set[str] = set()
