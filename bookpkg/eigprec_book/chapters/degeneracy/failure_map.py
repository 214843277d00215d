"""Where does TF32 break REKLS/SOAP, and does the eigenbasis probe see it? The failure map.

Issue 37, item 1: the chapter's testbed (a 128×64 weight, lr 0.1, a ×1000 spike) is one
point. The map runs the training problem of :mod:`~eigprec_book.chapters.degeneracy.training`
(linear regression, the spike at ``spike_step``) over layers (shape and learning rate),
spike sizes and precision arms -- float64, float32 at ``'highest'``, and ``'high'`` under
TF32 emulation with each rounding rule -- and records, in the same run, three things that
are measured independently of each other:

* **harm** (training): the largest population loss in the ``window`` steps after the
  spike over the run's *own* loss just before the spike (its jump), beside that peak over the
  float64 arm's for the same layer, spike and seed (its ratio). A float64 run that had
  diverged or stalled by the spike (:data:`REFERENCE_TRAINED`) is no reference: the runs of
  that layer and seed are marked ``"reference failed"`` and left out of every count;
* **turn** (the angle probe): the largest top-``k`` principal angle of Q_L, over the
  ``turn_steps`` steps from the spike on, against Q_L just before the spike -- measured on
  the training run itself, so both columns describe one trajectory;
* **flags** of :class:`eigprec.SOAPMonitor`, checked after every step: whether it flagged
  anything before the spike, and from the spike on.

Each (layer, arm, seed) is trained once up to the spike and forked there for every spike
size (the steps before a spike do not depend on its size), as the transient experiment does.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec._args import check_int, check_real
from eigprec.precision import current_matmul_precision, matmul_precision
from eigprec.soap.monitor import SOAPMonitor
from eigprec.subspace import subspace_angle
from eigprec.tf32 import emulate_tf32
from eigprec_book.chapters.degeneracy.practice import _NormClip
from eigprec_book.chapters.degeneracy.training import (
    METHODS,
    REMEDIES,
    Regression,
    Setting,
    _Trainer,
)

__all__ = [
    "ARMS",
    "HARM_JUMP",
    "REFERENCE_TRAINED",
    "SPLIT_ARMS",
    "TURN_DEGREES",
    "FailureMap",
    "classify",
    "failure_map_experiment",
    "harm_counts",
    "reference_first",
]

#: The precision arms: name -> (matmul precision, optimizer dtype, TF32 rounding rule).
#: float64 is the reference every other arm's peak is divided by.
#:
#: Example:
#:     >>> list(ARMS)
#:     ['float64', 'highest', 'high rna', 'high rne']
ARMS: dict[str, tuple[str, torch.dtype, str | None]] = {
    "float64": ("highest", torch.float64, None),
    "highest": ("highest", torch.float32, None),
    "high rna": ("high", torch.float32, "rna"),
    "high rne": ("high", torch.float32, "rne"),
}

#: Arms off the default list: the factor updates at ``'highest'`` and the basis refresh at
#: ``'high'`` (emerging-optimizers 0.4.0's precision defaults), TF32 ties away: name ->
#: (factor-update precision, dtype, rounding, refresh precision).
SPLIT_ARMS: dict[str, tuple[str, torch.dtype, str, str]] = {
    "split rna": ("highest", torch.float32, "rna", "high"),
}

#: A run is *harmed* when its peak loss after the spike exceeds this multiple of its own loss
#: just before the spike.
HARM_JUMP = 2.0

#: The float64 run of a layer and seed is a reference only if its loss just before the spike
#: is below this fraction of its starting loss: it trained, if slowly (at lr 0.01 the
#: testbed's float64 REKLS is at 0.8 of its start by step 50); a run that diverged (above
#: its start) or stalled near it is no reference, and that seed's runs are marked
#: ``"reference failed"``.
REFERENCE_TRAINED = 0.9

#: Q_L has *turned* when its top-k subspace moved more than this many degrees.
TURN_DEGREES = 30.0


@dataclass
class FailureMap:
    """What :func:`failure_map_experiment` measured: one row per (layer, spike, arm, seed).

    Attributes:
        rows: Dicts with ``"shape"`` (m, n), ``"lr"``, ``"spike"`` (the factor), ``"arm"``
            (a key of :data:`ARMS`), ``"seed"``, ``"start"`` (the loss at the start),
            ``"before"`` (the loss just before the spike), ``"peak"`` (largest loss in the
            window after the spike), ``"jump"`` (``peak / before``), ``"ratio"``
            (``peak`` over the float64 arm's, same layer, spike and seed), ``"reference
            failed"`` (that float64 run did not train: see :data:`REFERENCE_TRAINED`),
            ``"turn"`` (degrees), ``"f64 turn"`` (the float64 arm's),
            ``"harmed"`` (``jump > HARM_JUMP``), ``"turned"`` (``turn > TURN_DEGREES``),
            ``"damaged"`` (harmed, or turned where the float64 arm did not),
            ``"flag before"`` (steps flagged before the spike), ``"flagged"`` (flagged at
            the spike step or later in the window), ``"first flag"`` (steps after the spike
            of the first flag, ``None`` if none), ``"small-side min ratio"`` (the smaller side's
            factor's smallest λ_min/λ_max over the window, as the monitor reports it).
        config: The arguments of the run.

    Example:
        >>> fm = failure_map_experiment(
        ...     [((8, 4), 0.1)], spike_scales=(1000.0,), arms=("float64", "high rna"),
        ...     seeds=(0,), spike_step=20, window=3, turn_steps=2, k=2,
        ... )
        >>> [(r["arm"], r["ratio"], r["reference failed"]) for r in fm.rows][0]
        ('float64', 1.0, False)
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[tuple[tuple[int, int], float, float, str]]:
        """The (shape, lr, spike, arm) cells, in the order they were run."""
        seen: dict[tuple[Any, ...], None] = {}
        for r in self.rows:
            seen.setdefault((r["shape"], r["lr"], r["spike"], r["arm"]), None)
        return list(seen)

    def cell(
        self, shape: tuple[int, int], lr: float, spike: float, arm: str
    ) -> list[dict[str, Any]]:
        """The rows of one cell, one per seed."""
        return [
            r
            for r in self.rows
            if (r["shape"], r["lr"], r["spike"], r["arm"]) == (tuple(shape), lr, spike, arm)
        ]

    def valid(self) -> list[dict[str, Any]]:
        """The rows whose float64 reference trained (``"reference failed"`` ones left out)."""
        return [r for r in self.rows if not r["reference failed"]]

    def summary(self) -> list[dict[str, Any]]:
        """One row per cell: counts over the seeds whose reference trained, the median and
        range of the jump and of the ratio to float64.

        Returns:
            Dicts with ``"shape"``, ``"lr"``, ``"spike"``, ``"arm"``, ``"seeds"`` (whose
            reference trained), ``"reference failed"`` (seeds left out),
            ``"harmed"``, ``"turned"``, ``"damaged"``, ``"flagged"`` (counts of seeds),
            ``"flag before"`` (seeds flagged before the spike), ``"false +"`` (flagged
            before the spike or after it, not damaged), ``"false -"`` (damaged, never
            flagged), ``"jump median"``, ``"jump min"``, ``"jump max"``, ``"ratio
            median"``, ``"ratio min"``, ``"ratio max"``, ``"turn median"`` (NaN where no
            seed is left).
        """
        out = []
        for shape, lr, spike, arm in self.cells():
            every = self.cell(shape, lr, spike, arm)
            rs = [r for r in every if not r["reference failed"]]
            ratios = [r["ratio"] for r in rs] or [math.nan]
            jumps = [r["jump"] for r in rs] or [math.nan]
            out.append(
                {
                    "shape": shape,
                    "lr": lr,
                    "spike": spike,
                    "arm": arm,
                    "seeds": len(rs),
                    "reference failed": len(every) - len(rs),
                    "harmed": sum(r["harmed"] for r in rs),
                    "turned": sum(r["turned"] for r in rs),
                    "damaged": sum(r["damaged"] for r in rs),
                    "flagged": sum(r["flagged"] for r in rs),
                    "flag before": sum(r["flag before"] > 0 for r in rs),
                    "false +": sum(_alarm(r) and not r["damaged"] for r in rs),
                    "false -": sum(r["damaged"] and not _alarm(r) for r in rs),
                    "jump median": statistics.median(jumps),
                    "jump min": min(jumps),
                    "jump max": max(jumps),
                    "ratio median": statistics.median(ratios),
                    "ratio min": min(ratios),
                    "ratio max": max(ratios),
                    "turn median": statistics.median([r["turn"] for r in rs] or [math.nan]),
                }
            )
        return out

    def detector_rates(
        self, rows: Sequence[dict[str, Any]] | None = None, against: str = "damaged"
    ) -> dict[str, Any]:
        """The monitor's error rates over ``rows`` (default: all), against a criterion.

        A run counts as flagged when the monitor flagged it before the spike, at it or
        later in the window. Runs whose reference failed are left out. ``against`` names the
        row field that says the run was hurt: ``"damaged"`` (harmed, or Q_L turned where
        float64's did not) or ``"harmed"`` (training alone).

        Returns:
            ``{"runs", "positive", "negative", "false +", "false -", "false + rate",
            "false - rate", "flag before"}``: ``positive`` runs are those hurt; a rate is
            NaN where its denominator (negative or positive runs) is 0.

        Raises:
            ValueError: if ``against`` is neither ``"damaged"`` nor ``"harmed"``.
        """
        if against not in ("damaged", "harmed"):
            raise ValueError(f"against must be 'damaged' or 'harmed', got {against!r}")
        rows = self.valid() if rows is None else [r for r in rows if not r["reference failed"]]
        pos = [r for r in rows if r[against]]
        neg = [r for r in rows if not r[against]]
        fp = sum(_alarm(r) for r in neg)
        fn = sum(not _alarm(r) for r in pos)
        return {
            "runs": len(rows),
            "positive": len(pos),
            "negative": len(neg),
            "false +": fp,
            "false -": fn,
            "false + rate": fp / len(neg) if neg else math.nan,
            "false - rate": fn / len(pos) if pos else math.nan,
            "flag before": sum(r["flag before"] > 0 for r in rows),
        }


def classify(rows: Sequence[dict[str, Any]], group: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Recorded rows with ``"jump"``, ``"harmed"`` and ``"reference failed"`` recomputed from
    their losses under this module's definitions (a record keeps the raw losses).

    Args:
        rows: Rows of :class:`FailureMap` (or of a record made from them).
        group: Further keys that tell runs apart beyond (shape, lr, spike, seed), e.g.
            ``("method", "kind", "cells", "seed set")`` for the map record.

    Returns:
        New dicts; each non-float64 row is matched with the float64 row of its group.

    Raises:
        KeyError: if a row has no float64 row of its group.

    Example:
        >>> f64 = {"shape": [4, 2], "lr": 0.1, "spike": 10.0, "seed": 0, "arm": "float64",
        ...        "start": 10.0, "before": 9.5, "peak": 9.0}
        >>> [r["reference failed"] for r in classify([f64, {**f64, "arm": "highest"}])]
        [True, True]
    """

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (tuple(r["shape"]), r["lr"], r["spike"], r["seed"], *(r[g] for g in group))

    refs = {key(r): r for r in rows if r["arm"] == "float64"}
    out = []
    for r in rows:
        ref = refs[key(r)]
        jump = r["peak"] / r["before"]
        out.append(
            {
                **r,
                "jump": jump,
                "harmed": jump > HARM_JUMP,
                "reference failed": not ref["before"] < REFERENCE_TRAINED * ref["start"],
            }
        )
    return out


def harm_counts(rows: Sequence[dict[str, Any]], arms: Sequence[str]) -> tuple[int, int]:
    """Harmed runs and all runs over summary rows (:meth:`FailureMap.summary`) of given arms.

    Example:
        >>> harm_counts([{"arm": "highest", "harmed": 2, "seeds": 5}], ["highest"])
        (2, 5)
    """
    chosen = [r for r in rows if r["arm"] in arms]
    return sum(r["harmed"] for r in chosen), sum(r["seeds"] for r in chosen)


def reference_first(arms: Iterable[str]) -> list[str]:
    """Arms checked against :data:`ARMS`, float64 (the reference of every ratio) first.

    Raises:
        ValueError: on an unknown arm, or no ``"float64"`` among them.

    Example:
        >>> reference_first(["high rna", "float64"])
        ['float64', 'high rna']
    """
    arms = list(arms)
    for arm in arms:
        if arm not in ARMS and arm not in SPLIT_ARMS:
            raise ValueError(f"arm must be one of {[*ARMS, *SPLIT_ARMS]}, got {arm!r}")
    if "float64" not in arms:
        raise ValueError("arms must include 'float64', the reference of every ratio")
    return ["float64"] + [a for a in arms if a != "float64"]


def _alarm(row: dict[str, Any]) -> bool:
    return bool(row["flagged"] or row["flag before"] > 0)


def _tf32(arm: str) -> Callable[[], contextlib.AbstractContextManager[None]]:
    rounding = ARMS[arm][2] if arm in ARMS else SPLIT_ARMS[arm][2]
    if rounding is None:
        return contextlib.nullcontext
    return lambda: emulate_tf32(rounding=rounding)


def _advance(
    run: _Trainer, scale: float, tf32: Callable[[], Any], clip: _NormClip | None = None
) -> float:
    # Only the optimizer's step is emulated: the gradient and loss are float64 already, and
    # the monitor's float64 checks would pay the emulator's dispatch for nothing.
    grad = run.problem.gradient(run.param.detach(), run.step, run.target) * scale
    if clip is not None:
        norm = float(grad.norm())
        limit = clip.step(norm)
        if limit is not None and norm > limit:
            grad = grad * (limit / norm)
    run.param.grad = grad.to(run.param.dtype)
    with tf32():
        run.opt.step()
    run.step += 1
    return run.problem.loss(run.param.detach(), run.target)


def _smaller_side(shape: tuple[int, int]) -> str:
    m, n = shape
    return "R" if m >= n else "L"


def failure_map_experiment(
    layers: Sequence[tuple[tuple[int, int], float]] = (((128, 64), 0.1),),
    *,
    spike_scales: Sequence[float] = (10.0, 1000.0, 1e4),
    arms: Sequence[str] = tuple(ARMS),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    method: str = "REKLS",
    remedy: str = "none",
    clip: float | None = None,
    spike_step: int = 50,
    window: int = 40,
    turn_steps: int = 5,
    k: int = 8,
    eps: float = 1e-8,
    batch: int = 256,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> FailureMap:
    """Train every layer, arm and seed to the spike, fork for every spike size, record
    harm, the angle probe and the monitor's flags.

    Args:
        layers: ``((m, n), lr)`` pairs: the weight's shape and the learning rate.
        spike_scales: Factors of the spike.
        arms: Keys of :data:`ARMS` or :data:`SPLIT_ARMS`; ``"float64"`` must be among them
            (the reference).
        seeds: Problem seeds (W*, batches; explicit ``torch.Generator`` seeds).
        method: One of :data:`~eigprec_book.chapters.degeneracy.training.METHODS`:
            ``"REKLS"``, ``"SOAP"`` (both KL-Shampoo) or ``"plain SOAP"``.
        remedy: A key of :data:`~eigprec_book.chapters.degeneracy.training.REMEDIES`, applied to
            every arm but float64, which stays the plain reference: the map of a remedy on
            the cells where the plain optimizer fails.
        clip: Clip every arm's gradient (the spike's included, float64's too) at this
            multiple of the running mean of past clipped gradient norms (an EMA with
            coefficient 0.9), as the chapter's clipping study does; ``None``: no clip.
        spike_step: 0-based step whose gradient is scaled, ≥ 1.
        window: Steps after the spike step over which the peak is taken, ≥ 1.
        turn_steps: Steps from the spike on over which the largest turn is taken, in
            [1, window + 1].
        k: Size of Q_L's leading subspace for the angle, ≤ the smaller dimension.
        eps: Adam's ε and the eigenvalue floor.
        batch: Samples per step.
        progress: Optional wrapper of the loop over (layer, seed) pairs.

    Returns:
        A :class:`FailureMap`.

    Raises:
        TypeError: on a count that is not an int, or a number that is not real.
        ValueError: on an unknown arm, method or remedy, no float64 arm, empty lists, or a size,
            step or window out of range (all before any training).

    Example:
        >>> fm = failure_map_experiment(
        ...     [((8, 4), 0.1)], spike_scales=(10.0,), arms=("float64", "highest"),
        ...     seeds=(0, 1), spike_step=20, window=3, turn_steps=2, k=2,
        ... )
        >>> len(fm.rows), fm.summary()[1]["seeds"]
        (4, 2)
    """
    layers = [(tuple(shape), lr) for shape, lr in layers]
    if not layers or not seeds or not spike_scales:
        raise ValueError("need at least one layer, one seed and one spike scale")
    for shape, lr in layers:
        if len(shape) != 2:
            raise ValueError(f"a layer's shape must be (m, n), got {shape}")
        for s in shape:
            check_int("a layer's size", s, low=1)
        check_real("lr", lr, low=0.0, low_open=True)
    arms = reference_first(arms)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if remedy not in REMEDIES:
        raise ValueError(f"remedy must be one of {sorted(REMEDIES)}, got {remedy!r}")
    scales = [check_real("spike scale", s, low=0.0, low_open=True) for s in spike_scales]
    seeds = [check_int("seed", s, low=0) for s in seeds]
    spike_step = check_int("spike_step", spike_step, low=1)
    window = check_int("window", window, low=1)
    turn_steps = check_int("turn_steps", turn_steps, low=1)
    if turn_steps > window + 1:
        raise ValueError(f"turn_steps must be ≤ window + 1 = {window + 1}, got {turn_steps}")
    k = check_int("k", k, low=1)
    if k > min(min(shape) for shape, _ in layers):
        raise ValueError(f"k must be ≤ every layer's smaller size, got {k}")
    eps = check_real("eps", eps, low=0.0, low_open=True)
    batch = check_int("batch", batch, low=1)
    if clip is not None:
        clip = check_real("clip", clip, low=0.0, low_open=True)

    fmap = FailureMap(
        config={
            "layers": layers,
            "spike_scales": tuple(scales),
            "arms": tuple(arms),
            "seeds": tuple(seeds),
            "method": method,
            "remedy": remedy,
            "clip": clip,
            "spike_step": spike_step,
            "window": window,
            "turn_steps": turn_steps,
            "k": k,
            "eps": eps,
            "batch": batch,
        }
    )
    pairs: Iterable[Any] = [(layer, seed) for layer in layers for seed in seeds]
    if progress is not None:
        pairs = progress(pairs)
    for (shape, lr), seed in pairs:
        problem = Regression(shape, batch, 1.0, seed)
        f64: dict[float, dict[str, Any]] = {}
        for arm in arms:
            prec, dtype, _, refresh = (*ARMS[arm], None) if arm in ARMS else SPLIT_ARMS[arm]
            setting = Setting(
                method,
                prec,
                qr_fp32_matmul_prec=refresh,
                dtype=dtype,
                remedy="none" if arm == "float64" else remedy,
            )
            tf32 = _tf32(arm)
            with matmul_precision(current_matmul_precision()):
                run = _Trainer(setting, problem, lr, eps)
                start = problem.loss(run.param.detach(), run.target)
                monitor = SOAPMonitor(run.opt, spectra="full_rank")
                before = 0
                norms = _NormClip(0.9, clip) if clip is not None else None
                for _ in range(spike_step):
                    last = _advance(run, 1.0, tf32, norms)
                    before += monitor.check()[0].flagged
                ref = run.state()["Q_L"].detach().double().clone()
                for scale in scales:
                    fork = run.fork()
                    fnorms = norms.fork(clip) if norms is not None else None
                    fmon = SOAPMonitor(fork.opt, spectra="full_rank")
                    # ‖ΔL‖/‖L‖ at the spike step is the change since the last pre-spike check.
                    fmon._previous = {fork.param: monitor._previous[run.param]}
                    peak, at, turn, first, rmin = -math.inf, 0, 0.0, None, math.inf
                    side = _smaller_side(shape)
                    # [show:monitor]
                    for j in range(window + 1):
                        loss = _advance(fork, scale if j == 0 else 1.0, tf32, fnorms)
                        if j > 0 and loss > peak:
                            peak, at = loss, j
                        if j < turn_steps:
                            q = fork.state()["Q_L"].detach().double()
                            turn = max(turn, subspace_angle(ref, q, k))
                        (sig,) = fmon.check()
                        rmin = min(rmin, getattr(sig, side).eig_min_ratio)
                        if first is None and sig.flagged:
                            first = j
                    # [/show:monitor]
                    row = {
                        "shape": shape,
                        "lr": lr,
                        "spike": scale,
                        "arm": arm,
                        "seed": seed,
                        "start": start,
                        "before": last,
                        "peak": peak,
                        "jump": peak / last,
                        "peak step": at,
                        "turn": turn,
                        "flag before": before,
                        "flagged": first is not None,
                        "first flag": first,
                        "small-side min ratio": rmin,
                    }
                    if arm == "float64":
                        f64[scale] = row
                    ref_row = f64[scale]
                    row["ratio"] = peak / ref_row["peak"]
                    row["reference failed"] = not (
                        ref_row["before"] < REFERENCE_TRAINED * ref_row["start"]
                    )
                    row["f64 turn"] = ref_row["turn"]
                    row["harmed"] = row["jump"] > HARM_JUMP
                    row["turned"] = turn > TURN_DEGREES
                    # Damage: training harmed, or the basis turned where float64's did not.
                    row["damaged"] = row["harmed"] or (
                        row["turned"] and ref_row["turn"] <= TURN_DEGREES
                    )
                    fmap.rows.append(row)
    return fmap
