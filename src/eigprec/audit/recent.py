"""The last few forward calls of an audit, by autograd sequence number, in fixed memory (private).

:mod:`eigprec.audit.mode` remembers where each of the last ``FORWARD_FRAMES_LIMIT`` forward
products ran, keyed by the sequence number of the autograd node it created, so that the node's
backward products are attributed to that line. A dict that drops its oldest entry on every
insertion does not stay the size it had at the bound: its deleted slots are reused only when
it resizes, and the resize doubles its table (148 KiB more at 4,096 entries, about 100 bytes
a step over the 1,400 steps past the bound it took). Here the entries live in a ring of
``limit`` slots, written in place once full, and are looked up by bisection: sequence numbers
grow within a thread, so each of the ring's two runs (older, newer) is sorted.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

__all__ = ["RecentCalls"]


class RecentCalls:
    """Values of the ``limit`` most recent increasing integer keys; older keys are forgotten.

    Args:
        limit: how many entries are kept (>= 1).

    Raises:
        ValueError: for a ``limit`` below 1.

    Example:
        >>> recent = RecentCalls(2)
        >>> for key in (10, 11, 12):
        ...     recent.put(key, f"call {key}")
        >>> recent.get(10), recent.get(12), len(recent)
        (None, 'call 12', 2)
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._limit = limit
        self._keys = array("q")  # grows to `limit`, then is overwritten in place
        self._values: list[Any] = []
        self._next = 0  # the slot written next (the oldest entry, once full)

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, key: int, value: Any) -> None:
        """Remember ``value`` for ``key``; the oldest entry goes when ``limit`` are held.

        A key equal to the newest one replaces its value; a smaller key is ignored (keys come
        from one thread's autograd counter, which only grows).
        """
        keys = self._keys
        if keys:
            newest = self._next - 1  # (-1: the last slot)
            if key == keys[newest]:
                self._values[newest] = value
                return
            if key < keys[newest]:
                return
        if len(keys) < self._limit:
            keys.append(key)
            self._values.append(value)
        else:
            keys[self._next] = key
            self._values[self._next] = value
        self._next = (self._next + 1) % self._limit

    def get(self, key: int) -> Any:
        """The value remembered for ``key``, or None if it was never put or is forgotten."""
        keys, split = self._keys, self._next if len(self._keys) == self._limit else 0
        for lo, hi in ((split, len(keys)), (0, split)):  # older run, then newer run
            i = bisect_left(keys, key, lo, hi)
            if i < hi and keys[i] == key:
                return self._values[i]
        return None
