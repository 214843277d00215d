"""How large the book's experiments run: chapter scale on a small CPU, full scale in the
GPU publishing build (issue 23.12: a book helper, not library), reduced further in ``make
test``'s Colab check.

The library never imports this module. Its provenance record
(:func:`eigprec.describe_runtime`) still reports the scale truthfully: it reads the same
environment variable, ``EIGPREC_FULL``, with the same rule (``eigprec.runtime`` keeps that
one private reader, and :func:`full_scale` is it, so the two cannot disagree).
"""

from __future__ import annotations

from eigprec.runtime import _full_scale_requested, _quick_scale_requested

__all__ = ["full_scale", "quick_scale"]


def full_scale() -> bool:
    """Whether experiments should run at full scale (the GPU publishing build).

    Chapters shrink their experiments to fit a 2-core CPU; the publishing build sets
    the environment variable ``EIGPREC_FULL=1`` to scale them up. The provenance box
    of every page shows the same answer in its "Scale" row.

    Returns:
        True when ``EIGPREC_FULL`` is set to ``1``, ``true`` or ``yes`` (any case,
        surrounding spaces ignored).

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_FULL", None) and None
        >>> full_scale()
        False
    """
    return _full_scale_requested()


def quick_scale() -> bool:
    """Whether experiments should run at the Colab check's scale (one seed, small grids).

    The degeneracy chapter's multi-seed experiments then run their first seed, and its
    transient and sensitivity grids two points each.

    ``make test``'s Colab check sets ``EIGPREC_QUICK=1`` (``tools/colab_check.py
    --quick``): it proves that every reader's notebook runs where Colab would run it, while
    the strict build, at chapter scale, checks what the pages say. A page executed this way
    says so in its provenance box ("Scale"); no published page is.

    Returns:
        True when ``EIGPREC_QUICK`` is set to ``1``, ``true`` or ``yes`` (any case).

    Raises:
        ValueError: if ``EIGPREC_FULL`` asks for full scale as well.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_QUICK", None) and None
        >>> quick_scale()
        False
    """
    quick = _quick_scale_requested()
    if quick and _full_scale_requested():
        raise ValueError(
            "EIGPREC_QUICK=1 and EIGPREC_FULL=1 are both set: they ask for opposite scales; "
            "unset one of them"
        )
    return quick
