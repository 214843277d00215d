"""Entry point: ``python -m eigprec.bench tf32 --out book/data/tf32_gpu.json``."""

from __future__ import annotations

import sys

from eigprec.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
