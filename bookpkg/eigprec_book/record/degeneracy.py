"""``python -m eigprec_book.record degeneracy``: the spike experiment on a GPU with real TF32.

Two measurements on one CUDA device:

1. *Spike runs*: the degeneracy chapter's experiment (a 128×64 parameter, 200 steps, the
   gradient of step 50 multiplied by 1000) for SOAP and REKLS at ``'highest'`` and ``'high'``
   — on a GPU of compute capability ≥ 8.0 ``'high'`` is real TF32, not the emulator — and at
   ``'high'`` with each remedy (float64 approximate eigenvalues, a relative eigenvalue floor,
   3xTF32 factor updates). For each run: the angles of Q_L against step 49 (top-1 and the
   top-8 subspace) at the chapter's offsets, the largest angle after the spike, and the
   spectral facts the chapter's diagnosis rests on.
2. *Cost per step*: ``optimizer.step()`` of each configuration, timed with CUDA events after
   a warm-up, at the experiment's shape and at larger ones.

A GPU without TF32 records the ``'highest'`` runs and says that it skipped the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from eigprec.precision import current_matmul_precision, matmul_precision
from eigprec.runtime import describe_runtime
from eigprec.soap import SOAP
from eigprec.tf32 import has_real_tf32
from eigprec.timing import cuda_event_clock, perf_counter_clock, time_interleaved
from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_angle_table, spike_experiment
from eigprec_book.record._record import check_top_level, out_problem, write_record

__all__ = [
    "CONFIGS",
    "SCHEMA",
    "add_arguments",
    "record",
    "refusal",
    "run",
    "run_summary",
    "step_costs",
    "validate_record",
]

SCHEMA = "eigprec.bench.degeneracy/1"
#: label suffix -> spike_experiment / SOAP keywords; each runs for SOAP and REKLS.
CONFIGS: dict[str, dict[str, Any]] = {
    "highest": {"fp32_matmul_prec": "highest"},
    "high": {"fp32_matmul_prec": "high"},
    "high + float64 eigenvalues": {"fp32_matmul_prec": "high", "eigval_dtype": torch.float64},
    "high + relative eps": {"fp32_matmul_prec": "high", "eps_mode": "relative"},
    "high + 3xTF32 factor updates": {"fp32_matmul_prec": "high", "factor_matmul": "3xtf32"},
}
METHODS = ("SOAP", "REKLS")
SHAPES = ((128, 64), (1024, 512), (2048, 2048))


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _finite(x: float) -> float | None:
    # Strict JSON: an infinite or NaN diagnostic becomes null.
    return float(x) if math.isfinite(x) else None


def run_summary(run: Any, ref_step: int, offsets: Sequence[int], k: int = 8) -> dict[str, Any]:
    """The numbers of one spike run that the chapter reads, JSON-ready.

    Args:
        run: a :class:`eigprec.SpikeRun`.
        ref_step: step of the reference basis (the last before the spike).
        offsets: offsets for the angle table.
        k: size of the leading subspace.

    Returns:
        ``label``, ``config``, ``tf32``, ``ms_per_step``, ``angles`` (the two rows of
        :func:`eigprec.spike_angle_table`), ``max_top1_after``/``max_topk_after`` (from the
        spike step on), ``max_before`` (both angles, steps before the spike), ``clamped_L``
        and ``clamped_R`` at every step, and ``R_after_spike`` (the stored R's largest and
        smallest eigenvalue one step after the reference).

    Example:
        >>> from eigprec_book.chapters.degeneracy.spike import SpikeConfig, spike_experiment
        >>> r = spike_experiment(SpikeConfig("REKLS", shape=(8, 4), steps=6, spike_step=3))
        >>> run_summary(r, ref_step=2, offsets=(1,), k=2)["tf32"]
        'none'
    """
    top1 = run.top1_angles(ref_step)
    topk = run.subspace_angles(ref_step, k)
    table = spike_angle_table([run], ref_step=ref_step, offsets=offsets, k=k)
    spike = ref_step + 1
    return {
        "label": run.label,
        "config": _jsonable(dataclasses.asdict(run.config)),
        "tf32": run.tf32,
        "ms_per_step": 1e3 * run.seconds / run.steps,
        "angles": [{key: _jsonable(v) for key, v in row.items()} for row in table],
        "max_top1_after": float(top1[spike:].max()),
        "max_topk_after": float(topk[spike:].max()),
        "max_before": float(max(top1[:spike].max(), topk[:spike].max())),
        # The chapter's headline: one step after the spike step (step 51 for a spike at 50).
        "top1_one_step_after_spike": float(top1[spike + 1]) if spike + 1 < run.steps else None,
        "clamped_L": [int(c) for c in run.clamped_L],
        "clamped_R": [int(c) for c in run.clamped_R],
        "R_after_spike": {
            "max": _finite(float(run.eig_R[spike, 0])),
            "min": _finite(float(run.eig_R[spike, -1])),
        },
    }


def _optimizer(method: str, shape: tuple[int, int], device: str, kw: dict[str, Any]):
    p = torch.nn.Parameter(torch.zeros(*shape, device=device))
    g = torch.Generator().manual_seed(1)
    p.grad = torch.randn(*shape, generator=g).to(device)
    opt = SOAP(
        [p],
        lr=1e-3,
        weight_decay=0.0,
        use_kl_shampoo=True,
        use_eigh=method == "REKLS",
        qr_fp32_matmul_prec=kw["fp32_matmul_prec"],
        **kw,
    )
    return opt.step


def step_costs(
    shapes: Sequence[tuple[int, int]],
    configs: dict[str, dict[str, Any]],
    *,
    device: str = "cuda",
    max_repeats: int = 20,
    budget_s: float = 0.5,
    deadline: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Milliseconds per ``optimizer.step()`` of every method and configuration, per shape.

    Args:
        shapes: parameter shapes (m, n).
        configs: label → keywords, as :data:`CONFIGS`.
        device: ``"cuda"`` (CUDA events) or ``"cpu"`` (wall clock; for tests).
        max_repeats: most timed steps per candidate (after two warm-up steps, the first of
            which runs a full ``eigh``).
        budget_s: timed seconds per candidate.
        deadline: ``time.monotonic()`` after which no new shape starts.

    Returns:
        ``(rows, skipped)``: per shape and method, ``ms_per_step`` by configuration and the
        ratio to ``'high'`` and to ``'highest'``; and the shapes left out for time.
    """
    clock: Callable[[Callable[[], object]], float] = (
        cuda_event_clock if device == "cuda" else perf_counter_clock
    )
    rows, skipped = [], []
    with matmul_precision(current_matmul_precision()):  # leave the global setting as found
        for shape in shapes:
            if deadline is not None and time.monotonic() > deadline:
                skipped.append({"what": f"step cost at {shape[0]}x{shape[1]}", "why": "time"})
                continue
            for method in METHODS:
                fns = {
                    label: _optimizer(method, shape, device, dict(kw))
                    for label, kw in configs.items()
                }
                t = time_interleaved(
                    fns, clock=clock, warmup=2, max_repeats=max_repeats, budget_s=budget_s
                )
                ms = {label: 1e3 * v["seconds"] for label, v in t.items()}
                row: dict[str, Any] = {"shape": list(shape), "method": method, "ms_per_step": ms}
                for base in ("high", "highest"):
                    if base in ms:
                        row[f"vs_{base}"] = {label: v / ms[base] for label, v in ms.items()}
                rows.append(row)
                del fns
                if device == "cuda":
                    torch.cuda.empty_cache()
    return rows, skipped


