"""A detector a trainer can run on a SOAP-like optimizer's state (issue 37, item 5).

The degeneracy chapter's mechanism predicts what reduced-precision damage looks like in
the optimizer's state: the approximate eigenvalues diag(QᵀFQ) of a factor go negative
beyond rounding, the full-rank factor (R of a tall m×n weight, m > n) turns indefinite,
entries are clamped at the floor and the next steps' factor L jumps. None of these can
happen to a positive semidefinite factor in exact arithmetic, so :class:`SOAPMonitor`
reports them per parameter and flags a parameter when one exceeds what the state's own
dtype could explain (``dim × eps`` relative to the factor's largest eigenvalue).

Its false-positive and false-negative rates are measured on the chapter's failure map
(:mod:`eigprec_book.chapters.degeneracy.failure_map`, the page "Eigenbasis degeneracy: does
this apply to me?"): it sees TF32's indefinite factor, not every harm a spike does.
"""

from __future__ import annotations

import functools
import math
import numbers
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from eigprec._args import check_real
from eigprec.soap.factors import check_optimizer, factors_of, step_of

__all__ = ["FactorSignals", "SOAPMonitor", "SOAPSignals"]


@dataclass(frozen=True)
class FactorSignals:
    """What one Kronecker factor F (L or R) of one parameter shows, with basis Q.

    Returned inside :class:`SOAPSignals` by :meth:`SOAPMonitor.check`.

    Attributes:
        negative: How many approximate eigenvalues diag(QᵀFQ) are below 0.
        clamped: How many are below the floor the next KL-Shampoo step clamps them at
            (the group's ``eps``, or ``eps × max`` with ``eps_mode="relative"``; 0 for an
            optimizer whose groups have no ``eps``).
        approx_min_ratio: Smallest approximate eigenvalue over the largest in magnitude
            (NaN when the factor is empty or zero; −1 when none is positive).
        eig_min_ratio: λ_min(F)/max|λ(F)|, computed in float64: λ_min/λ_max for a factor
            whose largest eigenvalue is also the largest in magnitude, −1 for a negative
            semidefinite one (NaN when empty or zero, or not computed: the larger factor
            under ``spectra="full_rank"``).
        rel_change: ‖F − F_prev‖_F/‖F‖_F since the previous :meth:`SOAPMonitor.check`
            (NaN at the first check of this parameter).
        tol: The relative tolerance the flags used for this factor.
        finite: Whether every entry of F is finite (the other fields are NaN when not).

    Example:
        >>> import torch
        >>> from eigprec import SOAP
        >>> w = torch.nn.Parameter(torch.zeros(6, 4))
        >>> opt = SOAP([w], lr=0.1, use_kl_shampoo=True)
        >>> w.grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
        >>> opt.step()
        >>> (sig,) = SOAPMonitor(opt).check()
        >>> sig.R.eig_min_ratio > 0, sig.R.negative  # R of a tall weight: full rank
        (True, 0)
    """

    negative: int
    clamped: int
    approx_min_ratio: float
    eig_min_ratio: float
    rel_change: float
    tol: float
    finite: bool = True


@dataclass(frozen=True, eq=False)  # holds the parameter: compared by identity
class SOAPSignals:
    """The signals of one parameter at one check.

    Attributes:
        where: ``"parameter i of param group g, shape (m, n)"``.
        param: The parameter.
        step: The optimizer's step counter for it (None where its state keeps none).
        L: Signals of the left factor.
        R: Signals of the right factor.
        reasons: Why it is flagged, one sentence per signal; empty when not flagged.

    Example:
        >>> import torch
        >>> from eigprec import SOAP
        >>> w = torch.nn.Parameter(torch.zeros(6, 4))
        >>> opt = SOAP([w], lr=0.1, use_kl_shampoo=True)
        >>> w.grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
        >>> opt.step()
        >>> (sig,) = SOAPMonitor(opt).check()
        >>> sig.where, sig.step, sig.flagged, sig.reasons
        ('parameter 0 of param group 0, shape (6, 4)', 1, False, ())
    """

    where: str
    param: torch.Tensor
    step: int | None
    L: FactorSignals
    R: FactorSignals
    reasons: tuple[str, ...]

    @property
    def flagged(self) -> bool:
        """Whether any signal exceeded its threshold."""
        return bool(self.reasons)


