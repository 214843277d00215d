"""GPU recording commands: ``python -m eigprec_book.record <name> --out book/data/<file>.json``.

The command line only: it may import the chapters and the library; nothing imports it.

Each subcommand measures on a real GPU what the book can only emulate on other machines
and writes JSON with provenance (GPU, driver, torch and CUDA versions, date). They need
only torch, and refuse clearly where the hardware they measure is missing.

One recorder runs on any CPU: ``python -m eigprec_book.record.degeneracy_remedies`` records the
degeneracy chapter's remedies and its small transformer, whose grids are too large for the
chapter's CPU budget (its own command line, not a subcommand).
"""

from __future__ import annotations

__all__ = ["write_record"]

from eigprec_book.record._record import write_record
