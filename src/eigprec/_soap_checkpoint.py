"""How a SOAP optimizer's options travel with copies and checkpoints (private to eigprec.soap).

``torch.optim.Optimizer`` pickles and checkpoints only ``defaults``, ``state`` and
``param_groups``; SOAP's optimizer-wide options (KL-Shampoo on or off, its dtype, its
precisions, …) live in attributes, which a copy would drop and a checkpoint would not check.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import torch

__all__ = ["CheckpointedOptions"]


class CheckpointedOptions:
    """Mixin for :class:`eigprec.SOAP`: options kept by copies, recorded and checked in
    checkpoints. The class using it defines ``_OPTIONS`` and ``_ALGORITHM_OPTIONS``
    (attribute names) and ``dtype``."""

    _OPTIONS: tuple[str, ...] = ()
    _ALGORITHM_OPTIONS: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        # torch.optim.Optimizer pickles only defaults, state and param_groups; without the
        # options a deepcopy, pickle or torch.save copy could not step.
        state = super().__getstate__()
        state.update({name: getattr(self, name) for name in self._OPTIONS})
        state["diagnostics"] = self.diagnostics
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("diagnostics", {})

    def _option_record(self) -> dict[str, Any]:
        # Dtypes as names, so that torch.load(weights_only=True) reads the checkpoint.
        return {
            name: str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
            for name in self._ALGORITHM_OPTIONS
            for value in (getattr(self, name),)
        }

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state, with its options under ``"soap_options"``.

        Returns:
            :meth:`torch.optim.Optimizer.state_dict`'s ``state`` and ``param_groups``, plus
            ``soap_options``: every optimizer-wide option that defines the algorithm
            (``use_kl_shampoo``, ``dtype``, precisions, ``eps_mode``, …; dtypes as names).
        """
        out = super().state_dict()
        out["soap_options"] = self._option_record()
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`, refusing a checkpoint of another configuration.

        The options are not restored but compared: loading a KL-Shampoo checkpoint into a plain
        SOAP (or float64 state into a float32 optimizer) would silently continue a different
        algorithm, so a mismatch is an error that names the options to pass instead. The
        state keeps this optimizer's ``dtype`` whatever the parameters' dtype (the base class
        would cast it to the parameters' dtype and round a float64 state to float32).

        Args:
            state_dict: A dict returned by :meth:`state_dict`.

        Raises:
            ValueError: if ``soap_options`` is missing or differs from this optimizer's
                options, plus :meth:`torch.optim.Optimizer.load_state_dict`'s errors.
        """
        saved = state_dict.get("soap_options") if isinstance(state_dict, dict) else None
        if not isinstance(saved, dict):
            raise ValueError(
                "state_dict has no 'soap_options': it was not saved by eigprec's SOAP "
                "(or by an older version), so its algorithm options cannot be checked"
            )
        mine = self._option_record()
        diffs = [
            f"{name}={saved.get(name, '<missing>')!r} (saved) vs {mine.get(name, '<missing>')!r}"
            for name in sorted(set(saved) | set(mine))
            if saved.get(name, "<missing>") != mine.get(name, "<missing>")
        ]
        if diffs:
            raise ValueError(
                "state_dict was saved by a SOAP with other options: "
                + "; ".join(diffs)
                + ". Construct the optimizer with the saved options (state_dict['soap_options'])."
            )
        super().load_state_dict(state_dict)
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for pid, p in zip(saved_ids, params, strict=True):
            for key, value in state_dict["state"].get(pid, {}).items():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    self.state[p][key] = value.detach().to(p.device, self.dtype, copy=True)