class SOAPMonitor:
    """Check a SOAP-like optimizer's Kronecker factors for the signals of precision damage.

    Call :meth:`check` every step or every N steps (it costs one float64 ``eigvalsh`` of
    each factor, or of the smaller one with ``spectra="full_rank"``). A parameter is
    flagged when

    * an approximate eigenvalue diag(QᵀFQ) of either factor is below ``−tol × max|·|``, or
    * the factor of the smaller side (R for m > n, L for m < n, both when square), which
      is full rank in exact arithmetic, has λ_min/max|λ| below ``−tol`` (indefinite, or
      negative semidefinite), or
    * ``rel_change_limit`` is set and ‖ΔL‖/‖L‖ or ‖ΔR‖/‖R‖ since the last check exceeds it,
    * or a factor or basis holds NaN or inf.

    The larger factor's own eigenvalues are not flagged: its null half (m > n) is zero in
    exact arithmetic and rounding noise in any other, so its sign says nothing.

    What it sees and misses, measured on the degeneracy chapter's failure map (REKLS on a
    linear regression, one gradient spike, ×1000 and ×10⁴ at chapter scale; the page
    "Eigenbasis degeneracy: does this apply to me?" gives the rates): it flags the runs in
    which the spike made the smaller factor indefinite, at the spike step, and no run
    before its spike. It misses harm that comes without an indefinite factor -- float32
    at ``'highest'`` after a ×1000 spike at lr 0.1, and most TF32 runs of a 256×64 layer
    -- and at a small learning rate a flagged run may show no harm in the loss for many
    steps. Read a flag as
    "the preconditioner's state is broken", and no flag as "not broken this way", not as
    "safe".

    Which optimizers: any whose per-parameter state holds the factors and their bases
    under ``"L"``, ``"R"``, ``"Q_L"``, ``"Q_R"``, as :class:`eigprec.SOAP`,
    :class:`eigprec.REKLS` and emerging-optimizers' SOAP (0.3.0) keep them; the monitor
    reads only ``optimizer.state`` and ``optimizer.param_groups``, a group's ``"eps"`` (the
    clamp floor) and, where present, ``optimizer.eps_mode``.

    History: ``rel_change`` is measured against the factors of the parameter's previous
    check. It starts afresh (NaN) where that is no baseline: after the optimizer loaded a
    state dict (a rollback; seen through a ``torch.optim.Optimizer``'s load post-hook),
    where a step counter went back, and after :meth:`reset`. A parameter that leaves the
    optimizer is dropped at the next check, and the monitor never keeps one alive.

    Args:
        optimizer: A SOAP-like optimizer (see above): :class:`eigprec.SOAP`,
            :class:`eigprec.REKLS`, emerging-optimizers' ``SOAP``, or any object with a
            ``.state`` and ``.param_groups`` holding the factors as they do.
        tol: Relative tolerance; ``None``: ``dim × eps`` of the factor's dtype for a
            factor of size dim (what the state's own rounding could explain).
        rel_change_limit: Flag a factor whose relative change since the previous check
            exceeds this; ``None`` (default) reports the change without flagging it (it is
            large in exact arithmetic too while the factor's EMA warms up).
        spectra: ``"all"`` (default): λ_min/λ_max of both factors; ``"full_rank"``: of the
            smaller side's factor only (both when square), the one whose sign is flagged.
            The flags are the same; the larger factor's ``eig_min_ratio`` is then NaN, and
            a check of a tall layer costs much less (REKLS state of a 256×64 weight, one
            CPU thread: 1.9 ms against 5.2 ms).

    Raises:
        TypeError: if ``optimizer`` has no ``.state`` and ``.param_groups``, is one of
            ``torch.optim``'s optimizers (none keeps Kronecker factors), or the state of a
            parameter lacks a factor or basis (the message names the missing keys); or a
            limit is not a real number.
        ValueError: if ``tol`` is negative or a limit is not positive (or is NaN),
            ``spectra`` is not ``"all"`` or ``"full_rank"``, or a factor or basis has the
            wrong shape for its parameter.

    Example:
        >>> import torch
        >>> from eigprec import SOAP
        >>> w = torch.nn.Parameter(torch.zeros(6, 4))
        >>> opt = SOAP([w], lr=0.1, use_kl_shampoo=True, fp32_matmul_prec="highest")
        >>> monitor = SOAPMonitor(opt)
        >>> w.grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
        >>> opt.step()
        >>> [s.flagged for s in monitor.check()]
        [False]
    """

    def __init__(
        self,
        optimizer: Any,
        *,
        tol: float | None = None,
        rel_change_limit: float | None = None,
        spectra: str = "all",
    ) -> None:
        if not isinstance(spectra, str) or spectra not in ("all", "full_rank"):
            raise ValueError(f"spectra must be 'all' or 'full_rank', got {spectra!r}")
        check_optimizer(optimizer)
        self.optimizer = optimizer
        self.tol = None if tol is None else check_real("tol", tol, low=0.0)
        self.rel_change_limit = (
            None
            if rel_change_limit is None
            else check_real("rel_change_limit", rel_change_limit, low=0.0, low_open=True)
        )
        self.spectra = spectra
        # Keyed weakly by identity: a parameter that leaves the optimizer and is freed takes
        # its copies with it, without waiting for a check (issue 47, item 11).
        self._previous: WeakIdKeyDictionary = WeakIdKeyDictionary()
        register = getattr(optimizer, "register_load_state_dict_post_hook", None)
        if callable(register):
            # A load replaces the state (a rollback, typically): what was seen before it is
            # no baseline for the change after it. The hook holds the monitor weakly.
            handle = register(functools.partial(_forget, weakref.ref(self)))
            weakref.finalize(self, handle.remove)

    def reset(self) -> None:
        """Forget the factors seen so far: the next check reports no change (NaN).

        Done by itself when the optimizer loads a state dict (a ``torch.optim.Optimizer``'s
        load post-hook) and, per parameter, when a step counter goes back; call it after
        replacing an optimizer's state any other way.

        Example:
            >>> import torch
            >>> from eigprec import SOAP
            >>> w = torch.nn.Parameter(torch.zeros(3, 2))
            >>> opt = SOAP([w], lr=0.1)
            >>> monitor = SOAPMonitor(opt)
            >>> w.grad = torch.ones(3, 2)
            >>> opt.step()
            >>> _ = monitor.check()
            >>> monitor.reset()
            >>> monitor.check()[0].L.rel_change
            nan
        """
        self._previous.clear()

    def check(self) -> list[SOAPSignals]:
        """The signals of every parameter that has optimizer state, in group order.

        Returns:
            One :class:`SOAPSignals` per parameter stepped at least once.

        Raises:
            TypeError: if a parameter's state lacks a factor or basis (named), or one is not
                a real floating tensor.
            ValueError: if a factor or basis has the wrong shape for its parameter.

        Example:
            >>> import torch
            >>> from eigprec import SOAP
            >>> w = torch.nn.Parameter(torch.zeros(3, 2))
            >>> SOAPMonitor(SOAP([w], lr=0.1)).check()  # nothing stepped yet
            []
        """
        out = []
        opt = self.optimizer
        eps_mode = getattr(opt, "eps_mode", "absolute")
        present = {}
        for gi, group in enumerate(opt.param_groups):
            eps = group.get("eps")
            floor = (
                float(eps) if isinstance(eps, numbers.Real) and not isinstance(eps, bool) else 0.0
            )
            for pi, p in enumerate(group["params"]):
                present[id(p)] = p
                state = opt.state.get(p)
                if not state:
                    self._previous.pop(p, None)  # its state was dropped: start afresh
                    continue
                where = f"parameter {pi} of param group {gi}, shape {tuple(p.shape)}"
                L, R, Q_L, Q_R = factors_of(state, p, where)
                m, n = p.shape
                step = step_of(state)
                before = self._previous.get(p)
                if before is not None and step is not None and before[0] is not None:
                    if step < before[0]:  # the counter went back: replaced state
                        before = None
                signals, reasons = {}, []
                for side, (key, factor, basis) in enumerate((("L", L, Q_L), ("R", R, Q_R))):
                    dim = factor.shape[0]
                    tol = dim * torch.finfo(factor.dtype).eps if self.tol is None else self.tol
                    prev = None if before is None else before[1 + side]
                    full_rank_side = dim <= (n if key == "L" else m)
                    spectrum = self.spectra == "all" or full_rank_side
                    sig = _factor_signals(factor, basis, prev, floor, eps_mode, tol, spectrum)
                    signals[key] = sig
                    reasons += _reasons(key, sig, full_rank_side, self.rel_change_limit)
                self._previous[p] = (step, L.detach().clone(), R.detach().clone())
                out.append(
                    SOAPSignals(
                        where=where,
                        param=p,
                        step=step,
                        L=signals["L"],
                        R=signals["R"],
                        reasons=tuple(reasons),
                    )
                )
        for p in [p for p in self._previous.keys() if present.get(id(p)) is not p]:
            del self._previous[p]  # no longer in the optimizer
        return out


