"""What a practitioner would run: clipping, ``max_update_rms``, baselines, gradient scale.

The training problem of :mod:`~eigprec_book.chapters.degeneracy.training` (linear regression,
a ×``spike_scale`` gradient at ``spike_step``), run with the knobs a SOAP/REKLS user has:

* gradient clipping at ``clip`` × a running mean of past gradient norms (an EMA of the
  norms *after* clipping, bias-corrected, so a spike does not raise its own threshold;
  the first step is never clipped, having no history);
* the update-RMS cap ``max_update_rms`` of :class:`eigprec.SOAP`;
* the eigenvalue estimator: ``"diag"`` (diag(QᵀFQ), the library's), ``"clamp"``
  (:class:`~eigprec_book.chapters.degeneracy.kl_methods.ClampedEigvalSOAP`) or ``"ema"``
  (:class:`~eigprec_book.chapters.degeneracy.kl_methods.EMAEigvalSOAP`);
* baselines: ``"Adam"`` (``torch.optim.Adam``, same lr, betas and ε) and ``"plain SOAP"``
  (``use_kl_shampoo=False``);
* a gradient scale ``grad_scale`` = c: every gradient handed to the optimizer is multiplied
  by c (the loss by c), which leaves the minimiser and Adam-type steps unchanged except
  through ε, so σ²/ε moves by c².

Experiments return :class:`~eigprec_book.chapters.degeneracy.training.TrainingResult`;
:func:`peak_spread` summarises it per seed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from eigprec.precision import MATMUL_PRECISIONS
from eigprec.soap import SOAP
from eigprec_book.chapters.degeneracy.kl_methods import ClampedEigvalSOAP, EMAEigvalSOAP
from eigprec_book.chapters.degeneracy.training import (
    Regression,
    Setting,
    TrainingResult,
    _precision_context,
)

__all__ = [
    "ESTIMATORS",
    "METHODS",
    "Arm",
    "chapter_arms",
    "peak_spread",
    "practice_experiment",
    "row_spike",
    "training_and_practice",
]

#: Optimizers an :class:`Arm` can run.
#:
#: Example:
#:     >>> METHODS[-1]
#:     'Adam'
METHODS = ("SOAP", "REKLS", "plain SOAP", "Adam")

#: Eigenvalue estimators of the KL whitening.
#:
#: Example:
#:     >>> ESTIMATORS
#:     ('diag', 'clamp', 'ema')
ESTIMATORS = ("diag", "clamp", "ema")


@dataclass(frozen=True)
class Arm:
    """One optimizer configuration as a user would set it.

    Attributes:
        method: One of :data:`METHODS`.
        precision: ``fp32_matmul_prec`` (ignored by Adam and in float64).
        qr_precision: ``qr_fp32_matmul_prec``; ``None`` = ``precision``.
        dtype: Optimizer and parameter dtype.
        estimator: One of :data:`ESTIMATORS` (KL methods only).
        eigval_dtype: ``eigval_dtype`` of :class:`eigprec.SOAP`, or ``None``.
        clip: Clip the gradient norm at this multiple of the running mean norm; ``None``.
        max_update_rms: :class:`eigprec.SOAP`'s update-RMS cap; 0 = off.

    Example:
        >>> Arm("REKLS", "high", clip=10.0).label
        'REKLS high, clip 10×'
    """

    method: str
    precision: str = "highest"
    qr_precision: str | None = None
    dtype: torch.dtype = torch.float32
    estimator: str = "diag"
    eigval_dtype: torch.dtype | None = None
    clip: float | None = None
    max_update_rms: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for prec in (self.precision, self.qr_precision):
            if prec is not None and prec not in MATMUL_PRECISIONS:
                raise ValueError(f"precision must be one of {MATMUL_PRECISIONS}, got {prec!r}")
        if self.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {self.dtype}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.clip is not None and not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"clip must be positive and finite or None, got {self.clip}")
        if not (self.max_update_rms >= 0 and math.isfinite(self.max_update_rms)):
            raise ValueError(f"max_update_rms must be ≥ 0, got {self.max_update_rms}")

    @property
    def label(self) -> str:
        """Short name, e.g. ``'SOAP highest/high + f64 eigenvalues, clip 3×'``."""
        if self.dtype == torch.float64:
            name = f"{self.method} float64"
        elif self.method == "Adam":
            name = "Adam"
        elif self.qr_precision not in (None, self.precision):
            name = f"{self.method} {self.precision}/{self.qr_precision}"
        else:
            name = f"{self.method} {self.precision}"
        extras = {"clamp": " + clamp", "ema": " + EMA eigenvalues", "diag": ""}[self.estimator]
        if self.eigval_dtype == torch.float64:
            extras += " + f64 eigenvalues"
        knobs = []
        if self.clip is not None:
            knobs.append(f"clip {self.clip:g}×")
        if self.max_update_rms > 0:
            knobs.append(f"max_update_rms {self.max_update_rms:g}")
        return name + extras + (", " + ", ".join(knobs) if knobs else "")

    def build(
        self, param: torch.Tensor | Sequence[torch.Tensor], lr: float, eps: float
    ) -> torch.optim.Optimizer:
        """The optimizer (betas (0.9, 0.95), shampoo β 0.95, no weight decay) of one 2-D
        parameter or of a list of them (a model's weights)."""
        params = [param] if isinstance(param, torch.Tensor) else list(param)
        if self.method == "Adam":
            return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.95), eps=eps)
        cls = {"diag": SOAP, "clamp": ClampedEigvalSOAP, "ema": EMAEigvalSOAP}[self.estimator]
        kwargs: dict[str, Any] = {"eigval_dtype": self.eigval_dtype} if self.eigval_dtype else {}
        return cls(
            params,
            lr=lr,
            betas=(0.9, 0.95),
            shampoo_beta=0.95,
            eps=eps,
            weight_decay=0.0,
            use_kl_shampoo=self.method != "plain SOAP",
            use_eigh=self.method == "REKLS",
            fp32_matmul_prec=self.precision,  # type: ignore[arg-type]
            qr_fp32_matmul_prec=self.qr_precision or self.precision,  # type: ignore[arg-type]
            dtype=self.dtype,
            max_update_rms=self.max_update_rms,
            **kwargs,
        )

    def _setting(self) -> Setting:
        return Setting("SOAP", self.precision, self.qr_precision, self.dtype)


