"""Writing a report file all at once or not at all (private helper of :mod:`eigprec.audit.cli`).

A report written straight into its file and interrupted (a full disk, a signal) leaves half a
file where the previous report was. Here the text goes to a temporary file in the same folder,
which then replaces the target in one step (``os.replace``, atomic on POSIX within a file
system): readers see the old file or the new one. Targets that are not regular files
(``/dev/stdout``, a FIFO, ``/dev/full``) cannot be replaced and are written directly.

(The library has no shared helper for this yet; issue 47 adds one, and this one should then
give way to it.)
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

__all__ = ["write_text"]


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically where ``path`` is, or will be, a file.

    A new file gets the permissions ``open`` would give it (``0o666`` less the umask); a
    file replaced keeps its own.

    Args:
        path: the target; its folder must exist.
        text: what the file will hold.

    Raises:
        OSError: where the text cannot be written; the target is then as it was, and no
            temporary file is left behind.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> write_text(str(folder / "a.md"), "# report\\n")
        >>> (folder / "a.md").read_text(), [p.name for p in folder.iterdir()]
        ('# report\\n', ['a.md'])
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    # The process's umask, read without changing it where Linux says it (/proc), else by
    # setting and restoring it (a moment's change that no file creation can fall into here:
    # the audit writes its reports after the script has ended).
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
