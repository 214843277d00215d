"""The TF32 rounding rules, and the one used where a call leaves the rule unset."""

from __future__ import annotations

import os

__all__ = ["ROUNDINGS", "ROUNDING_ENV", "default_rounding"]

#: The rounding rules :func:`round_tf32` implements.
ROUNDINGS = ("rna", "rne", "rz")

#: The environment variable that sets the rounding used where a call leaves it unset
#: (``rounding=None``); ``"rna"`` where it is unset. The book's configuration matrix
#: (``make robustness``) runs every page with ``EIGPREC_TF32_ROUNDING=rne`` too.
ROUNDING_ENV = "EIGPREC_TF32_ROUNDING"


def default_rounding() -> str:
    """The TF32 rounding used where a call leaves ``rounding`` unset (``None``).

    Returns:
        The value of the environment variable ``EIGPREC_TF32_ROUNDING`` if it is set,
        else ``"rna"``.

    Raises:
        ValueError: if ``EIGPREC_TF32_ROUNDING`` is set to something other than one of
            ``ROUNDINGS``.

    Example:
        >>> import os
        >>> default_rounding() == os.environ.get("EIGPREC_TF32_ROUNDING", "rna")
        True
    """
    value = os.environ.get(ROUNDING_ENV)
    if value is None:
        return "rna"
    if value not in ROUNDINGS:
        raise ValueError(f"{ROUNDING_ENV} must be one of {ROUNDINGS}, got {value!r}")
    return value


def _check_rounding(rounding: object) -> str:
    if rounding is None:
        return default_rounding()
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    return rounding
