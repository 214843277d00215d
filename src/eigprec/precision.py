"""Float32 matmul precision: read it coherently and set it temporarily.

PyTorch has two generations of knobs for the precision of float32 matrix products:
the legacy ones (``torch.set_float32_matmul_precision`` and the
``torch.backends.cuda.matmul.allow_tf32`` flag) and, from torch 2.9, per-backend
``fp32_precision`` attributes (``torch.backends.cuda.matmul.fp32_precision``,
``torch.backends.mkldnn.matmul.fp32_precision`` and the global
``torch.backends.fp32_precision``). Once the new attributes have been written,
the legacy getter refuses to answer (it raises ``RuntimeError``), so this module
reads and restores the new attributes themselves where they exist.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["MATMUL_PRECISIONS", "current_matmul_precision", "matmul_precision"]

#: The modes accepted by :func:`torch.set_float32_matmul_precision`, from the most
#: to the least precise float32 matrix product.
#:
#: Example:
#:     >>> MATMUL_PRECISIONS
#:     ('highest', 'high', 'medium')
MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high", "medium")

# Attribute paths of the per-backend settings introduced in torch 2.9, in the order
# they are restored (global first, so the specific ones win).
_NEW_API_PATHS: tuple[tuple[str, ...], ...] = (
    ("fp32_precision",),
    ("cuda", "matmul", "fp32_precision"),
    ("mkldnn", "matmul", "fp32_precision"),
)


def _has_new_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _get_attr(path: tuple[str, ...]) -> str:
    obj = torch.backends
    for name in path:
        obj = getattr(obj, name)
    return obj  # type: ignore[return-value]


def _set_attr(path: tuple[str, ...], value: str) -> None:
    obj = torch.backends
    for name in path[:-1]:
        obj = getattr(obj, name)
    setattr(obj, path[-1], value)


def current_matmul_precision() -> str:
    """The float32 matmul precision torch would use on CUDA, as a legacy mode name.

    Unlike :func:`torch.get_float32_matmul_precision`, this works after code has
    used the torch ≥ 2.9 ``fp32_precision`` settings (which make the legacy getter
    raise). ``'high'`` means TF32 for CUDA float32 matmuls; ``'medium'`` means TF32
    on CUDA and bf16 in oneDNN on the CPU; ``'highest'`` means full float32.

    Returns:
        One of ``'highest'``, ``'high'`` or ``'medium'``.

    Example:
        >>> with matmul_precision("high"):
        ...     current_matmul_precision()
        'high'
    """
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        pass
    # Mixed legacy/new settings: derive the answer from the new attributes.
    cuda = _get_attr(("cuda", "matmul", "fp32_precision"))
    if cuda == "none":
        cuda = _get_attr(("fp32_precision",))
    mkldnn = _get_attr(("mkldnn", "matmul", "fp32_precision"))
    if mkldnn == "bf16":
        return "medium"
    return "high" if cuda == "tf32" else "highest"


@contextlib.contextmanager
def matmul_precision(mode: str) -> Iterator[None]:
    """Set torch's float32 matmul precision inside a ``with`` block, then restore it.

    The legacy flag ``torch.backends.cuda.matmul.allow_tf32`` and, on torch ≥ 2.9,
    the ``fp32_precision`` attributes follow the mode, because they are set through
    :func:`torch.set_float32_matmul_precision`, which keeps them coherent. On exit
    (normal or by an exception) every setting is restored exactly, so blocks nest.

    Args:
        mode: ``'highest'`` (IEEE float32), ``'high'`` (TF32 allowed on CUDA) or
            ``'medium'`` (additionally bf16 allowed, e.g. by oneDNN on the CPU).

    Yields:
        None.

    Raises:
        ValueError: if ``mode`` is not one of the three allowed names.

    Example:
        >>> import torch
        >>> with matmul_precision("high"):
        ...     torch.backends.cuda.matmul.allow_tf32
        True
        >>> with matmul_precision("highest"):
        ...     torch.backends.cuda.matmul.allow_tf32
        False
    """
    if not isinstance(mode, str) or mode not in MATMUL_PRECISIONS:
        raise ValueError(
            f"matmul precision must be one of {', '.join(map(repr, MATMUL_PRECISIONS))}; "
            f"got {mode!r}"
        )
    saved = [(path, _get_attr(path)) for path in _NEW_API_PATHS] if _has_new_api() else []
    try:
        saved_legacy: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # new-API settings already in use; they are restored below
        saved_legacy = None
    try:
        torch.set_float32_matmul_precision(mode)
        yield
    finally:
        # The legacy setter first (it rewrites the new attributes), then the new
        # attributes exactly as they were ('none' means "inherit", not 'ieee').
        if saved_legacy is not None:
            torch.set_float32_matmul_precision(saved_legacy)
        for path, value in saved:
            _set_attr(path, value)