def record(
    *,
    device: str = "cuda",
    shape: tuple[int, int] = (128, 64),
    steps: int = 200,
    spike_step: int = 50,
    offsets: Sequence[int] = (1, 2, 5, 10),
    cost_shapes: Sequence[tuple[int, int]] = SHAPES,
    budget_s: float = 130.0,
) -> dict[str, Any]:
    """The spike runs and the per-step costs on ``device``, as one record.

    Args:
        device: ``"cuda"``; ``"cpu"`` (TF32 emulated) only to test the record's layout.
        shape: the spike experiment's parameter shape.
        steps: optimizer steps per run.
        spike_step: 0-based step whose gradient is scaled by 1000.
        offsets: angle-table offsets from ``spike_step - 1``.
        cost_shapes: shapes for the cost per step.
        budget_s: seconds for everything; runs and shapes beyond it are listed as skipped.

    Returns:
        The record (see :func:`validate_record`).
    """
    start = time.monotonic()
    deadline = start + budget_s
    tf32 = has_real_tf32(device)
    configs = dict(CONFIGS)
    skipped: list[dict[str, str]] = []
    if device == "cuda" and not tf32:
        configs = {"highest": CONFIGS["highest"]}
        skipped.append(
            {"what": "every 'high' run", "why": "this GPU has no TF32 (compute capability < 8.0)"}
        )
    ref_step = spike_step - 1
    runs = []
    for method in METHODS:
        for label, kw in configs.items():
            if time.monotonic() > deadline:
                skipped.append({"what": f"{method} {label}", "why": "time budget spent"})
                continue
            config = SpikeConfig(
                method,  # type: ignore[arg-type]
                device=device,
                shape=shape,
                steps=steps,
                spike_step=spike_step,
                **kw,
            )
            r = spike_experiment(config, label=f"{method} {label}")
            runs.append(run_summary(r, ref_step, offsets))
    costs, later = step_costs(cost_shapes, configs, device=device, deadline=deadline)
    skipped += later
    spike_angles: dict[str, dict[str, float | None]] = {}
    for r in runs:
        method, _, label = r["label"].partition(" ")
        if label in ("high", "highest"):
            spike_angles.setdefault(method, {})[label] = r["top1_one_step_after_spike"]
    out = {
        "schema": SCHEMA,
        "provenance": describe_runtime().as_record(),
        "settings": {
            "shape": list(shape),
            "steps": steps,
            "spike_step": spike_step,
            "spike_scale": 1000.0,
            "ref_step": ref_step,
            "offsets": list(offsets),
            "tf32_hardware": tf32,
            "timer": "cuda events" if device == "cuda" else "perf_counter",
        },
        "spike_top1_angle_one_step_after": spike_angles,
        "runs": runs,
        "step_cost": costs,
        "skipped": skipped,
        "seconds": round(time.monotonic() - start, 1),
    }
    validate_record(out)
    return out


