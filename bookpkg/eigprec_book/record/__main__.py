"""Entry point: ``python -m eigprec_book.record tf32 --out book/data/tf32_gpu.json``."""

from __future__ import annotations

import sys

from eigprec_book.record.cli import main

if __name__ == "__main__":
    sys.exit(main())
