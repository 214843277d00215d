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
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from eigprec import precision as _precision
from eigprec.audit.report import tf32_audit
from eigprec.audit.script import (
    compile_calls,
    run_target,
    script_traceback,
    warnings_at_user_lines,
)
from eigprec.audit.stops import Progress, StopRun, Terminated, watch
from eigprec.audit.summary import Run, kept_in_float32, write_reports
from eigprec.audit.unfuse import unfused
from eigprec.precision import matmul_precision
from eigprec.tf32 import ROUNDINGS, emulate_tf32
from eigprec.tf32.gpus import GPUS, profile
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

What it costs: PyTorch's dispatch modes put Python in the way of every operator, and each
measured product is computed again with TF32 operands (and, up to 2**18 multiply-adds, in
float64) and compared entry by entry. By default (--sample 8) each site's first 8 calls
and every 8th after are measured, the rest only counted. On one CPU thread a small GPT's
training iteration (4 blocks of width 128, benchmarks/bench_audit_iteration.py) took 1.6x
as long audited, on average over 30 iterations: about 1.1-1.4x for an iteration whose
products are only counted, 2.5-2.8x for one measured in full (--sample 1 measures every
call). Models of tiny layers cost more, in proportion, as the audit's work per operator
dominates their small products. Memory: while a product is measured the audit holds a few
more tensors of its size, released right after; between products, one record per call
site and the call sites of the last 4,096 forward products (to attribute their backward
products).
"""

_EPILOG = """\
examples:
  python -m eigprec.audit train.py --epochs 1
  python -m eigprec.audit --steps 3 --json audit.json -m mypackage.train --lr 0.1
  python -m eigprec.audit --max-seconds 60 --unfuse --markdown audit.md train.py
  python -m eigprec.audit --gpu hopper --steps 20 train.py
  python -m eigprec.audit --emulate --precision high train.py -- --arg-of-the-script
"""


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
        "--gpu",
        choices=GPUS,
        default=None,
        help="model that TF32 GPU: its tie rule ("
        + ", ".join(f"{name} {profile(name).rounding}" for name in GPUS)
        + ") becomes the default --rounding, and the small products it ran in float32 ("
        + "; ".join(f"{name}: {kept_in_float32(profile(name))}" for name in GPUS)
        + ") are left out of the audit and of --emulate; default: every float32 product",
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
    if options.rounding is None and options.gpu is not None:
        options.rounding = profile(options.gpu).rounding  # (before the environment's)
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
    run = Run(options.target)
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
                    stack.enter_context(emulate_tf32(options.rounding, gpu=options.gpu))
                report = stack.enter_context(
                    tf32_audit(
                        rounding=options.rounding,
                        skip=skip,
                        depth=options.depth,
                        sample=options.sample,
                        gpu=options.gpu,
                    )
                )
                stack.enter_context(warnings_at_user_lines(skip))
                stack.enter_context(compile_calls(run.compiled, skip))
                _run_script(options, run, progress)
        finally:
            progress.writing = True
            sys.argv[:], sys.path[:] = saved
            _precision._restore(precision)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        write_reports(options, run, progress, report, skip)
    if progress.terminated and run.status != 143:
        run.status, run.exit_request = 143, None  # (SIGTERM during the report)
    if run.exit_request is not None:
        raise run.exit_request
    return run.status


def _run_script(options: argparse.Namespace, run: Run, progress: Progress) -> None:
    try:
        try:
            run_target(options.target, options.args, options.module)
        finally:
            progress.writing = True  # the timer and SIGTERM now wait for the report
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