def chapter_arms() -> list[Arm]:
    """The arms of the chapter's clipping study: for SOAP and REKLS in float64, at
    ``'highest'`` and at ``'high'``: clipping at 10× and 3× the running mean norm and
    ``max_update_rms=1``; then Adam and plain SOAP (no KL-Shampoo) at ``'highest'``.

    Returns:
        A list of :class:`Arm` (the unclipped runs are the training experiment's).

    Example:
        >>> [a.label for a in chapter_arms()][-2:]
        ['Adam', 'plain SOAP highest']
    """
    arms = []
    for method in ("SOAP", "REKLS"):
        for knob in ({"clip": 10.0}, {"clip": 3.0}, {"max_update_rms": 1.0}):
            arms += [
                Arm(method, dtype=torch.float64, **knob),  # type: ignore[arg-type]
                Arm(method, "highest", **knob),  # type: ignore[arg-type]
                Arm(method, "high", **knob),  # type: ignore[arg-type]
            ]
    return [*arms, Arm("Adam"), Arm("plain SOAP")]


def practice_experiment(
    arms: Sequence[Arm],
    *,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    steps: int = 100,
    spike_step: int | None = 50,
    spike_scale: float = 1000.0,
    grad_scale: float = 1.0,
    shape: tuple[int, int] = (128, 64),
    batch: int = 256,
    lr: float = 0.1,
    eps: float = 1e-8,
    clip_beta: float = 0.9,
    share_prefix: bool = True,
    spike_rows: int | None = None,
) -> TrainingResult:
    """Train the regression once per arm and seed, with one spiked gradient.

    Args:
        arms: Configurations to run.
        seeds: Problem seeds (W* and batches).
        steps: Optimizer steps.
        spike_step: 0-based step whose gradient is multiplied by ``spike_scale``; ``None``.
        spike_scale: The spike's factor.
        grad_scale: c, multiplying every gradient (the loss scale).
        shape: (m, n) of the weight.
        batch: Samples per step.
        lr: Learning rate.
        eps: Adam's ε and the eigenvalue floor.
        clip_beta: EMA coefficient of the running gradient norm that clipping uses.
        share_prefix: Run arms that differ only in ``clip`` once up to the spike and fork
            them there, when no threshold would have clipped before it (the same numbers,
            computed once; ``False`` runs every arm from step 0, for testing).
        spike_rows: ``None``: the spike multiplies the whole gradient (a scaled i.i.d.
            draw). k: the spike has the same norm but lies on k rows (:func:`row_spike`).

    Returns:
        A :class:`~eigprec_book.chapters.degeneracy.training.TrainingResult` keyed by
        :attr:`Arm.label`; ``config`` holds the other arguments.

    Raises:
        ValueError: on empty arms or seeds, duplicate labels, or a value out of range.

    Example:
        >>> r = practice_experiment(
        ...     [Arm("Adam"), Arm("REKLS", clip=3.0)], seeds=(0,), steps=6, spike_step=3,
        ...     shape=(6, 3), batch=8,
        ... )
        >>> sorted(r.losses)
        ['Adam', 'REKLS highest, clip 3×']
    """
    arms = list(arms)
    if not arms or not seeds:
        raise ValueError("need at least one arm and one seed")
    if len({a.label for a in arms}) != len(arms):
        raise ValueError("arms must have distinct labels")
    if steps < 1 or (spike_step is not None and not 0 <= spike_step < steps):
        raise ValueError(f"need steps ≥ 1 and spike_step in [0, steps), got {steps}, {spike_step}")
    for name, value in (("lr", lr), ("eps", eps), ("grad_scale", grad_scale)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be positive and finite, got {value}")
    if not 0 <= clip_beta < 1:
        raise ValueError(f"clip_beta must be in [0, 1), got {clip_beta}")
    if spike_rows is not None and not (isinstance(spike_rows, int) and 1 <= spike_rows <= shape[0]):
        raise ValueError(f"spike_rows must be None or in [1, {shape[0]}], got {spike_rows!r}")
    if spike_rows is not None and spike_scale < 1:
        raise ValueError(f"a row spike needs spike_scale ≥ 1, got {spike_scale}")
    config = {
        "shape": shape,
        "batch": batch,
        "lr": lr,
        "eps": eps,
        "grad_scale": grad_scale,
        "spike_rows": spike_rows,
    }
    result = TrainingResult([], tuple(seeds), steps, spike_step, spike_scale, config=config)
    curves = {a.label: torch.empty(len(seeds), steps + 1, dtype=torch.float64) for a in arms}
    # Arms that differ only in the clipping threshold take the same steps until a clip first
    # bites, so they share one run up to the spike and fork there (checked, not assumed: an
    # arm whose threshold would have bitten earlier runs on its own from step 0).
    groups: dict[Arm, list[Arm]] = {}
    for arm in arms:
        groups.setdefault(replace(arm, clip=None), []).append(arm)
    for base, members in groups.items():
        with _precision_context(base._setting()):
            for i, seed in enumerate(seeds):
                problem = Regression(shape, batch, 1.0, seed)
                if not share_prefix or spike_step is None or len(members) == 1:
                    for arm in members:
                        curves[arm.label][i] = _Run(arm, problem, result, clip_beta).finish()
                    continue
                shared = _Run(base, problem, result, clip_beta)
                shared.advance_to(spike_step)
                for arm in members:
                    if shared.clip_would_bite(arm.clip):
                        run = _Run(arm, problem, result, clip_beta)
                    else:
                        run = shared.fork(arm)
                    curves[arm.label][i] = run.finish()
    for arm in arms:
        result.losses[arm.label] = curves[arm.label]
    return result


class _NormClip:
    """Clipping at ``clip`` × a bias-corrected EMA of past (clipped) gradient norms.

    The running norm is kept whether or not this run clips, so that an unclipped run can
    tell when a clipped twin would first have clipped (:meth:`would_bite`). Shared by the
    regression runs here and the MLP runs of :mod:`eigprec_book.chapters.degeneracy.mlp`.
    """

    def __init__(self, beta: float, clip: float | None) -> None:
        self.beta, self.clip = beta, clip
        self.norm_avg, self.weight = 0.0, 0.0  # EMA of clipped norms and its bias correction
        # (running sum, its weight, norm) before each step ≥ 1: what a threshold compares
        self.history: list[tuple[float, float, float]] = []

    def step(self, norm: float) -> float | None:
        """Record one step's gradient norm; the norm to clip it to, or None (no clipping)."""
        limit = None
        if self.weight > 0:
            self.history.append((self.norm_avg, self.weight, norm))
            if self.clip is not None:
                limit = self.clip * self.norm_avg / self.weight
                norm = min(norm, limit)
        self.norm_avg = self.beta * self.norm_avg + (1 - self.beta) * norm
        self.weight = self.beta * self.weight + (1 - self.beta)
        return limit

    def would_bite(self, clip: float | None) -> bool:
        """Would clipping at ``clip`` × the running mean have changed a step so far?"""
        # The very expression that sets the limit in `step`, so "would bite" is exact.
        return clip is not None and any(clip * a / w / n < 1.0 for a, w, n in self.history)

    def fork(self, clip: float | None) -> _NormClip:
        """A copy of the running state that goes on clipping at ``clip``."""
        twin = _NormClip(self.beta, clip)
        twin.norm_avg, twin.weight, twin.history = self.norm_avg, self.weight, list(self.history)
        return twin


class _Run:
    """One arm's run on one problem, which can be advanced, forked and finished."""

    def __init__(
        self, arm: Arm, problem: Regression, result: TrainingResult, clip_beta: float
    ) -> None:
        cfg = result.config
        self.arm, self.problem, self.result, self.clip_beta = arm, problem, result, clip_beta
        self.target = problem.target()
        self.param = torch.nn.Parameter(torch.zeros(*problem.shape, dtype=arm.dtype))
        self.opt = arm.build(self.param, cfg["lr"], cfg["eps"])
        self.curve = torch.empty(result.steps + 1, dtype=torch.float64)
        self.curve[0] = problem.loss(self.param.detach(), self.target)
        self.clipper = _NormClip(clip_beta, arm.clip)
        self.k = 0

    def advance_to(self, stop: int) -> None:
        cfg, result, arm = self.result.config, self.result, self.arm
        for k in range(self.k, stop):
            grad = self.problem.gradient(self.param.detach(), k, self.target) * cfg["grad_scale"]
            if k == result.spike_step:
                rows = cfg.get("spike_rows")
                if rows is None:
                    grad = grad * result.spike_scale
                else:
                    grad = row_spike(grad, rows, result.spike_scale, self.problem.seed)
            norm = torch.linalg.matrix_norm(grad).item()
            limit = self.clipper.step(norm)
            if limit is not None:
                grad = grad * min(1.0, limit / norm)
            self.param.grad = grad.to(arm.dtype)
            self.opt.step()
            self.curve[k + 1] = self.problem.loss(self.param.detach(), self.target)
        self.k = max(self.k, stop)

    def clip_would_bite(self, clip: float | None) -> bool:
        """Would clipping at ``clip`` × the running mean have changed a step so far?"""
        return self.clipper.would_bite(clip)

    def fork(self, arm: Arm) -> _Run:
        """A copy that goes on as ``arm`` (same arm up to its clipping threshold)."""
        twin = _Run(arm, self.problem, self.result, self.clip_beta)
        with torch.no_grad():
            twin.param.copy_(self.param)
        twin.opt.state[twin.param] = copy.deepcopy(self.opt.state[self.param])
        twin.curve.copy_(self.curve)
        twin.clipper, twin.k = self.clipper.fork(arm.clip), self.k
        return twin

    def finish(self) -> torch.Tensor:
        self.advance_to(self.result.steps)
        return self.curve


def row_spike(grad: torch.Tensor, rows: int, scale: float, seed: int) -> torch.Tensor:
    """A spike of ``scale`` × the gradient's norm, concentrated on ``rows`` of its rows.

    The rows (drawn by ``torch.Generator().manual_seed(seed)``) are multiplied by one factor
    s chosen so that the spiked gradient's Frobenius norm is ``scale`` × the gradient's, as
    for the scaled draw ``scale · grad``; the other rows are untouched. What the spike adds,
    (s − 1) times those rows, has rank at most ``rows``.

    Args:
        grad: The step's m×n gradient.
        rows: How many rows carry the spike, 1 ≤ rows ≤ m.
        scale: The spiked gradient's norm over the gradient's, ≥ 1.
        seed: Seeds the choice of rows.

    Returns:
        The spiked gradient (a new tensor).

    Raises:
        ValueError: on ``rows`` out of range, ``scale`` < 1 or a zero gradient on those rows.

    Example:
        >>> g = torch.ones(4, 2, dtype=torch.float64)
        >>> s = row_spike(g, 1, 10.0, seed=0)
        >>> round(torch.linalg.matrix_norm(s).item() / torch.linalg.matrix_norm(g).item(), 6)
        10.0
        >>> int((s != g).any(dim=1).sum())
        1
    """
    m = grad.shape[0]
    if not 1 <= rows <= m:
        raise ValueError(f"rows must be in [1, {m}], got {rows}")
    if not scale >= 1:
        raise ValueError(f"scale must be ≥ 1, got {scale}")
    pick = torch.randperm(m, generator=torch.Generator().manual_seed(seed))[:rows]
    on = grad[pick].square().sum()
    if on == 0:
        raise ValueError("the chosen rows of the gradient are zero")
    total = grad.square().sum()
    # s² · on + (total − on) = scale² · total
    factor = torch.sqrt((scale**2 * total - (total - on)) / on)
    out = grad.clone()
    out[pick] = grad[pick] * factor
    return out


def peak_spread(result: TrainingResult) -> dict[str, dict[str, Any]]:
    """Per setting: the loss before the spike and the peak after it, per seed and summarised.

    Args:
        result: A training result with a spike.

    Returns:
        ``{label: {"before": mean, "befores": tensor per seed, "peaks": tensor per seed,
        "mean", "min", "max", "final": mean final loss}}``.

    Raises:
        ValueError: if the result has no spike.

    Example:
        >>> r = practice_experiment([Arm("Adam")], seeds=(0, 1), steps=4, spike_step=2,
        ...                         shape=(6, 3), batch=8)
        >>> s = peak_spread(r)["Adam"]
        >>> bool(s["min"] <= s["mean"] <= s["max"])
        True
    """
    if result.spike_step is None:
        raise ValueError("peak_spread needs a run with a spike")
    s = result.spike_step
    out = {}
    for label, curves in result.losses.items():
        peaks = curves[:, s + 1 :].max(dim=1).values
        out[label] = {
            "before": curves[:, s].mean().item(),
            "befores": curves[:, s].clone(),
            "peaks": peaks,
            "mean": peaks.mean().item(),
            "min": peaks.min().item(),
            "max": peaks.max().item(),
            "final": curves[:, -1].mean().item(),
        }
    return out


def _as_arm(setting: Setting) -> Arm | None:
    """The :class:`Arm` that trains exactly as ``setting`` does, if there is one."""
    if setting.remedy != "none":
        return None
    return Arm(setting.method, setting.fp32_matmul_prec, setting.qr_fp32_matmul_prec, setting.dtype)


def training_and_practice(
    settings: Sequence[Setting],
    arms: Sequence[Arm],
    *,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    steps: int = 100,
    spike_step: int = 50,
    shape: tuple[int, int] = (128, 64),
    batch: int = 256,
) -> tuple[TrainingResult, TrainingResult]:
    """The training experiment and the clipping study, sharing the runs they have in common.

    An unclipped setting (no remedy) trains as the :class:`Arm` without ``clip`` does, and
    the clipped arms share its steps up to the spike, so those settings run once, inside
    :func:`practice_experiment`; the remedies run in
    :func:`~eigprec_book.chapters.degeneracy.training.training_experiment`. Both at their
    defaults otherwise (spike ×1000, lr 0.1, ε 1e-8, label noise 1).

    Args:
        settings: The training experiment's settings.
        arms: The clipping study's arms.
        seeds: Problem seeds of both.
        steps: Optimizer steps of both.
        spike_step: 0-based step of the spike.
        shape: (m, n) of the weight.
        batch: Samples per step.

    Returns:
        ``(training, practice)``: the training result with one curve per setting, in the
        order given, and the practice result with one per arm.

    Raises:
        ValueError: as the two experiments.

    Example:
        >>> t, p = training_and_practice(
        ...     [Setting("REKLS"), Setting("REKLS", remedy="relative eps")],
        ...     [Arm("REKLS", clip=3.0)], seeds=(0,), steps=4, spike_step=2, shape=(6, 3),
        ...     batch=8,
        ... )
        >>> list(t.losses), list(p.losses)
        (['REKLS highest', 'REKLS highest + relative eps'], ['REKLS highest, clip 3×'])
    """
    from eigprec_book.chapters.degeneracy.training import training_experiment

    settings, arms = list(settings), list(arms)
    twins = {s.label: _as_arm(s) for s in settings}
    extra = [a for a in twins.values() if a is not None and a.label not in {b.label for b in arms}]
    common = {"seeds": seeds, "steps": steps, "spike_step": spike_step, "shape": shape}
    prac = practice_experiment([*extra, *arms], batch=batch, **common)  # type: ignore[arg-type]
    rest = [s for s in settings if twins[s.label] is None]
    train = training_experiment(rest, batch=batch, **common) if rest else None  # type: ignore[arg-type]
    losses = {}
    for s in settings:
        losses[s.label] = prac.losses[s.label] if twins[s.label] else train.losses[s.label]
    merged = TrainingResult(
        settings,
        tuple(seeds),
        steps,
        prac.spike_step,
        prac.spike_scale,
        losses,
        config={**(train.config if train else {}), **prac.config},
    )
    for arm in extra:
        del prac.losses[arm.label]
    return merged, prac
