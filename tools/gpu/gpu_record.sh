#!/usr/bin/env bash
# One call on a GPU machine: the carried wheels into a --target folder, then the steps asked
# for with the machine's own python3 and PYTHONPATH=<folder>:src:bookpkg (no child venv, so the
# machine's torch and CuPy are the ones used); at most 8 files into $OUT. Offline.
#   bash tools/gpu/gpu_record.sh --steps complex64,eig,ops | tests | notebooks:<chapter>
#        [--budget 540] [--dry-run] [--out DIR]
# Without an NVIDIA GPU it stops at once with exit status 3 (see tools/gpu/gpu_record.py and tools/gpu/README.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.."
exec "${PYTHON:-python3}" "$here/gpu_record.py" "$@"
