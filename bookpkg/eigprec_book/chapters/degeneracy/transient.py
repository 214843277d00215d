"""When does the spike stop hurting, and how large must it be? Branched training runs.

The steps before a spike are the same with and without it, so each setting is trained
once without a spike and *forked* at every spike step (and, for the sensitivity grid, for
every spike size): the fork takes the scaled gradient and trains on for a window.

* :func:`transient_experiment` -- the spike at later steps (issue 11, New 2): how far the
  loss jumps, and the state of L just before (λ₁/λ₂, how far Q_L's top vector and top-8
  subspace turned over the ten steps before the spike).
* :func:`sensitivity_experiment` -- eps (shared with Adam's) × spike size (New 4).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec.subspace import subspace_angle, top1_angle
from eigprec_book.chapters.degeneracy.training import (
    Regression,
    Setting,
    _check_common,
    _precision_context,
    _Trainer,
)

__all__ = [
    "SensitivityResult",
    "TransientResult",
    "sensitivity_experiment",
    "transient_experiment",
]


def _check_window(spike_steps: Sequence[int], window: int) -> list[int]:
    steps = sorted(set(int(s) for s in spike_steps))
    if not steps or steps[0] < 11:
        raise ValueError(f"spike steps must be ≥ 11 (ten pre-spike steps), got {spike_steps}")
    if window < 1:
        raise ValueError(f"window must be ≥ 1, got {window}")
    return steps


@dataclass
class TransientResult:
    """What :func:`transient_experiment` measured.

    Attributes:
        rows: One dict per (setting, spike step): ``"setting"``, ``"spike step"``,
            ``"loss before"`` (after the spike step's predecessors), ``"peak"`` (largest
            loss in the window after the spike), ``"peak / before"``, ``"peak vs float64"``
            (peak over the float64 run's peak at that spike step, NaN without one),
            ``"lambda1/lambda2"`` and ``"lambda1/lambda_min"`` of L before the spike,
            ``"top-1 turn (10 steps)"`` and ``"top-8 turn (10 steps)"`` (degrees, Q_L
            just before the spike against ten steps earlier).
        curves: ``{(label, spike step): (window + 1,)}`` losses from just before the spike.
        baseline: ``{label: (last + 1,)}`` loss of the run without a spike.
        config: The arguments.

    Example:
        >>> r = transient_experiment(
        ...     [Setting("REKLS")], spike_steps=[12], window=2, shape=(6, 3), batch=8, k=2
        ... )
        >>> r.rows[0]["spike step"], r.curves[("REKLS highest", 12)].shape
        (12, torch.Size([3]))
    """

    rows: list[dict[str, Any]]
    curves: dict[tuple[str, int], torch.Tensor]
    baseline: dict[str, torch.Tensor]
    config: dict[str, Any] = field(default_factory=dict)


def _factor_state(trainer: _Trainer) -> tuple[torch.Tensor, torch.Tensor]:
    state = trainer.state()
    lam = torch.linalg.eigvalsh(state["L"].double()).flip(0)
    return lam, state["Q_L"].detach().double().clone()


def transient_experiment(
    settings: Sequence[Setting] | None = None,
    *,
    spike_steps: Sequence[int] = (50, 150, 300, 600),
    window: int = 20,
    spike_scale: float = 1000.0,
    seed: int = 0,
    shape: tuple[int, int] = (128, 64),
    batch: int = 256,
    noise: float = 1.0,
    lr: float = 0.1,
    eps: float = 1e-8,
    k: int = 8,
    shampoo_beta: float = 0.95,
) -> TransientResult:
    """Spike the same training at several steps; record the loss jump and L's state before.

    Args:
        settings: Settings to run; default REKLS in float64, at ``'highest'`` and ``'high'``.
        spike_steps: 0-based steps of the spike (each ≥ 11), one fork per step.
        window: Steps trained after each spike.
        spike_scale: Factor of the spike.
        seed: Problem seed.
        shape: (m, n) of the weight.
        batch: Samples per step.
        noise: Label noise σ.
        lr: Learning rate.
        eps: Adam's ε and the eigenvalue floor.
        k: Size of the top subspace whose turn is recorded.
        shampoo_beta: β of the factors' EMA; the first step's weight decays as βᵗ.

    Returns:
        A :class:`TransientResult`.

    Raises:
        ValueError: on a spike step < 11, a window < 1, k outside [1, m] or a value out of
            range.
    """
    if settings is None:
        settings = [
            Setting("REKLS", dtype=torch.float64),
            Setting("REKLS", "highest"),
            Setting("REKLS", "high"),
        ]
    steps = _check_window(spike_steps, window)
    if not 1 <= k <= shape[0]:
        raise ValueError(f"k must be in [1, {shape[0]}], got {k}")
    last = steps[-1] + window
    _check_common(last, None, lr, eps)
    if not 0 < shampoo_beta < 1:
        raise ValueError(f"shampoo_beta must be in (0, 1), got {shampoo_beta}")
    problem = Regression(shape, batch, noise, seed)
    rows: list[dict[str, Any]] = []
    curves: dict[tuple[str, int], torch.Tensor] = {}
    baseline: dict[str, torch.Tensor] = {}
    for setting in settings:
        with _precision_context(setting):
            base = _Trainer(setting, problem, lr, eps, shampoo_beta)
            losses = [problem.loss(base.param.detach(), base.target)]
            history: collections.deque[torch.Tensor] = collections.deque(maxlen=11)
            for step in range(last):
                if step in steps:
                    lam, q_now = _factor_state(base)
                    q_then = history[0]
                    fork = base.fork()
                    branch = [losses[-1]]
                    for j in range(window):
                        branch.append(fork.advance(spike_scale if j == 0 else 1.0))
                    curve = torch.tensor(branch, dtype=torch.float64)
                    curves[(setting.label, step)] = curve
                    peak = curve[1:].max().item()
                    rows.append(
                        {
                            "setting": setting.label,
                            "spike step": step,
                            "loss before": curve[0].item(),
                            "peak": peak,
                            "peak / before": peak / curve[0].item(),
                            "lambda1/lambda2": (lam[0] / lam[1]).item(),
                            "lambda1/lambda_min": (lam[0] / lam[-1]).item(),
                            "top-1 turn (10 steps)": top1_angle(q_then, q_now),
                            f"top-{k} turn (10 steps)": subspace_angle(q_then, q_now, k),
                        }
                    )
                losses.append(base.advance())
                history.append(base.state()["Q_L"].detach().double().clone())
            baseline[setting.label] = torch.tensor(losses, dtype=torch.float64)
    reference = {
        (r["setting"].split()[0], r["spike step"]): r["peak"]
        for r in rows
        if r["setting"].endswith("float64")
    }
    for r in rows:
        ref = reference.get((r["setting"].split()[0], r["spike step"]))
        r["peak vs float64"] = r["peak"] / ref if ref is not None else math.nan
    config = {"spike_steps": steps, "window": window, "spike_scale": spike_scale, "seed": seed}
    config |= {"shape": shape, "batch": batch, "noise": noise, "lr": lr, "eps": eps}
    config["shampoo_beta"] = shampoo_beta
    return TransientResult(rows, curves, baseline, config)


@dataclass
class SensitivityResult:
    """Peak loss after a spike over a grid of eps × spike size, per setting.

    Attributes:
        eps: ``(e,)`` values of eps.
        scales: ``(s,)`` spike sizes.
        peak: ``{label: (e, s)}`` largest loss in the window after the spike.
        before: ``{label: (e,)}`` loss just before the spike.
        config: The other arguments.

    Example:
        >>> r = sensitivity_experiment(
        ...     [Setting("SOAP")], eps=[1e-8], scales=[1.0, 10.0], spike_step=12,
        ...     window=2, shape=(6, 3), batch=8,
        ... )
        >>> r.peak["SOAP highest"].shape
        torch.Size([1, 2])
    """

    eps: torch.Tensor
    scales: torch.Tensor
    peak: dict[str, torch.Tensor]
    before: dict[str, torch.Tensor]
    config: dict[str, Any] = field(default_factory=dict)

    def ratio(self, label: str, reference: str) -> torch.Tensor:
        """``peak[label] / peak[reference]``, cell by cell (e.g. 'high' over float64).

        Args:
            label: A setting's label.
            reference: Another setting's label.

        Returns:
            ``(e, s)`` float64 tensor.

        Raises:
            KeyError: if a label was not run.
        """
        for name in (label, reference):
            if name not in self.peak:
                raise KeyError(f"no setting {name!r}; have {sorted(self.peak)}")
        return self.peak[label] / self.peak[reference]


def sensitivity_experiment(
    settings: Sequence[Setting] | None = None,
    *,
    eps: Sequence[float] = (1e-4, 1e-6, 1e-8, 1e-10, 1e-12),
    scales: Sequence[float] = (10.0, 100.0, 200.0, 300.0, 1000.0),
    spike_step: int = 50,
    window: int = 25,
    seed: int = 0,
    shape: tuple[int, int] = (128, 64),
    batch: int = 256,
    noise: float = 1.0,
    lr: float = 0.1,
) -> SensitivityResult:
    """For every eps, train to the spike step once, then fork once per spike size.

    Args:
        settings: Settings; default REKLS in float64 and at ``'high'``.
        eps: Values of Adam's ε (also the eigenvalue floor).
        scales: Spike sizes.
        spike_step: 0-based step of the spike, ≥ 11.
        window: Steps trained after the spike.
        seed: Problem seed.
        shape: (m, n) of the weight.
        batch: Samples per step.
        noise: Label noise σ.
        lr: Learning rate.

    Returns:
        A :class:`SensitivityResult`.

    Raises:
        ValueError: on an empty or non-positive grid, or a value out of range.
    """
    if settings is None:
        settings = [Setting("REKLS", dtype=torch.float64), Setting("REKLS", "high")]
    _check_window([spike_step], window)
    if not eps or not scales or min(eps) <= 0 or min(scales) <= 0:
        raise ValueError(f"eps and scales must be non-empty and positive, got {eps}, {scales}")
    for e in eps:
        _check_common(spike_step + window, spike_step, lr, e)
    problem = Regression(shape, batch, noise, seed)
    eps_t = torch.tensor(list(eps), dtype=torch.float64)
    scales_t = torch.tensor(list(scales), dtype=torch.float64)
    peak: dict[str, torch.Tensor] = {}
    before: dict[str, torch.Tensor] = {}
    for setting in settings:
        grid = torch.empty(len(eps), len(scales), dtype=torch.float64)
        pre = torch.empty(len(eps), dtype=torch.float64)
        with _precision_context(setting):
            for i, e in enumerate(eps):
                base = _Trainer(setting, problem, lr, e)
                loss = problem.loss(base.param.detach(), base.target)
                for _ in range(spike_step):
                    loss = base.advance()
                pre[i] = loss
                for j, scale in enumerate(scales):
                    fork = base.fork()
                    grid[i, j] = max(fork.advance(scale if t == 0 else 1.0) for t in range(window))
        peak[setting.label] = grid
        before[setting.label] = pre
    config = {"spike_step": spike_step, "window": window, "seed": seed, "shape": shape}
    config |= {"batch": batch, "noise": noise, "lr": lr}
    return SensitivityResult(eps_t, scales_t, peak, before, config)
