"""Output that cannot be written (``| head``, ``> /dev/full``, a closed stdout): one line.

Shared by the entry point (:mod:`crag.app.cli.console`) and the commands
(:mod:`crag.app.cli.commands`); the standard library only, so the entry point stays light.
"""

from __future__ import annotations

import errno
import io
import os
import sys

__all__ = ["ClosedOutput", "discard_pending_output", "os_error_text"]


class ClosedOutput(io.TextIOBase):
    """Standard output of a process started with it closed (``crag ask … >&-``).

    Python leaves ``sys.stdout`` as ``None`` then, and ``print`` drops the text silently; this
    refuses it, so that a command with output fails with one line instead.
    """

    def write(self, text: str) -> int:
        """Refuse ``text``: there is nowhere to write it."""
        raise OSError(errno.EBADF, "standard output is closed")


def os_error_text(exc: OSError) -> str:
    """One line for ``exc``: what failed and where, never a traceback."""
    if isinstance(exc, BrokenPipeError):
        return "the output was closed before all of it was written (broken pipe)"
    if exc.errno == errno.ENOSPC:
        where = f" (writing {exc.filename})" if exc.filename else ""
        return f"no space left on the device{where}; free some space and run it again"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason}: {exc.filename}" if exc.filename else reason


def discard_pending_output() -> None:
    """Drop output that cannot be written, so the interpreter's exit does not try again.

    Its last flush would otherwise print ``Exception ignored … BrokenPipeError``.
    """
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            sys.stdout = ClosedOutput()
