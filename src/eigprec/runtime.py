"""Where a chapter ran: the provenance record shown at the top of every page."""

from __future__ import annotations

import datetime as _dt
import html
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np
import torch

from eigprec.precision import current_matmul_precision
from eigprec.tf32.rounding import default_rounding
from eigprec.tf32.settings import is_tf32_capability

__all__ = ["RuntimeInfo", "describe_runtime"]

# Distribution names under which CuPy is published; looked up without importing
# CuPy, which is slow to import and absent on machines without CUDA.
_CUPY_DISTRIBUTIONS = ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy-rocm-6-0")


def _cupy_version() -> str | None:
    for dist in _CUPY_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


# Environment variables that change TF32 behind torch's settings.
_TF32_ENV = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
# C's strtol in base 10: leading white space, a sign, digits; the rest is not read.
_C_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def _tf32_env_overrides() -> tuple[tuple[str, str], ...]:
    return tuple((name, os.environ[name]) for name in _TF32_ENV if name in os.environ)


def _nvidia_override_value(value: str) -> int | None:
    """``NVIDIA_TF32_OVERRIDE`` as NVIDIA's libraries read it, or None without digits.

    NVIDIA documents the value 0 only and its libraries are closed; we read the value as C
    reads an integer (``strtol``), so ``" 0 "``, ``"00"`` and ``"+0"`` are 0. A value
    without digits (``""``, ``"off"``) is not claimed either way.
    """
    match = _C_INTEGER.match(value)
    return int(match.group(1)) if match else None


def _assignment(name: str, value: str) -> str:
    # White space or an empty value is what a reader must see: quote anything unusual.
    plain = value.isalnum() and value.isascii()
    return f"{name}={value if plain else repr(value)}"


def _tf32_env_meaning(name: str, value: str) -> str:
    if name == "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE":
        # ATen reads it when its context is created, with c10::utils::check_env: exactly "0"
        # or "1"; anything else ("1 ", "01", "true") is ignored with a warning.
        if value == "1":
            return "torch starts at 'high' (TF32 matmuls)"
        if value == "0":
            return "torch's default start"
        return "ignored by torch, which reads only 0 or 1"
    number = _nvidia_override_value(value)
    if number is None:
        return "not an integer: NVIDIA documents only 0 (never TF32)"
    if number == 0:
        return "cuBLAS and cuDNN never use TF32"
    return "not 0: TF32 follows the program's settings"


# How the emulator's rounding rules read in the provenance box (see eigprec.tf32).
_RULE_WORDS = {
    "rna": (
        "ties rounded away from zero, as published for Ampere GPUs; "
        "the book's H100 and H200 round ties to even"
    ),
    "rne": "ties rounded to even, as the H100 and H200 recorded for the book",
    "rz": "truncated",
}


