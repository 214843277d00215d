"""Dispatch ``python -m eigprec.bench <subcommand> ...`` to its module."""

from __future__ import annotations

import argparse
import importlib
import sys

from eigprec.bench import SUBCOMMANDS


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand.

    Args:
        argv: command-line arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The subcommand's exit status.
    """
    parser = argparse.ArgumentParser(prog="python -m eigprec.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_path in SUBCOMMANDS.items():
        module = importlib.import_module(module_path)
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(p)
        p.set_defaults(_module=module)
    args = parser.parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
