"""Float32 matmul precision: read what runs, set it temporarily, safely across threads.

PyTorch has two generations of knobs for the precision of float32 matrix products:
the legacy ones (``torch.set_float32_matmul_precision`` and the
``torch.backends.cuda.matmul.allow_tf32`` flag) and, from torch 2.9, per-backend
``fp32_precision`` attributes (``torch.backends.cuda.matmul.fp32_precision``,
``torch.backends.mkldnn.matmul.fp32_precision``, their parents
``torch.backends.cudnn.fp32_precision`` / ``torch.backends.mkldnn.fp32_precision`` and
the global ``torch.backends.fp32_precision``; ``"none"`` means "inherit from the
parent"). ATen keeps the legacy level and the new attributes side by side; when they
disagree (only the new attribute was set) the legacy getters refuse to answer and
raise ``RuntimeError`` (ATen ``Context::float32MatmulPrecision`` and
``Context::allowTF32CuBLAS``). This module therefore reads the new attributes, which
are what the kernels consult, and restores both generations exactly.

Thread safety: torch's precision settings are process-wide. :func:`matmul_precision`
blocks in different threads are coordinated by one process-wide lock: blocks asking
for the same mode share it (the settings are restored when the last one leaves),
a block asking for a different mode waits until the others have left, and the
process always ends at the precision it had before the first block. Asyncio tasks are
holders of their own (see :func:`matmul_precision`). Code that calls torch's setters
directly bypasses this protocol.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from eigprec._context import owner, reusable

__all__ = ["MATMUL_PRECISIONS", "current_matmul_precision", "matmul_precision"]

#: The modes accepted by :func:`torch.set_float32_matmul_precision`, from the most
#: to the least precise float32 matrix product.
#:
#: Example:
#:     >>> MATMUL_PRECISIONS
#:     ('highest', 'high', 'medium')
MATMUL_PRECISIONS: tuple[str, ...] = ("highest", "high", "medium")

# Attribute paths (under torch.backends) of the torch >= 2.9 settings this module
# saves, parents before children: setting a parent propagates to its children.
_GENERIC = ("fp32_precision",)
_CUDA_ALL = ("cudnn", "fp32_precision")
_MKLDNN_ALL = ("mkldnn", "fp32_precision")
_CUDA_MATMUL = ("cuda", "matmul", "fp32_precision")
_MKLDNN_MATMUL = ("mkldnn", "matmul", "fp32_precision")
_PARENTS = (_GENERIC, _CUDA_ALL, _MKLDNN_ALL)
_CHILDREN = (_CUDA_MATMUL, _MKLDNN_MATMUL)


def _has_new_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


@dataclass(eq=False)
class _Pin:
    """A oneDNN setting held at IEEE while CPU products run (see :func:`_pin_ieee`)."""

    old: str  # the value set, which every reader here sees meanwhile
    count: int = 0  # products in flight that need it


# Attribute path -> pin. Only the switch and its restore are serialised (under _LOCK); the
# products run without the lock, and this module reads and writes pinned settings through
# the pins, so no snapshot, restore or reader ever sees or keeps the pin's IEEE.
_PINS: dict[tuple[str, ...], _Pin] = {}


def _raw(path: tuple[str, ...]) -> Any:
    obj: Any = torch.backends
    for name in path:
        obj = getattr(obj, name)
    return obj


def _get_attr(path: tuple[str, ...]) -> str:
    pin = _PINS.get(path)
    return pin.old if pin is not None else _raw(path)


def _set_attr(path: tuple[str, ...], value: str) -> None:
    pin = _PINS.get(path)
    if pin is not None:
        pin.old = value
        return
    setattr(_raw(path[:-1]), path[-1], value)


def _repin() -> None:
    # After torch's legacy setter, which writes oneDNN's matmul setting whatever it was
    # (a parent's setter leaves a set child alone, and a pinned child is set): its value is
    # what the pin now stands for, and the pin stays in force.
    pin = _PINS.get(_MKLDNN_MATMUL)
    if pin is not None:
        pin.old = _raw(_MKLDNN_MATMUL)
        setattr(_raw(_MKLDNN_MATMUL[:-1]), _MKLDNN_MATMUL[-1], "ieee")


def _pin_ieee(path: tuple[str, ...]) -> bool:
    """Hold the oneDNN setting at ``path`` at IEEE for one product; False: it already was.

    Pins are counted: the setting is put back when the last product that needed it ends
    (:func:`_unpin`). Takes the lock only for the switch itself.
    """
    with _LOCK:
        pin = _PINS.get(path)
        if pin is None:
            if _effective(path, path[:-2] + path[-1:], path[-1:]) == "ieee":
                return False
            pin = _PINS[path] = _Pin(_raw(path))
            setattr(_raw(path[:-1]), path[-1], "ieee")
        pin.count += 1
        return True


def _unpin(path: tuple[str, ...]) -> None:
    """End one product's :func:`_pin_ieee`; the last one restores the setting exactly."""
    with _LOCK:
        pin = _PINS[path]
        pin.count -= 1
        if not pin.count:
            del _PINS[path]
            _put_back(_raw(path[:-1]), path[-1], pin.old)