def _forget(monitor: weakref.ref[SOAPMonitor], _optimizer: object) -> None:
    alive = monitor()
    if alive is not None:
        alive.reset()


def _factor_signals(
    factor: torch.Tensor,
    basis: torch.Tensor,
    previous: torch.Tensor | None,
    eps: float,
    eps_mode: str,
    tol: float,
    spectrum: bool = True,
) -> FactorSignals:
    f, q = factor.detach().double(), basis.detach().double()
    if f.numel() == 0:
        return FactorSignals(0, 0, math.nan, math.nan, math.nan, tol)
    if not bool(torch.isfinite(f).all() and torch.isfinite(q).all()):
        return FactorSignals(0, 0, math.nan, math.nan, math.nan, tol, finite=False)
    approx = ((q.T @ f) * q.T).sum(dim=1)  # diag(QᵀFQ), as SOAP computes it
    top = approx.max().item()
    floor = eps * top if eps_mode == "relative" and top > 0 else eps
    eig = torch.linalg.eigvalsh(f) if spectrum else None
    size = torch.linalg.matrix_norm(f).item()
    change = math.nan
    if previous is not None:
        delta = torch.linalg.matrix_norm(f - previous.double()).item()
        # A factor that stayed zero did not change (0/0); one that became zero changed fully.
        change = delta / size if size > 0 else (0.0 if delta == 0 else math.inf)
    return FactorSignals(
        negative=int((approx < 0).sum()),
        clamped=int((approx < floor).sum()),
        approx_min_ratio=_min_over_scale(approx),
        eig_min_ratio=math.nan if eig is None else _min_over_scale(eig),
        rel_change=change,
        tol=tol,
    )