@dataclass(frozen=True)
class RuntimeInfo:
    """A snapshot of the machine and settings a computation ran with.

    Attributes:
        device: ``"cuda"`` when a CUDA (or ROCm) device is visible, else ``"cpu"``.
        device_name: the GPU's name, or the CPU's description.
        compute_capability: ``(major, minor)`` of the current CUDA device, or None.
        tf32_hardware: True on NVIDIA GPUs of compute capability ≥ 8.0 (Ampere and
            later), the ones whose tensor cores execute TF32.
        tf32_emulated: True where the book emulates TF32 in software instead
            (everywhere ``tf32_hardware`` is False).
        matmul_precision: torch's current float32 matmul precision.
        torch_version: ``torch.__version__``.
        cuda_version: the CUDA version torch was built with, or None.
        numpy_version: ``numpy.__version__``.
        cupy_version: the installed CuPy distribution's version, or None.
        python_version: the interpreter's version.
        timestamp: UTC time of the snapshot, ISO 8601.
        driver_version: the NVIDIA driver's version (from ``nvidia-smi``), or None.
        cudnn_version: cuDNN's version as torch reports it, or None.
        tf32_env_overrides: ``(name, value)`` of the environment variables that change
            TF32 behind torch's settings, where set: ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``
            (``1``: torch starts at 'high', as in NVIDIA's NGC containers; torch reads
            exactly ``0`` or ``1``) and ``NVIDIA_TF32_OVERRIDE`` (``0``: NVIDIA's libraries
            never use TF32; read as C reads an integer, so ``" 0 "`` counts as 0; a value
            without digits is reported as undocumented, by the label and the table alike).
        tf32_rounding: where TF32 is emulated, the rounding rule calls that name none use
            (``eigprec.tf32.default_rounding()``); None on TF32 hardware.
        notes: ``(label, text)`` rows a caller adds to the box, shown before "When" (the
            book adds the scale its experiments ran at).

    Example:
        >>> info = describe_runtime()
        >>> info.device in {"cpu", "cuda"}
        True
        >>> "Executed on" in str(info)
        True
    """

    device: str
    device_name: str
    compute_capability: tuple[int, int] | None
    tf32_hardware: bool
    tf32_emulated: bool
    matmul_precision: str
    torch_version: str
    cuda_version: str | None
    numpy_version: str
    cupy_version: str | None
    python_version: str
    timestamp: str
    driver_version: str | None = None
    cudnn_version: int | None = None
    tf32_env_overrides: tuple[tuple[str, str], ...] = ()
    tf32_rounding: str | None = None
    notes: tuple[tuple[str, str], ...] = ()

    @property
    def tf32_label(self) -> str:
        """One phrase saying how TF32 behaves here (real hardware or CPU emulation)."""
        if self.tf32_hardware:
            value = dict(self.tf32_env_overrides).get("NVIDIA_TF32_OVERRIDE")
            number = None if value is None else _nvidia_override_value(value)
            shown = _assignment("NVIDIA_TF32_OVERRIDE", value or "")
            if number == 0:
                return f"off ({shown} disables the tensor cores' TF32)"
            if value is not None and number is None:
                return f"real (tensor cores), unless {shown}, not an integer, disables it"
            return "real (tensor cores)"
        where = "this GPU has no TF32" if self.device == "cuda" else "no GPU"
        rule = _RULE_WORDS.get(self.tf32_rounding or "")
        return (
            f"emulated in software ({where}; {rule})" if rule else f"emulated in software ({where})"
        )

    def as_record(self) -> dict[str, object]:
        """The provenance of a recording, as JSON-ready data (the recorders write it).

        Returns:
            ``gpu``, ``compute_capability`` (``"9.0"``), ``driver``, ``torch``, ``cuda``,
            ``cudnn``, ``cupy``, ``python``, ``date`` (UTC, ISO 8601), ``device``,
            ``matmul_precision``, ``tf32`` (how TF32 ran) and ``tf32_env_overrides``.

        Example:
            >>> sorted(describe_runtime().as_record())[:3]
            ['compute_capability', 'cuda', 'cudnn']
        """
        cc = self.compute_capability
        return {
            "gpu": self.device_name,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "driver": self.driver_version,
            "torch": self.torch_version,
            "cuda": self.cuda_version,
            "cudnn": self.cudnn_version,
            "cupy": self.cupy_version,
            "python": self.python_version,
            "date": self.timestamp,
            "device": self.device,
            "matmul_precision": self.matmul_precision,
            "tf32": self.tf32_label,
            "tf32_env_overrides": dict(self.tf32_env_overrides),
        }

    def _rows(self) -> list[tuple[str, str]]:
        cc = self.compute_capability
        device = self.device_name + (f" (compute capability {cc[0]}.{cc[1]})" if cc else "")
        versions = f"torch {self.torch_version}"
        if self.cuda_version:
            versions += f" (CUDA {self.cuda_version})"
        versions += f" · NumPy {self.numpy_version} · CuPy {self.cupy_version or 'not installed'}"
        versions += f" · Python {self.python_version}"
        rows = [
            ("Executed on", device),
            ("TF32", self.tf32_label),
            ("float32 matmul precision", self.matmul_precision),
        ]
        if self.tf32_env_overrides:
            notes = []
            for name, value in self.tf32_env_overrides:
                notes.append(f"{_assignment(name, value)} ({_tf32_env_meaning(name, value)})")
            rows.append(("TF32 environment", " · ".join(notes)))
        return [
            *rows,
            ("Versions", versions),
            *self.notes,
            ("When", self.timestamp),
        ]

    def __str__(self) -> str:
        rows = self._rows()
        width = max(len(k) for k, _ in rows)
        lines = [f"{k.rjust(width)} : {v}" for k, v in rows]
        rule = "─" * max(len(line) for line in lines)
        return "\n".join([rule, *lines, rule])

    def _repr_html_(self) -> str:
        # Collapsed (issue 23): the closed box's one line still names the device and
        # how TF32 ran, so a reader who never opens it knows where the numbers come from.
        cells = "".join(
            f'<tr><th style="text-align:right;padding:2px 10px 2px 0;vertical-align:top">'
            f"{html.escape(k)}</th><td style='padding:2px 0'>{html.escape(v)}</td></tr>"
            for k, v in self._rows()
        )
        summary = f"Provenance: executed on {self.device_name}; TF32 {self.tf32_label}"
        return (
            '<details class="eigprec-provenance" style="border-left:4px solid #4c72b0;'
            'background:rgba(76,114,176,0.08);padding:6px 12px;margin:4px 0;font-size:0.9em">'
            '<summary style="font-weight:bold;cursor:pointer">'
            f"{html.escape(summary)}</summary>"
            f'<table style="border:none;margin:4px 0 0 0">{cells}</table></details>\n'
        )


