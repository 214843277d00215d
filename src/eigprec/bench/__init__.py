"""Recording commands for the book's GPU results: ``python -m eigprec.bench <name> --out F``.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args)``;
``eigprec.bench.SUBCOMMANDS`` maps names to module paths so that a module (and anything heavy
it imports, such as CuPy) is imported only when its subcommand runs.
"""

from __future__ import annotations

__all__ = ["SUBCOMMANDS"]

SUBCOMMANDS: dict[str, str] = {
    "eig": "eigprec.bench.eig",
}
