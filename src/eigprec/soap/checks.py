"""What a SOAP step checks before it commits, and the errors it raises (private to eigprec.soap).

A step computes every parameter's new state *and new value* aside, checks them all with one
host synchronisation, and only then writes any; these functions say why a step is refused.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch

from eigprec._args import check_soap_hyperparameters

__all__ = [
    "check_loaded_groups",
    "check_loaded_state",
    "check_lr_fits",
    "new_parameter",
    "refuse_non_finite",
]


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
    wider = ", or use dtype=torch.float64" if dtype != torch.float64 else ""
    raise ValueError(
        f"SOAP step refused for {where}: {', '.join(bad)} would overflow {name} "
        f"(largest |gradient| entry {top:.3g}). "
        f"Nothing was updated. Clip or rescale the gradient{wider}."
    )


def _state_shapes(m: int, n: int) -> dict[str, tuple[int, int]]:
    # The moments first: their shape is the checkpoint's parameter's, the clearest report.
    return {
        "exp_avg": (m, n),
        "exp_avg_sq": (m, n),
        "L": (m, m),
        "R": (n, n),
        "Q_L": (m, m),
        "Q_R": (n, n),
    }


def check_loaded_groups(state_dict: dict[str, Any]) -> None:
    """Refuse a checkpoint whose param groups hold hyperparameters a step would refuse.

    ``torch.optim.Optimizer.load_state_dict`` replaces every group's hyperparameters by the
    saved ones without looking at them; a NaN ``lr`` or a missing ``shampoo_beta`` then
    failed at the next step, with the valid groups already overwritten (issue 47, item 8).
    Checked as the constructor checks its arguments, before anything is loaded.

    Args:
        state_dict: The checkpoint, after the load pre-hooks. A ``param_groups`` that is not
            a list of dicts is left to torch, which names it.

    Raises:
        ValueError: naming the group and the hyperparameter missing or out of range.
        TypeError: naming the group and the hyperparameter that is not a number.
    """
    groups = state_dict.get("param_groups")
    if not isinstance(groups, list):
        return
    for gi, group in enumerate(groups):
        if isinstance(group, dict):
            check_soap_hyperparameters(group, f"state_dict: param group {gi}")


def check_loaded_state(param_groups: Sequence[dict[str, Any]], state_dict: dict[str, Any]) -> None:
    """Refuse a checkpoint whose per-parameter state this optimizer could not step from.

    Every parameter's saved state must hold the SOAP keys, each a real floating tensor of the
    shape the parameter implies, with finite entries, and an integer ``step`` ≥ 0. Checked
    before anything is loaded, so a refused load changes nothing; a step would otherwise
    fail far from the cause (a shape error in a product, or an "overflow" of a state that
    was NaN when it was saved).

    Args:
        param_groups: The optimizer's parameter groups.
        state_dict: The checkpoint, after the load pre-hooks. Group layouts that differ
            are left to :meth:`torch.optim.Optimizer.load_state_dict`, which names them.

    Raises:
        ValueError: naming the parameter, the key and what is wrong.
    """
    saved_groups, states = state_dict.get("param_groups"), state_dict.get("state")
    if not isinstance(saved_groups, list) or not isinstance(states, dict):
        return
    if len(saved_groups) != len(param_groups) or any(
        not isinstance(s, dict) or len(s.get("params", ())) != len(g["params"])
        for s, g in zip(saved_groups, param_groups, strict=True)
    ):
        return
    for gi, (saved, group) in enumerate(zip(saved_groups, param_groups, strict=True)):
        for pi, (pid, p) in enumerate(zip(saved["params"], group["params"], strict=True)):
            state = states.get(pid)
            if not state:
                continue
            where = f"parameter {pi} of param group {gi}, shape {tuple(p.shape)}"
            _check_one_state(state, where, _state_shapes(*p.shape))


def _check_one_state(state: dict[str, Any], where: str, shapes: dict[str, tuple]) -> None:
    missing = [key for key in (*shapes, "step") if key not in state]
    if missing:
        keys = ", ".join(repr(key) for key in missing)
        raise ValueError(f"state_dict: the state of {where} is missing {keys}")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"state_dict: 'step' of {where} must be an int ≥ 0, got {step!r}")
    for key, shape in shapes.items():
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"state_dict: {key!r} of {where} must be a tensor, got {type(value).__name__}"
            )
        if not value.is_floating_point():
            raise ValueError(
                f"state_dict: {key!r} of {where} is {_name(value.dtype)}, not a real floating dtype"
            )
        if tuple(value.shape) != shape:
            raise ValueError(
                f"state_dict: {key!r} of {where} has shape {tuple(value.shape)}, expected "
                f"{shape}: the checkpoint holds the state of another parameter"
            )
        # One sync per tensor: loading is rare, and the message names the first bad key.
        if not bool(torch.isfinite(value).all()):
            raise ValueError(
                f"state_dict: {key!r} of {where} has NaN or inf entries; a step cannot "
                "continue from it (the checkpoint was saved from a diverged or corrupted run)"
            )
