"""A testbed where the preconditioner has something to learn: a teacher–student MLP.

The regression of :mod:`~eigprec_book.chapters.degeneracy.training` has white inputs, so its
Kronecker factors tend to multiples of the identity and Adam does as well as SOAP. Here
the inputs are anisotropic: x = U diag(√λ) z with z ~ N(0, I), U a random rotation and λ
log-spaced over ``spread`` (λ_max/λ_min), scaled to mean 1. A fixed teacher,
``nn.Sequential(nn.Linear, nn.GELU, nn.Linear)`` without biases, labels them; a student of
the same architecture learns from fresh batches. All draws come from explicit
``torch.Generator`` objects seeded by the problem's seed.

The student is a plain ``torch.nn`` model evaluated in float64 (``torch.func.functional_call``
on float64 copies of the weights), so every optimizer arm sees the same gradients up to the
rounding of its own weights, and the matmul precision acts on the optimizer only, as in the
regression. The loss reported is ½·mean‖student(x) − teacher(x)‖² over a fixed evaluation
set: the function error, which training drives towards 0.

Each arm (:class:`~eigprec_book.chapters.degeneracy.practice.Arm`) and seed runs once up to the
spike step and is forked there into a run without the spike, one with it and one per
clipping threshold (clipping with ``torch.nn.utils.clip_grad_norm_`` at ``clip`` × an EMA of
past clipped norms, as in :mod:`~eigprec_book.chapters.degeneracy.practice`; a threshold that
would have clipped before the spike runs on its own from step 0).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from eigprec_book.chapters.degeneracy.practice import Arm, _NormClip
from eigprec_book.chapters.degeneracy.training import _precision_context

__all__ = ["MLPResult", "TeacherStudent", "mlp_experiment"]


@dataclass(frozen=True)
class TeacherStudent:
    """A two-layer GELU teacher labels anisotropic Gaussian inputs; a student learns it.

    Attributes:
        d_in: Input size.
        hidden: Hidden width of teacher and student.
        d_out: Output size.
        spread: λ_max/λ_min of the input covariance, ≥ 1.
        batch: Samples per step.
        seed: Seeds the rotation, the teacher, the student's start and the batches.

    Example:
        >>> p = TeacherStudent(d_in=6, hidden=8, d_out=2, spread=100.0, batch=4)
        >>> [tuple(w.shape) for w in p.student_weights(torch.float32)]
        [(8, 6), (2, 8)]
    """

    d_in: int = 64
    hidden: int = 128
    d_out: int = 16
    spread: float = 1e6
    batch: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.d_in, self.hidden, self.d_out, self.batch) < 1:
            raise ValueError("d_in, hidden, d_out and batch must be ≥ 1")
        if not (self.spread >= 1 and math.isfinite(self.spread)):
            raise ValueError(f"spread must be ≥ 1 and finite, got {self.spread}")

    def _gen(self, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + stream)

    def eigenvalues(self) -> torch.Tensor:
        """λ of the input covariance, descending, log-spaced over ``spread``, mean 1."""
        lam = self.spread ** -torch.linspace(0, 1, self.d_in, dtype=torch.float64)
        return lam / lam.mean()

    def input_map(self) -> torch.Tensor:
        """U diag(√λ) (d_in × d_in, float64): x = U diag(√λ) z."""
        q, r = torch.linalg.qr(torch.randn(self.d_in, self.d_in, generator=self._gen(1)).double())
        q = q * torch.sign(torch.diagonal(r))  # a Haar-distributed rotation
        return q * self.eigenvalues().sqrt()

    def model(self) -> nn.Sequential:
        """The architecture (float64, no biases), weights as ``nn.Linear`` draws them."""
        return nn.Sequential(
            nn.Linear(self.d_in, self.hidden, bias=False, dtype=torch.float64),
            nn.GELU(),
            nn.Linear(self.hidden, self.d_out, bias=False, dtype=torch.float64),
        )

    def _weights(self, stream: int) -> list[torch.Tensor]:
        gen = self._gen(stream)
        return [
            torch.randn(self.hidden, self.d_in, generator=gen).double() / math.sqrt(self.d_in),
            torch.randn(self.d_out, self.hidden, generator=gen).double() / math.sqrt(self.hidden),
        ]

    def teacher_weights(self) -> list[torch.Tensor]:
        """The teacher's two weight matrices (float64, N(0, 1/fan-in) entries)."""
        return self._weights(2)

    def student_weights(self, dtype: torch.dtype) -> list[torch.Tensor]:
        """The student's starting weights in ``dtype`` (an independent N(0, 1/fan-in) draw)."""
        return [w.to(dtype) for w in self._weights(3)]

    def inputs(self, n: int, stream: int, input_map: torch.Tensor | None = None) -> torch.Tensor:
        """n inputs (n × d_in, float64) from generator stream ``stream`` (``input_map``:
        :meth:`input_map`'s value, passed to save recomputing it)."""
        z = torch.randn(n, self.d_in, generator=self._gen(stream)).double()
        return z @ (self.input_map() if input_map is None else input_map).T


