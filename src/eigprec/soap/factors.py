"""Reading the Kronecker factors out of a SOAP-like optimizer (private to eigprec.soap).

:class:`eigprec.SOAPMonitor` reads any optimizer whose per-parameter state holds the factors
and their bases under the keys emerging-optimizers' SOAP uses (``"L"``, ``"R"``, ``"Q_L"``,
``"Q_R"``): eigprec's SOAP and REKLS, emerging-optimizers' SOAP and REKLS, or any object
with a compatible ``.state`` and ``.param_groups`` (issue 46, item 5). These functions say
what is missing from one that is not.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

__all__ = ["FACTOR_KEYS", "check_optimizer", "factors_of", "stateful_params", "step_of"]

#: The state keys of the factors L, R and of their eigenbases, in that order.
FACTOR_KEYS = ("L", "R", "Q_L", "Q_R")

_NEEDS = ", ".join(map(repr, FACTOR_KEYS))


def check_optimizer(optimizer: object) -> None:
    """Refuse an object whose state does not, or cannot, hold SOAP's factors and bases.

    Args:
        optimizer: What :class:`eigprec.SOAPMonitor` was given.

    Raises:
        TypeError: if it has no ``.state`` mapping and ``.param_groups`` list of dicts with
            ``"params"``, if it is one of ``torch.optim``'s optimizers (none keeps
            Kronecker factors; their state may be empty until a step, as SOAP's is), or if
            the state of a parameter lacks a factor or basis (named).
        ValueError: if a factor or basis has a shape the parameter does not imply.
    """
    name = type(optimizer).__name__
    state = getattr(optimizer, "state", None)
    groups = getattr(optimizer, "param_groups", None)
    if (
        not isinstance(state, Mapping)
        or not isinstance(groups, Sequence)
        or not all(isinstance(g, Mapping) and "params" in g for g in groups)
    ):
        raise TypeError(
            "optimizer must have .state (parameter -> its state) and .param_groups (dicts "
            f"with 'params'), as torch.optim.Optimizer has; got {name}"
        )
    module = type(optimizer).__module__
    if module == "torch.optim" or module.startswith("torch.optim."):
        raise TypeError(
            f"torch.optim.{name} keeps no Kronecker factors: SOAPMonitor reads the state "
            f"keys {_NEEDS} (eigprec's SOAP/REKLS, emerging-optimizers' SOAP, or alike)"
        )
    for p, state_of_p, where in stateful_params(optimizer):
        factors_of(state_of_p, p, where)


def stateful_params(optimizer: Any) -> Iterator[tuple[torch.Tensor, Mapping[str, Any], str]]:
    """``(parameter, its state, where)`` for every parameter with non-empty state, in order.

    ``where`` reads ``"parameter i of param group g, shape (m, n)"``. Parameters without
    state (never stepped) are skipped; the state mapping is read with ``.get``, so a
    ``defaultdict`` gains no entries.
    """
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            state = optimizer.state.get(p)
            if state:
                yield p, state, f"parameter {pi} of param group {gi}, shape {tuple(p.shape)}"


def factors_of(
    state: Mapping[str, Any], p: torch.Tensor, where: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """L, R, Q_L and Q_R from one parameter's state, checked.

    Raises:
        TypeError: if one is missing, or is not a real floating tensor.
        ValueError: if the parameter is not 2-D or one has the wrong shape.
    """
    missing = [key for key in FACTOR_KEYS if key not in state]
    if missing:
        keys = ", ".join(map(repr, missing))
        held = ", ".join(sorted(map(repr, state)))
        raise TypeError(
            f"SOAPMonitor reads the Kronecker factors and bases {_NEEDS} from each "
            f"parameter's optimizer state; the state of {where} lacks {keys} (it holds "
            f"{held})"
        )
    if p.dim() != 2:
        raise ValueError(f"SOAPMonitor reads the factors of 2-D parameters; {where} is not 2-D")
    m, n = p.shape
    out = []
    for key, size in zip(FACTOR_KEYS, (m, n, m, n), strict=True):
        value = state[key]
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            kind = str(value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__
            raise TypeError(f"{key!r} of {where} must be a real floating tensor, got {kind}")
        if tuple(value.shape) != (size, size):
            raise ValueError(
                f"{key!r} of {where} has shape {tuple(value.shape)}, expected {(size, size)}"
            )
        out.append(value)
    return out[0], out[1], out[2], out[3]


def step_of(state: Mapping[str, Any]) -> int | None:
    """The state's step counter as an int (a tensor counter read once), or None if it has
    none."""
    step = state.get("step")
    if isinstance(step, torch.Tensor) and step.numel() == 1:
        return int(step.item())
    if isinstance(step, numbers.Integral) and not isinstance(step, bool):
        return int(step)
    if isinstance(step, numbers.Real) and float(step).is_integer():
        return int(step)
    return None
