"""How large the book's experiments run: ``EIGPREC_SCALE=quick|chapter|full``.

``chapter`` (the default) fits a 2-core CPU; ``full`` is the GPU publishing build's;
``quick`` is ``make test``'s Colab check (one seed, smaller grids), which proves that every
reader's notebook runs while the strict build, at chapter scale, checks what the pages say.
Every page's provenance box says which scale it ran at (:func:`provenance`).
"""

from __future__ import annotations

import os

from eigprec import RuntimeInfo, describe_runtime
from eigprec_book.helpers.seeds import seed_offset

__all__ = ["SCALES", "SCALE_ENV", "full_scale", "provenance", "quick_scale", "scale"]

#: The environment variable that chooses the scale.
SCALE_ENV = "EIGPREC_SCALE"
#: The scales, smallest first.
SCALES = ("quick", "chapter", "full")
_RETIRED = ("EIGPREC_FULL", "EIGPREC_QUICK")
_LABELS = {
    "quick": "one seed, smaller grids: make test's Colab check (EIGPREC_SCALE=quick)",
    "chapter": "reduced for a small CPU",
    "full": "full (EIGPREC_SCALE=full)",
}


def scale() -> str:
    """The scale the book's experiments run at.

    Returns:
        ``EIGPREC_SCALE``'s value (surrounding spaces and case ignored), ``"chapter"`` if unset.

    Raises:
        ValueError: if ``EIGPREC_SCALE`` is not one of ``SCALES``, or a variable it
            replaced (``EIGPREC_FULL``, ``EIGPREC_QUICK``) is set: it would be ignored.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SCALE", None) and None
        >>> scale()
        'chapter'
    """
    for name in _RETIRED:
        if name in os.environ:
            raise ValueError(
                f"{name} is no longer read: set EIGPREC_SCALE to one of {SCALES} instead "
                f"(and unset {name})"
            )
    value = os.environ.get(SCALE_ENV, "chapter").strip().lower()
    if value not in SCALES:
        raise ValueError(f"{SCALE_ENV} must be one of {SCALES}, got {value!r}")
    return value


def full_scale() -> bool:
    """Whether experiments run at full scale (``EIGPREC_SCALE=full``, the GPU build).

    Raises:
        ValueError: as :func:`scale`.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SCALE", None) and None
        >>> full_scale()
        False
    """
    return scale() == "full"


def quick_scale() -> bool:
    """Whether experiments run at the Colab check's scale (``EIGPREC_SCALE=quick``).

    The degeneracy chapter's multi-seed experiments then run their first seed, and its
    transient and sensitivity grids two points each.

    Raises:
        ValueError: as :func:`scale`.

    Example:
        >>> import os
        >>> os.environ.pop("EIGPREC_SCALE", None) and None
        >>> quick_scale()
        False
    """
    return scale() == "quick"


def provenance() -> RuntimeInfo:
    """The page's provenance box: :func:`eigprec.describe_runtime`, the scale it ran at and,
    where they were shifted, the seeds.

    Returns:
        A :class:`eigprec.RuntimeInfo` with a "Scale" row (and a "Seeds" row under a seed
        offset).

    Raises:
        ValueError: as :func:`scale`.

    Example:
        >>> "Scale" in str(provenance())
        True
    """
    notes = [("Scale", _LABELS[scale()])]
    offset = seed_offset()
    if offset:
        notes.append(("Seeds", f"every seed shifted by {offset} (EIGPREC_SEED_OFFSET={offset})"))
    return describe_runtime(notes=tuple(notes))