_TOP = {
    "schema": str,
    "provenance": dict,
    "settings": dict,
    "spike_top1_angle_one_step_after": dict,
    "runs": list,
    "step_cost": list,
    "skipped": list,
}
_RUN_KEYS = ("label", "config", "tf32", "ms_per_step", "angles", "max_top1_after", "max_before")


def validate_record(record: Any) -> None:
    """Check that ``record`` has the structure the degeneracy chapter reads.

    Args:
        record: a decoded ``degeneracy`` recording.

    Raises:
        ValueError: naming the first missing or wrong field.

    Example:
        >>> validate_record({"schema": SCHEMA})
        Traceback (most recent call last):
        ...
        ValueError: degeneracy record: missing 'provenance'
    """
    check_top_level(record, "degeneracy", SCHEMA, _TOP)
    for run in record["runs"]:
        for key in _RUN_KEYS:
            if key not in run:
                raise ValueError(f"degeneracy record: run {run.get('label')!r} lacks {key!r}")
        if run["tf32"] not in ("none", "hardware", "emulated"):
            raise ValueError(f"degeneracy record: run {run['label']!r} has tf32={run['tf32']!r}")
    if not record["runs"] and not record["skipped"]:
        raise ValueError("degeneracy record: no runs and nothing said about why")
    for row in record["step_cost"]:
        if not row.get("ms_per_step") or any(
            not (isinstance(v, float) and v > 0) for v in row["ms_per_step"].values()
        ):
            raise ValueError(f"degeneracy record: step_cost row {row.get('shape')} lacks times")
    for item in record["skipped"]:
        if not (isinstance(item, dict) and item.get("what") and item.get("why")):
            raise ValueError("degeneracy record: every skipped entry needs 'what' and 'why'")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the ``degeneracy`` subparser.
    """
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per run")
    parser.add_argument("--budget", type=float, default=130.0, help="seconds for everything")


def refusal() -> str | None:
    """Why this machine cannot record, or None when it can."""
    if not torch.cuda.is_available():
        return (
            "eigprec_book.record degeneracy runs the spike experiment on a CUDA GPU (real TF32 at "
            "'high'); torch.cuda.is_available() is False here, so nothing was run or written."
        )
    return None


def run(args: argparse.Namespace) -> int:
    """Record and write, or refuse with exit status 2.

    Args:
        args: parsed options (``out``, ``steps``, ``budget``).

    Returns:
        0 when the record was written, 2 when refused.
    """
    if args.steps < 52 or not args.budget > 0:
        print(
            "eigprec_book.record degeneracy: --steps must be >= 52 and --budget > 0",
            file=sys.stderr,
        )
        return 2
    problem = out_problem(args.out)
    if problem is not None:
        print(f"eigprec_book.record degeneracy: {problem}; nothing was run", file=sys.stderr)
        return 2
    reason = refusal()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    rec = record(steps=args.steps, budget_s=args.budget)
    path = write_record(rec, args.out)
    print(f"{rec['provenance']['gpu']}: top-1 angle of Q_L one step after the spike (degrees)")
    for method, by_prec in rec["spike_top1_angle_one_step_after"].items():
        print(f"  {method}: " + ", ".join(f"{p} {a}" for p, a in by_prec.items()))
    for row in rec["step_cost"]:
        m, n = row["shape"]
        costs = ", ".join(f"{k} {v:.3g}" for k, v in row["ms_per_step"].items())
        print(f"  {row['method']} {m}x{n} ms/step: {costs}")
    for item in rec["skipped"]:
        print(f"  skipped {item['what']}: {item['why']}")
    print(f"wrote {path}")
    return 0
