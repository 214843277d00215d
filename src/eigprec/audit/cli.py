"""``python -m eigprec.audit``: audit the float32 products of an unmodified script.

The command runs a script (or ``-m module``) as ``python`` would -- same ``sys.argv``,
``__name__ == "__main__"``, ``sys.path[0]``, output and exit status -- inside
:func:`eigprec.audit.tf32_audit`, and prints the report to stderr when the script ends,
however it ends. :func:`main` is the whole command; ``eigprec/audit/__main__.py`` calls it.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import importlib.machinery
import importlib.util
import json
import math
import os
import runpy
import sys
import types
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

from eigprec.audit.report import AuditReport, tf32_audit
from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, emulate_tf32

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
shapes) gets its call count and worst TF32 error: norm-wise, at the worst entry, and at the
entry's row-column scale. The script's own results are untouched (bit for bit) unless
--emulate is given (or --precision medium, which lets oneDNN on the CPU use bf16). The
report goes to stderr when the script ends -- normally, by an exception (its traceback and
exit status 1 pass through), by sys.exit (its status passes through) or after --steps
optimizer steps (status 0).

What it costs: each audited product is computed again with TF32 operands (and, up to
2**18 multiply-adds, in float64) and compared entry by entry. On the CPU, a small MNIST-
style CNN's training steps (tests/data/mnist_example.py, batch 32) took 2.3x to 2.5x as long
audited; a whole short run of it (10 steps, a test pass), interpreter start included, 1.2x
(benchmarks/bench_audit_cli.py). Tiny products cost more, in proportion, as the audit's
per-call Python work dominates them. Memory: while a product is measured the audit holds a
few more tensors of its size (a 1024x1024 product raised the peak RSS by 16 MiB audited, 21
the first time, and by 4 MiB, its output, plain), released right after. Between
products it keeps one record per call site and the call sites of the last 4,096 forward
products (to attribute their backward products): nothing more per step (+0.06 bytes a
step, from 4,096 to 10,000 steps).
"""

_EPILOG = """\
examples:
  python -m eigprec.audit train.py --epochs 1
  python -m eigprec.audit --steps 3 --json audit.json -m mypackage.train --lr 0.1
  python -m eigprec.audit --emulate --precision high --markdown audit.md train.py
"""


class _StepLimit(BaseException):
    """Raised from the optimizer hook after ``--steps`` steps: ends the script early.

    A BaseException, so that the script's own ``except Exception`` handlers let it pass
    (its ``finally`` blocks and context managers still run).
    """


@dataclass
class _Run:
    """How the script's run went: what the report's header and the JSON file say."""

    target: str
    steps: int = 0
    stopped: bool = False  # ended by --steps
    status: int = 0
    error: str | None = None  # the exception that ended the script, "Type: message"
    exit_request: BaseException | None = field(default=None, repr=False)


