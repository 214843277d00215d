"""What a SOAP step checks before it commits, and the errors it raises (private to eigprec.soap).

A step computes every parameter's new state *and new value* aside, checks them all with one
host synchronisation, and only then writes any; these functions say why a step is refused.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_lr_fits", "new_parameter", "refuse_non_finite"]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_lr_fits(lr: float, p: torch.Tensor, where: str) -> None:
    """Refuse a learning rate that cannot be a scalar of ``p``'s dtype.

    torch converts ``alpha`` of ``add_`` to the tensor's dtype and raises "value cannot be
    converted … without overflow" beyond its range, which, raised from inside a commit, left
    the parameters before it updated (issue 35).
    """
    if lr > torch.finfo(p.dtype).max:
        raise ValueError(
            f"SOAP step refused for {where}: lr={lr:g} is beyond the range of the parameter's "
            f"dtype {_name(p.dtype)} (largest {torch.finfo(p.dtype).max:.3g}). "
            "Nothing was updated."
        )


def new_parameter(p: torch.Tensor, decay: float, lr: float, update: torch.Tensor) -> torch.Tensor:
    """``p·decay − lr·update`` in ``p``'s dtype, in a new tensor; ``p`` is not written.

    The same operations, in the same order, as the in-place ``p.mul_(decay)`` and
    ``p.add_(update, alpha=-lr)`` a step used to commit with, so the numbers do not change.
    """
    new = p.detach() * decay if decay != 1.0 else p.detach().clone()
    return new.add_(update.to(p.dtype), alpha=-lr)


def refuse_non_finite(
    state: dict[str, Any],
    bad: list[str],
    grad: torch.Tensor,
    where: str,
    dtype: torch.dtype,
    eps: float | None = None,
) -> None:
    """Raise the ``ValueError`` that says why a step's new values are not all finite.

    Args:
        state: The parameter's new state; its ``"_param"`` entry (``decay``, ``lr``,
            ``weight_decay``, ``dtype``) describes how the new parameter was computed.
        bad: Names of the new values that are not finite (state keys, ``"update"``,
            ``"param"``), in the order they are computed.
        grad: The parameter's gradient (its largest entry is reported).
        where: Which parameter, for the message.
        dtype: The optimizer's state dtype.
        eps: The group's ``eps``, to recognise an eps that rounds to 0.

    Raises:
        ValueError: always.
    """
    name = _name(dtype)
    if bad != ["param"]:  # a non-finite state or update makes the parameter so: name the cause
        bad = [key for key in bad if key != "param"]
    if bad == ["update"] and eps is not None and torch.tensor(eps, dtype=dtype) == 0:
        # A NaN from 0 / (0 + eps) is no overflow: eps is below the dtype's smallest value.
        tiny = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
        raise ValueError(
            f"SOAP step refused for {where}: eps={eps:g} rounds to 0 in {name}, so a zero "
            f"second moment gives 0/0. Nothing was updated. Use eps ≥ {tiny:.3g}, the "
            f"smallest positive {name}, or a larger one."
        )
    if bad == ["param"]:
        # The state and update are finite: weight decay or lr took the parameter out of range.
        info = state["_param"]
        raise ValueError(
            f"SOAP step refused for {where}: the new parameter would not be finite in "
            f"{_name(info['dtype'])} (lr={info['lr']:g}, weight_decay={info['weight_decay']:g}, "
            f"weight-decay factor {info['decay']:.3g}). Nothing was updated. Lower lr or "
            "weight_decay."
        )
    top = grad.abs().max().item() if grad.numel() else 0.0
    raise ValueError(
        f"SOAP step refused for {where}: {', '.join(bad)} would overflow {name} "
        f"(largest |gradient| entry {top:.3g}). "
        "Nothing was updated. Clip or rescale the gradient, or use dtype=torch.float64."
    )
