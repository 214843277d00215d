"""What the remedies cost where nothing spikes: training on a layer with curvature to learn.

Issue 46 item 4: a remedy that contains a spike may slow ordinary training. The chapter's
testbed has white gradients (nothing for a preconditioner to learn), so it cannot show that
cost. :class:`CurvedRegression` gives the layer curvature over several decades, rotated, on
its inputs (the right factor) or its outputs (the left one); :func:`cost_experiment` trains
it without any spike with two-sided KL-SOAP/REKLS, with the remedies (one-sided
preconditioning, the EMA eigenvalue estimator, clipping at 10× or 3× the running gradient
norm) and with Adam, and records the loss at a few checkpoints. One-sided preconditioning
keeps the smaller side's factor only: where the larger side carries the curvature, it
drops it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec_book.chapters.degeneracy.practice import _NormClip
from eigprec_book.chapters.degeneracy.training import Setting, build_optimizer

__all__ = ["ARMS", "CostResult", "CurvedRegression", "cost_experiment"]

#: The runs: name -> (method, remedy, clip multiple or None); ``"Adam"`` is torch's.
ARMS: dict[str, tuple[str, str, float | None]] = {
    "REKLS": ("REKLS", "none", None),
    "SOAP": ("SOAP", "none", None),
    "one-sided REKLS": ("REKLS", "one-sided", None),
    "EMA eigenvalues REKLS": ("REKLS", "EMA eigenvalues", None),
    "REKLS, clip 10×": ("REKLS", "none", 10.0),
    "REKLS, clip 3×": ("REKLS", "none", 3.0),
    "Adam": ("Adam", "none", None),
}


@dataclass(frozen=True)
class CurvedRegression:
    """Linear regression whose loss has curvature over ``decades`` decades on one side.

    With ``side="inputs"`` the inputs are x ~ N(0, C), C = Q diag(λ) Qᵀ with λ log-spaced
    from 1 to 10^-decades and Q a random rotation; with ``side="outputs"`` the inputs are
    white and the residual is weighted by C over the outputs. The loss per output is
    ½ tr((W − W*) C_in (W − W*)ᵀ C_out)/m + σ²/2.

    Attributes:
        shape: (m, n) of W.
        side: ``"inputs"`` or ``"outputs"``.
        decades: Spread of the curvature.
        batch: Samples per step.
        noise: σ.
        seed: Seeds W*, Q and the batches.

    Example:
        >>> p = CurvedRegression((4, 3), "inputs", decades=2.0, noise=0.0)
        >>> p.loss(p.target())
        0.0
    """

    shape: tuple[int, int] = (32, 128)
    side: str = "inputs"
    decades: float = 4.0
    batch: int = 256
    noise: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape must be two positive sizes, got {self.shape}")
        if self.side not in ("inputs", "outputs"):
            raise ValueError(f"side must be 'inputs' or 'outputs', got {self.side!r}")
        if not (self.decades >= 0 and math.isfinite(self.decades)):
            raise ValueError(f"decades must be finite and >= 0, got {self.decades}")
        if self.batch < 1 or not self.noise >= 0:
            raise ValueError(f"need batch >= 1 and noise >= 0, got {self.batch}, {self.noise}")

    @functools.cached_property
    def _curvature(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, λ) of the curved side, float64 (computed once per problem)."""
        size = self.shape[1] if self.side == "inputs" else self.shape[0]
        gen = torch.Generator().manual_seed(self.seed * 7919 + 17)
        q, _ = torch.linalg.qr(torch.randn(size, size, generator=gen, dtype=torch.float64))
        lam = torch.logspace(0.0, -self.decades, size, dtype=torch.float64)
        return q, lam

    def target(self) -> torch.Tensor:
        """W*, float64, N(0, 1) entries."""
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randn(*self.shape, generator=gen, dtype=torch.float64)

    def gradient(self, W: torch.Tensor, step: int, target: torch.Tensor) -> torch.Tensor:
        """Mini-batch gradient at 0-based ``step`` (float64)."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 1)
        m, n = self.shape
        q, lam = self._curvature
        x = torch.randn(n, self.batch, generator=gen, dtype=torch.float64)
        e = torch.randn(m, self.batch, generator=gen, dtype=torch.float64)
        if self.side == "inputs":
            x = q @ (lam.sqrt()[:, None] * (q.T @ x))
        residual = (W.double() - target) @ x - self.noise * e
        if self.side == "outputs":
            residual = q @ (lam[:, None] * (q.T @ residual))
        return residual @ x.T / self.batch

    def loss(self, W: torch.Tensor, target: torch.Tensor | None = None) -> float:
        """Population loss per output."""
        target = self.target() if target is None else target
        q, lam = self._curvature
        d = W.double() - target
        if self.side == "inputs":
            value = ((d @ q).square() * lam[None, :]).sum()
        else:
            value = ((q.T @ d).square() * lam[:, None]).sum()
        return 0.5 * (value.item() / self.shape[0] + self.noise**2)


@dataclass
class CostResult:
    """What :func:`cost_experiment` measured.

    Attributes:
        rows: One dict per (problem, arm, seed): ``"shape"``, ``"side"``, ``"noise"``,
            ``"arm"``, ``"seed"``, ``"start"`` and ``"loss"`` (step -> loss at each
            checkpoint; NaN if the run broke), ``"broke"`` (a non-finite loss or the
            optimizer refused a step).
        config: The arguments.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def losses(self, shape: Sequence[int], side: str, arm: str, step: int) -> list[float]:
        """The loss at ``step`` of every seed of one problem and arm."""
        return [
            r["loss"][step]
            for r in self.rows
            if tuple(r["shape"]) == tuple(shape) and r["side"] == side and r["arm"] == arm
        ]


