"""``--unfuse``: run fused kernels as the products the audit can see (private helper of the CLI).

Fused attention (``F.scaled_dot_product_attention``'s flash and memory-efficient kernels,
the transformer fast path of ``nn.MultiheadAttention``/``nn.TransformerEncoderLayer``) and
oneDNN's LSTM kernel multiply inside C++, out of a dispatch mode's sight: the audit counts
their calls as *run but not covered*. :func:`unfused` runs them on kernels made of visible
products instead: attention on its math kernel (``bmm``, softmax, ``bmm``), the fast path
off, and ``torch.lstm`` (unpacked float32 input) as ATen's native cell loop
(:func:`eigprec.tf32.opaque.lstm_native`, the loop torch itself runs with oneDNN off).

The arithmetic changes with the kernels: results then differ from a plain run in the last
bits. GRU and plain RNN layers already run the native loop on the CPU; on a GPU cuDNN runs
them, and those calls stay not covered (LSTMs run the native loop there too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode

from eigprec.tf32 import opaque

__all__ = ["UNFUSED_OPS", "unfused"]

#: The not-covered operators that ``--unfuse`` replaces by visible products.
UNFUSED_OPS = frozenset(op.__name__ for op in opaque.FUSED_ATTENTION | opaque.ONEDNN_RNN)


class _NativeLSTM(TorchFunctionMode):
    # torch.lstm on unpacked float32 input, run as ATen's native loop of visible products.

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if (
            func is torch.lstm
            and not kwargs
            and len(args) == 9
            and isinstance(args[0], torch.Tensor)
            and not isinstance(args[1], torch.Tensor)  # (packed input: batch_sizes)
            and args[0].dtype == torch.float32
        ):
            return opaque.lstm_native(*args)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def unfused() -> Iterator[None]:
    """Fused attention on its math kernel, the fast path off, LSTMs as native loops.

    Process-wide switches (the attention backends, the fast path) are restored as found.

    Example:
        >>> import torch
        >>> from eigprec.audit import tf32_audit
        >>> q = torch.ones(1, 2, 4, 8)
        >>> with unfused(), tf32_audit() as report:
        ...     _ = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        >>> sorted(r.op for r in report.records), report.not_covered
        (['bmm', 'bmm'], {})
    """
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]), _NativeLSTM():
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
