"""Writing a user's file so that a failure never leaves it half-written (private).

A file written in place (``open(path, "w")``, ``Path.write_text``) is truncated first, so a
write that fails half-way -- a full disk, a file-size limit, an interrupt -- leaves a cut
file where a good one was (issue 47, item 3: a 153,971-byte record cut to 16,384 bytes).
:func:`write_text_atomic` writes a temporary file in the same folder and moves it over the
old one with :func:`os.replace`, which POSIX makes atomic within one file system.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` so that the file is either the old one or the new one.

    The text goes to a new file beside ``path`` (a hidden name ending in ``.tmp``), flushed
    to disk, then :func:`os.replace`\\ s the old file. A failure at any point leaves the
    old file as it was and removes the temporary file. The new file keeps the old one's
    permission bits (a new file: 0o666 less the umask, as ``open`` gives); a symbolic link
    is written through, its target replaced. The folder must exist.

    Args:
        path: The file to write.
        text: Its new content.
        encoding: The text encoding.

    Returns:
        The path written (links resolved).

    Raises:
        IsADirectoryError: if ``path`` is a folder.
        ValueError: if ``path`` exists and is not a regular file (a device, a pipe): it
            would be replaced, not written to.
        OSError: from creating, writing or moving the file (the old file is left whole).

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> write_text_atomic(p, "one\\n").read_text()
        'one\\n'
    """
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    if mode is not None and not stat.S_ISREG(mode):
        raise ValueError(
            f"{path} exists and is not a regular file: it is written by replacing it with a "
            "new file, which would replace this one too; write to a regular file"
        )
    data = text.encode(encoding)
    temporary, fd = _create_beside(target)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(temporary, stat.S_IMODE(mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)
    return target


def _create_beside(target: Path) -> tuple[Path, int]:
    # O_EXCL with mode 0o666: a name nobody else holds, and the umask applied by the kernel
    # (reading the umask would mean setting it, process-wide).
    while True:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def _sync_folder(folder: Path) -> None:
    # The rename is durable once the folder is on disk; not every system can sync a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
