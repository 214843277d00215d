"""Command-line parsing of ``python -m eigprec_book.record``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence

__all__ = ["build_parser", "main"]

#: subcommand -> (module with ``add_arguments(parser)`` and ``run(args) -> int``, help)
COMMANDS = {
    "tf32": ("eigprec_book.record.tf32", "TF32 rounding, diag(QᵀLQ) at 'high', matmul throughput"),
    "eig": ("eigprec_book.record.eig", "kth_eigvalsh (CuPy) vs torch.linalg: speed, stream race"),
    "degeneracy": (
        "eigprec_book.record.degeneracy",
        "spike experiment at real TF32, remedies' cost",
    ),
    "ops": ("eigprec_book.record.ops", "which float32 operators TF32 changes, from which size"),
    "complex64": (
        "eigprec_book.record.complex64",
        "whether and how TF32 rounds complex64 mm, bmm and linear",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m eigprec_book.record``.

    Returns:
        An ``argparse.ArgumentParser`` with one subparser per recording command.

    Example:
        >>> build_parser().parse_args(["tf32", "--out", "x.json"]).out
        'x.json'
    """
    parser = argparse.ArgumentParser(
        prog="python -m eigprec_book.record",
        description="Record GPU measurements for the Eigen-Precision book.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen recording command.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit status (0 success, 2 refused for missing hardware).
    """
    args = build_parser().parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return module.run(args)
