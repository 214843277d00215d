"""The key that says whether the execution cache still holds (Makefile: cache-key, publish).

jupyter-cache keys a notebook on its code cells only (jupyter-book issue 1633), so
everything else that can change what a chapter prints — the package, recorded data, the
requirements — is hashed here, and the Makefile empties the cache when the key changes.

Each input file contributes its path and the SHA-256 of its content, and, unless
``--content-only``, its modification time: ``touch`` counts as a change, as it does for
make itself. ``--content-only`` is for a cache restored on a fresh checkout, where every
file time is new (the GPU publishing workflow). Byte-compiled files and build metadata
(``__pycache__``, ``*.pyc``, ``*.egg-info``) are skipped; an input that does not exist is
left out. Written in Python rather than with ``find -printf`` and ``sha256sum`` so that it
runs the same with the BSD tools of macOS as with GNU's.

Usage::

    python tools/cache_key.py src book/data requirements.txt pyproject.toml
    python tools/cache_key.py --content-only --extra full=1 --extra "NVIDIA A100" src ...

Prints 16 hexadecimal digits.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

SKIPPED_DIRS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".egg-info")


def input_files(inputs: Iterable[str | Path]) -> Iterator[Path]:
    """Every file under the inputs (files or folders), in a fixed order.

    Args:
        inputs: files or folders; missing ones are skipped.

    Returns:
        An iterator over the files, sorted by path within each input.
    """
    for item in map(Path, inputs):
        if item.is_file():
            yield item
        elif item.is_dir():
            found = []
            for folder, dirs, files in os.walk(item):
                dirs[:] = [
                    d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(SKIPPED_SUFFIXES)
                ]
                found += [Path(folder, f) for f in files if not f.endswith(SKIPPED_SUFFIXES)]
            yield from sorted(found)


def cache_key(
    inputs: Iterable[str | Path], *, content_only: bool = False, extra: Sequence[str] = ()
) -> str:
    """A short hash of the inputs' paths, contents and (unless ``content_only``) times.

    Args:
        inputs: files or folders to hash.
        content_only: leave modification times out.
        extra: further lines to hash (a setting, the device's name).

    Returns:
        16 hexadecimal digits.

    Example:
        >>> len(cache_key(["no-such-file"]))
        16
    """
    digest = hashlib.sha256()
    for path in input_files(inputs):
        line = f"{path.as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}"
        if not content_only:
            line += f"\0{path.stat().st_mtime_ns}"
        digest.update(line.encode() + b"\n")
    for item in extra:
        digest.update(b"extra\0" + item.encode() + b"\n")
    return digest.hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="*", help="files or folders")
    parser.add_argument("--content-only", action="store_true", help="ignore file times")
    parser.add_argument("--extra", action="append", default=[], help="a further line to hash")
    args = parser.parse_args(argv)
    print(cache_key(args.inputs, content_only=args.content_only, extra=args.extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
