"""Context managers whose objects can be entered more than once (private).

Like ``contextlib.contextmanager``'s objects, they also decorate a function (each call then
runs inside a block). A generator function or a coroutine (``async def``) function is
stepped: the block is entered each time its body runs (``next``/``send``/``throw``/``close``,
or a task resuming the coroutine) and left each time the body gives control back (a
``yield``, an ``await`` that suspends), so the body runs inside the block and the code
between its steps outside it. An async generator function is refused with ``TypeError``.

``contextlib.contextmanager`` gives one-shot objects: ``cm = matmul_precision("high")``
entered a second time fails with an ``AttributeError`` from inside the standard library.
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
import types
from collections.abc import Callable, Generator, Hashable, Iterator
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
        # As contextlib's context managers do: decorating runs each call inside a block. A
        # call of a generator or coroutine function only creates the generator or coroutine,
        # and its body ran later, outside the block (issue 47, item 5): those are stepped
        # instead, the block entered while the body runs and left while it is suspended.
        if inspect.isasyncgenfunction(func):
            raise TypeError(
                f"{self._name} cannot decorate the async generator function "
                f"{func.__qualname__}: its body runs in steps this decorator cannot enter; "
                "use the block with `with` inside its body, between its yields"
            )
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def stepped(*args: P.args, **kwargs: P.kwargs) -> Any:
                return (yield from _stepped(self, func(*args, **kwargs)))

            return stepped  # type: ignore[return-value]
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def awaited(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await _stepped_coroutine(self, func(*args, **kwargs))

            return awaited  # type: ignore[return-value]

        @functools.wraps(func)
        def inside(*args: P.args, **kwargs: P.kwargs) -> T:
            with self:
                return func(*args, **kwargs)

        return inside

    def __enter__(self) -> Any:
        cm = self._factory()
        value = cm.__enter__()
        me = owner()
        with self._lock:
            self._stacks.setdefault(me, []).append(cm)
        _count_open(me, 1)
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
                _count_open(me, -1)
            else:
                others = {k: s for k, s in self._stacks.items() if s}
                cm = None
                if len(others) == 1:
                    ((key, stack),) = others.items()
                    cm = stack.pop()
                    if not stack:
                        del self._stacks[key]
                    _count_open(key, -1)
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


# Owner -> how many blocks of every reusable object it holds open: a stepped body that
# returns with more or fewer open than it started with kept a block across a yield.
_OPEN: dict[tuple[int, Hashable | None], int] = {}
_OPEN_LOCK = threading.Lock()


def _count_open(who: tuple[int, Hashable | None], change: int) -> None:
    with _OPEN_LOCK:
        count = _OPEN.get(who, 0) + change
        if count:
            _OPEN[who] = count
        else:
            _OPEN.pop(who, None)  # no reference to a finished task survives


def _open_here() -> int:
    with _OPEN_LOCK:
        return _OPEN.get(owner(), 0)


def _stepped(block: _Reusable, inner: Any) -> Generator[Any, Any, Any]:
    """Run the generator or coroutine ``inner`` one step at a time, each step in ``block``.

    Every ``send``/``throw``/``close`` that runs the body does so inside a fresh entry of
    ``block``; what the body yields (a value, or the future an ``await`` suspends on) goes
    out with the block left, so the code that resumes it runs outside.

    Raises:
        RuntimeError: if the body yields with a block of its own still open (or one of the
            caller's closed): the step's block could not be left in order, so the body is
            closed first (its blocks left innermost first) and the step refused.
    """
    send, value = inner.send, None
    while True:
        with block:
            started = _open_here()
            try:
                out = send(value)
            except StopIteration as stop:
                return stop.value
            if _open_here() != started:
                inner.close()
                raise RuntimeError(
                    f"{block._name} decorates {getattr(inner, '__qualname__', 'a body')}, "
                    "whose body kept a matmul_precision or emulate_tf32 block of its own open "
                    "across a yield or await; the decorator's block cannot be left before it, "
                    "so the body was closed. Leave such blocks before each yield or await."
                )
        try:
            value = yield out
        except GeneratorExit:
            with block:
                inner.close()
            raise
        except BaseException as error:  # thrown in (a cancellation, say): the body sees it
            send, value = inner.throw, error
        else:
            send = inner.send


# The same stepping as an awaitable: types.coroutine flags the generator function (itself,
# not a copy) as a generator-based coroutine, which `await` accepts and `yield from` in a
# plain generator still does.
_stepped_coroutine = types.coroutine(_stepped)


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
