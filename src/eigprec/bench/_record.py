"""JSON writing shared by the recording commands (their provenance is
:meth:`eigprec.RuntimeInfo.as_record`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["write_record"]


def write_record(record: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a recording as indented JSON (parent folders created).

    Args:
        record: a JSON-serialisable dict.
        path: destination file.

    Returns:
        The path written.

    Raises:
        TypeError: if ``record`` is not a dict or holds values JSON cannot encode.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.json"
        >>> write_record({"a": 1}, p).read_text().strip()
        '{\\n  "a": 1\\n}'
    """
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict, got {type(record).__name__}")
    text = json.dumps(record, indent=2, allow_nan=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path
