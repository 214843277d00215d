"""The TF32 details page's report on four architectures, and the remedies' price.

Built on :mod:`eigprec_book.chapters.tf32.architectures`: its audits, end-to-end effects and
attributions for all four models, the FLOPs of each module (torch's flop counter) and the
remedy of running chosen modules at ``'highest'``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from eigprec.audit import Attribution
from eigprec.precision import matmul_precision
from eigprec.tf32 import emulate_tf32
from eigprec_book.chapters.tf32.architectures import (
    ARCHITECTURES,
    LABELS,
    ArchitectureAudit,
    _evaluation,
    architecture_attribution,
    audit_architecture,
    build_architecture,
    product_family,
    tf32_effects,
)
from eigprec_book.chapters.tf32.experiments import median

__all__ = ["ArchitecturesReport", "architectures_report", "forward_flops", "highest_for"]


def forward_flops(name: str, seed: int = 0) -> dict[str, int]:
    """Floating-point operations of one evaluation, per module path (torch's flop counter).

    Args:
        name: one of :data:`ARCHITECTURES`.
        seed: seed of the weights and the data.

    Returns:
        Module path (as in the audit's records; ``""`` for the whole model) -> FLOPs of the
        matrix products and convolutions run inside it.

    Example:
        >>> flops = forward_flops("gpt2")
        >>> 0 < flops["lm_head"] < flops[""]
        True
    """
    from torch.utils.flop_counter import FlopCounterMode

    model, batch = build_architecture(name, seed)
    counter = FlopCounterMode(display=False)
    with counter:
        _evaluation(model, batch)
    root = type(model).__name__
    out = {}
    for path, ops in counter.get_flop_counts().items():
        if path == "Global":
            continue
        key = "" if path == root else path.removeprefix(root + ".")
        out[key] = int(sum(ops.values()))
    return out


def highest_for(
    name: str, modules: tuple[str, ...], seed: int = 0, rounding: str | None = None
) -> float:
    """The evaluation logits' change at emulated ``'high'`` with ``modules`` kept at float32.

    The remedy the chapter recommends for the products that matter, ``'highest'`` around
    them alone (here entered and left by forward hooks of those modules), measured against
    the logits at ``'highest'`` everywhere.

    Args:
        name: one of :data:`ARCHITECTURES`.
        modules: module paths to run at ``'highest'`` (``()``: none).
        seed: seed of the weights and the data.
        rounding: the emulator's TF32 rounding.

    Returns:
        ‖logits − logits_fp32‖ / ‖logits_fp32‖.

    Example:
        >>> highest_for("gpt2", ("lm_head",)) < highest_for("gpt2", ())
        True
    """
    model, batch = build_architecture(name, seed)
    reference = _evaluation(model, batch)
    named = dict(model.named_modules())
    handles, open_blocks = [], []

    def enter(*_: Any) -> None:
        block = matmul_precision("highest")
        block.__enter__()
        open_blocks.append(block)

    def leave(*_: Any) -> None:
        open_blocks.pop().__exit__(None, None, None)

    for path in modules:
        handles.append(named[path].register_forward_pre_hook(enter))
        handles.append(named[path].register_forward_hook(leave))
    try:
        with matmul_precision("high"), emulate_tf32(rounding=rounding):
            logits = _evaluation(model, batch)
    finally:
        for h in handles:
            h.remove()
    return float((logits - reference).norm() / reference.norm())


@dataclass(frozen=True)
class ArchitecturesReport:
    """Everything the TF32 details page shows about the four architectures.

    Attributes:
        audits: name -> :class:`ArchitectureAudit` (seed 0).
        effects: name -> one :func:`tf32_effects` result per seed.
        logit_sites: name -> :func:`architecture_attribution` of the logits (seed 0).
        gradient_sites: :func:`architecture_attribution` of ``gradient_model``'s gradients.
        gradient_model: the model whose gradients were attributed.
        flops: name -> :func:`forward_flops`.
        remedy: ``{"model", "modules", "before", "after", "flop_share"}``: the logits'
            change at ``'high'`` without and with ``modules`` at ``'highest'``, and those
            modules' share of the evaluation's FLOPs.
        seconds: wall-clock time of the whole report.
    """

    audits: dict[str, ArchitectureAudit]
    effects: dict[str, list[dict[str, dict[str, float]]]]
    logit_sites: dict[str, Attribution]
    gradient_sites: Attribution
    gradient_model: str
    flops: dict[str, dict[str, int]]
    remedy: dict[str, Any]
    seconds: float

    def audit_rows(self) -> list[dict[str, Any]]:
        """One row per model: parameters, products audited, the worst and where it ran."""
        rows = []
        for name, found in self.audits.items():
            worst = found.worst()
            mark = "" if worst.phase == "forward" else "∂ "
            rows.append(
                {
                    "model": _short(name),
                    "parameters": found.parameters,
                    "products": len(found.training) + len(found.evaluation),
                    "worst": worst.norm_error,
                    "where": f"{mark}{product_family(worst.module, worst.op)}",
                    "logit_site": self.logit_sites[name].sites[0].module,
                }
            )
        return rows

    def effect_rows(self) -> list[dict[str, Any]]:
        """One row per model: TF32's median change of each quantity over the seeds, and
        float32's median error against float64 for the gradients."""
        rows = []
        for name, runs in self.effects.items():
            med = {
                q: _median([r["high"][q] for r in runs]) for q in ("logits", "loss", "gradients")
            }
            fp32 = _median([r["float32"]["gradients"] for r in runs])
            rows.append({"model": _short(name), **med, "fp32_gradients": fp32})
        return rows


def _short(name: str) -> str:
    return LABELS[name].split(" (")[0]


def _median(values: list[float]) -> float:
    return median(torch.tensor(values, dtype=torch.float64))


def architectures_report(
    seeds: int = 5,
    rounding: str | None = None,
    gradient_model: str = "resnet",
    remedy: tuple[str, tuple[str, ...]] = ("gpt2", ("lm_head",)),
) -> ArchitecturesReport:
    """Audit, end-to-end effects, attribution and a remedy for the four architectures.

    Args:
        seeds: seeds (weights and data) of the end-to-end effects: 0, 1, ...
        rounding: the emulator's TF32 rounding (None: its default).
        gradient_model: the model whose training gradients are attributed to its products.
        remedy: ``(model, module paths)`` to keep at ``'highest'`` in :func:`highest_for`.

    Returns:
        An :class:`ArchitecturesReport`.
    """
    start = time.perf_counter()
    audits = {n: audit_architecture(n, rounding=rounding) for n in ARCHITECTURES}
    effects = {
        n: [tf32_effects(n, seed=s, rounding=rounding) for s in range(seeds)] for n in ARCHITECTURES
    }
    logit_sites = {n: architecture_attribution(n, rounding=rounding) for n in ARCHITECTURES}
    gradient_sites = architecture_attribution(gradient_model, "gradients", rounding=rounding)
    flops = {n: forward_flops(n) for n in ARCHITECTURES}
    model, modules = remedy
    share = sum(flops[model].get(m, 0) for m in modules) / flops[model][""]
    fixed = {
        "model": model,
        "modules": modules,
        "before": highest_for(model, (), rounding=rounding),
        "after": highest_for(model, modules, rounding=rounding),
        "flop_share": share,
    }
    seconds = time.perf_counter() - start
    return ArchitecturesReport(
        audits, effects, logit_sites, gradient_sites, gradient_model, flops, fixed, seconds
    )
