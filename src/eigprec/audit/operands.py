"""What an audited product reads, writes and differentiates (private helper of
:mod:`eigprec.audit.mode`).

Whether an operator writes over its inputs (then the audit's side products must run before
it) or over the operands it multiplies (then its float32 result is not their product), and,
for the backward products of a GEMM, whose gradient each one computes, so that a layer's
input-gradient and weight-gradient products are told apart even where their shapes agree.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["gradient_of", "operand_roles", "overwrites_operand", "writes_an_input"]


def writes_an_input(packet: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the op writes (in place into its first argument, or out=) over the memory of
    any of its inputs, the additive term of ``addmm_`` included."""
    if packet.__name__.endswith("_"):
        return True
    written = kwargs.get("out")
    if not isinstance(written, torch.Tensor):
        return False
    storage = written.untyped_storage().data_ptr()
    return any(
        isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == storage for a in args
    )


def operand_roles(func: Any, args: tuple[Any, ...], operands: tuple[int, ...]) -> tuple:
    """For the two operands of a forward GEMM: (storage address, requires grad, the name of its
    gradient's product): "weight" for a parameter (or a view of one, as linear's transposed
    weight), "input" for the other operand of a parameter, else the operator's own name for
    the argument ("self", "mat2"...).
    """
    mats = [args[i] for i in operands]
    params = [_is_parameter(m) for m in mats]
    names = [func._schema.arguments[i].name for i in operands]
    return tuple(
        (
            m.untyped_storage().data_ptr(),
            m.requires_grad,
            "weight" if params[j] else ("input" if params[1 - j] else names[j]),
        )
        for j, m in enumerate(mats)
    )


def _is_parameter(t: torch.Tensor) -> bool:
    return isinstance(t, torch.nn.Parameter) or isinstance(t._base, torch.nn.Parameter)


def gradient_of(roles: tuple, args: tuple[Any, ...], operands: tuple[int, ...]) -> str:
    """Which operand's gradient a backward product of that GEMM computes, as "[name grad]"; ""
    where it cannot be told. With one operand requiring grad, only its gradient is computed.
    With two, both are saved for backward (each gradient needs the other operand), so their
    storage is alive and the product that reads operand j's storage computes the other one's
    gradient.
    """
    wanting = [r for r in roles if r[1]]
    if len(wanting) == 1:
        return f"[{wanting[0][2]} grad]"
    if len(wanting) != 2 or roles[0][0] == roles[1][0]:
        return ""
    read = {args[i].untyped_storage().data_ptr() for i in operands}
    hits = [j for j in (0, 1) if roles[j][0] in read]
    return f"[{roles[1 - hits[0]][2]} grad]" if len(hits) == 1 else ""


def overwrites_operand(
    packet: Any, args: tuple[Any, ...], kwargs: dict[str, Any], operands: tuple[int, ...]
) -> bool:
    """Whether the op writes (out=, or in place into its first argument) over the memory of one
    of the operands it multiplies.
    """
    written = kwargs.get("out")
    if written is None and packet.__name__.endswith("_"):
        written = args[0]
    if not isinstance(written, torch.Tensor):
        return False
    storage = written.untyped_storage().data_ptr()
    return any(
        isinstance(args[i], torch.Tensor) and args[i].untyped_storage().data_ptr() == storage
        for i in operands
    )
