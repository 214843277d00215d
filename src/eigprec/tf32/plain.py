"""Calls a TF32 GPU runs in float32 that a dispatch mode would still change (private).

Two kinds, measured (issue 34):

* eigenvalues and singular values without vectors (``eigvalsh``, ``svdvals``, ``eigvals``
  and the norms, condition numbers and ranks built on them). ATen's composites compute the
  vectors too whenever *any* dispatch mode is active (``at::isTensorSubclassLike``, so
  ``_may_require_fw_or_bw_grad`` is true): LAPACK's vector path gives other values, 5.1e-5
  apart for ``eigvalsh`` at n = 256. A TF32 GPU changes none of them (H200: ``eigvalsh``,
  batched n = 45 too, and ``svdvals`` bit for bit with the switch off and on). Where no
  gradient is wanted and every active dispatch mode is one of this package's TF32 modes,
  they run with those modes off: exactly the plain call. Their kernels multiply in LAPACK,
  out of any mode's sight, so nothing is lost.
* ``vector @ matrix`` and ``F.linear`` on a 1-D input: ATen makes them one-row GEMMs, which
  the measured H100 (length 256, ``book/data/tf32_gpu.json``, ``coverage.vecmat`` and
  ``linear1d``) and H200 (length 4096) ran in float32 at 'high'. Products inside such a call
  are marked (:data:`IN_VECTOR_PRODUCT`) and the modes leave them alone.
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode_stack

__all__ = [
    "IN_VECTOR_PRODUCT",
    "PlainCalls",
    "TF32Mode",
    "dynamo_off",
    "run_plain",
    "vector_product",
    "wants_plain",
]

#: True while a ``vector @ matrix`` (or ``F.linear`` of a vector) runs: not TF32 on a GPU.
IN_VECTOR_PRODUCT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "_tf32_in_vector_product", default=False
)


class TF32Mode:
    """Marks this package's TF32 dispatch modes (emulator, audit, attribution).

    torch wraps a dispatch mode's ``__torch_dispatch__`` in ``torch._dynamo.disable`` (so
    that Dynamo never traces a mode's frames while compiled code runs through it), a wrapper
    that imports ``torch._dynamo`` at the first operator: seconds of start-up for a script
    that never compiles. Subclasses get the same guard from :func:`dynamo_off` instead,
    which needs only torch's C hook (and falls back to torch's wrapper without it).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        raw = cls.__dict__.get("__torch_dispatch__")
        if callable(raw) and _set_eval_frame is not None:
            cls.__torch_dispatch__ = dynamo_off(getattr(raw, "__wrapped__", raw))

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # (torch's own wrapper only where ours is unavailable)
        return _set_eval_frame is None


try:  # Dynamo's frame hook and per-code strategies, in C (no torch._dynamo import)
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy
    from torch._C._dynamo.eval_frame import set_code_exec_strategy as _set_code_exec_strategy
    from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
except ImportError:  # pragma: no cover (another torch: its own wrapper then)
    _set_eval_frame = None


def dynamo_off(fn: Any) -> Any:
    """``fn`` with Dynamo's frame hook off while it runs: no frame under it is compiled.

    What ``torch._dynamo.disable`` does for a dispatch mode, without importing
    ``torch._dynamo``: the hook is cleared on entry and put back on exit, and the wrapper's
    own frame is marked for Dynamo to skip (as torch marks its own wrapper's).
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        prior = _set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_eval_frame(prior)

    _set_code_exec_strategy(
        run.__code__, _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.DEFAULT)
    )
    return run


_VALUES = frozenset(
    {
        torch.linalg.eigvalsh,
        torch.linalg.svdvals,
        torch.linalg.eigvals,
        torch.linalg.matrix_norm,
        torch.linalg.norm,
        torch.linalg.matrix_rank,
        torch.nuclear_norm,
    }
)
_NORMS = frozenset({torch.norm, torch.Tensor.norm})
# cond's other orders invert the matrix (linalg.inv: TF32 changes it on a GPU).
_COND_SPECTRAL = (None, 2, -2)

_VECTOR_PRODUCTS = frozenset(
    {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.nn.functional.linear}
)


def wants_plain(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` is a values-only decomposition that must run as without the modes."""
    if func is torch.linalg.cond:
        p = args[1] if len(args) > 1 else kwargs.get("p")
        if p not in _COND_SPECTRAL:
            return False
    elif func in _NORMS:  # torch.norm: only the nuclear norm decomposes
        if (args[1] if len(args) > 1 else kwargs.get("p")) != "nuc":
            return False
    elif func not in _VALUES:
        return False
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False  # the vector path is the plain one too
    if torch.autograd.forward_ad._current_level >= 0:
        return False  # (forward AD: dual tensors take the vector path)
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return False  # (torch.func transforms: wrapped tensors take it as well)
    return all(isinstance(m, TF32Mode) for m in _get_current_dispatch_mode_stack())


def run_plain(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``func`` with the (TF32) dispatch modes off: the call as without them."""
    with _disable_current_modes():
        return func(*args, **kwargs)


def vector_product(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``func(*args)`` is a ``vector @ matrix`` or ``F.linear`` of a vector."""
    if func not in _VECTOR_PRODUCTS or len(args) < 2:
        return False
    x, y = args[0], args[1]
    return (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.dim() == 1
        and y.dim() == 2
    )


_WATCHED = frozenset({*_VALUES, *_NORMS, torch.linalg.cond, *_VECTOR_PRODUCTS})


class PlainCalls(TorchFunctionMode):
    """The audit's function mode: runs values-only decompositions plainly and marks
    vector products (the emulator's :class:`~eigprec.tf32.dispatch.GraphMarker` does both
    itself)."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if func not in _WATCHED:  # (the common case, kept cheap: it runs at every call)
            return func(*args, **(kwargs or {}))
        kwargs = kwargs or {}
        if wants_plain(func, args, kwargs):
            return run_plain(func, args, kwargs)
        if vector_product(func, args):
            token = IN_VECTOR_PRODUCT.set(True)
            try:
                return func(*args, **kwargs)
            finally:
                IN_VECTOR_PRODUCT.reset(token)
        return func(*args, **kwargs)