def _min_over_scale(values: torch.Tensor) -> float:
    # Over the largest magnitude, not the largest value: a factor whose values are all ≤ 0
    # (negated, or a negative 1×1 factor) has no positive maximum, and dividing by it gave
    # NaN, which no "< −tol" test flags (issue 47, item 1). For a PSD factor it is λ_max.
    scale = values.abs().max().item()
    return values.min().item() / scale if scale > 0 else math.nan


def _reasons(
    key: str, sig: FactorSignals, full_rank_side: bool, rel_change_limit: float | None
) -> list[str]:
    if not sig.finite:
        return [f"{key} or its basis has NaN or inf entries"]
    reasons = []
    if sig.approx_min_ratio < -sig.tol:
        reasons.append(
            f"{key}: an approximate eigenvalue diag(QᵀFQ) is negative beyond rounding "
            f"(min/max|·| {sig.approx_min_ratio:.3g} < −{sig.tol:.3g}; {sig.negative} negative, "
            f"{sig.clamped} clamped)"
        )
    if full_rank_side and sig.eig_min_ratio < -sig.tol:
        reasons.append(
            f"{key} is not positive semidefinite "
            f"(λ_min/max|λ| {sig.eig_min_ratio:.3g} < −{sig.tol:.3g})"
        )
    if rel_change_limit is not None and sig.rel_change > rel_change_limit:
        reasons.append(
            f"{key} changed by {sig.rel_change:.3g} of its norm since the last check "
            f"(limit {rel_change_limit:g})"
        )
    return reasons
