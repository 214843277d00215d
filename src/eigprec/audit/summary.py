"""What ``python -m eigprec.audit`` prints and writes when the script ends (private).

The header (how the script ended), the verdict and TF32 lines, the table, the notes (a stop
the script caught, ``--steps`` that never fired, ``torch.compile``, fused kernels, sampling),
and the same in the ``--markdown`` and ``--json`` files, each written on its own
(:mod:`eigprec.audit.writes`): a file that cannot be written is named, the rest goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from eigprec.audit.report import AuditReport
from eigprec.audit.stops import Progress
from eigprec.audit.unfuse import UNFUSED_OPS
from eigprec.audit.verdict import site_verdict
from eigprec.audit.writes import write_text
from eigprec.tf32.gpus import GPUProfile, profile

__all__ = ["Run", "kept_in_float32", "write_reports"]

_TIES = {"rna": "ties away from zero", "rne": "ties to even", "rz": "truncation"}


@dataclass
class Run:
    """How the script's run went: what the report's header and the JSON file say."""

    target: str
    status: int = 0
    stopped: bool = False  # the audit's stop ended the script (not caught by it)
    error: str | None = None  # the exception that ended the script, "Type: message"
    exit_request: BaseException | None = field(default=None, repr=False)
    compiled: list[str] = field(default_factory=list)  # torch.compile calls, file:line


def _header(options: argparse.Namespace, run: Run, progress: Progress, n: int) -> str:
    ended = f"{progress.steps} optimizer steps"
    if run.stopped and progress.stop_reason == "--steps":
        ended += (
            f"; stopped at the start of iteration {progress.iterations + 1} "
            f"(--steps {options.steps}: {_plural(options.steps, 'whole iteration')} of "
            f"{progress.first})"
        )
    elif run.stopped:
        ended += f"; stopped by --max-seconds {options.max_seconds:g}" + (
            f" at the start of iteration {progress.iterations + 1}"
            if progress.deadline_passed and progress.first is not None
            else ""
        )
    if run.error == "SIGTERM":
        ended += "; ended by SIGTERM (exit status 143)"
    elif run.error is not None:
        ended += f"; the script raised {run.error.split(':')[0]} (exit status {run.status})"
    elif run.exit_request is not None:
        ended += f"; the script exited with status {run.status}"
    return f"TF32 audit of {run.target}: {n} product sites, {ended}"


def kept_in_float32(model: GPUProfile) -> str:
    """The products a GPU's record kept in float32, in words (read from its profile).

    Example:
        >>> kept_in_float32(profile("hopper"))
        'bmm/baddbmm up to 16, conv1d/conv2d/conv_transpose2d up to 16 channels, one-row mm'
    """
    parts = [f"bmm/baddbmm up to {model.batched_up_to}"] if model.batched_up_to else []
    convs = [
        (limit, f"{kind}{dims}d")
        for kind, limits in (("conv", model.conv_up_to), ("conv_transpose", model.transposed_up_to))
        for dims, limit in sorted(limits.items())
    ]
    for limit in sorted({limit for limit, _ in convs}):
        names = "/".join(name for at, name in convs if at == limit)
        parts.append(f"{names} up to {limit} channels")
    if model.one_row:
        parts.append("one-row mm")
    return ", ".join(parts) or "none on record"


def _gpu_line(options: argparse.Namespace) -> str:
    model = profile(options.gpu)
    rule = "its rule" if options.rounding == model.rounding else "--rounding"
    kept = kept_in_float32(model)
    left_out = (
        "it kept no product in float32 on record: every product is audited"
        if kept == "none on record"
        else f"the products it kept in float32 ({kept}) are left out"
    )
    return (
        f"GPU modelled: {model.name} (--gpu): operands rounded {options.rounding} "
        f"({_TIES[options.rounding]}, {rule}); {left_out}"
    )


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _tf32_line(report: AuditReport) -> str:
    records = report.records
    calls = sum(r.calls for r in records)
    on = sum(r.tf32_calls for r in records)
    if on == 0:
        return (
            f"TF32: the script never turns it on (0 of {calls} calls): a TF32 GPU would run "
            "these products in float32; the errors say what turning TF32 on would do"
        )
    if on == calls:
        return f"TF32: the script turns it on for all {calls} calls: these are its errors"
    return f"TF32: the script turns it on for {on} of {calls} calls (column 'TF32 on')"


def _notes(options: argparse.Namespace, run: Run, progress: Progress, report: AuditReport) -> list:
    notes = []
    caught = progress.stops_raised - int(run.stopped)
    if caught > 0:
        notes.append(
            f"the script caught the audit's stop ({progress.stop_reason}) {caught} time(s) and "
            "went on (a bare `except:` or `except BaseException`?); each later step was "
            "refused"
        )
    if options.steps is not None and progress.first is None and run.error is None:
        notes.append(
            f"--steps {options.steps} never fired: no torch.optim optimizer stepped (weights "
            "updated by hand?); --max-seconds stops any script"
        )
    records = report.records
    if options.emulate and records and not any(r.tf32_calls for r in records):
        notes.append(
            "--emulate changed nothing: the script never asks for TF32; add --precision high "
            "to run it in TF32"
        )
    if run.compiled:
        places = ", ".join(dict.fromkeys(run.compiled))
        notes.append(
            f"torch.compile was called {len(run.compiled)} time(s) ({places}); under the audit "
            "Dynamo compiles nothing, so that code ran eagerly and its products are audited "
            "as eager ones (a plain run compiles them)"
        )
    fused = sum(calls for name, (calls, _) in report.not_covered.items() if name in UNFUSED_OPS)
    if fused and not options.unfuse:
        notes.append(
            f"{fused} calls of fused kernels ran out of the audit's sight (listed above); "
            "--unfuse runs them as products it can see"
        )
    unmeasured = sum(r.calls - (r.measured_calls or 0) for r in records)
    if unmeasured:
        notes.append(
            f"{unmeasured} of {sum(r.calls for r in records)} calls were counted, not measured "
            f"(--sample {options.sample}: each site's first {options.sample} calls, then one "
            f"in {options.sample}; --sample 1 measures every call)"
        )
    if options.unfuse:
        notes.append(
            "--unfuse ran fused attention on its math kernel and LSTMs as native loops: the "
            "run's results may differ from a plain run's in the last bits"
        )
    return notes


def write_reports(
    options: argparse.Namespace,
    run: Run,
    progress: Progress,
    report: AuditReport,
    skip: tuple[str, ...],
) -> None:
    """Print the report to stderr, then write each of --markdown and --json on its own.

    A file that cannot be written is named on stderr and the rest goes on; the exit status
    stays the script's.
    """
    summary = [_header(options, run, progress, len(report)), report.verdict()]
    if options.gpu is not None:
        summary.append(_gpu_line(options))
    if len(report):
        summary.append(_tf32_line(report))
    notes = [f"Note: {note}." for note in _notes(options, run, progress, report)]
    hidden = len(report) - options.top
    more = [f"({hidden} more sites: --top or --json to see them)"] if hidden > 0 else []
    text = report.to_text(limit=options.top)
    with contextlib.suppress(OSError, ValueError):
        print("\n" + "\n".join([*summary, text, *more, *notes]), file=sys.stderr, flush=True)
    writers = {
        "markdown": lambda: (
            "\n\n".join(
                [
                    f"## TF32 audit of `{os.path.basename(run.target)}`",
                    *summary,
                    report.to_markdown(limit=options.top),
                    *more,
                    *notes,
                ]
            )
            + "\n"
        ),
        "json": lambda: (
            json.dumps(
                _as_json(options, run, progress, report, summary, notes, skip),
                indent=1,
                allow_nan=False,
            )
            + "\n"
        ),
    }
    for flag, render in writers.items():
        path = getattr(options, flag)
        if path is None:
            continue
        try:
            write_text(path, render())
        except OSError as error:
            with contextlib.suppress(OSError, ValueError):
                print(
                    f"python -m eigprec.audit: could not write --{flag} {path}: {error}",
                    file=sys.stderr,
                    flush=True,
                )


def _finite(x: float | None) -> float | str | None:
    # JSON has no inf/NaN; they are kept as the strings "inf" and "nan".
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _as_json(
    options: argparse.Namespace,
    run: Run,
    progress: Progress,
    report: AuditReport,
    summary: list[str],
    notes: list[str],
    skip: tuple[str, ...],
) -> dict[str, Any]:
    return {
        "target": run.target,
        "module": options.module,
        "args": list(options.args),
        "options": {
            "steps": options.steps,
            "max_seconds": options.max_seconds,
            "precision": options.precision,
            "emulate": options.emulate,
            "unfuse": options.unfuse,
            "rounding": options.rounding,
            "gpu": options.gpu,
            "sample": options.sample,
            "depth": options.depth,
            "skip": list(skip),
        },
        "summary": summary,
        "notes": notes,
        "optimizer_steps": progress.steps,
        "iterations": progress.iterations,
        "first_optimizer": progress.first,
        "stopped_by": progress.stop_reason if run.stopped else None,
        "stopped_by_steps": run.stopped and progress.stop_reason == "--steps",
        "stops_caught_by_script": progress.stops_raised - int(run.stopped),
        "exit_status": run.status,
        "exception": run.error,
        "torch_compile_calls": run.compiled,
        "records": [
            {
                "site": r.site,
                "frames": [list(frame) for frame in r.frames],
                "module": r.module,
                "op": r.op,
                "phase": r.phase,
                "shapes": [list(s) for s in r.shapes],
                "calls": r.calls,
                "measured_calls": r.measured_calls,
                "tf32_calls": r.tf32_calls,
                "verdict": site_verdict(r, options.rounding),
                "norm_error": _finite(r.norm_error),
                "entry_error": _finite(r.entry_error),
                "scaled_entry_error": _finite(r.scaled_entry_error),
                "fp32_norm_error": _finite(r.fp32_norm_error),
                "float64_calls": r.float64_calls,
                "tf32_nonfinite": r.tf32_nonfinite,
            }
            for r in report.records
        ],
        "not_covered": {
            name: {"calls": calls, "tf32_gpu": note}
            for name, (calls, note) in report.not_covered.items()
        },
    }
