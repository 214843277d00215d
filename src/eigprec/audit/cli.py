"""``python -m eigprec.audit``: audit the float32 products of an unmodified script.

The command runs a script (or ``-m module``) as ``python`` would -- same ``sys.argv``,
``__name__ == "__main__"``, ``sys.path[0]``, output and exit status -- inside
:func:`eigprec.audit.tf32_audit`, and prints the report to stderr when the script ends,
however it ends. :func:`main` is the whole command; ``eigprec/audit/__main__.py`` calls it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eigprec import precision as _precision
from eigprec.audit.report import AuditReport, tf32_audit
from eigprec.audit.script import (
    compile_calls,
    run_target,
    script_traceback,
    warnings_at_user_lines,
)
from eigprec.audit.stops import Progress, StopRun, Terminated, watch
from eigprec.audit.unfuse import UNFUSED_OPS, unfused
from eigprec.audit.verdict import site_verdict
from eigprec.audit.writes import write_text
from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, emulate_tf32
from eigprec.tf32.rounding import ROUNDING_ENV, check_rounding

__all__ = ["DEFAULT_SKIP", "main"]

#: Modules whose frames never name a call site: torch, eigprec, and runpy (which runs the
#: script); ``--skip`` adds to them.
DEFAULT_SKIP = ("torch", "eigprec", "runpy")

_DESCRIPTION = """\
Run a Python script (or -m module) unmodified, as `python script.py args` would, and
report which of its float32 matrix products and convolutions TF32 would hurt.

What is measured: every float32 GEMM (@, mm, bmm, addmm, matmul, einsum, linear...) and
convolution the script runs, forward and backward, is also run on the side with its
operands rounded to TF32 and against a reference (float64 up to 2**18 multiply-adds,
float32 beyond). Each call site of the script's code (file:line, nn.Module path, operator,
shapes; a backward product names its autograd node and whose gradient it computes) gets
its call count, whether the script's settings turn TF32 on there, a verdict, and its worst
TF32 error: norm-wise, at the worst entry against its row·column scale, and at the worst
entry against its own size. The script's own results are untouched (bit for bit) unless
--emulate (or --precision medium, which lets oneDNN on the CPU use bf16) or --unfuse is
given. The report goes to stderr when the script ends: normally (its status), by an
exception (its traceback, status 1), by sys.exit (its status), by Ctrl-C (130), by SIGTERM
(143), or by --steps or --max-seconds (0). --json and --markdown files are written then,
each on its own and all at once; one that cannot be written is named, and the others and
the exit status are kept.

