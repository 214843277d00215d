"""Provenance and JSON writing shared by the recording commands."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = ["provenance", "write_record"]


def _driver_version() -> str | None:
    # torch exposes no driver query; nvidia-smi ships with every driver.
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def provenance(device: int = 0) -> dict[str, Any]:
    """Where and with what a recording was made.

    Args:
        device: CUDA device index.

    Returns:
        A JSON-ready dict: GPU name, compute capability, driver, torch, CUDA and cuDNN
        versions, Python version and the UTC date.

    Raises:
        RuntimeError: if CUDA is not available.

    Example:
        >>> provenance()["compute_capability"]  # doctest: +SKIP
        '9.0'
    """
    if not torch.cuda.is_available():
        raise RuntimeError("provenance() describes a CUDA device, and none is available")
    major, minor = torch.cuda.get_device_capability(device)
    return {
        "gpu": torch.cuda.get_device_name(device),
        "compute_capability": f"{major}.{minor}",
        "driver": _driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


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
