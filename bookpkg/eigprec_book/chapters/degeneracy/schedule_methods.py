"""Remedies that change *when* or *where* SOAP preconditions, not its arithmetic.

Issue 37, item 3. The failure starts at the first KL-Shampoo step, whose zero factors are
whitened by 1/ε; these variants of :class:`eigprec.SOAP` move or remove parts of the
preconditioner instead of changing a formula:

* :class:`SkipFirstSOAP` -- the first gradient only builds the factors and the basis; the
  parameter and Adam's moments are left alone (the SOAP authors' reference code skips the
  first update so that a gradient is never projected on a basis built from itself);
* :class:`DelayedSOAP` -- plain Adam in the parameter's coordinates for the first
  ``start_step`` steps while the factors accumulate, then Adam in the eigenbasis (Distributed
  Shampoo's ``start_preconditioning_step``, later emerging-optimizers' ``adam_warmup_steps``);
* :class:`OneSidedSOAP` -- only the smaller side is preconditioned; the larger side's basis
  stays the identity, so the factor whose exact null half starts the failure is never built.

:func:`clipped_spike` gives the spike a layer passes on under a *global* gradient-norm clip
(item 11). All are our own implementations of the ideas, on the 0.3.0 semantics of
:class:`eigprec.SOAP`; none is the cited projects' code.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from eigprec._args import check_int, check_real
from eigprec.soap import SOAP, core

__all__ = ["DelayedSOAP", "OneSidedSOAP", "SkipFirstSOAP", "clipped_spike"]


class SkipFirstSOAP(SOAP):
    """:class:`eigprec.SOAP` whose first step only builds the preconditioner.

    At the first step the factors are updated and the basis computed as usual, but the
    parameter does not move and Adam's moments stay zero; from the second step on the
    optimizer is :class:`eigprec.SOAP`. Adam's bias corrections do not count the skipped
    step (its moments saw no gradient there); the factors' β correction does.

    Args:
        params: Parameters (all 2-D) or parameter groups.
        lr: Learning rate, ≥ 0.
        **kwargs: Any other argument of :class:`eigprec.SOAP`.

    Raises:
        TypeError, ValueError: as :class:`eigprec.SOAP`.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(4, 2))
        >>> opt = SkipFirstSOAP([w], lr=0.1, use_kl_shampoo=True, fp32_matmul_prec="highest")
        >>> w.grad = torch.ones(4, 2)
        >>> opt.step()
        >>> w.abs().max().item(), opt.state[w]["L"].abs().max().item() > 0
        (0.0, True)
    """

    def _adam_direction(
        self, state: dict[str, Any], g: torch.Tensor, group: dict[str, Any], t: int
    ) -> torch.Tensor:
        if t == 1:
            return torch.zeros_like(g)
        return super()._adam_direction(state, g, group, t - 1)


class DelayedSOAP(SOAP):
    """:class:`eigprec.SOAP` that runs plain Adam until ``start_step``, factors accumulating.

    For the first ``start_step`` steps both bases stay the identity, so the inner Adam works
    in the parameter's own coordinates (plain Adam), while the factors take every update --
    the KL-Shampoo ones whiten by diag(F) in that identity basis. At step
    ``start_step + 1`` the basis is computed by ``eigh`` (as SOAP's first step) and Adam's
    first moment rotated into it; from then on the optimizer is :class:`eigprec.SOAP`.
    ``start_step=0`` is :class:`eigprec.SOAP` exactly.

    Args:
        params: Parameters (all 2-D) or parameter groups.
        lr: Learning rate, ≥ 0.
        start_step: Steps of plain Adam before preconditioning starts, ≥ 0.
        **kwargs: Any other argument of :class:`eigprec.SOAP`.

    Raises:
        TypeError: if ``start_step`` is not an int (a bool is not).
        ValueError: if ``start_step`` < 0.
        TypeError, ValueError: as :class:`eigprec.SOAP`.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(4, 2))
        >>> opt = DelayedSOAP([w], lr=0.1, start_step=3, fp32_matmul_prec="highest")
        >>> w.grad = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
        >>> opt.step()
        >>> torch.equal(opt.state[w]["Q_L"], torch.eye(4))
        True
    """

    def __init__(self, params: Any, lr: float, start_step: int = 10, **kwargs: Any) -> None:
        self.start_step = check_int("start_step", start_step, low=0)
        super().__init__(params, lr=lr, **kwargs)

    def _refresh_basis(self, state: dict[str, Any], eigh_now: bool) -> None:
        done = state["step"]  # steps taken before this one
        if done < self.start_step:
            return
        super()._refresh_basis(state, eigh_now or done == self.start_step)


class OneSidedSOAP(SOAP):
    """:class:`eigprec.SOAP` that preconditions only the smaller side of each parameter.

    For an m×n parameter with m ≥ n only R (n×n) and its basis Q_R are kept up to date; Q_L
    stays the identity and L stays zero (for m < n, the other way round). With the larger
    side's preconditioner the identity, KL-Shampoo's update of the kept factor has no other
    factor to whiten by: R ← β R + (1 − β) GᵀG/m (plain Shampoo's GᵀG, over m). The inner
    Adam then runs in the coordinates (I, Q_R). This is the one-sided SOAP idea for
    embedding-like shapes, applied to every parameter.

    Args:
        params: Parameters (all 2-D) or parameter groups.
        lr: Learning rate, ≥ 0.
        **kwargs: Any other argument of :class:`eigprec.SOAP`.

    Raises:
        TypeError, ValueError: as :class:`eigprec.SOAP`.

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(4, 2))
        >>> opt = OneSidedSOAP([w], lr=0.1, use_kl_shampoo=True, fp32_matmul_prec="highest")
        >>> w.grad = torch.ones(4, 2)
        >>> opt.step()
        >>> opt.state[w]["R"][0, 0].item(), opt.state[w]["L"].abs().max().item()  # GᵀG/m
        (1.0, 0.0)
    """

    def _update_factors(
        self, state: dict[str, Any], grad: torch.Tensor, beta: float, eps: float, diag: dict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        m, n = grad.shape
        L, R = state["L"], state["R"]
        norm = (m if m >= n else n) if self.use_kl_shampoo else 1
        if m >= n:
            return L, R.lerp(self._mm(grad.T, grad) / norm, 1.0 - beta)
        return L.lerp(self._mm(grad, grad.T) / norm, 1.0 - beta), R

    def _refresh_basis(self, state: dict[str, Any], eigh_now: bool) -> None:
        m, n = state["exp_avg"].shape
        axis = 1 if m >= n else 0
        key, factor = ("Q_R", state["R"]) if axis else ("Q_L", state["L"])
        basis = state[key]
        momentum = state["Q_L"] @ state["exp_avg"] @ state["Q_R"].T
        order = torch.argsort(self._approx_eigvals(factor, basis), descending=True)
        basis = basis[:, order]
        state["exp_avg_sq"] = state["exp_avg_sq"].index_select(axis, order)
        if eigh_now:
            basis = core.eigh_descending(factor)
        else:
            for _ in range(self.power_iter_steps):
                basis = torch.linalg.qr(factor @ basis).Q
        state[key] = basis
        state["exp_avg"] = state["Q_L"].T @ momentum @ state["Q_R"]


def clipped_spike(spike: float, share: float, headroom: float = 1.0) -> float:
    """The factor a one-layer spike keeps after a *global* gradient-norm clip.

    A layer whose gradient carries ``share`` of the model's squared gradient norm spikes by
    ``spike`` while the rest of the model does not: the global norm grows by
    g = √(1 − share + share·spike²). A fixed clip at ``headroom`` times the usual global
    norm scales every gradient by min(1, headroom/g), so the layer's gradient is
    ``spike × min(1, headroom/g)`` times its usual size.

    Args:
        spike: The layer's spike factor, > 0.
        share: The layer's share of the squared global norm in ordinary steps, in (0, 1].
        headroom: The clip threshold over the usual global norm, ≥ 1 (1: the clip sits at
            the usual norm).

    Returns:
        The layer's gradient after the clip, over its usual size.

    Raises:
        TypeError: if an argument is not a real number.
        ValueError: if an argument is out of range.

    Example:
        >>> round(clipped_spike(1000.0, 1e-4), 1)  # the global norm grows only ≈ 10×
        99.5
    """
    spike = check_real("spike", spike, low=0.0, low_open=True)
    share = check_real("share", share, low=0.0, high=1.0, low_open=True)
    headroom = check_real("headroom", headroom, low=1.0)
    growth = math.sqrt(1.0 - share + share * spike * spike)
    return spike * min(1.0, headroom / growth)
