"""Which ``nn.Module`` runs now, for the audit's layer paths (private helper of
:mod:`eigprec.audit`).

Global forward hooks keep the path of the running module (``blocks.0.attn.qkv``), which the
audit's records carry beside the user's line, and step the audit's function mode aside
while a transformer module runs, so that torch takes the same fast path as without it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["module_paths"]


# Modules whose forward takes torch's fused fast path only when no torch-function mode is
# active (torch.overrides.has_torch_function): the audit's function mode steps aside there.
_FASTPATH_MODULES = (
    torch.nn.MultiheadAttention,
    torch.nn.TransformerEncoderLayer,
    torch.nn.TransformerEncoder,
)


@contextlib.contextmanager
def module_paths(settings: Any, plain: Any = None) -> Iterator[None]:
    """Keep ``settings.modules`` = the paths of the nn.Modules running in this thread.

    Global forward hooks (``torch.nn.modules.module.register_module_forward_pre_hook``)
    push a module's path relative to the outermost module called (``encoder.layers.0
    .linear1``; the outermost one is named by its class) and pop it when it returns. While
    a transformer module runs, the function mode ``plain`` (when given, and on top of the
    stack) is taken off, so that torch takes the same fast path as without the audit.
    """
    owner = threading.get_ident()
    names: dict[int, str] = {}
    suspended: list[torch.nn.Module] = []

    def pre(module: torch.nn.Module, _args: Any) -> None:
        if threading.get_ident() != owner:
            return
        if plain is not None and isinstance(module, _FASTPATH_MODULES):
            depth = torch._C._len_torch_function_stack()
            if depth and torch._C._get_function_stack_at(depth - 1) is plain:
                torch._C._pop_torch_function_stack()
                suspended.append(module)
        if not settings.modules:
            names.clear()
            names.update((id(m), n) for n, m in module.named_modules() if n)
            settings.modules.append(type(module).__name__)
            return
        settings.modules.append(names.get(id(module), type(module).__name__))

    def post(module: torch.nn.Module, _args: Any, _out: Any) -> None:
        if threading.get_ident() != owner:
            return
        if settings.modules:
            settings.modules.pop()
        if suspended and suspended[-1] is module:
            suspended.pop()
            torch._C._push_on_torch_function_stack(plain)

    from torch.nn.modules import module as _module

    handles = (
        _module.register_module_forward_pre_hook(pre),
        _module.register_module_forward_hook(post, always_call=True),
    )
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        settings.modules.clear()
