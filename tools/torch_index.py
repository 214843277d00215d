"""Which extra package index `make env` gives pip for torch on this machine.

Prints one line, the index URL, or nothing; says why on stderr.

- On Linux without a working ``nvidia-smi``: PyTorch's CPU index, if it answers within
  ``--timeout`` seconds. Its ``torch==X.Y.Z+cpu`` wheel (about 0.2 GB) sorts above PyPI's
  ``X.Y.Z`` for the same pin, and it pulls in no CUDA packages; PyPI's Linux wheel
  brings several GB of them.
- Where that index cannot be reached (a machine that sees only PyPI or a mirror): nothing,
  so pip uses its configured index alone. Passing an unreachable index to pip instead
  would cost seconds of retries for every package it resolves.
- With an NVIDIA GPU, or on macOS/Windows (whose PyPI wheels are CPU builds already):
  nothing.

Usage: ``python tools/torch_index.py [--cpu-index URL] [--timeout SECONDS]``
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu() -> bool:
    """True when ``nvidia-smi -L`` runs and lists a GPU (a driver without a GPU fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        result = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and "GPU" in result.stdout


def reachable(index: str, timeout: float) -> tuple[bool, str]:
    """Whether ``<index>/torch/`` answers with a page within ``timeout`` seconds."""
    url = index.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200, f"HTTP {response.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, str(getattr(exc, "reason", exc))


def choose(cpu_index: str, timeout: float, platform: str = sys.platform) -> tuple[str, str]:
    """The index to add (or ``""``) and the reason, for the log."""
    if not platform.startswith("linux"):
        return "", f"{platform}: PyPI's torch is a CPU build here"
    if has_nvidia_gpu():
        return "", "an NVIDIA GPU is present: torch's CUDA build from pip's configured index"
    ok, why = reachable(cpu_index, timeout)
    if ok:
        return cpu_index, f"no NVIDIA GPU: torch's CPU build from {cpu_index}"
    return "", (
        f"no NVIDIA GPU, but {cpu_index} is not reachable ({why}): torch from pip's "
        "configured index alone (on Linux, PyPI's wheel brings several GB of CUDA packages)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-index", default=CPU_INDEX)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    index, why = choose(args.cpu_index, args.timeout)
    print(f"torch_index: {why}", file=sys.stderr)
    print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