def _positive(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
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
        help="end the script after N torch.optim optimizer steps (exit status 0)",
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
        "emulate_tf32), as a TF32 GPU would; without it the script's results are float32",
    )
    parser.add_argument(
        "--rounding",
        choices=ROUNDINGS,
        default="rna",
        help="TF32 rounding of the operands: rna (Ampere cuBLAS, the default), rne (ties "
        "to even, as an H100 recorded for the book), rz (truncation)",
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
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _check(parser: argparse.ArgumentParser, options: argparse.Namespace) -> None:
    # Every problem is named before the script starts (a long training run must not fail
    # at its end for want of a folder to write the report into).
    for flag in ("json", "markdown"):
        path = getattr(options, flag)
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path) or not os.path.isdir(folder):
            parser.error(f"--{flag} {path}: not a file in an existing folder")
    if options.module:
        try:
            found = importlib.util.find_spec(options.target)
        except (ImportError, ValueError) as error:
            parser.error(f"-m {options.target}: {error}")
        if found is None:
            parser.error(f"-m {options.target}: no module of that name")
    elif not os.path.exists(options.target):
        parser.error(f"can't open file {options.target!r}: no such file or directory")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``python -m eigprec.audit [options] script.py [args]``.

    Args:
        argv: the command's arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: the script's (0 when ``--steps`` ended it, 1 when it raised).

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
    options = parser.parse_args(argv)
    _check(parser, options)
    run = _Run(options.target)

    def count_step(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        run.steps += 1
        if options.steps is not None and run.steps >= options.steps:
            run.stopped = True
            raise _StepLimit

    hook = register_optimizer_step_post_hook(count_step)
    saved = sys.argv[:], sys.path[:]
    try:
        with contextlib.ExitStack() as stack:
            if options.precision is not None:
                stack.enter_context(matmul_precision(options.precision))
            if options.emulate:
                # The audit inside the emulator: its float32 and reference results then
                # come from a clean run (see eigprec.audit's docstring).
                stack.enter_context(emulate_tf32(options.rounding))
            report = stack.enter_context(
                tf32_audit(
                    rounding=options.rounding,
                    skip=DEFAULT_SKIP + tuple(options.skip),
                    depth=options.depth,
                )
            )
            _run_target(options, run)
    finally:
        hook.remove()
        sys.argv[:], sys.path[:] = saved
    sys.stdout.flush()
    _write_reports(options, run, report)
    if run.exit_request is not None:
        raise run.exit_request
    return run.status


def _run_target(options: argparse.Namespace, run: _Run) -> None:
    # As the interpreter sets up a script: sys.path[0] is the script's folder (symlinks
    # resolved) or, for -m, the current folder; python -P (safe_path) adds neither.
    if not sys.flags.safe_path:
        sys.path[0] = (
            os.getcwd() if options.module else os.path.dirname(os.path.realpath(options.target))
        )
    sys.argv[:] = [options.target, *options.args]
    try:
        if options.module:
            runpy.run_module(options.target, run_name="__main__", alter_sys=True)
        elif os.path.isfile(options.target) and not zipfile.is_zipfile(options.target):
            _run_source(options.target)
        else:  # a folder or zip file with a __main__.py
            runpy.run_path(options.target, run_name="__main__")
    except _StepLimit:
        pass
    except SystemExit as request:
        run.exit_request = request
        code = request.code
        run.status = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as error:  # reported, then status 1 as python gives
        run.error = f"{type(error).__name__}: {error}"
        run.status = 130 if isinstance(error, KeyboardInterrupt) else 1
        sys.stdout.flush()
        # (python's excepthook prints the exception's own traceback, not its argument's)
        error.with_traceback(_script_frames(error.__traceback__))
        sys.excepthook(type(error), error, error.__traceback__)


def _run_source(path: str) -> None:
    # What the interpreter does for `python path`: runpy.run_path would set sys.argv[0],
    # __file__ and the tracebacks' file names all to the path as typed, whereas python keeps
    # argv[0] as typed and makes the other two absolute.
    full = os.path.abspath(path)
    with open(full, "rb") as f:
        code = compile(f.read(), full, "exec", dont_inherit=True)
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=full,
        __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", full),
        __cached__=None,
    )
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        sys.modules["__main__"] = saved


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    # The traceback from the script's first frame on, as `python script.py` prints it
    # (without this module's and runpy's frames above it).
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in ("runpy", __name__):
        tb = tb.tb_next
    return tb


def _summary(run: _Run, report: AuditReport) -> str:
    ended = (
        f"stopped after {run.steps} optimizer steps (--steps)"
        if run.stopped
        else f"{run.steps} optimizer steps"
    )
    if run.error is not None:
        ended += f"; the script raised {run.error.split(':')[0]} (exit status {run.status})"
    elif run.exit_request is not None:
        ended += f"; the script exited with status {run.status}"
    return f"TF32 audit of {run.target}: {len(report)} product sites, {ended}"


def _write_reports(options: argparse.Namespace, run: _Run, report: AuditReport) -> None:
    summary = _summary(run, report)
    hidden = len(report) - options.top
    more = f"({hidden} more sites: --top or --json to see them)" if hidden > 0 else ""
    text = report.to_text(limit=options.top)
    print(f"\n{summary}\n{text}" + (f"\n{more}" if more else ""), file=sys.stderr, flush=True)
    if options.markdown is not None:
        table = report.to_markdown(limit=options.top)
        parts = [f"## TF32 audit of `{os.path.basename(run.target)}`", summary, table]
        with open(options.markdown, "w", encoding="utf-8") as f:
            f.write("\n\n".join([*parts, *([more] if more else [])]) + "\n")
    if options.json is not None:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(_as_json(options, run, report), f, indent=1, allow_nan=False)
            f.write("\n")


def _finite(x: float | None) -> float | str | None:
    # JSON has no inf/NaN; they are kept as the strings "inf" and "nan".
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _as_json(options: argparse.Namespace, run: _Run, report: AuditReport) -> dict[str, Any]:
    return {
        "target": run.target,
        "module": options.module,
        "args": list(options.args),
        "options": {
            "steps": options.steps,
            "precision": options.precision,
            "emulate": options.emulate,
            "rounding": options.rounding,
            "depth": options.depth,
            "skip": [*DEFAULT_SKIP, *options.skip],
        },
        "optimizer_steps": run.steps,
        "stopped_by_steps": run.stopped,
        "exit_status": run.status,
        "exception": run.error,
        "records": [
            {
                "site": r.site,
                "frames": [list(frame) for frame in r.frames],
                "module": r.module,
                "op": r.op,
                "phase": r.phase,
                "shapes": [list(s) for s in r.shapes],
                "calls": r.calls,
                "tf32_calls": r.tf32_calls,
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