def _names(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters()]


def _forward(model: nn.Module, weights: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    params = dict(zip(_names(model), weights, strict=True))
    return torch.func.functional_call(model, params, (x,))


@dataclass
class MLPResult:
    """Loss curves of :func:`mlp_experiment`.

    Attributes:
        seeds: Problem seeds.
        steps: Optimizer steps per run.
        spike_step: 0-based step of the spike.
        spike_scale: The spike's factor.
        losses: ``{label: (len(seeds), steps + 1)}`` evaluation loss; entry k after k steps.
            Labels are the arm's (spike, unclipped), ``label + ", no spike"`` and the
            clipped arms' labels.
        config: The other arguments.

    Example:
        >>> r = mlp_experiment([Arm("Adam")], seeds=(0,), steps=4, spike_step=2,
        ...                    problem=TeacherStudent(6, 8, 2, batch=4), eval_size=8)
        >>> sorted(r.losses)
        ['Adam', 'Adam, no spike']
    """

    seeds: tuple[int, ...]
    steps: int
    spike_step: int
    spike_scale: float
    losses: dict[str, torch.Tensor]
    config: dict[str, Any]


class _Run:
    """One arm on one problem: float64 model, weights in the arm's dtype, optional clipping."""

    def __init__(self, arm: Arm, problem: TeacherStudent, data: dict[str, Any]) -> None:
        self.arm, self.problem, self.data = arm, problem, data
        self.weights = [nn.Parameter(w) for w in problem.student_weights(arm.dtype)]
        self.opt = arm.build(self.weights, data["lr"], data["eps"])
        self.curve = torch.empty(data["steps"] + 1, dtype=torch.float64)
        self.curve[0] = self.loss()
        self.clipper = _NormClip(data["clip_beta"], arm.clip)
        self.k = 0

    def loss(self) -> float:
        with torch.no_grad():
            x, y = self.data["eval"]
            out = _forward(self.data["model"], [w.double() for w in self.weights], x)
            return 0.5 * (out - y).square().sum(dim=1).mean().item()

    def advance_to(self, stop: int, spike: bool) -> None:
        data, model = self.data, self.data["model"]
        for k in range(self.k, stop):
            x = self.problem.inputs(self.problem.batch, 100 + k, data["map"])
            with torch.no_grad():
                y = _forward(model, data["teacher"], x)
            w64 = [w.detach().double().requires_grad_() for w in self.weights]
            loss = 0.5 * (_forward(model, w64, x) - y).square().sum(dim=1).mean()
            grads = torch.autograd.grad(loss, w64)
            if spike and k == data["spike_step"]:
                grads = [g * data["spike_scale"] for g in grads]
            for w, g in zip(self.weights, grads, strict=True):
                w.grad = g.to(w.dtype)
            norm = math.sqrt(sum(g.square().sum().item() for g in grads))
            limit = self.clipper.step(norm)
            if limit is not None:
                nn.utils.clip_grad_norm_(self.weights, max_norm=limit)
            # Only the optimizer runs under the precision setting (and TF32 emulation, whose
            # dispatch would otherwise slow every float64 op of the model as well).
            with _precision_context(self.arm._setting()):
                self.opt.step()
            self.curve[k + 1] = self.loss()
        self.k = max(self.k, stop)

    def clip_would_bite(self, clip: float) -> bool:
        return self.clipper.would_bite(clip)

    def fork(self, arm: Arm) -> _Run:
        twin = _Run(arm, self.problem, self.data)
        with torch.no_grad():
            for mine, theirs in zip(self.weights, twin.weights, strict=True):
                theirs.copy_(mine)
        for mine, theirs in zip(self.weights, twin.weights, strict=True):
            twin.opt.state[theirs] = copy.deepcopy(self.opt.state[mine])
        twin.curve.copy_(self.curve)
        twin.clipper, twin.k = self.clipper.fork(arm.clip), self.k
        return twin


def mlp_experiment(
    arms: Sequence[Arm],
    *,
    clips: Sequence[float] = (),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    steps: int = 200,
    spike_step: int = 100,
    spike_scale: float = 1000.0,
    problem: TeacherStudent | None = None,
    lr: float = 0.01,
    eps: float = 1e-8,
    eval_size: int = 2048,
    clip_beta: float = 0.9,
) -> MLPResult:
    """Train the student with every arm and seed; fork at the spike (none, spike, clipped).

    Args:
        arms: Unclipped optimizer configurations (:class:`Arm`; its ``clip`` must be ``None``).
        clips: Clipping thresholds (multiples of the running mean norm) to fork per arm.
        seeds: Problem seeds (``problem`` is re-seeded with each).
        steps: Optimizer steps.
        spike_step: 0-based step whose gradients are all multiplied by ``spike_scale``.
        spike_scale: The spike's factor.
        problem: The testbed (default :class:`TeacherStudent`); its ``seed`` is replaced.
        lr: Learning rate of every arm.
        eps: Adam's ε and the eigenvalue floor.
        eval_size: Samples of the fixed evaluation set.
        clip_beta: EMA coefficient of the running gradient norm.

    Returns:
        An :class:`MLPResult`.

    Raises:
        ValueError: on empty arms or seeds, a clipped or duplicate arm, or a value out of range.

    Example:
        >>> r = mlp_experiment([Arm("REKLS")], clips=(3.0,), seeds=(0,), steps=4, spike_step=2,
        ...                    problem=TeacherStudent(6, 8, 2, batch=4), eval_size=8)
        >>> sorted(r.losses)
        ['REKLS highest', 'REKLS highest, clip 3×', 'REKLS highest, no spike']
    """
    arms = list(arms)
    if not arms or not seeds:
        raise ValueError("need at least one arm and one seed")
    if any(a.clip is not None for a in arms):
        raise ValueError("pass unclipped arms; clipping thresholds go in clips")
    if len({a.label for a in arms}) != len(arms):
        raise ValueError("arms must have distinct labels")
    if not 0 <= spike_step < steps:
        raise ValueError(f"need 0 ≤ spike_step < steps, got {spike_step}, {steps}")
    for name, value in (("lr", lr), ("eps", eps), ("spike_scale", spike_scale)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be positive and finite, got {value}")
    if any(not (c > 0 and math.isfinite(c)) for c in clips) or eval_size < 1:
        raise ValueError("clips must be positive and finite, eval_size ≥ 1")
    if not 0 <= clip_beta < 1:
        raise ValueError(f"clip_beta must be in [0, 1), got {clip_beta}")
    base = TeacherStudent() if problem is None else problem
    config = {"problem": base, "lr": lr, "eps": eps, "eval_size": eval_size, "clips": clips}
    result = MLPResult(tuple(seeds), steps, spike_step, spike_scale, {}, config)
    for arm in arms:
        labels = [arm.label, f"{arm.label}, no spike"] + [replace(arm, clip=c).label for c in clips]
        curves = {lab: torch.empty(len(seeds), steps + 1, dtype=torch.float64) for lab in labels}
        for i, seed in enumerate(seeds):
            prob = replace(base, seed=seed)
            model = prob.model()
            teacher = prob.teacher_weights()
            input_map = prob.input_map()
            x_eval = prob.inputs(eval_size, 0, input_map)
            with torch.no_grad():
                y_eval = _forward(model, teacher, x_eval)
            data = {
                "model": model,
                "teacher": teacher,
                "eval": (x_eval, y_eval),
                "map": input_map,
                "lr": lr,
                "eps": eps,
                "steps": steps,
                "spike_step": spike_step,
                "spike_scale": spike_scale,
                "clip_beta": clip_beta,
            }
            shared = _Run(arm, prob, data)
            shared.advance_to(spike_step, spike=True)
            branches = [(f"{arm.label}, no spike", shared.fork(arm), False)]
            for c in clips:
                clipped = replace(arm, clip=c)
                if shared.clip_would_bite(c):
                    run = _Run(clipped, prob, data)
                else:
                    run = shared.fork(clipped)
                branches.append((clipped.label, run, True))
            branches.append((arm.label, shared, True))
            for label, run, spike in branches:
                run.advance_to(steps, spike=spike)
                curves[label][i] = run.curve
        result.losses.update(curves)
    return result
