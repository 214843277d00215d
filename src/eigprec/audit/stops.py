"""Ending an audited script early, whole iterations at a time (private helper of the CLI).

``--steps N`` runs N whole training iterations: the stop comes at the start of iteration
N + 1, in the pre-step hook of the first optimizer that steps, so that the N-th iteration's
tail (logging, ``scheduler.step()``, a checkpoint) has run, and with several optimizers
(a GAN's two) every one of them has stepped N times. ``--max-seconds S`` ends the script
once S seconds have passed: at the start of the next iteration where an optimizer steps
(within ``min(S, 60)`` more seconds), else wherever it is. SIGTERM (``timeout``'s and batch
schedulers' signal) ends the script as Ctrl-C does, so the report is still written.

The stop is an exception that ``except Exception`` lets pass (its ``finally`` blocks and
context managers run); a bare ``except:`` can swallow it, and :class:`Progress` counts how
often it had to be raised.
"""

from __future__ import annotations

import contextlib
import os
import signal
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

__all__ = ["GRACE_SECONDS", "Progress", "StopRun", "Terminated", "watch"]

#: Once --max-seconds have passed in a script with an optimizer, how long the audit waits
#: for the next iteration to start before it stops the script wherever it is.
GRACE_SECONDS = 60.0


class StopRun(BaseException):
    """Raised to end the script early (``--steps``, ``--max-seconds``): exit status 0.

    A BaseException, so that the script's ``except Exception`` handlers let it pass.
    """


class Terminated(BaseException):
    """Raised in the script when the process receives SIGTERM: exit status 143."""


@dataclass
class Progress:
    """How far the script got, and why it stopped."""

    steps_limit: int | None = None
    seconds_limit: float | None = None
    steps: int = 0  # optimizer steps, all optimizers
    iterations: int = 0  # steps of the first optimizer that stepped
    first: str | None = None  # that optimizer's class name
    stop_reason: str | None = None  # "--steps" or "--max-seconds", once raised
    stops_raised: int = 0
    deadline_passed: bool = False
    terminated: bool = False  # SIGTERM received
    writing: bool = False  # the script has ended: signals wait for the report
    _first_ref: Any = field(default=None, repr=False)

    def stop(self, reason: str) -> StopRun:
        self.stop_reason = reason
        self.stops_raised += 1
        return StopRun(reason)

    def before_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        if self._first_ref is None:
            self._first_ref = weakref.ref(optimizer)
            self.first = type(optimizer).__name__
        if self._first_ref() is not optimizer or self.writing:
            return
        if self.steps_limit is not None and self.iterations >= self.steps_limit:
            raise self.stop("--steps")
        if self.deadline_passed:
            raise self.stop("--max-seconds")

    def after_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self.steps += 1
        if self._first_ref is not None and self._first_ref() is optimizer:
            self.iterations += 1


@contextlib.contextmanager
def watch(progress: Progress) -> Iterator[None]:
    """Count optimizer steps, enforce the limits and catch SIGTERM until the block ends.

    SIGTERM and the timer are handled only where this runs in the main thread (Python
    delivers signals there); in a process forked by the script (DataLoader workers) the
    handlers give way to the default action.
    """
    hooks = (
        register_optimizer_step_pre_hook(progress.before_step),
        register_optimizer_step_post_hook(progress.after_step),
    )
    pid = os.getpid()

    def on_term(signum: int, _frame: Any) -> None:
        if os.getpid() != pid:  # a forked child: die as it would without the audit
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        progress.terminated = True
        if not progress.writing:
            raise Terminated

    def on_alarm(_signum: int, _frame: Any) -> None:
        if os.getpid() != pid or progress.writing:
            return
        if progress.first is not None and not progress.deadline_passed:
            progress.deadline_passed = True  # stop at the next iteration's start...
            signal.setitimer(signal.ITIMER_REAL, min(progress.seconds_limit or 0.0, GRACE_SECONDS))
            return
        raise progress.stop("--max-seconds")  # ...or here, where none comes

    with contextlib.ExitStack() as stack:
        for hook in hooks:
            stack.callback(hook.remove)
        if _main_thread():
            previous = signal.signal(signal.SIGTERM, on_term)
            stack.callback(signal.signal, signal.SIGTERM, previous)
            if progress.seconds_limit is not None:
                before = signal.signal(signal.SIGALRM, on_alarm)
                stack.callback(signal.signal, signal.SIGALRM, before)
                stack.callback(signal.setitimer, signal.ITIMER_REAL, 0)
                signal.setitimer(signal.ITIMER_REAL, progress.seconds_limit)
        yield


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
