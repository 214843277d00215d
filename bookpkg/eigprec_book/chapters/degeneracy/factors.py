"""Both factors, both orientations: which basis the spike damages, by a rotation-blind metric.

The chapter's angle plots watch Q_L's top-8 subspace. Inside a near-degenerate cluster any
rotation is harmless, so an angle can alarm for nothing or miss damage elsewhere. The metric
here ignores such rotations: the *off-diagonal mass* of the float64 reference factor F in a
run's basis Q,

    offdiag(Q; F) = ‖QᵀFQ − diag(QᵀFQ)‖_F / ‖F‖_F,

zero exactly when Q diagonalises F (whatever basis it picks inside a repeated eigenvalue).
The gradients are i.i.d. N(0, 1) and do not depend on the parameter, so the float64 run's
factors are the true factors of every run on the same seed. The update RMS sits beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from eigprec.soap import SOAP
from eigprec_book.chapters.degeneracy.training import Setting, _precision_context

__all__ = ["FactorHealth", "factor_health_experiment", "offdiag_mass"]


def offdiag_mass(basis: torch.Tensor, factor: torch.Tensor) -> float:
    """‖QᵀFQ − diag(QᵀFQ)‖_F / ‖F‖_F in float64.

    Args:
        basis: Q, square (d×d).
        factor: F, symmetric d×d.

    Returns:
        The relative off-diagonal mass (0 when Q diagonalises F); 0 for F = 0.

    Raises:
        ValueError: if the shapes do not match or are not square.

    Example:
        >>> f = torch.diag(torch.tensor([2.0, 2.0, 1.0]))
        >>> c, s = math.cos(0.3), math.sin(0.3)
        >>> q = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        >>> offdiag_mass(q, f) < 1e-7  # a rotation inside the repeated pair costs nothing
        True
    """
    if basis.dim() != 2 or basis.shape[0] != basis.shape[1] or basis.shape != factor.shape:
        raise ValueError(f"need square Q and F of one shape, got {basis.shape}, {factor.shape}")
    q, f = basis.double(), factor.double()
    norm = torch.linalg.matrix_norm(f).item()
    if norm == 0:
        return 0.0
    c = q.T @ f @ q
    return torch.linalg.matrix_norm(c - torch.diag(torch.diagonal(c))).item() / norm


@dataclass
class FactorHealth:
    """Per run (label) and seed: off-diagonal mass of both factors and update RMS per step.

    Attributes:
        shape: (m, n) of the parameter.
        seeds: Seeds.
        offdiag_L, offdiag_R: ``{label: (seeds, steps)}`` float64.
        update_rms: ``{label: (seeds, steps)}`` float64.

    Example:
        >>> h = factor_health_experiment([Setting("REKLS")], shape=(6, 3), seeds=(0,), steps=4,
        ...                              spike_step=2)
        >>> h.offdiag_L["REKLS highest"].shape
        torch.Size([1, 4])
    """

    shape: tuple[int, int]
    seeds: tuple[int, ...]
    offdiag_L: dict[str, torch.Tensor] = field(default_factory=dict)
    offdiag_R: dict[str, torch.Tensor] = field(default_factory=dict)
    update_rms: dict[str, torch.Tensor] = field(default_factory=dict)


def _gradients(
    shape: tuple[int, int],
    seed: int,
    steps: int,
    spike_step: int,
    scale: float,
    rank: int | None = None,
):
    gen = torch.Generator().manual_seed(seed)
    m, n = shape
    for k in range(steps):
        if rank is None:
            g = torch.randn(m, n, generator=gen, dtype=torch.float64)
        else:
            # A product of Gaussian factors: rank ``rank``, entries of unit variance.
            a = torch.randn(m, rank, generator=gen, dtype=torch.float64)
            g = a @ torch.randn(rank, n, generator=gen, dtype=torch.float64) / rank**0.5
        yield g * scale if k == spike_step else g


def _run(setting: Setting, shape, seed, steps, spike_step, scale, rank=None):
    param = torch.nn.Parameter(torch.zeros(*shape, dtype=setting.dtype))
    opt = SOAP(
        [param],
        lr=1.0,
        betas=(0.9, 0.95),
        shampoo_beta=0.95,
        eps=1e-8,
        weight_decay=0.0,
        use_kl_shampoo=True,
        use_eigh=setting.method == "REKLS",
        fp32_matmul_prec=setting.fp32_matmul_prec,  # type: ignore[arg-type]
        qr_fp32_matmul_prec=setting.qr_prec,  # type: ignore[arg-type]
        dtype=setting.dtype,
    )
    out = []
    with _precision_context(setting):
        for g in _gradients(shape, seed, steps, spike_step, scale, rank):
            before = param.detach().clone()
            param.grad = g.to(setting.dtype)
            opt.step()
            st = opt.state[param]
            rms = (param.detach() - before).double().square().mean().sqrt().item()
            out.append(
                (st["L"].clone(), st["R"].clone(), st["Q_L"].clone(), st["Q_R"].clone(), rms)
            )
    return out


def factor_health_experiment(
    settings: Sequence[Setting],
    *,
    shape: tuple[int, int] = (128, 64),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    steps: int = 60,
    spike_step: int = 50,
    spike_scale: float = 1000.0,
    rank: int | None = None,
) -> FactorHealth:
    """The spike experiment with i.i.d. gradients, measured on both factors.

    Each setting's bases are scored against the float64 run of the same method and seed
    (run here as the reference), so the metric needs no reference of its own.

    Args:
        settings: Settings to run (KL-Shampoo on, lr 1, betas (0.9, 0.95), β 0.95, ε 1e-8).
        shape: (m, n); (64, 128) is the wide layer.
        seeds: Gradient seeds.
        steps: Steps per run.
        spike_step: 0-based step whose gradient is multiplied by ``spike_scale``.
        spike_scale: The spike's factor.
        rank: Rank of every gradient (a product of Gaussian factors); ``None``: full rank.

    Returns:
        A :class:`FactorHealth`.

    Raises:
        ValueError: on no settings or seeds, or a spike outside the run.
    """
    if not settings or not seeds:
        raise ValueError("need at least one setting and one seed")
    if not 0 <= spike_step < steps or not (spike_scale > 0 and math.isfinite(spike_scale)):
        raise ValueError(f"need 0 ≤ spike_step < steps and a positive scale, got {spike_step}")
    if rank is not None and not 1 <= rank <= min(shape):
        raise ValueError(f"rank must be in [1, {min(shape)}] or None, got {rank}")
    health = FactorHealth(tuple(shape), tuple(seeds))
    refs: dict[tuple[str, int], list] = {}
    for setting in settings:
        rows_L, rows_R, rows_u = [], [], []
        for seed in seeds:
            key = (setting.method, seed)
            ref = Setting(setting.method, dtype=torch.float64)
            if key not in refs:
                refs[key] = _run(ref, shape, seed, steps, spike_step, spike_scale, rank)
            # The float64 setting is its own reference: the same run, not run twice.
            same = setting == ref
            run = (
                refs[key]
                if same
                else _run(setting, shape, seed, steps, spike_step, spike_scale, rank)
            )
            for rows, side in ((rows_L, 0), (rows_R, 1)):
                rows.append(
                    [
                        offdiag_mass(mine[2 + side], ref[side])
                        for mine, ref in zip(run, refs[key], strict=True)
                    ]
                )
            rows_u.append([r[4] for r in run])
        for store, rows in (
            (health.offdiag_L, rows_L),
            (health.offdiag_R, rows_R),
            (health.update_rms, rows_u),
        ):
            store[setting.label] = torch.tensor(rows, dtype=torch.float64)
    return health