def _effective(*paths: tuple[str, ...]) -> str:
    # ATen's Context::float32Precision: "none" inherits from the parent, up to the
    # generic setting; "none" all the way up means IEEE.
    for path in paths:
        value = _get_attr(path)
        if value != "none":
            return value
    return "ieee"


def _cuda_matmul_precision() -> str:
    value = _effective(_CUDA_MATMUL, _CUDA_ALL, _GENERIC)
    return "ieee" if value == "bf16" else value  # cuBLAS has no bf16 mode for float32


def _onednn_matmul_precision() -> str:
    return _effective(_MKLDNN_MATMUL, _MKLDNN_ALL, _GENERIC)


def _legacy_level() -> str:
    """ATen's legacy float32 matmul level, also when its getter refuses to answer."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        pass
    # The getter raised, so the legacy level disagrees with the new attributes; the
    # rules it checks (Context::float32MatmulPrecision, Context::allowTF32CuBLAS)
    # pin the level down. allow_tf32 answers iff (level != highest) == cuBLAS TF32.
    cuda_tf32 = _cuda_matmul_precision() == "tf32"
    try:
        _ = torch.backends.cuda.matmul.allow_tf32
        not_highest = cuda_tf32
    except RuntimeError:
        not_highest = not cuda_tf32
    if not not_highest:
        return "highest"
    # 'high' is refused when oneDNN is at bf16, 'medium' when it is at tf32.
    return "high" if _onednn_matmul_precision() == "bf16" else "medium"


@dataclass(frozen=True)
class _State:
    legacy: str
    new: tuple[tuple[tuple[str, ...], str], ...]


def _snapshot() -> _State:
    new = tuple((p, _get_attr(p)) for p in (*_PARENTS, *_CHILDREN)) if _has_new_api() else ()
    return _State(_legacy_level(), new)


def _restore(state: _State) -> None:
    values = dict(state.new)
    for path in _PARENTS:
        if path in values and _get_attr(path) != values[path]:
            _set_attr(path, values[path])
    # The legacy setter rewrites the two matmul children; they are set after it.
    torch.set_float32_matmul_precision(state.legacy)
    _repin()
    for path in _CHILDREN:
        if path in values and _get_attr(path) != values[path]:
            _set_attr(path, values[path])


_Owner = tuple[int, Hashable | None]  # (thread id, asyncio task or None): see _context.owner


@dataclass(eq=False)
class _Level:
    mode: str
    snapshot: _State | None
    holders: dict[_Owner, int] = field(default_factory=dict)
    exclusive: bool = False  # shared with no other owner (see _exclusive)


# One process-wide stack of precision levels. More than one level exists only while
# blocks of one thread and its nesting owners hold them all, so foreign owners can only
# ever share the bottom level, and only when they ask for its mode. Within a thread,
# an asyncio task is foreign to every other task: torch's precision is process-wide,
# so two tasks interleaving at different modes would run at each other's precision.
_LOCK = threading.Condition(threading.RLock())
_LEVELS: list[_Level] = []
_WAITING: set[_Owner] = set()  # owners blocked in _acquire


def _foreign(holder: _Owner, me: _Owner) -> bool:
    # Code outside any task (task None) in a thread cannot run while one of its tasks
    # does, so a task's blocks nest inside it; two different tasks interleave.
    return holder[0] != me[0] or (holder[1] is not None and holder[1] is not me[1])


def _foreign_holders(me: _Owner) -> set[_Owner]:
    return {h for level in _LEVELS for h in level.holders if _foreign(h, me)}


def _acquire(
    mode: str | None, *, exclusive: bool = False, me: _Owner | None = None
) -> tuple[_Level, _Owner]:
    """Enter a level: set ``mode`` (or pin the current precision when None).

    ``exclusive``: a level no other owner may share (``mode`` None: nothing is set), for
    code that changes a setting itself; ``me``: enter as this owner instead of the caller.
    """
    me = owner() if me is None else me
    with _LOCK:
        while True:
            others = _foreign_holders(me)
            if not others:
                if exclusive:
                    level = _Level(current_matmul_precision(), None, exclusive=True)
                elif mode is None and _LEVELS:  # a pin changes nothing: join the top
                    level = _LEVELS[-1]
                    break
                elif mode is None:
                    level = _Level(current_matmul_precision(), None)
                else:
                    level = _Level(mode, _snapshot())
                    torch.set_float32_matmul_precision(mode)
                    _repin()
                _LEVELS.append(level)
                break
            bottom = _LEVELS[0]
            if (
                len(_LEVELS) == 1
                and not exclusive
                and not bottom.exclusive
                and mode in (None, bottom.mode)
            ):
                level = bottom
                break
            _refuse_same_thread(me, mode, others)
            _refuse_deadlock(me, mode)
            _WAITING.add(me)
            try:
                _LOCK.wait()
            finally:
                _WAITING.discard(me)
        level.holders[me] = level.holders.get(me, 0) + 1
        return level, me


def _refuse_same_thread(me: _Owner, mode: str | None, others: set[_Owner]) -> None:
    # Another asyncio task of this thread holds the precision: waiting for it would block
    # the event loop it needs to finish, and not waiting would change its precision.
    if any(h[0] == me[0] for h in others):
        raise RuntimeError(
            f"matmul_precision({mode!r}) refused: another asyncio task in this thread holds "
            f"the float32 matmul precision at {_LEVELS[-1].mode!r} across an await. Torch's "
            "precision is process-wide, so interleaved tasks would run at each other's "
            "precision; use the same mode in concurrent tasks, or do not await inside a "
            "matmul_precision or emulate_tf32 block."
        )


def _refuse_deadlock(me: _Owner, mode: str | None) -> None:
    # This thread shares a level and wants to change it while every other holder is
    # itself waiting to change it: nobody could ever proceed. Refuse loudly instead.
    others = _foreign_holders(me)
    # Held by this owner or by code it runs inside (which cannot leave before it does).
    mine = any(not _foreign(h, me) for level in _LEVELS for h in level.holders)
    if mine and others <= _WAITING:
        raise RuntimeError(
            f"matmul_precision({mode!r}) would deadlock: this thread shares the float32 "
            f"matmul precision {_LEVELS[0].mode!r} with {len(others)} other thread(s) "
            "(in matmul_precision or emulate_tf32 blocks) that are themselves waiting to "
            "change it. Torch's precision is process-wide; enter matmul_precision before "
            "emulate_tf32, or use the same mode in all threads."
        )


def _release(level: _Level, me: _Owner) -> None:
    """Leave ``level`` as ``me`` (the owner that entered it, whichever thread calls)."""
    with _LOCK:
        level.holders[me] -= 1
        if not level.holders[me]:
            del level.holders[me]
        later = None
        if not level.holders:
            i = _LEVELS.index(level)
            del _LEVELS[i]
            if i < len(_LEVELS):
                # Left before a block entered after it (generators closed out of order):
                # the precision of the block still open stays in force, and the level
                # above now restores what this one would have.
                later = _LEVELS[i].mode
                if level.snapshot is not None:
                    _LEVELS[i].snapshot = level.snapshot
            elif level.snapshot is not None:
                _restore(level.snapshot)
        _LOCK.notify_all()  # fewer holders may be enough for a waiting thread
    if later is not None:
        raise RuntimeError(
            f"a matmul_precision({level.mode!r}) block (or emulate_tf32 block) was exited "
            "before a block entered after it in the same thread (generators or tasks "
            "interleaved their blocks): its code may have run at the later block's "
            f"precision {later!r}. The later block keeps its precision and the "
            "precision from before both is restored when it exits; nest blocks instead."
        )


@contextlib.contextmanager
def _exclusive(me: _Owner | None = None) -> Iterator[None]:
    """Hold the precision alone: other owners' blocks (any mode) and pins wait meanwhile.

    For code that changes a process-wide setting itself (the audit's flip of the TF32
    switch on a GPU): no other thread then runs inside a block while it is changed.
    ``me`` enters on behalf of another owner (autograd's worker thread running the
    backward of the owner's graph, which waits for it).
    """
    level, me = _acquire(None, exclusive=True, me=me)
    try:
        yield
    finally:
        _release(level, me)


def _put_back(obj: object, attr: str, old: object) -> None:
    # Torch's fp32_precision getters answer with the inherited value where the setting is
    # "none", so the value read cannot say which it was: inherit first, and set the value
    # explicitly only where inheriting does not give it back.
    if attr == "fp32_precision":
        setattr(obj, attr, "none")
        if getattr(obj, attr) == old:
            return
    setattr(obj, attr, old)


@contextlib.contextmanager
def _switched(obj: object, attr: str, value: object, me: _Owner | None = None) -> Iterator[None]:
    """Set ``obj.attr`` (a process-wide torch setting) for one owner's block, then restore.

    The owner holds the precision exclusively (:func:`_exclusive`, ``me`` as there) and the
    lock while the setting differs, so no other thread's block runs at it or reads it, and
    snapshots never see it.
    """
    with _exclusive(me), _LOCK:
        old = getattr(obj, attr)
        setattr(obj, attr, value)
        try:
            yield
        finally:
            _put_back(obj, attr, old)


@contextlib.contextmanager
def _pinned() -> Iterator[None]:
    """Hold the current precision: other threads' blocks that would change it wait."""
    level, me = _acquire(None)
    try:
        yield
    finally:
        _release(level, me)


def current_matmul_precision() -> str:
    """The float32 matmul precision that runs now, as a legacy mode name.

    Derived from the settings the kernels read (cuBLAS: the effective
    ``torch.backends.cuda.matmul.fp32_precision``; oneDNN on the CPU: the effective
    ``torch.backends.mkldnn.matmul.fp32_precision``), not from torch's legacy level,
    which can lag behind after old and new APIs were mixed and whose getter
    :func:`torch.get_float32_matmul_precision` then raises. ``'highest'``: full
    float32 on CUDA; ``'high'``: TF32 for CUDA float32 matmuls; ``'medium'``: TF32
    on CUDA and bf16 in oneDNN on the CPU. (A mix with no legacy name, oneDNN at bf16
    while cuBLAS is at IEEE, reads ``'highest'``: the name describes CUDA; see
    :func:`eigprec.describe_runtime` for the oneDNN setting.) Thread-safe: it never
    reads a half-restored state of a :func:`matmul_precision` block.

    Returns:
        One of ``'highest'``, ``'high'`` or ``'medium'``.

    Example:
        >>> with matmul_precision("high"):
        ...     current_matmul_precision()
        'high'
    """
    with _LOCK:
        if not _has_new_api():
            return torch.get_float32_matmul_precision()
        if _cuda_matmul_precision() != "tf32":
            return "highest"
        return "medium" if _onednn_matmul_precision() == "bf16" else "high"


def _check_mode(mode: object) -> None:
    if not isinstance(mode, str) or mode not in MATMUL_PRECISIONS:
        raise ValueError(
            f"matmul precision must be one of {', '.join(map(repr, MATMUL_PRECISIONS))}; "
            f"got {mode!r}"
        )


@reusable(check=_check_mode)
def matmul_precision(mode: str) -> Iterator[None]:
    """Set torch's float32 matmul precision inside a ``with`` block, then restore it.

    The legacy flag ``torch.backends.cuda.matmul.allow_tf32`` and, on torch ≥ 2.9, the
    ``fp32_precision`` attributes follow the mode. On exit, normal or by an exception, every
    setting is restored exactly as it was found, so blocks nest. Blocks in different threads
    share one process-wide lock: blocks asking for the same mode run together, and a block
    asking for another mode waits until the others have left. An asyncio task is a holder of
    its own, like a thread, but one asking for a mode another task holds raises instead of
    blocking the event loop. The rules in full (a wait that could never end, generators
    closed out of order, a block exited in another thread) are on the API page:
    :ref:`api-precision-decided`.

    Args:
        mode: ``'highest'`` (IEEE float32), ``'high'`` (TF32 allowed on CUDA) or
            ``'medium'`` (additionally bf16 allowed, e.g. by oneDNN on the CPU).

    Yields:
        None.

    Raises:
        ValueError: if ``mode`` is not one of the three allowed names (raised at the call,
            before ``with``).
        RuntimeError: if waiting for the other threads' blocks could never end, another
            asyncio task of this thread holds another mode, or blocks are exited out of
            order or where they were not entered.

    Example:
        >>> import torch
        >>> with matmul_precision("high"):
        ...     torch.backends.cuda.matmul.allow_tf32
        True
        >>> with matmul_precision("highest"):
        ...     torch.backends.cuda.matmul.allow_tf32
        False
    """
    level, me = _acquire(mode)
    try:
        yield
    finally:
        _release(level, me)
