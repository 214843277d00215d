"""Running a script as ``python`` runs it, under the audit (private helper of the command line).

:func:`run_target` sets up ``sys.argv``, ``sys.path[0]``, ``__main__`` and ``__file__`` as the
interpreter does for ``python script.py`` or ``python -m module``, and runs it. Its frame is the
audit's boundary: frames above it (the command line, whoever called it) never name a call site.

What the audit adds to a run, it takes out of what the user sees:

* :func:`script_traceback`: a traceback as ``python`` prints it, without the audit's frames
  (an error raised by a torch operator shows the user's line, not the dispatch modes the
  operator passed through);
* :func:`warnings_at_user_lines`: a warning that torch raises inside an operator points at
  the user's line, as without the audit, not at the mode's frame the operator ran in;
* :func:`compile_calls`: ``torch.compile`` is counted (Dynamo compiles nothing while a
  dispatch mode runs, so the compiled code runs eagerly and is audited as eager code).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib.machinery
import os
import runpy
import sys
import types
import warnings
import zipfile
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

import torch

from eigprec.audit import mode

__all__ = ["compile_calls", "run_target", "script_traceback", "warnings_at_user_lines"]

_EIGPREC = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# torch's files that a call passes through on its way into and out of the dispatch modes:
# frames of theirs next to the audit's own are the audit's detour, not the user's call.
_INTO_MODES = frozenset(
    _TORCH + p
    for p in ("overrides.py", "_compile.py", "_dynamo/eval_frame.py", "utils/_python_dispatch.py")
)
_OUT_OF_MODES = _INTO_MODES | {_TORCH + "_ops.py"}


def run_target(target: str, args: list[str], module: bool) -> None:
    """Run ``target`` with ``args`` as ``python target args`` (``python -m`` for a module).

    Raises:
        Whatever the script raises (``SystemExit`` included); ``sys.argv`` and ``sys.path``
        are the caller's to restore.
    """
    # As the interpreter sets up a script: sys.path[0] is the script's folder (symlinks
    # resolved) or, for -m, the current folder; python -P (safe_path) adds neither.
    if not sys.flags.safe_path:
        sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.realpath(target))
    sys.argv[:] = [target, *args]
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif os.path.isfile(target) and not zipfile.is_zipfile(target):
        _run_source(target)
    else:  # a folder or zip file with a __main__.py
        runpy.run_path(target, run_name="__main__")


# The script's frames are below this one: the audit names no site above it.
mode.BOUNDARIES.add(run_target.__code__)


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


def _ours(filename: str) -> bool:
    return filename.startswith(_EIGPREC)


def script_traceback(error: BaseException) -> None:
    """Cut the audit's frames out of ``error``'s traceback (and its causes'), in place.

    The frames above the script (the command line's, runpy's) go; so do the dispatch
    modes' frames and torch's frames into and out of them, wherever the error was raised
    outside eigprec. A Python function that torch re-dispatched through the modes shows
    once, at the line that raised, as without the audit. An error raised by eigprec's
    own code keeps every frame below the script.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = _trimmed(error.__traceback__)
        error = error.__cause__ or error.__context__


def _trimmed(tb: TracebackType | None) -> TracebackType | None:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    # The frames above the script: this package's (the runner, the command line) and runpy's.
    start = 0
    for i, entry in enumerate(entries):
        if entry.tb_frame.f_code is run_target.__code__:
            start = i + 1
    entries = [e for e in entries[start:] if e.tb_frame.f_globals.get("__name__") not in ("runpy",)]
    names = [e.tb_frame.f_code.co_filename for e in entries]
    if entries and not _ours(names[-1]):
        drop = _detours(entries, names)
        entries = [e for i, e in enumerate(entries) if i not in drop]
    for entry, after in zip(entries, [*entries[1:], None], strict=True):
        entry.tb_next = after
    return entries[0] if entries else None


def _detours(entries: list[TracebackType], names: list[str]) -> set[int]:
    # Indices of the audit's detours: each run of eigprec frames, with torch's frames into
    # the modes before it and out of them after it.
    drop: set[int] = set()
    i = 0
    while i < len(entries):
        if not _ours(names[i]):
            i += 1
            continue
        start = i
        while start > 0 and names[start - 1] in _INTO_MODES:
            start -= 1
        end = i
        while end + 1 < len(entries) and (_ours(names[end + 1]) or names[end + 1] in _OUT_OF_MODES):
            end += 1
        drop.update(range(start, end + 1))
        # A function re-dispatched through the modes (handle_torch_function) runs twice: the
        # call into the modes and the call that did the work; python shows the second only.
        if (
            start > 0
            and end + 1 < len(entries)
            and entries[start - 1].tb_frame.f_code is entries[end + 1].tb_frame.f_code
        ):
            drop.add(start - 1)
        i = end + 1
    return drop


@contextlib.contextmanager
def warnings_at_user_lines(skip: tuple[str, ...]) -> Iterator[None]:
    """While it runs, warnings raised inside a dispatch mode's frame point at the user's line.

    A warning that torch raises in C++ (or with ``stacklevel``) names the innermost Python
    frame, which under the audit is a mode's, not the user's. Such warnings are shown at
    the innermost frame outside ``skip`` modules instead, as without the audit. (Python's
    "once per location" bookkeeping still counts them at the mode's line.)
    """
    shown = warnings.showwarning

    @functools.wraps(shown)
    def show(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        if _ours(filename) or (filename in _OUT_OF_MODES and _in_modes(sys._getframe(1))):
            place = _user_line(sys._getframe(1), skip)
            if place is not None:
                filename, lineno = place
                rest = rest[:1]  # (the source line is read anew from the new place)
        shown(message, category, filename, lineno, *rest)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown


def _in_modes(frame: FrameType | None) -> bool:
    while frame is not None:
        if _ours(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


def _user_line(frame: FrameType | None, skip: tuple[str, ...]) -> tuple[str, int] | None:
    while frame is not None:
        if frame.f_code is run_target.__code__:
            return None
        name = frame.f_globals.get("__name__", "")
        if name != "warnings" and not any(name == p or name.startswith(p + ".") for p in skip):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


@contextlib.contextmanager
def compile_calls(calls: list[str], skip: tuple[str, ...]) -> Iterator[None]:
    """While it runs, every ``torch.compile`` call appends the user's ``file:line`` to ``calls``.

    Dynamo compiles nothing while a dispatch mode is active: compiled functions and modules
    run eagerly under the audit, and their products are audited as eager code. The
    command line says so. Dynamo's warning about global module hooks (the audit's own, for
    the layer names) is silenced: nothing is compiled for it to concern.
    """
    original = torch.compile

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        place = _user_line(sys._getframe(1), skip)
        calls.append(f"{os.path.basename(place[0])}:{place[1]}" if place else "?")
        return original(*args, **kwargs)

    torch.compile = counted
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks"
            )
            yield
    finally:
        if torch.compile is counted:
            torch.compile = original
