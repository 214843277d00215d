"""Every seed a page uses, shifted together by ``EIGPREC_SEED_OFFSET``.

A chaotic run on another CPU is, in effect, a run with other seeds: a claim about runs that
diverge in float32 is checked on other seed sets too (issue 45). Pages draw each seed through
:func:`seed` (or a set of them through :func:`seeds`), so ``EIGPREC_SEED_OFFSET=1000``
re-runs every random experiment of every page on other seeds; ``make robustness`` does
(two seed-shifted configurations beside the arithmetic ones).
"""

from __future__ import annotations

import os

__all__ = ["SEED_OFFSET_ENV", "seed", "seed_offset", "seed_set", "seeds"]

#: The environment variable that shifts every seed of every page.
SEED_OFFSET_ENV = "EIGPREC_SEED_OFFSET"


def seed_offset() -> int:
    """The shift added to every seed: ``EIGPREC_SEED_OFFSET``, 0 where unset.

    Raises:
        ValueError: if it is set to anything but a non-negative integer.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SEED_OFFSET", None) and None
        >>> seed_offset()
        0
    """
    text = os.environ.get(SEED_OFFSET_ENV, "0").strip()
    if not text.isdigit():
        raise ValueError(f"{SEED_OFFSET_ENV} must be a non-negative integer, got {text!r}")
    return int(text)


def seed(value: int) -> int:
    """``value`` shifted by :func:`seed_offset`: the seed a page's experiment uses.

    Args:
        value: the seed as the page writes it (0, 1, ...).

    Returns:
        ``value + seed_offset()``.

    Raises:
        TypeError: if ``value`` is not an int (bools are not).
        ValueError: if ``value`` is negative, or as :func:`seed_offset`.

    Example:
        >>> import os
        >>> os.environ["EIGPREC_SEED_OFFSET"] = "1000"
        >>> seed(3)
        1003
        >>> del os.environ["EIGPREC_SEED_OFFSET"]
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a seed must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"a seed must be >= 0, got {value}")
    return value + seed_offset()


def seeds(values: int | tuple[int, ...] | range) -> tuple[int, ...]:
    """A page's seed set, shifted: ``seeds(5)`` is seeds 0 … 4, ``seeds((3, 7))`` two.

    At the Colab check's scale (``EIGPREC_SCALE=quick``, :func:`eigprec_book.helpers.quick_scale`)
    the set is its first seed alone, as the degeneracy chapter's experiments there run: that
    check proves that every cell of a reader's notebook runs, and the strict build checks
    what the pages find, on every seed.

    Args:
        values: how many seeds (from 0), or the seeds as the page writes them.

    Returns:
        A tuple of shifted seeds (:func:`seed`); one at the Colab check's scale.

    Raises:
        TypeError, ValueError: as :func:`seed`; also a count below 1.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SEED_OFFSET", None) and None
        >>> seeds(3)
        (0, 1, 2)
    """
    from eigprec_book.helpers.scale import quick_scale  # (scale.py imports this module)

    shifted = seed_set(values)
    return shifted[:1] if quick_scale() else shifted


def seed_set(values: int | tuple[int, ...] | range) -> tuple[int, ...]:
    """:func:`seeds` at every scale: the whole set, shifted (for code that picks its own
    subset at the Colab check's scale, as ``experiment_kwargs`` does).

    Args:
        values: how many seeds (from 0), or the seeds as the page writes them.

    Returns:
        A tuple of shifted seeds (:func:`seed`), all of them.

    Raises:
        TypeError, ValueError: as :func:`seed`; also a count below 1.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SEED_OFFSET", None) and None
        >>> seed_set(2)
        (0, 1)
    """
    if isinstance(values, int) and not isinstance(values, bool):
        if values < 1:
            raise ValueError(f"need at least one seed, got {values}")
        values = tuple(range(values))
    return tuple(seed(v) for v in values)
