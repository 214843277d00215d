"""JSON writing shared by the recording commands (their provenance is
:meth:`eigprec.RuntimeInfo.as_record`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from eigprec._files import write_text_atomic

__all__ = ["check_top_level", "finite", "out_problem", "write_record"]


def finite(x: Any) -> Any:
    """``x`` with every NaN or infinite float replaced by None (JSON has no NaN).

    Example:
        >>> finite({"a": [1.0, float("nan")]})
        {'a': [1.0, None]}
    """
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def write_record(record: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a recording as indented JSON (parent folders created), atomically.

    The JSON goes to a temporary file beside ``path`` that replaces the old file only once
    it is complete (:func:`eigprec._files.write_text_atomic`): a failure half-way (a full
    disk, a file-size limit) leaves an existing record as it was, not cut short.

    Args:
        record: a JSON-serialisable dict.
        path: destination file.

    Returns:
        The path written.

    Raises:
        TypeError: if ``record`` is not a dict or holds values JSON cannot encode.
        ValueError: if it holds NaN or infinity (JSON has none).
        OSError: from writing (an existing file is left whole).

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
    write_text_atomic(path, text + "\n")
    return path


def out_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a recording could not be written to ``path``, or None; checked before measuring.

    A recorder runs for minutes (a GPU run's budget is 240 s) and wrote its ``--out`` only
    at the end, so a folder given as ``--out`` failed after all the work (issue 47, item
    4). Missing parent folders are fine (:func:`write_record` makes them).

    Args:
        path: the ``--out`` argument.

    Returns:
        ``"--out PATH: …"`` naming the problem, or None.

    Example:
        >>> import tempfile
        >>> out_problem(tempfile.mkdtemp()).endswith("is a folder, not a file")
        True
    """
    path = Path(path)
    if path.is_dir():
        return f"--out {path}: is a folder, not a file"
    if path.exists() and not path.is_file():
        return f"--out {path}: exists and is not a regular file"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"--out {path}: {folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"--out {path}: cannot write in {folder}"
    return None


def check_top_level(record: Any, name: str, schema: str, keys: dict[str, type]) -> None:
    """The checks every recording shares: a dict, each top-level key of its type, the schema.

    Args:
        record: a decoded recording.
        name: the recorder's name, for the messages (``"eig"``).
        schema: the schema string the record must carry.
        keys: top-level key → expected type.

    Raises:
        ValueError: naming the first missing or mistyped field.

    Example:
        >>> check_top_level({"schema": "x/1"}, "demo", "x/1", {"schema": str})
    """
    if not isinstance(record, dict):
        raise ValueError(f"{name} record: expected a dict, got {type(record).__name__}")
    for key, kind in keys.items():
        if key not in record:
            raise ValueError(f"{name} record: missing {key!r}")
        if not isinstance(record[key], kind):
            raise ValueError(f"{name} record: {key!r} should be a {kind.__name__}")
    if record["schema"] != schema:
        raise ValueError(f"{name} record: schema {record['schema']!r}, expected {schema!r}")
