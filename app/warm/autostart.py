"""Start a warm server for the first ``crag ask`` / ``crag ingest`` that finds none.

As build tools keep a daemon (the Gradle daemon, the Bazel server): the first command that finds
no server on its socket starts ``crag serve`` in the background and runs on it once it listens,
so that it costs about what it costs in-process and the next command finds the models loaded.
The server is detached (a session of its own, no terminal, stdin and stdout closed), writes its
log next to its socket (``<socket>.log``, ``0600``, in the same private directory), binds the
same per-directory socket with the same checks as a ``crag serve`` started by hand, loads
nothing before it listens (the first command loads what it needs: a server started for
``crag ask --store a`` must not build the default store), and stops after
:data:`DEFAULT_IDLE_TIMEOUT_S` without a command (``CRAG_SERVE_IDLE_TIMEOUT`` seconds).

Two commands started at once start one server: each takes ``<socket>.lock`` (``flock``) before
it looks again and starts one, and holds it until the server listens; the second finds it
then. ``CRAG_SERVE_AUTOSTART=0`` turns this off (CI, tests); ``--no-server`` starts nothing.

Standard library only, as the rest of the warm client: imported before anything heavy.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from crag.app.warm.sockets import (
    AUTOSTART_ENV,
    IDLE_TIMEOUT_ENV,
    check_private_directory,
    connect_trusted,
)

DEFAULT_IDLE_TIMEOUT_S = 900.0
"""How long a server a command started waits for the next command before it stops."""

READY_TIMEOUT_S = 60.0
"""How long a command waits for the server it started to listen, then runs in-process."""

OFF_VALUES = frozenset({"0", "off", "false", "no"})

SERVE_SCRIPT = "import sys; from crag.app.cli.commands import main; sys.exit(main(sys.argv[1:]))"
"""``crag serve``, run with ``python -P``: the working directory is not put on ``sys.path``,
so a ``crag`` or ``langchain`` folder in it is never imported in its place."""


class AutostartError(ValueError):
    """The warm server could not be started, or did not listen in time (one line)."""


def autostart_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a command that finds no server may start one (``CRAG_SERVE_AUTOSTART``)."""
    source = os.environ if environ is None else environ
    return source.get(AUTOSTART_ENV, "").strip().lower() not in OFF_VALUES


def idle_timeout(environ: Mapping[str, str] | None = None) -> float:
    """The idle timeout of a server started by a command: ``CRAG_SERVE_IDLE_TIMEOUT`` seconds.

    Raises:
        AutostartError: The variable is set to something else than a positive number.
    """
    source = os.environ if environ is None else environ
    text = source.get(IDLE_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_IDLE_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise AutostartError(
            f"environment variable {IDLE_TIMEOUT_ENV} must be a number of seconds above 0, "
            f"not {text[:40]!r}"
        )
    return seconds


def duration_text(seconds: float) -> str:
    """``15 min``, ``90 s``: how long a server waits idle, for its messages."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def log_path(sock: Path) -> Path:
    """Where a started server writes its log: next to its socket, in its private directory."""
    return sock.with_name(sock.name + ".log")


def lock_path(sock: Path) -> Path:
    """The lock a command holds while it starts the server of ``sock``."""
    return sock.with_name(sock.name + ".lock")


def start_server(sock: Path, cwd: Path, *, connect_timeout: float) -> socket.socket:
    """Start ``crag serve`` for ``sock`` in ``cwd`` (or find the one another command started).

    Returns a connection to it, checked as :func:`connect_trusted` checks any.

    Raises:
        AutostartError: It could not be started, exited, or did not listen in time.
        SocketTrustError: The socket's directory or the socket is not this user's own.
    """
    seconds = idle_timeout()
    check_private_directory(sock.parent, create=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    with _start_lock(lock_path(sock), deadline):
        conn = connect_trusted(sock, timeout=connect_timeout)
        if conn is not None:  # another command started it while this one waited
            return conn
        sys.stderr.write(
            "crag: starting a warm server for this directory (the next commands here are "
            f"faster; it stops after {duration_text(seconds)} idle)\n"
        )
        sys.stderr.flush()
        process = _spawn(sock, cwd, seconds)
        return _wait_until_listening(sock, process, deadline, connect_timeout)


@contextlib.contextmanager
def _start_lock(path: Path, deadline: float) -> Iterator[None]:
    """Hold ``path``'s ``flock`` (released when the process ends, however it ends)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise AutostartError(f"cannot open the lock {path}: {exc.strerror or exc}") from exc
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise AutostartError(
                        f"another crag command has been starting it for {READY_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _spawn(sock: Path, cwd: Path, seconds: float) -> subprocess.Popen[bytes]:
    """``crag serve --idle-timeout SECONDS --no-preload``, detached, its log to a file."""
    log = log_path(sock)
    try:
        log_fd = os.open(
            log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as exc:
        raise AutostartError(f"cannot write its log {log}: {exc.strerror or exc}") from exc
    command = [sys.executable, "-P", "-c", SERVE_SCRIPT, "serve"]
    command += ["--idle-timeout", f"{seconds:g}", "--no-preload"]
    try:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,  # no terminal: its Ctrl-C and hang-up are not the server's
            close_fds=True,
        )
    except OSError as exc:
        raise AutostartError(f"cannot run {sys.executable}: {exc.strerror or exc}") from exc
    finally:
        os.close(log_fd)


def _wait_until_listening(
    sock: Path, process: subprocess.Popen[bytes], deadline: float, connect_timeout: float
) -> socket.socket:
    """A connection to the started server once it listens.

    Raises:
        AutostartError: It exited first, or did not listen before ``deadline``.
    """
    while True:
        conn = connect_trusted(sock, timeout=connect_timeout)
        if conn is not None:
            return conn
        code = process.poll()
        if code is not None:
            raise AutostartError(
                f"it exited with code {code} before listening ({_last_line(log_path(sock))})"
            )
        if time.monotonic() >= deadline:
            raise AutostartError(
                f"it did not listen within {READY_TIMEOUT_S:g} s (its log: {log_path(sock)})"
            )
        time.sleep(0.05)


def _last_line(log: Path) -> str:
    """The last line the server wrote (its one-line error), else where its log is."""
    try:
        with log.open("rb") as stream:
            stream.seek(max(0, log.stat().st_size - 2000))
            lines = stream.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        lines = []
    return lines[-1].strip() if lines else f"its log: {log}"
