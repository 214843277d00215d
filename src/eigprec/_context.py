"""Context managers whose objects can be entered more than once (private).

``contextlib.contextmanager`` gives one-shot objects: ``cm = matmul_precision("high")``
entered a second time fails with an ``AttributeError`` from inside the standard library.
:func:`reusable` runs the generator afresh on every ``with``, so one object may be
entered again, nested, and used from several threads.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

__all__ = ["reusable"]

P = ParamSpec("P")
T = TypeVar("T")


class _Reusable(contextlib.AbstractContextManager):
    def __init__(self, factory: Callable[[], contextlib.AbstractContextManager]) -> None:
        self._factory = factory
        self._local = threading.local()  # each thread's own stack of entered generators

    def __enter__(self) -> Any:
        stack = self._local.__dict__.setdefault("stack", [])
        cm = self._factory()
        value = cm.__enter__()
        stack.append(cm)
        return value

    def __exit__(self, *exc: Any) -> bool | None:
        return self._local.stack.pop().__exit__(*exc)


def reusable(func: Callable[P, Iterator[T]]) -> Callable[P, contextlib.AbstractContextManager]:
    """Like :func:`contextlib.contextmanager`, but each ``with`` runs ``func`` anew."""
    one_shot = contextlib.contextmanager(func)

    @functools.wraps(func)
    def make(*args: P.args, **kwargs: P.kwargs) -> contextlib.AbstractContextManager:
        return _Reusable(lambda: one_shot(*args, **kwargs))

    return make