How to read it: ordinary TF32 rounding gives a norm-wise error of about 2**-12 (2.4e-4),
and never more than 2**-10 (9.8e-4; 2**-9 for --rounding rz) for a product whose terms do
not cancel: TF32 keeps 11 significant bits of each operand. The verdict column says, per
site:
  ordinary            within that bound: nothing to fix; the order of such rows is noise.
  cancellation >=Nx   above it: the result is at least N times smaller than its terms, and
                      TF32's error is that much larger relative to it. Fix: run that site
                      at full float32 -- `with eigprec.matmul_precision("highest"):` around
                      it -- or use 3xTF32 (eigprec.matmul_3xtf32), float32 accuracy on
                      tensor cores.
  inf/NaN             TF32 overflowed where float32 did not (operands within 2**-11 of
                      float32's largest value): the same fix, or rescale.
The row·col column is each entry's error against the largest value its row and column
could give: about 2**-12 wherever TF32 rounded as usual. The entry column is the worst
entry's error against its own size: large for entries near zero, which matters only where
small entries do (residuals, small eigenvalues). "TF32 on" says whether the script's own
settings ask for TF32 there (torch.backends.cuda.matmul.fp32_precision,
set_float32_matmul_precision): where they do not, a TF32 GPU runs the product in float32,
and the errors say what turning TF32 on would do. Fused kernels (attention, oneDNN's LSTM)
multiply out of the audit's sight: they are counted as not covered, and --unfuse runs
them as products it can see.

What it costs: each audited product is computed again with TF32 operands (and, up to
2**18 multiply-adds, in float64) and compared entry by entry; with PyTorch's dispatch
modes in the way of every operator, a training iteration of a small GPT (4 blocks of
width 128) took 2x as long audited on one CPU thread (benchmarks/bench_audit_iteration.py).
Memory: while a product is measured the audit holds a few more tensors of its size,
released right after; between products, one record per call site and the call sites of
the last 4,096 forward products (to attribute their backward products).
"""

_EPILOG = """\
examples:
  python -m eigprec.audit train.py --epochs 1
  python -m eigprec.audit --steps 3 --json audit.json -m mypackage.train --lr 0.1
  python -m eigprec.audit --max-seconds 60 --unfuse --markdown audit.md train.py
  python -m eigprec.audit --emulate --precision high train.py -- --arg-of-the-script
"""


@dataclass
class _Run:
    """How the script's run went: what the report's header and the JSON file say."""

    target: str
    status: int = 0
    stopped: bool = False  # the audit's stop ended the script (not caught by it)
    error: str | None = None  # the exception that ended the script, "Type: message"
    exit_request: BaseException | None = field(default=None, repr=False)
    compiled: list[str] = field(default_factory=list)  # torch.compile calls, file:line
    write_failed: bool = False


def _positive(name: str, kind: Callable[[str], Any] = int) -> Callable[[str], Any]:
    noun = "an integer" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {noun}, got {text!r}") from None
        if kind is int and value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be a positive number, got {text}")
        return value

    return parse


def _module_name(text: str) -> str:
    if not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"--skip needs a module name such as 'numpy', got {text!r}"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m eigprec.audit",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] (script.py | -m module) [args ...]",
        allow_abbrev=False,  # (the script's arguments start at the first non-option)
    )
    parser.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="run a module as `python -m module` would (the target is a module name)",
    )
    parser.add_argument(
        "--steps",
        type=_positive("--steps"),
        metavar="N",
        help="run N whole training iterations, counted in steps of the first torch.optim "
        "optimizer that steps, then end the script at the start of the next (status 0)",
    )
    parser.add_argument(
        "--max-seconds",
        type=_positive("--max-seconds", float),
        metavar="S",
        help="end the script after S seconds (status 0): at the start of the next iteration "
        "if an optimizer steps (within min(S, 60) more seconds), else wherever it is",
    )
    parser.add_argument(
        "--precision",
        choices=("high", "medium"),
        help="float32 matmul precision for the run (torch.set_float32_matmul_precision); "
        "default: whatever the script sets",
    )
    parser.add_argument(
        "--emulate",
        action="store_true",
        help="compute the run itself in TF32 wherever the settings ask for it (eigprec."
        "emulate_tf32), as a TF32 GPU would; a script that never asks for TF32 also needs "
        "--precision high; without it the script's results are float32",
    )
    parser.add_argument(
        "--unfuse",
        action="store_true",
        help="run fused attention on its math kernel (bmm's), the transformer fast path "
        "off and LSTMs as ATen's native loop, so that their products are audited too "
        "(results may then differ from a plain run in the last bits)",
    )
    parser.add_argument(
        "--rounding",
        choices=ROUNDINGS,
        default=None,
        help="TF32 rounding of the operands: rna (Ampere cuBLAS), rne (ties to even, as an "
        "H100 recorded for the book), rz (truncation); default: $EIGPREC_TF32_ROUNDING, "
        "else rna",
    )
    parser.add_argument(
        "--sample",
        type=_positive("--sample"),
        default=8,
        metavar="K",
        help="measure each site's first K calls, then every K-th (default 8): a long run "
        "pays the side products on one step in K; 1 measures every call",
    )
    parser.add_argument("--json", metavar="PATH", help="write every record as JSON to PATH")
    parser.add_argument(
        "--markdown", metavar="PATH", help="write the report as a Markdown table to PATH"
    )
    parser.add_argument(
        "--top",
        type=_positive("--top"),
        default=20,
        metavar="K",
        help="show the K worst sites in the printed and Markdown reports (default 20)",
    )
    parser.add_argument(
        "--depth",
        type=_positive("--depth"),
        default=1,
        help="how many of the script's frames name a site (2 separates a helper's callers)",
    )
    parser.add_argument(
        "--skip",
        type=_module_name,
        action="append",
        default=[],
        metavar="MODULE",
        help="frames of MODULE (and its submodules) are not the script's code when naming "
        f"a site; repeatable; always skipped: {', '.join(DEFAULT_SKIP)}",
    )
    parser.add_argument("target", metavar="script.py | module", help="what to run")
    parser.add_argument(
        "args",
        nargs="*",
        default=[],
        help="the script's own arguments, passed as they are (-- included)",
    )
    return parser


def _split(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    # (the audit's options, [target, *the script's arguments]): the target is the first
    # argument that is neither an option nor an option's value ("--" ends the options,
    # "-m" takes the module name). The script's arguments are passed on exactly as typed,
    # a leading "--" included, which argparse would drop.
    valued = {
        flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings
    }
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], argv[i + 1 :]
        if token == "-m":
            return argv[: i + 1], argv[i + 1 :]
        if not token.startswith("-") or token == "-":
            return argv[:i], argv[i:]
        i += 2 if token in valued else 1
    return argv, []


def _script_file(options: argparse.Namespace) -> str | None:
    # The file the target runs from, resolved (the -m module's source), if there is one.
    if options.module:
        found = importlib.util.find_spec(options.target)
        origin = getattr(found, "origin", None)
        return os.path.realpath(origin) if origin and os.path.exists(origin) else None
    return os.path.realpath(options.target)


def _check(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    # Every problem is named before the script starts (a long training run must not fail
    # at its end for want of a folder to write the report into).
    if options.module:
        try:
            found = importlib.util.find_spec(options.target)
        except (ImportError, ValueError) as error:
            parser.error(f"-m {options.target}: {error}")
        if found is None:
            parser.error(f"-m {options.target}: no module of that name")
    elif not os.path.exists(options.target):
        parser.error(f"can't open file {options.target!r}: no such file or directory")
    try:
        options.rounding = check_rounding(options.rounding)
    except ValueError as error:
        parser.error(f"{ROUNDING_ENV}: {error}")
    script = _script_file(options)
    taken: dict[str, str] = {}
    for flag in ("json", "markdown"):
        path = getattr(options, flag)
        if path is None:
            continue
        # Fixed now: the script may change the working folder.
        full = os.path.abspath(path)
        if os.path.isdir(full) or not os.path.isdir(os.path.dirname(full)):
            parser.error(f"--{flag} {path}: not a file in an existing folder")
        real = os.path.realpath(full)
        if real == script:
            parser.error(f"--{flag} {path}: that is the script itself")
        if real in taken:
            parser.error(f"--{flag} {path}: the same file as --{taken[real]}")
        taken[real] = flag
        setattr(options, flag, full)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``python -m eigprec.audit [options] script.py [args]``.

    Args:
        argv: the command's arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: the script's (0 when ``--steps`` or ``--max-seconds`` ended it, 1
        when it raised, 130 after Ctrl-C, 143 after SIGTERM).

    Raises:
        SystemExit: the script's own ``sys.exit`` (after the report), or status 2 for bad
            options (named before the script starts).

    Example:
        >>> main(["--steps", "0", "train.py"])  # refused (on stderr) before anything runs
        Traceback (most recent call last):
        ...
        SystemExit: 2
    """
    parser = _parser()
    head, tail = _split(parser, list(sys.argv[1:] if argv is None else argv))
    options = parser.parse_args([*head, *(["--", tail[0]] if tail else [])])
    options.args = tail[1:]
    _check(parser, options)
    run = _Run(options.target)
    progress = Progress(options.steps, options.max_seconds)
    skip = DEFAULT_SKIP + tuple(options.skip)
    saved = sys.argv[:], sys.path[:]
    # (the script's own precision settings are undone after it, for a caller of main() in
    # the same process: a test, a notebook)
    precision = _precision._snapshot()
    with watch(progress):
        try:
            with contextlib.ExitStack() as stack:
                if options.precision is not None:
                    stack.enter_context(matmul_precision(options.precision))
                if options.unfuse:
                    stack.enter_context(unfused())
                if options.emulate:
                    # The audit inside the emulator: its float32 and reference results then
                    # come from a clean run (see eigprec.audit's docstring).
                    stack.enter_context(emulate_tf32(options.rounding))
                report = stack.enter_context(
                    tf32_audit(
                        rounding=options.rounding,
                        skip=skip,
                        depth=options.depth,
                        sample=options.sample,
                    )
                )
                stack.enter_context(warnings_at_user_lines(skip))
                stack.enter_context(compile_calls(run.compiled, skip))
                _run_script(options, run)
        finally:
            progress.writing = True  # signals now wait for the report
            sys.argv[:], sys.path[:] = saved
            _precision._restore(precision)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        _write_reports(options, run, progress, report)
    if progress.terminated and run.status != 143:
        run.status, run.exit_request = 143, None  # (SIGTERM during the report)
    if run.exit_request is not None:
        raise run.exit_request
    return run.status


def _run_script(options: argparse.Namespace, run: _Run) -> None:
    try:
        run_target(options.target, options.args, options.module)
    except StopRun:
        run.stopped = True
    except SystemExit as request:
        run.exit_request = request
        code = request.code
        run.status = code if isinstance(code, int) else (0 if code is None else 1)
    except Terminated:  # (python prints nothing for SIGTERM: neither does the audit)
        run.error, run.status = "SIGTERM", 143
    except BaseException as error:  # reported, then status 1 as python gives
        run.error = f"{type(error).__name__}: {error}"
        run.status = 130 if isinstance(error, KeyboardInterrupt) else 1
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        script_traceback(error)
        sys.excepthook(type(error), error, error.__traceback__)


def _header(options: argparse.Namespace, run: _Run, progress: Progress, n: int) -> str:
    ended = f"{progress.steps} optimizer steps"
    if run.stopped and progress.stop_reason == "--steps":
        ended += (
            f"; stopped at the start of iteration {progress.iterations + 1} "
            f"(--steps {options.steps}: {options.steps} whole iterations of {progress.first})"
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


def _notes(options: argparse.Namespace, run: _Run, progress: Progress, report: AuditReport) -> list:
    notes = []
    caught = progress.stops_raised - int(run.stopped)
    if caught > 0:
        notes.append(
            f"the script caught the audit's stop ({progress.stop_reason}) {caught} time(s) and "
            "went on (a bare `except:` or `except BaseException`?); each later step was "
            "refused"
        )
    if options.steps is not None and progress.first is None:
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
            f"(--sample {options.sample}: each site's first {options.sample} calls and every "
            f"{options.sample}th after; --sample 1 measures every call)"
        )
    if options.unfuse:
        notes.append(
            "--unfuse ran fused attention on its math kernel and LSTMs as native loops: the "
            "run's results may differ from a plain run's in the last bits"
        )
    return notes


def _write_reports(
    options: argparse.Namespace, run: _Run, progress: Progress, report: AuditReport
) -> None:
    # The printed report first, then each file on its own: a failure is named and the rest
    # goes on (the exit status stays the script's).
    summary = [_header(options, run, progress, len(report)), report.verdict()]
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
                _as_json(options, run, progress, report, summary, notes), indent=1, allow_nan=False
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
            run.write_failed = True
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
    run: _Run,
    progress: Progress,
    report: AuditReport,
    summary: list[str],
    notes: list[str],
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
            "sample": options.sample,
            "depth": options.depth,
            "skip": [*DEFAULT_SKIP, *options.skip],
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
