"""The spike experiment's diagnosis, measured step by step against float64.

:func:`trace_spike` reruns the chapter's spike experiment (i.i.d. N(0, 1) gradients drawn
in float32 from ``torch.Generator().manual_seed(seed)``, one of them scaled; the same
sequence as :func:`eigprec_book.chapters.degeneracy.spike.spike_experiment`) for any
:class:`~eigprec_book.chapters.degeneracy.training.Setting`, remedies included, and keeps what
the corrections of issue 11 need: both factors' spectra, the approximate eigenvalues, the
bases and the size of every update. The other functions turn traces into the numbers the
chapter states:

* :func:`factor_history` -- R is held up by L's null half, not decaying (correction 1);
* :func:`null_half` -- L's null-half estimates, their weights and R's jump (correction 2);
* :func:`spectrum_ratio` -- per-eigenvalue ratio of a run's factor to float64's (3);
* :func:`null_half_turn` -- how far L's null-half eigenvectors turn per step (3);
* :func:`spike_perturbation` -- ‖ΔL‖/‖L‖ at the spike beside the gap (4);
* :func:`hidden_damage` / :func:`remedy_diagnosis` -- what the top-8 angle hides (3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec.subspace import davis_kahan_bound, subspace_angle, top1_angle
from eigprec_book.chapters.degeneracy.training import (
    Setting,
    _precision_context,
    build_optimizer,
    chapter_settings,
)

__all__ = [
    "RemedyDiagnosis",
    "SpikeTrace",
    "factor_history",
    "hidden_damage",
    "null_half",
    "null_half_turn",
    "remedy_diagnosis",
    "spectrum_ratio",
    "spike_perturbation",
    "trace_spike",
]


@dataclass
class SpikeTrace:
    """One spike run of :func:`trace_spike`, every quantity per 0-based step.

    Attributes:
        label: The setting's label.
        eig_L: ``(steps, m)`` eigenvalues of the stored L after each step, descending
            (computed in float64).
        eig_R: ``(steps, n)`` same for R.
        approx_L: ``(steps, m)`` approximate eigenvalues diag(Q_Lᵀ L Q_L) KL-Shampoo used at
            each step (from the previous step's L and Q_L; NaN where not recorded).
        approx_R: ``(steps, n)`` same for R.
        update_rms: ``(steps,)`` RMS of the step's update (parameter change / lr).
        update_rms_halves: ``(steps, 2)`` RMS of the update in the eigenbasis it was made
            in (Q_Lᵀ U Q_R), over the rows of L's top n directions and over the rest (L's
            null half when m > n).
        rel_change_L: ``(steps,)`` ‖L_t − L_{t−1}‖_F/‖L_t‖_F.
        Q_L: ``(steps, m, m)`` left basis after each step (float64 copy).
        factors: ``{step: (L, R)}`` float64 copies after the steps in ``keep``.
        config: The arguments.
    """

    label: str
    eig_L: torch.Tensor
    eig_R: torch.Tensor
    approx_L: torch.Tensor
    approx_R: torch.Tensor
    update_rms: torch.Tensor
    update_rms_halves: torch.Tensor
    rel_change_L: torch.Tensor
    Q_L: torch.Tensor
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def trace_spike(
    setting: Setting,
    *,
    steps: int = 56,
    spike_step: int = 50,
    spike_scale: float = 1000.0,
    shape: tuple[int, int] = (128, 64),
    lr: float = 1.0,
    eps: float = 1e-8,
    seed: int = 0,
    keep: Sequence[int] = (0, 49, 50, 51, 52),
) -> SpikeTrace:
    """Run the spike experiment for one setting and record its factors and updates.

    Args:
        setting: Optimizer setting (method, precision, dtype, remedy).
        steps: Number of steps.
        spike_step: 0-based step whose gradient is scaled.
        spike_scale: The factor.
        shape: (m, n) of the parameter.
        lr: Learning rate (the update RMS is divided by it).
        eps: Adam's ε and the eigenvalue floor.
        seed: Gradient seed.
        keep: Steps after which L and R are kept.

    Returns:
        A :class:`SpikeTrace`.

    Raises:
        ValueError: on a non-positive step count, shape or learning rate.

    Example:
        >>> t = trace_spike(Setting("REKLS"), steps=6, spike_step=3, shape=(8, 4), keep=[3])
        >>> t.eig_R.shape, sorted(t.factors)
        (torch.Size([6, 4]), [3])
    """
    if steps < 1 or len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"need steps ≥ 1 and two positive sizes, got {steps}, {shape}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be positive and finite, got {lr}")
    m, n = shape
    param = torch.nn.Parameter(torch.zeros(m, n, dtype=setting.dtype))
    opt = build_optimizer(setting, param, lr, eps, track_diagnostics=True)
    gen = torch.Generator().manual_seed(seed)
    rec: dict[str, list[torch.Tensor]] = {k: [] for k in ("eL", "eR", "aL", "aR", "Q")}
    rms: list[float] = []
    rel: list[float] = []
    halves: list[list[float]] = []
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    prev_L = None
    with _precision_context(setting):
        for k in range(steps):
            grad = torch.randn(m, n, generator=gen)
            param.grad = (grad * spike_scale if k == spike_step else grad).to(setting.dtype)
            before = param.detach().double().clone()
            opt.step()
            update = (param.detach().double() - before) / lr
            rms.append(update.square().mean().sqrt().item())
            state = opt.state[param]
            rotated = state["Q_L"].double().T @ update @ state["Q_R"].double()
            halves.append([rotated[:n].square().mean().sqrt().item(), _rms(rotated[n:])])
            L = state["L"].detach().double().clone()
            R = state["R"].detach().double().clone()
            rec["eL"].append(torch.linalg.eigvalsh(L).flip(0))
            rec["eR"].append(torch.linalg.eigvalsh(R).flip(0))
            diag = opt.diagnostics.get(param, {})
            rec["aL"].append(diag.get("approx_L", torch.full((m,), math.nan, dtype=torch.float64)))
            rec["aR"].append(diag.get("approx_R", torch.full((n,), math.nan, dtype=torch.float64)))
            rec["Q"].append(state["Q_L"].detach().double().clone())
            size = torch.linalg.matrix_norm(L).item()
            delta = L if prev_L is None else L - prev_L
            rel.append(torch.linalg.matrix_norm(delta).item() / size if size > 0 else math.inf)
            prev_L = L
            if k in keep:
                factors[k] = (L, R)
    config = {"steps": steps, "spike_step": spike_step, "spike_scale": spike_scale}
    config |= {"shape": shape, "lr": lr, "eps": eps, "seed": seed, "shampoo_beta": 0.95}
    return SpikeTrace(
        setting.label,
        torch.stack(rec["eL"]),
        torch.stack(rec["eR"]),
        torch.stack(rec["aL"]),
        torch.stack(rec["aR"]),
        torch.tensor(rms, dtype=torch.float64),
        torch.tensor(halves, dtype=torch.float64),
        torch.tensor(rel, dtype=torch.float64),
        torch.stack(rec["Q"]),
        factors,
        config,
    )


def _rms(x: torch.Tensor) -> float:
    return x.square().mean().sqrt().item() if x.numel() else math.nan


def _check_step(trace: SpikeTrace, *steps: int) -> None:
    for s in steps:
        if not 0 <= s < trace.eig_L.shape[0]:
            raise IndexError(f"step {s} is outside the trace of {trace.eig_L.shape[0]} steps")


def factor_history(trace: SpikeTrace, step: int = 49, start: int = 0) -> dict[str, float]:
    """How each factor's extreme eigenvalues changed from ``start`` to ``step``.

    In float64, R's smallest eigenvalue stays at its first-step value while its largest
    decays with β: R is held up by the large weights of L's near-null half, not decaying.

    Args:
        trace: A :class:`SpikeTrace`.
        step: The later step (0-based).
        start: The earlier step.

    Returns:
        ``{"R min ratio", "R max ratio", "L max ratio"}``: eigenvalue at ``step`` over the
        same one at ``start``.

    Raises:
        IndexError: if a step is outside the trace.

    Example:
        >>> t = trace_spike(Setting("SOAP", dtype=torch.float64), steps=5, shape=(8, 4))
        >>> factor_history(t, step=4)["R max ratio"] < 1
        True
    """
    _check_step(trace, step, start)
    return {
        "R min ratio": (trace.eig_R[step, -1] / trace.eig_R[start, -1]).item(),
        "R max ratio": (trace.eig_R[step, 0] / trace.eig_R[start, 0]).item(),
        "L max ratio": (trace.eig_L[step, 0] / trace.eig_L[start, 0]).item(),
    }


def null_half(trace: SpikeTrace, spike_step: int = 50) -> dict[str, float]:
    """L's null half just before the spike: its estimates, their weights, R's jump.

    The first step leaves L with rank n (of m) on the scale 1/(n·eps); the other m − n
    directions are only filled by later increments whitened by R ~ 1/eps, so their
    approximate eigenvalues are tiny and their weights 1/λ huge -- in float64 as well.

    Args:
        trace: A :class:`SpikeTrace` (``approx_L`` recorded).
        spike_step: The spike's 0-based step.

    Returns:
        ``{"null min", "null max"}`` (smallest and largest of L's m − n smallest approximate
        eigenvalues used at the spike step), ``"weight max"`` (1/"null min"), ``"top"``
        (largest approximate eigenvalue), ``"clamped"`` (how many lie below the floor
        eps), and ``"R jump"`` (λ_max(R) after the spike over before it).

    Raises:
        IndexError: if the spike step or its predecessor is outside the trace.
    """
    _check_step(trace, spike_step - 1, spike_step)
    m, n = trace.config["shape"]
    approx = trace.approx_L[spike_step].sort(descending=True).values
    tail = approx[n:] if m > n else approx[-1:]
    return {
        "null min": tail.min().item(),
        "null max": tail.max().item(),
        "weight max": 1.0 / tail.min().item(),
        "top": approx[0].item(),
        "clamped": int((approx < trace.config["eps"]).sum().item()),
        "R jump": (trace.eig_R[spike_step, 0] / trace.eig_R[spike_step - 1, 0]).item(),
    }


def spectrum_ratio(trace: SpikeTrace, reference: SpikeTrace, step: int, factor: str = "R"):
    """Per-eigenvalue ratio of a run's factor to the reference run's, at ``step``.

    Args:
        trace: The run (e.g. float32 'highest').
        reference: The ground truth (float64), same gradients.
        step: 0-based step.
        factor: ``"L"`` or ``"R"``.

    Returns:
        ``(ratio, worst)``: the ``(size,)`` tensor of eigenvalue ratios (descending order
        in both) and max over i of max(ratio, 1/ratio).

    Raises:
        ValueError: on an unknown factor; IndexError: on a step outside either trace.
    """
    if factor not in ("L", "R"):
        raise ValueError(f"factor must be 'L' or 'R', got {factor!r}")
    _check_step(trace, step)
    _check_step(reference, step)
    a = getattr(trace, f"eig_{factor}")[step]
    b = getattr(reference, f"eig_{factor}")[step]
    ratio = a / b
    worst = torch.maximum(ratio.abs(), 1 / ratio.abs()).max().item()
    return ratio, worst


def null_half_turn(trace: SpikeTrace, steps: Sequence[int] = range(40, 50)) -> dict[str, float]:
    """How far L's eigenvectors turn from one step to the next, per half.

    For each column j and step t, the angle between column j of Q_L at t and at t − 1
    (the optimizer's own ordering, which is also how Adam's second moment is carried:
    permuted, never rotated, while the first moment is rotated into the new basis). Mean
    over the steps and the columns of each half. Before the spike the null half turns at
    every precision (its eigenvalues are nearly equal); after it, float64's null half is
    fixed by the spike's increment while float32's is redrawn from rounding noise.

    Args:
        trace: A :class:`SpikeTrace`.
        steps: Steps t (each ≥ 1).

    Returns:
        ``{"top half", "null half"}`` mean angles in degrees.

    Raises:
        IndexError: if a step or its predecessor is outside the trace.
    """
    steps = list(steps)
    _check_step(trace, *steps, *(s - 1 for s in steps))
    n = trace.config["shape"][1]
    angles = []
    for t in steps:
        cos = (trace.Q_L[t] * trace.Q_L[t - 1]).sum(dim=0).abs().clamp(max=1.0)
        angles.append(torch.rad2deg(torch.arccos(cos)))
    a = torch.stack(angles)
    return {"top half": a[:, :n].mean().item(), "null half": a[:, n:].mean().item()}


def spike_perturbation(trace: SpikeTrace, step: int = 50, k: int = 8) -> dict[str, float]:
    """One step's perturbation of L beside the gap that defines its top-k subspace.

    The EMA step L ← βL + (1 − β)X scales L (which turns no eigenvector) and adds X; the
    eigenvectors of the new L are those of L + E with E = (1 − β)X/β. Davis–Kahan bounds
    the turn of the top-k subspace by ‖E‖₂/(λ_k − λ_{k+1}). At the spike step itself E is
    tiny (the spike enters L through R's whitening); the step after is where L moves.

    Args:
        trace: A :class:`SpikeTrace` that kept the factors at ``step − 1`` and ``step``.
        step: The 0-based step whose update is measured (the spike step or a later one).
        k: Size of the subspace.

    Returns:
        ``{"rel change"}`` ‖ΔL‖_F/‖L‖_F of that step (the chapter's measure),
        ``"E/L"`` ‖E‖₂/‖L‖₂ before it, ``"gap/lambda1"`` (λ_k − λ_{k+1})/λ₁ before it,
        ``"E/gap"`` and ``"dk bound"`` (degrees; 90 when vacuous).

    Raises:
        IndexError: if a step is outside the trace; KeyError: if the factors were not kept.
    """
    _check_step(trace, step - 1, step)
    for s in (step - 1, step):
        if s not in trace.factors:
            raise KeyError(f"the trace kept no factors at step {s}; pass keep=[..., {s}]")
    t = step + 1
    beta = trace.config["shampoo_beta"]
    beta_t = 1.0 - (1.0 - beta) / (1.0 - beta**t)  # the optimizer's bias-corrected β
    L_before, L_after = trace.factors[step - 1][0], trace.factors[step][0]
    E = L_after / beta_t - L_before
    lam = torch.linalg.eigvalsh(L_before).flip(0)
    gap = (lam[k - 1] - lam[k]).item()
    e_norm = torch.linalg.matrix_norm(E, ord=2).item()
    return {
        "rel change": trace.rel_change_L[step].item(),
        "E/L": e_norm / lam[0].item(),
        "gap/lambda1": gap / lam[0].item(),
        "E/gap": e_norm / gap,
        "dk bound": davis_kahan_bound(e_norm, gap),
    }


def hidden_damage(
    pairs: Sequence[tuple[SpikeTrace, SpikeTrace]],
    spike_step: int = 50,
    k: int = 8,
    after: int = 1,
) -> list[dict[str, Any]]:
    """Per run: the angles the chapter shows beside the damage they do not show.

    Args:
        pairs: ``(run, reference)``: each run with the float64 run of the same method and
            the same arithmetic (for a remedy that changes the update, such as a relative
            floor, the float64 run *with* that remedy); same gradients.
        spike_step: The spike's 0-based step.
        k: Subspace size of the angle column.
        after: Compare factors and updates at ``spike_step + after``.

    Returns:
        Rows ``{"run", "top-1 angle", "top-k angle"`` (max after the spike against the
        basis before it, degrees), ``"R ratio"`` (worst per-eigenvalue ratio of R to the
        reference's), ``"update RMS"``, ``"reference RMS"}`` at ``spike_step + after``.

    Raises:
        IndexError: if ``spike_step + after`` is outside a trace.
    """
    at = spike_step + after
    rows = []
    for tr, reference in pairs:
        _check_step(tr, at, spike_step - 1)
        ref = tr.Q_L[spike_step - 1]
        later = tr.Q_L[spike_step:]
        rows.append(
            {
                "run": tr.label,
                "top-1 angle": max(top1_angle(ref, q) for q in later),
                f"top-{k} angle": max(subspace_angle(ref, q, k) for q in later),
                "R ratio": spectrum_ratio(tr, reference, at)[1],
                "update RMS": tr.update_rms[at].item(),
                "reference RMS": reference.update_rms[at].item(),
            }
        )
    return rows


#: Remedies that change the update itself, so that float64 without them is no reference.
_CHANGE_THE_MATH = ("relative eps", "Gram first step", "eigenvalue clamp")


@dataclass
class RemedyDiagnosis:
    """What :func:`remedy_diagnosis` measured.

    Attributes:
        rows: :func:`hidden_damage` rows, one per setting (float64 ones included).
        traces: ``{label: SpikeTrace}`` of every run, references included.
    """

    rows: list[dict[str, Any]]
    traces: dict[str, SpikeTrace]


def remedy_diagnosis(
    methods: Sequence[str] = ("REKLS",),
    *,
    settings: Sequence[Setting] | None = None,
    steps: int = 56,
    spike_step: int = 50,
    seed: int = 0,
    shape: tuple[int, int] = (128, 64),
) -> RemedyDiagnosis:
    """Trace every chapter setting through the spike and measure what the angle hides.

    Runs :func:`eigprec_book.chapters.degeneracy.training.chapter_settings` for ``methods``,
    plus the float64 run of each remedy that changes the update, and pairs every run with
    its float64 reference.

    Args:
        methods: ``"SOAP"`` and/or ``"REKLS"``.
        settings: Run these instead of the chapter's settings of ``methods``.
        steps: Steps per run (> ``spike_step + 1``).
        spike_step: The spike's 0-based step.
        seed: Gradient seed.
        shape: (m, n) of the parameter.

    Returns:
        A :class:`RemedyDiagnosis`.

    Raises:
        ValueError: if ``steps ≤ spike_step + 1`` or ``spike_step < 1``.
    """
    if spike_step < 1 or steps <= spike_step + 1:
        raise ValueError(f"need 1 ≤ spike_step < steps − 1, got {spike_step}, {steps}")
    settings = chapter_settings(methods) if settings is None else list(settings)
    # Every run's float64 reference, once each, after the runs themselves.
    for s in list(settings):
        remedy = s.remedy if s.remedy in _CHANGE_THE_MATH else "none"
        ref = Setting(s.method, dtype=torch.float64, remedy=remedy)
        if ref not in settings:
            settings.append(ref)
    keep = (0, spike_step - 1, spike_step, spike_step + 1, spike_step + 2)
    traces = {
        s.label: trace_spike(
            s, steps=steps, spike_step=spike_step, seed=seed, shape=shape, keep=keep
        )
        for s in settings
    }
    pairs = []
    for s in settings:
        remedy = s.remedy if s.remedy in _CHANGE_THE_MATH else "none"
        ref = Setting(s.method, dtype=torch.float64, remedy=remedy)
        pairs.append((traces[s.label], traces[ref.label]))
    return RemedyDiagnosis(hidden_damage(pairs, spike_step=spike_step), traces)
