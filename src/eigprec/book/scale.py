"""How large the book's experiments run: chapter scale on a small CPU, full scale in the
GPU publishing build (issue 23.12: a book helper, not library).

The library never imports this module. Its provenance record
(:func:`eigprec.describe_runtime`) still reports the scale truthfully: it reads the same
environment variable, ``EIGPREC_FULL``, with the same rule (``eigprec.runtime`` keeps that
one private reader, and :func:`full_scale` is it, so the two cannot disagree).
"""

from __future__ import annotations

from eigprec.runtime import _full_scale_requested

__all__ = ["full_scale"]


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
