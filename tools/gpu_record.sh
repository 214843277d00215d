#!/usr/bin/env bash
# The one command of a GPU machine: venv on the preinstalled torch/CuPy, carried wheels,
# recorders, unit suite, chapters; all into $OUT (or _build/gpu-record). Offline.
#   bash tools/gpu_record.sh [--steps tf32,eig,...] [--budget 540] [--dry-run] [--out DIR]
# Without an NVIDIA GPU it stops at once with exit status 3 (see tools/gpu_record.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
exec "${PYTHON:-python3}" "$here/gpu_record.py" "$@"
