"""oneDNN's float32 precision pinned to IEEE around one CPU product (private).

Used by the TF32 emulator and the audit, which both promise float32 accumulation for the
products they run on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from . import precision

__all__ = ["ieee_cpu"]

# Per oneDNN op ("matmul", "conv"): its switch and the three settings its effective
# precision is read from (ATen's Context::float32Precision), or None where this torch has no
# such switch. Looked up once: only the values are read at every product.
_MKLDNN: dict[str, tuple[Any, tuple[Any, ...]] | None] = {}


def _mkldnn_switches(op: str) -> tuple[Any, tuple[Any, ...]] | None:
    if op not in _MKLDNN:
        mkldnn = torch.backends.mkldnn
        switch = getattr(mkldnn, op, None)
        _MKLDNN[op] = (
            (switch, (switch, mkldnn, torch.backends))
            if hasattr(switch, "fp32_precision")
            else None
        )
    return _MKLDNN[op]


class ieee_cpu:  # lower case: used as a function is, `with ieee_cpu(x, "matmul"):`
    """Run one CPU product with oneDNN's float32 ``op`` pinned to IEEE.

    At 'medium' (or 'high' on CPUs with reduced-precision units) oneDNN may run the
    float32 product in bf16/tf32; the emulation promises float32 accumulation, so pin it.
    The setting is process-wide: the precision lock is held meanwhile, so that other
    threads' matmul_precision blocks neither snapshot nor restore it. A class rather than a
    generator context manager: it runs once per product, and this is the cheaper form.
    """

    __slots__ = ("_old", "_switches")

    def __init__(self, operand: torch.Tensor, op: str) -> None:
        self._switches = _mkldnn_switches(op) if operand.device.type == "cpu" else None
        self._old: str | None = None

    def __enter__(self) -> None:
        if self._switches is None:
            return
        switch, chain = self._switches
        precision._LOCK.acquire()
        try:
            for setting in chain:  # the effective precision: "none" inherits
                value = setting.fp32_precision
                if value != "none":
                    break
            else:
                value = "ieee"
            if value != "ieee":
                self._old = switch.fp32_precision
                switch.fp32_precision = "ieee"
        except BaseException:
            precision._LOCK.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._switches is None:
            return
        try:
            if self._old is not None:
                # Torch's getter answers with the inherited value where the op's own
                # setting is "none", so the value read before cannot say which it was.
                # Restore as precision._restore does: inherit first, and set the value
                # explicitly only where inheriting does not give it back.
                switch = self._switches[0]
                switch.fp32_precision = "none"
                if switch.fp32_precision != self._old:
                    switch.fp32_precision = self._old
        finally:
            precision._LOCK.release()
