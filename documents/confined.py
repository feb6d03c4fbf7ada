"""Read a file only if what was opened lies in a directory (the served ``ingest_root``).

Checking a path and then opening it leaves a gap: a symbolic link swapped in between (by anyone
who may write under the root) makes the open follow it outside, after the check passed. So the
file is opened first, and what was opened is checked: its device and inode must be those of
the file the path now resolves to inside the root. The bytes are then read from that same
descriptor. A link swapped before the open is followed, and the opened file's identity is not
that of any file inside the root; a link swapped back after the open leaves the path naming a
file other than the one opened. Either way the file is refused.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from crag.documents.document import LoaderError
from crag.documents.loaders import real_path, unreadable

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
"""A FIFO opened without ``O_NONBLOCK`` waits for a writer, forever; a terminal is not ours."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _refused(path: Path, root: Path) -> LoaderError:
    return LoaderError(
        f"{path}: refused: it leads outside {root}, the only directory ingested from"
    )


def _open(path: Path) -> int:
    """Open ``path`` for reading (following links); each failure as the loaders word it."""
    try:
        return os.open(path, _OPEN_FLAGS | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise unreadable(path, exc) from exc


def _check_kind(mode: int, path: Path) -> None:
    """Refuse anything but a regular file."""
    if stat.S_ISDIR(mode):
        raise LoaderError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise LoaderError(f"{path}: skipped: not a regular file")


def _check_opened(fd: int, path: Path, root: Path) -> None:
    """Refuse unless ``fd`` is a regular file and the one ``path`` resolves to inside ``root``."""
    opened = os.fstat(fd)
    _check_kind(opened.st_mode, path)
    real = real_path(path)
    if not _inside(real, root):
        raise _refused(path, root)
    try:
        named = os.stat(real)
    except OSError:
        raise _refused(path, root) from None
    if (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino):
        raise _refused(path, root)


def read_inside(path: Path, root: Path) -> bytes:
    """The bytes of the file ``path`` names, provided it lies in ``root`` (links followed).

    Args:
        path: The file.
        root: The directory it must lie in, resolved (no symbolic links in it).

    Raises:
        LoaderError: The file leads outside ``root`` (now, or when it was opened), is not a
            regular file (never read: a FIFO or device is opened without blocking and closed),
            is missing, or cannot be read.
    """
    if not _inside(real_path(path), root):  # the plain case: refused without opening anything
        raise _refused(path, root)
    # a FIFO or device is never opened (see the loaders), unless swapped in just now; a
    # missing file, a loop...: opening says which
    with contextlib.suppress(OSError):
        _check_kind(os.stat(path).st_mode, path)
    fd = _open(path)
    try:
        _check_opened(fd, path, root)
        with os.fdopen(fd, "rb", closefd=False) as file:
            return file.read()
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read file ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
