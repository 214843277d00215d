"""Does the spike hurt training? A linear-regression run per optimizer setting.

The problem: learn an m×n weight W from y = W* x + σ·noise with x ~ N(0, I_n), by
mini-batches of ``batch`` fresh samples per step. The gradient is that of
½·E‖Wx − y‖² over the batch, computed in float64 and handed to the optimizer in its dtype,
so every setting sees the same gradient sequence up to rounding of W. One step's gradient
is multiplied by ``spike_scale``. The loss reported is the *population* loss per output,
½(‖W − W*‖²_F/m + σ²) -- the exact expected loss on fresh data, no held-out sample needed.

Four experiments are built on one runner that can branch a run at any step (the steps
before a spike are the same with and without it, so they are computed once):

* :func:`training_experiment` -- loss curves with a spike, per setting and seed (New 1);
* :func:`transient_experiment` -- the spike at later steps (New 2);
* :func:`sensitivity_experiment` -- eps × spike size (New 4);
* :func:`training_experiment` with ``spike_step=None`` -- each remedy's cost (New 5).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec.precision import MATMUL_PRECISIONS, current_matmul_precision, matmul_precision
from eigprec.soap import SOAP
from eigprec.tf32 import emulate_tf32, tf32_mode
from eigprec_book.chapters.degeneracy.kl_methods import (
    ClampedEigvalSOAP,
    EMAEigvalSOAP,
    GramStartSOAP,
    KLRecipeSOAP,
)
from eigprec_book.chapters.degeneracy.schedule_methods import (
    DelayedSOAP,
    OneSidedSOAP,
    SkipFirstSOAP,
)

__all__ = [
    "METHODS",
    "REMEDIES",
    "Regression",
    "Setting",
    "TrainingResult",
    "build_optimizer",
    "chapter_settings",
    "remedy_class",
    "training_experiment",
    "training_table",
]

#: The remedies, each as the :class:`eigprec.SOAP` options it sets (``"Gram first step"``
#: ``"eigenvalue clamp"`` and ``"EMA eigenvalues"`` select :class:`GramStartSOAP`,
#: :class:`ClampedEigvalSOAP` and :class:`EMAEigvalSOAP`, after the KL-Shampoo authors'
#: safeguards; ``"KL-Shampoo recipe"`` selects :class:`KLRecipeSOAP`, the three together;
#: ``"skip first step"``, ``"delayed start"`` and ``"one-sided"`` select the schedules of
#: :mod:`~eigprec_book.chapters.degeneracy.schedule_methods`. :func:`chapter_settings` leaves
#: out the recipe and the schedules: the failure map's remedy record runs them).
#:
#: Example:
#:     >>> sorted(REMEDIES)[:2]
#:     ['3xTF32 factor updates', 'EMA eigenvalues']
REMEDIES: dict[str, dict[str, Any]] = {
    "none": {},
    "float64 eigenvalues": {"eigval_dtype": torch.float64},
    "relative eps": {"eps_mode": "relative"},
    "3xTF32 factor updates": {"factor_matmul": "3xtf32"},
    "Gram first step": {},
    "eigenvalue clamp": {},
    "EMA eigenvalues": {},
    "KL-Shampoo recipe": {},
    "skip first step": {},
    "delayed start": {"start_step": 10},
    "one-sided": {},
}

# The remedies the chapter's training pages do not run (see REMEDIES).
_NOT_IN_CHAPTER = ("KL-Shampoo recipe", "skip first step", "delayed start", "one-sided")


#: The optimizers of the chapter's training runs: KL-SOAP, REKLS (KL-SOAP with ``eigh`` every
#: step) and SOAP without KL-Shampoo.
METHODS = ("SOAP", "REKLS", "plain SOAP")


@dataclass(frozen=True)
class Setting:
    """One optimizer configuration of the training experiments.

    Attributes:
        method: ``"SOAP"`` (orthogonal-iteration refresh) or ``"REKLS"`` (``eigh`` every
            step), both with KL-Shampoo factor updates, or ``"plain SOAP"`` (orthogonal
            iteration, the factors as EMAs of G Gᵀ and Gᵀ G: no KL-Shampoo).
        fp32_matmul_prec: Precision of the factor updates and projections.
        qr_fp32_matmul_prec: Precision of the basis refresh; ``None`` = the same.
        dtype: Optimizer dtype; float64 is the ground truth.
        remedy: A key of :data:`REMEDIES`.

    Example:
        >>> Setting("REKLS", "high", remedy="relative eps").label
        'REKLS high + relative eps'
    """

    method: str
    fp32_matmul_prec: str = "highest"
    qr_fp32_matmul_prec: str | None = None
    dtype: torch.dtype = torch.float32
    remedy: str = "none"

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for prec in (self.fp32_matmul_prec, self.qr_fp32_matmul_prec):
            if prec is not None and prec not in MATMUL_PRECISIONS:
                raise ValueError(f"precision must be one of {MATMUL_PRECISIONS}, got {prec!r}")
        if self.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {self.dtype}")
        if self.remedy not in REMEDIES:
            raise ValueError(f"remedy must be one of {sorted(REMEDIES)}, got {self.remedy!r}")

    @property
    def qr_prec(self) -> str:
        """The basis-refresh precision actually used."""
        return self.qr_fp32_matmul_prec or self.fp32_matmul_prec

    @property
    def label(self) -> str:
        """Short name, e.g. ``'SOAP float64'`` or ``'REKLS highest/high'``."""
        if self.dtype == torch.float64:
            name = f"{self.method} float64"
        elif self.qr_prec != self.fp32_matmul_prec:
            name = f"{self.method} {self.fp32_matmul_prec}/{self.qr_prec}"
        else:
            name = f"{self.method} {self.fp32_matmul_prec}"
        return name if self.remedy == "none" else f"{name} + {self.remedy}"


def chapter_settings(methods: Sequence[str] = ("SOAP", "REKLS")) -> list[Setting]:
    """The settings the chapter compares, per method.

    float64 (ground truth), ``'highest'``, ``'high'``, the split ``'highest'`` factor
    update with ``'high'`` refresh (emerging-optimizers 0.4.0's precision defaults),
    ``'high'`` with each remedy of :data:`REMEDIES` that changes the arithmetic, and
    ``'highest'`` with the eigenvalue clamp and with the EMA eigenvalue estimates.

    Args:
        methods: ``"SOAP"`` and/or ``"REKLS"``.

    Returns:
        A list of :class:`Setting`.

    Example:
        >>> [s.label for s in chapter_settings(["SOAP"])][:3]
        ['SOAP float64', 'SOAP highest', 'SOAP high']
    """
    out = []
    for method in methods:
        out += [
            Setting(method, "highest", dtype=torch.float64),
            Setting(method, "highest"),
            Setting(method, "high"),
            Setting(method, "highest", "high"),
        ]
        out += [
            Setting(method, "high", remedy=r)
            for r in REMEDIES
            if r not in ("none", "eigenvalue clamp", "EMA eigenvalues", *_NOT_IN_CHAPTER)
        ]
        out += [
            Setting(method, "highest", remedy=r) for r in ("eigenvalue clamp", "EMA eigenvalues")
        ]
    return out


def remedy_class(remedy: str) -> type[SOAP]:
    """The optimizer class a remedy of :data:`REMEDIES` runs (its options are the value).

    Raises:
        ValueError: if ``remedy`` is not a key of :data:`REMEDIES`.

    Example:
        >>> remedy_class("EMA eigenvalues").__name__
        'EMAEigvalSOAP'
    """
    if remedy not in REMEDIES:
        raise ValueError(f"remedy must be one of {sorted(REMEDIES)}, got {remedy!r}")
    classes: dict[str, type[SOAP]] = {
        "Gram first step": GramStartSOAP,
        "eigenvalue clamp": ClampedEigvalSOAP,
        "EMA eigenvalues": EMAEigvalSOAP,
        "KL-Shampoo recipe": KLRecipeSOAP,
        "skip first step": SkipFirstSOAP,
        "delayed start": DelayedSOAP,
        "one-sided": OneSidedSOAP,
    }
    return classes.get(remedy, SOAP)


def build_optimizer(
    setting: Setting,
    param: torch.Tensor,
    lr: float,
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.95),
    shampoo_beta: float = 0.95,
    track_diagnostics: bool = False,
) -> SOAP:
    """The optimizer of a :class:`Setting` (weight decay 0; KL-Shampoo unless "plain SOAP").

    Args:
        setting: The configuration.
        param: The 2-D parameter.
        lr: Learning rate.
        eps: Adam's ε and the eigenvalue floor.
        betas: Adam's betas.
        shampoo_beta: Factor EMA coefficient.
        track_diagnostics: Record the approximate eigenvalues (see :class:`eigprec.SOAP`).

    Returns:
        An :class:`eigprec.SOAP` (or :class:`GramStartSOAP`).

    Example:
        >>> w = torch.nn.Parameter(torch.zeros(4, 2))
        >>> type(build_optimizer(Setting("SOAP", remedy="Gram first step"), w, 0.1)).__name__
        'GramStartSOAP'
    """
    cls = remedy_class(setting.remedy)
    return cls(
        [param],
        lr=lr,
        betas=betas,
        shampoo_beta=shampoo_beta,
        eps=eps,
        weight_decay=0.0,
        use_kl_shampoo=setting.method != "plain SOAP",
        use_eigh=setting.method == "REKLS",
        fp32_matmul_prec=setting.fp32_matmul_prec,  # type: ignore[arg-type]
        qr_fp32_matmul_prec=setting.qr_prec,  # type: ignore[arg-type]
        dtype=setting.dtype,
        track_diagnostics=track_diagnostics,
        **REMEDIES[setting.remedy],
    )


@dataclass(frozen=True)
class Regression:
    """Linear regression y = W* x + σ·noise with Gaussian x: the training problem.

    Attributes:
        shape: (m, n) of W (m outputs, n inputs).
        batch: Samples per step.
        noise: σ.
        seed: Seeds W* (N(0, 1) entries) and the batches.

    Example:
        >>> p = Regression(shape=(4, 3), batch=8)
        >>> p.loss(p.target())  # at W = W*, only the noise is left: σ²/2
        0.5
    """

    shape: tuple[int, int] = (128, 64)
    batch: int = 256
    noise: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape must be two positive sizes, got {self.shape}")
        if self.batch < 1 or not self.noise >= 0:
            raise ValueError(f"need batch ≥ 1 and noise ≥ 0, got {self.batch}, {self.noise}")

    def target(self) -> torch.Tensor:
        """W*, float64."""
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randn(*self.shape, generator=gen, dtype=torch.float64)

    def gradient(self, W: torch.Tensor, step: int, target: torch.Tensor) -> torch.Tensor:
        """Mini-batch gradient of ½‖Wx − y‖² at 0-based ``step`` (float64)."""
        # One generator per (seed, step): a branch at any step sees the same batches.
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 1)
        m, n = self.shape
        # Drawn in float32 (float64 draws cost four times as much), multiplied in float64.
        x = torch.randn(n, self.batch, generator=gen).double()
        e = torch.randn(m, self.batch, generator=gen).double()
        residual = (W.double() - target) @ x - self.noise * e
        return residual @ x.T / self.batch

    def loss(self, W: torch.Tensor, target: torch.Tensor | None = None) -> float:
        """Population loss per output, ½(‖W − W*‖²_F/m + σ²)."""
        target = self.target() if target is None else target
        diff = (W.double() - target).square().sum().item()
        return 0.5 * (diff / self.shape[0] + self.noise**2)


class _Trainer:
    """One run in progress; ``fork()`` copies it so a spike can branch off."""

    def __init__(
        self,
        setting: Setting,
        problem: Regression,
        lr: float,
        eps: float,
        shampoo_beta: float = 0.95,
    ) -> None:
        self.setting, self.lr, self.eps, self.shampoo_beta = setting, lr, eps, shampoo_beta
        self.problem = problem
        self.target = problem.target()
        self.param = torch.nn.Parameter(torch.zeros(*problem.shape, dtype=setting.dtype))
        self.opt = build_optimizer(setting, self.param, lr, eps, shampoo_beta=shampoo_beta)
        self.step = 0

    def advance(self, scale: float = 1.0) -> float:
        grad = self.problem.gradient(self.param.detach(), self.step, self.target)
        self.param.grad = (grad * scale).to(self.param.dtype)
        self.opt.step()
        self.step += 1
        return self.problem.loss(self.param.detach(), self.target)

    def fork(self) -> _Trainer:
        # Not deepcopy(self): torch.optim.Optimizer pickles only its state and groups, so a
        # deep copy would lose the options SOAP keeps as attributes.
        twin = _Trainer(self.setting, self.problem, self.lr, self.eps, self.shampoo_beta)
        with torch.no_grad():
            twin.param.copy_(self.param)
        twin.opt.state[twin.param] = copy.deepcopy(self.opt.state[self.param])
        twin.step = self.step
        return twin

    def state(self) -> dict[str, Any]:
        return self.opt.state[self.param]


def _precision_context(setting: Setting) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(matmul_precision(current_matmul_precision()))
    modes = {
        tf32_mode("cpu", p, setting.dtype) for p in (setting.fp32_matmul_prec, setting.qr_prec)
    }
    if "emulated" in modes:
        stack.enter_context(emulate_tf32())
    return stack


@dataclass
class TrainingResult:
    """Loss curves of :func:`training_experiment`.

    Attributes:
        settings: The settings run.
        seeds: Problem seeds.
        steps: Optimizer steps per run.
        spike_step: 0-based step whose gradient was scaled, or ``None``.
        spike_scale: The factor.
        losses: ``{label: (len(seeds), steps + 1)}`` float64 population loss, entry 0
            before the first step, entry k after k steps.
        config: The other arguments.

    Example:
        >>> r = training_experiment([Setting("SOAP")], shape=(6, 3), steps=4, spike_step=2)
        >>> r.losses["SOAP highest"].shape  # two seeds, five points
        torch.Size([2, 5])
    """

    settings: list[Setting]
    seeds: tuple[int, ...]
    steps: int
    spike_step: int | None
    spike_scale: float
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def _check_common(steps: int, spike_step: int | None, lr: float, eps: float) -> None:
    if steps < 1:
        raise ValueError(f"steps must be ≥ 1, got {steps}")
    if spike_step is not None and not 0 <= spike_step < steps:
        raise ValueError(f"spike_step must be in [0, steps) or None, got {spike_step}")
    if not (lr > 0 and math.isfinite(lr)) or not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"lr and eps must be positive and finite, got {lr}, {eps}")


def training_experiment(
    settings: Sequence[Setting] | None = None,
    *,
    seeds: Sequence[int] = (0, 1),
    steps: int = 100,
    spike_step: int | None = 50,
    spike_scale: float = 1000.0,
    shape: tuple[int, int] = (128, 64),
    batch: int = 256,
    noise: float = 1.0,
    lr: float = 0.1,
    eps: float = 1e-8,
) -> TrainingResult:
    """Train the regression with every setting and seed, one gradient scaled by the spike.

    Args:
        settings: Settings to run; default :func:`chapter_settings`.
        seeds: Seeds of the problem (W* and batches).
        steps: Optimizer steps.
        spike_step: 0-based step of the spike; ``None`` for no spike (the cost of a remedy).
        spike_scale: Factor of the spike.
        shape: (m, n) of the weight.
        batch: Samples per step.
        noise: Label noise σ.
        lr: Learning rate.
        eps: Adam's ε and the eigenvalue floor.

    Returns:
        A :class:`TrainingResult`.

    Raises:
        ValueError: on an empty setting list or seed list, or a value out of range.

    Example:
        >>> r = training_experiment(
        ...     [Setting("SOAP", dtype=torch.float64)], shape=(6, 3), steps=30, spike_step=None
        ... )
        >>> r.losses["SOAP float64"][0, -1] < r.losses["SOAP float64"][0, 0]
        tensor(True)
    """
    settings = chapter_settings() if settings is None else list(settings)
    if not settings or not seeds:
        raise ValueError("need at least one setting and one seed")
    _check_common(steps, spike_step, lr, eps)
    result = TrainingResult(
        settings,
        tuple(seeds),
        steps,
        spike_step,
        spike_scale,
        config={"shape": shape, "batch": batch, "noise": noise, "lr": lr, "eps": eps},
    )
    for setting in settings:
        curves = torch.empty(len(seeds), steps + 1, dtype=torch.float64)
        with _precision_context(setting):
            for i, seed in enumerate(seeds):
                problem = Regression(shape, batch, noise, seed)
                run = _Trainer(setting, problem, lr, eps)
                curves[i, 0] = problem.loss(run.param.detach(), run.target)
                for k in range(steps):
                    curves[i, k + 1] = run.advance(spike_scale if k == spike_step else 1.0)
        result.losses[setting.label] = curves
    return result


def training_table(result: TrainingResult, at_step: int | None = None) -> list[dict[str, Any]]:
    """Peak and final loss per setting, over seeds.

    Args:
        result: A :class:`TrainingResult`.
        at_step: Report the loss after this many steps as ``"loss at step"`` (default: the
            last step).

    Returns:
        Rows ``{"setting", "before spike", "peak (mean)", "peak (max)", "final (mean)",
        "final (max)"}``; "peak" is the largest loss after the spike step (over the whole
        run without a spike), "before spike" the mean loss just before it.

    Raises:
        ValueError: if ``at_step`` is outside the run.

    Example:
        >>> r = training_experiment([Setting("SOAP")], shape=(6, 3), steps=4, spike_step=2)
        >>> sorted(training_table(r)[0])[:2]
        ['before spike', 'final (max)']
    """
    at = result.steps if at_step is None else at_step
    if not 0 <= at <= result.steps:
        raise ValueError(f"at_step must be in [0, {result.steps}], got {at_step}")
    s = 0 if result.spike_step is None else result.spike_step
    rows = []
    for label, curves in result.losses.items():
        peak = curves[:, s + 1 :].max(dim=1).values
        rows.append(
            {
                "setting": label,
                "before spike": curves[:, s].mean().item(),
                "peak (mean)": peak.mean().item(),
                "peak (max)": peak.max().item(),
                "final (mean)": curves[:, at].mean().item(),
                "final (max)": curves[:, at].max().item(),
            }
        )
    return rows
