"""Context managers whose objects can be entered more than once (private).

Like ``contextlib.contextmanager``'s objects, they also decorate a function (each call then
runs inside a block). ``contextlib.contextmanager`` gives one-shot objects:
``cm = matmul_precision("high")`` entered a second time fails with an ``AttributeError``
from inside the standard library.
:func:`reusable` runs the generator afresh on every ``with``, so one object may be
entered again, nested, and used from several threads and asyncio tasks. Its arguments are
checked when the object is made (the signature is bound, and an optional ``check`` runs),
not only when it is entered, so ``matmul_precision("fast")`` fails where it is written.

:func:`owner` names who enters a block: the thread, and the asyncio task running in it
(if any). Each owner has its own stack of entered blocks, so interleaved tasks cannot
exit each other's blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, ParamSpec, TypeVar

__all__ = ["owner", "reusable"]

P = ParamSpec("P")
T = TypeVar("T")


def owner() -> tuple[int, Hashable | None]:
    """``(thread id, current asyncio task or None)``: who is entering or leaving a block."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop runs in this thread
        task = None
    return threading.get_ident(), task


class _Reusable(contextlib.AbstractContextManager):
    def __init__(self, factory: Callable[[], contextlib.AbstractContextManager], name: str) -> None:
        self._factory = factory
        self._name = name
        self._lock = threading.Lock()
        self._stacks: dict[tuple[int, Hashable | None], list] = {}  # owner -> entered blocks

    def __call__(self, func: Callable[P, T]) -> Callable[P, T]:
        # As contextlib's context managers do: decorating runs each call inside a block.
        @functools.wraps(func)
        def inside(*args: P.args, **kwargs: P.kwargs) -> T:
            with self:
                return func(*args, **kwargs)

        return inside

    def __enter__(self) -> Any:
        cm = self._factory()
        value = cm.__enter__()
        with self._lock:
            self._stacks.setdefault(owner(), []).append(cm)
        return value

    def __exit__(self, *exc: Any) -> bool | None:
        me = owner()
        with self._lock:
            stack = self._stacks.get(me)
            if stack:
                cm = stack.pop()
                if not stack:
                    del self._stacks[me]  # no reference to a finished task survives
                others = None
            else:
                others = {k: s for k, s in self._stacks.items() if s}
                cm = None
                if len(others) == 1:
                    ((key, stack),) = others.items()
                    cm = stack.pop()
                    if not stack:
                        del self._stacks[key]
        if cm is not None and others is None:
            return cm.__exit__(*exc)
        if cm is None and not others:
            raise RuntimeError(f"{self._name}: __exit__ called on a block that was never entered")
        if cm is not None:
            # Entered by one other thread or task and left here: release it (so the
            # precision is not held forever), then refuse the misuse loudly.
            message = (
                f"{self._name}: a block entered in another thread or asyncio task was exited "
                "here; it has been released, but a block must be exited by whoever entered it"
            )
            try:
                cm.__exit__(*exc)
            except Exception as e:  # e.g. torch's thread-local mode stack of this thread
                raise RuntimeError(message) from e
            raise RuntimeError(message)
        raise RuntimeError(
            f"{self._name}: __exit__ called in a thread or asyncio task that did not enter "
            f"this block, while {len(others)} others hold it; nothing was released"
        )


def reusable(
    func: Callable[P, Iterator[T]] | None = None,
    *,
    check: Callable[..., object] | None = None,
) -> Any:
    """Like :func:`contextlib.contextmanager`, but each ``with`` runs ``func`` anew.

    Args:
        func: a generator function yielding once.
        check: called with the same arguments when the object is made; raises on bad
            arguments, so they fail at the call, not at ``with``.

    Returns:
        The decorated function (or a decorator, when only ``check`` is given).
    """
    if func is None:
        return functools.partial(reusable, check=check)
    one_shot = contextlib.contextmanager(func)
    signature = inspect.signature(func)

    @functools.wraps(func)
    def make(*args: P.args, **kwargs: P.kwargs) -> contextlib.AbstractContextManager:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{func.__name__}(): {e}") from None
        if check is not None:
            check(*args, **kwargs)
        return _Reusable(lambda: one_shot(*args, **kwargs), f"{func.__name__}(...)")

    return make