def _optimizer(arm: str, param: torch.Tensor, lr: float, eps: float) -> torch.optim.Optimizer:
    method, remedy, _ = ARMS[arm]
    if method == "Adam":
        return torch.optim.Adam([param], lr=lr, betas=(0.9, 0.95), eps=eps)
    return build_optimizer(Setting(method, dtype=torch.float64, remedy=remedy), param, lr, eps)


def _train(
    problem: CurvedRegression, arm: str, lr: float, eps: float, checkpoints: Sequence[int]
) -> tuple[dict[int, float], bool]:
    target = problem.target()
    param = torch.nn.Parameter(torch.zeros(*problem.shape, dtype=torch.float64))
    opt = _optimizer(arm, param, lr, eps)
    clip = _NormClip(0.9, ARMS[arm][2])
    losses: dict[int, float] = {}
    broke = False
    for step in range(max(checkpoints)):
        grad = problem.gradient(param.detach(), step, target)
        limit = clip.step(float(grad.norm()))
        if limit is not None and float(grad.norm()) > limit:
            grad = grad * (limit / float(grad.norm()))
        param.grad = grad
        try:
            opt.step()
        except ValueError:  # the optimizer refused a non-finite step
            broke = True
            break
        if not bool(torch.isfinite(param.detach()).all()):
            broke = True
            break
        if step + 1 in checkpoints:
            losses[step + 1] = problem.loss(param.detach(), target)
    for c in checkpoints:
        losses.setdefault(c, math.nan)
    return losses, broke


def cost_experiment(
    problems: Sequence[CurvedRegression] = (
        CurvedRegression((32, 128), "inputs"),
        CurvedRegression((128, 32), "outputs"),
    ),
    arms: Sequence[str] = tuple(ARMS),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    *,
    lr: float = 0.03,
    eps: float = 1e-8,
    checkpoints: Sequence[int] = (100, 200, 400, 800),
) -> CostResult:
    """Train each problem with each arm and seed, no spike; losses at the checkpoints.

    Every run is in float64: the question is the algorithm's cost, not the arithmetic's.

    Args:
        problems: The problems; their ``seed`` is replaced by each of ``seeds``.
        arms: Keys of :data:`ARMS`.
        seeds: Seeds (explicit ``torch.Generator`` seeds of W*, the rotation, the batches).
        lr: Learning rate of every arm.
        eps: Adam's ε and the eigenvalue floor.
        checkpoints: Steps (1-based counts of updates) at which the loss is recorded.

    Returns:
        A :class:`CostResult`.

    Raises:
        ValueError: on an unknown arm, no problem, seed or checkpoint, or a checkpoint < 1.

    Example:
        >>> r = cost_experiment(
        ...     [CurvedRegression((6, 4), "inputs", decades=2.0)], ["REKLS", "Adam"], (0,),
        ...     checkpoints=(5,),
        ... )
        >>> sorted(r.rows[0]) [:3]
        ['arm', 'broke', 'loss']
    """
    for arm in arms:
        if arm not in ARMS:
            raise ValueError(f"arm must be one of {list(ARMS)}, got {arm!r}")
    if not problems or not seeds or not checkpoints or min(checkpoints) < 1:
        raise ValueError("need problems, seeds and checkpoints (each >= 1)")
    result = CostResult(
        config={
            "problems": [
                {"shape": list(p.shape), "side": p.side, "decades": p.decades,
                 "batch": p.batch, "noise": p.noise}
                for p in problems
            ],
            "arms": list(arms),
            "seeds": list(seeds),
            "lr": lr,
            "eps": eps,
            "checkpoints": list(checkpoints),
        }
    )  # fmt: skip
    for base in problems:
        for seed in seeds:
            problem = CurvedRegression(
                base.shape, base.side, base.decades, base.batch, base.noise, seed
            )
            start = problem.loss(torch.zeros(*problem.shape, dtype=torch.float64))
            for arm in arms:
                losses, broke = _train(problem, arm, lr, eps, checkpoints)
                result.rows.append(
                    {
                        "shape": list(problem.shape),
                        "side": problem.side,
                        "noise": problem.noise,
                        "arm": arm,
                        "seed": seed,
                        "start": start,
                        "loss": losses,
                        "broke": broke,
                    }
                )
    return result