def describe_runtime(notes: tuple[tuple[str, str], ...] = ()) -> RuntimeInfo:
    """Describe the device, library versions and precision settings in force now.

    CuPy's version is read from package metadata, so CuPy is not imported. The matmul
    precision is the one that runs (:func:`eigprec.current_matmul_precision`), and the
    TF32 environment overrides are reported when set.

    Args:
        notes: ``(label, text)`` rows to add to the box (strings).

    Returns:
        A frozen :class:`RuntimeInfo`; in a notebook it renders as the provenance
        box ("Executed on …"), and ``print()`` gives the same box as text.

    Raises:
        TypeError: if ``notes`` is not a tuple of ``(str, str)`` pairs.

    Example:
        >>> info = describe_runtime()
        >>> info.tf32_emulated == (not info.tf32_hardware)
        True
    """
    if not isinstance(notes, tuple) or not all(
        isinstance(n, tuple) and len(n) == 2 and all(isinstance(s, str) for s in n) for n in notes
    ):
        raise TypeError(f"notes must be a tuple of (label, text) string pairs, got {notes!r}")
    cc: tuple[int, int] | None = None
    if torch.cuda.is_available():
        device = "cuda"
        index = torch.cuda.current_device()
        device_name = torch.cuda.get_device_name(index)
        major, minor = torch.cuda.get_device_capability(index)
        cc = (int(major), int(minor))
        tf32_hardware = is_tf32_capability(cc)
    else:
        device = "cpu"
        device_name = platform.processor() or platform.machine() or "unknown CPU"
        device_name = f"CPU ({device_name}, {os.cpu_count()} logical cores)"
        tf32_hardware = False
    return RuntimeInfo(
        device=device,
        device_name=device_name,
        compute_capability=cc,
        tf32_hardware=tf32_hardware,
        tf32_emulated=not tf32_hardware,
        matmul_precision=current_matmul_precision(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        numpy_version=np.__version__,
        cupy_version=_cupy_version(),
        python_version=platform.python_version(),
        timestamp=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        driver_version=_driver_version() if device == "cuda" else None,
        cudnn_version=_cudnn_version() if device == "cuda" else None,
        tf32_env_overrides=_tf32_env_overrides(),
        tf32_rounding=None if tf32_hardware else default_rounding(),
        notes=notes,
    )


def _cudnn_version() -> int | None:
    # A CUDA build of torch on a machine whose GPU it cannot use (or a faked one) raises from
    # inside torch.backends.cudnn (torch 2.13: ValueError from min() of no versions); the
    # box then says the version is unknown rather than failing.
    try:
        return torch.backends.cudnn.version()
    except (RuntimeError, ValueError, OSError):
        return None


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
