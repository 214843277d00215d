"""How a SOAP optimizer's options travel with copies and checkpoints (private to eigprec.soap).

``torch.optim.Optimizer`` pickles and checkpoints only ``defaults``, ``state`` and
``param_groups``; SOAP's optimizer-wide options (KL-Shampoo on or off, its dtype, its
precisions, …) live in attributes, which a copy would drop and a checkpoint would not check.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import chain
from typing import Any

import torch

from eigprec.soap.checks import check_loaded_groups, check_loaded_state

__all__ = ["CheckpointedOptions"]


def _record_options(optimizer: CheckpointedOptions, state_dict: dict[str, Any]) -> dict[str, Any]:
    # The first state_dict post-hook (module-level, so copies can register it again): the
    # user's post-hooks then see soap_options, as they see the rest of the state dict.
    state_dict["soap_options"] = optimizer._option_record()
    return state_dict


class CheckpointedOptions:
    """Mixin for :class:`eigprec.SOAP`: options kept by copies, recorded and checked in
    checkpoints. The class using it defines ``_OPTIONS`` and ``_ALGORITHM_OPTIONS``
    (attribute names) and ``dtype``."""

    _OPTIONS: tuple[str, ...] = ()
    _ALGORITHM_OPTIONS: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._register_option_hook()

    def _register_option_hook(self) -> None:
        if _record_options not in self._optimizer_state_dict_post_hooks.values():
            self.register_state_dict_post_hook(_record_options, prepend=True)

    def __getstate__(self) -> dict[str, Any]:
        # torch.optim.Optimizer pickles only defaults, state and param_groups; without the
        # options a deepcopy, pickle or torch.save copy could not step.
        state = super().__getstate__()
        state.update({name: getattr(self, name) for name in self._OPTIONS})
        state["diagnostics"] = self.diagnostics
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # hooks are not pickled: torch starts them empty
        self.__dict__.setdefault("diagnostics", {})
        self._register_option_hook()

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
            (``use_kl_shampoo``, ``dtype``, precisions, ``eps_mode``, …; dtypes as names),
            added before the state-dict post-hooks run (except those registered with
            ``prepend=True`` later), so they see it.
        """
        return super().state_dict()  # soap_options: added by the first post-hook

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`, refusing a checkpoint of another configuration.

        The options are not restored but compared: loading a KL-Shampoo checkpoint into a plain
        SOAP (or float64 state into a float32 optimizer) would silently continue a different
        algorithm, so a mismatch is an error that names the options to pass instead. The
        state keeps this optimizer's ``dtype`` whatever the parameters' dtype (the base class
        would cast it to the parameters' dtype and round a float64 state to float32).

        Hooks behave as in :class:`torch.optim.Optimizer`: load pre-hooks run first, on a
        shallow copy, and what one returns is what is loaded (so a hook can migrate an older
        checkpoint, ``soap_options`` included); the options are checked after them; the
        post-hooks run last, once the state is in this optimizer's ``dtype``.

        Args:
            state_dict: A dict returned by :meth:`state_dict`.

        Raises:
            TypeError: if ``state_dict`` is not a dict, or a saved group's hyperparameter
                is not a number.
            ValueError: if ``soap_options`` is missing or differs from this optimizer's
                options; if a saved group lacks a hyperparameter (``lr``, ``betas``,
                ``shampoo_beta``, ``eps``, ``weight_decay``) or holds one out of the range
                :class:`SOAP` accepts (the message names the group and the hyperparameter);
                if a parameter's state lacks a key, holds a tensor of the wrong shape (a
                checkpoint of another model) or dtype, NaN or inf entries, or a ``step``
                that is not an int ≥ 0 (the message names the parameter and the key).
                Nothing is loaded then. Plus
                :meth:`torch.optim.Optimizer.load_state_dict`'s errors.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        state_dict = state_dict.copy()
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
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
        check_loaded_groups(state_dict)
        check_loaded_state(self.param_groups, state_dict)
        # The base class would run the hooks again (pre) and before the dtype fix-up (post).
        pre, post = (
            self._optimizer_load_state_dict_pre_hooks,
            self._optimizer_load_state_dict_post_hooks,
        )
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        try:
            super().load_state_dict(state_dict)
        finally:
            self._optimizer_load_state_dict_pre_hooks = pre
            self._optimizer_load_state_dict_post_hooks = post
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for pid, p in zip(saved_ids, params, strict=True):
            for key, value in state_dict["state"].get(pid, {}).items():
                if isinstance(value, torch.Tensor) and value.is_floating_point():
                    self.state[p][key] = value.detach().to(p.device, self.dtype, copy=True)
        for hook in post.values():
            hook(self)
