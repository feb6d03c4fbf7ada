"""A warm CLI: ``crag serve`` keeps the models loaded; ``crag ask`` and ``crag ingest`` use it.

Most of a cold ``crag ask`` is spent importing torch and loading the embedder, the evaluator
and the generator again. ``crag serve`` loads them once and listens on a Unix socket (one per
directory in this user's private runtime directory, or ``CRAG_SERVE_SOCKET``: see
:mod:`crag.app.warm.sockets` for where, and for the checks both ends make on each other). While
it runs, ``crag ask`` and ``crag ingest`` send their command line to it and print what it
streams back: the same output, the same exit code, as when they run in-process. When no server
answers, it is busy with another command, it does not answer in time, or it was started with
other deployment settings (``CRAG_*`` variables) than the client's, they run in-process as
before. ``crag serve --stop`` stops it.

Protocol, one JSON object a line: the client sends ``{"argv", "cwd", "env", "tty"}`` (or
``{"stop": true}``), where ``env`` holds only digests of the ``CRAG_*`` values (the server
compares them with its own; no value, secret or not, crosses the socket); the server answers
``{"accepted": true}`` or ``{"refused": reason}`` at once, then ``{"out": text}`` and
``{"err": text}`` chunks and a final ``{"exit": code}``. A request must arrive within
:data:`REQUEST_TIMEOUT_S` and fit in :data:`MAX_REQUEST_BYTES`, and each of its fields must have
its type (``argv`` a list of strings, ``tty`` an object of booleans, ``stop`` a boolean...):
any other request is refused with a line naming the field, and no request, nor a failing
command, ends the server. Before each command, a store whose files changed since the server
opened it (another process ingested into it) is reopened, so that the answer searches it as it
is on disk. A client that goes away
(Ctrl-C, killed), or reads nothing for :data:`SEND_TIMEOUT_S` while the server has output for
it (stopped), is dropped and its run cancelled through the run's cancellation token
(:mod:`crag.core.cancellation`): model work stops at its next batch or token, and an ingest
before its next batch of chunks. The batch being written when the cancel comes is finished,
so the documents it completes stay, whole, with those completed before; the unfinished ones
are removed: nothing is left half-stored (:mod:`crag.vectorstore.chunk_writer`). Commands run
one at a time, in the server's main thread; connections are read on threads of their own, so
an idle one blocks nobody. ``{"stop": true}`` stops the server once the running command has
finished (nothing is accepted meanwhile), and is answered ``{"exit": 0, "answered": n}``
then, whether or not that client is still there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from crag.app.warm.sockets import (
    CLIENT_ENV,
    SOCKET_ENV,
    SocketTrustError,
    WorkingDirectoryError,
    check_peer,
    connect_trusted,
    current_directory,
    prepare_socket_path,
    socket_path,
)

__all__ = [
    "SOCKET_ENV",
    "WarmServer",
    "WarmServerError",
    "run_on_server",
    "socket_path",
    "stop_server",
]

logger = logging.getLogger(__name__)

DEFAULT_SOCKET = "$XDG_RUNTIME_DIR/crag/serve-<digest of the directory>.sock"
"""How the default socket is named, for ``crag serve --help``."""

WARM_COMMANDS = frozenset({"ask", "ingest"})
"""The subcommands a running ``crag serve`` answers."""

NO_SERVER_OPTION = "--no-server"
"""Given to ``crag ask`` or ``crag ingest``: run in-process even when a server is running."""

MAX_REQUEST_BYTES = 1_000_000
"""The longest request line the server reads; a longer one is refused (the client runs it)."""

REQUEST_TIMEOUT_S = 5.0
"""How long the server waits for a connection's request line before closing it."""

CONNECT_TIMEOUT_S = 2.0
"""How long a client waits to connect."""

ANSWER_TIMEOUT_S = 10.0
"""How long a client waits for the server to accept or refuse its command, then runs it itself.

The server answers at once when it is idle, and refuses at once when busy; no answer in this
time means it is stuck, and the command is safe to run here: the server never starts a command
it has not accepted.
"""

SEND_TIMEOUT_S = 5.0
"""How long the server waits to send to a client before dropping it (and cancelling its run).

A client that reads nothing (stopped, or its output piped to a pager nobody scrolls) must not
hold the server, which runs one command at a time, nor ``crag serve --stop``.
"""

MAX_PENDING_CONNECTIONS = 16
"""Connections read at once; more are closed at once (each costs a thread for a while)."""


class WarmServerError(ValueError):
    """``crag serve`` cannot start or stop (the message says why, in one line)."""


def deployment_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``CRAG_*`` variables, each value as its SHA-256 digest.

    A server answers only clients that agree with it on them; it compares digests with its
    own, so no value (``CRAG_THREADS_DB`` with a password, ``CRAG_LLM_API_KEY``) travels.
    """
    source = os.environ if environ is None else environ
    return {
        name: "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        for name, value in source.items()
        if name.startswith("CRAG_") and name not in CLIENT_ENV
    }


def _send(conn: socket.socket, message: Mapping[str, Any]) -> None:
    """Send one message as one line of ASCII JSON.

    ASCII, so that a file name that is not UTF-8 (a lone surrogate from ``os.fsdecode``)
    travels as an escape and arrives unchanged.
    """
    conn.sendall((json.dumps(message) + "\n").encode("ascii"))


def _messages(conn: socket.socket) -> Iterator[dict[str, Any]]:
    """The JSON objects the peer sends, one a line, until it closes the connection."""
    buffer = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                message = json.loads(line)
                if isinstance(message, dict):
                    yield message


# --- the client -------------------------------------------------------------------------


def _shown(text: object) -> str:
    r"""The server's output made safe for this terminal, as all of crag's output is.

    The server's CLI already escapes what it prints from data; a server that is not crag (or a
    broken one) could send raw escape sequences, so every control and format character is
    escaped again here. Idempotent on crag's own output: its escapes (``\x1b``) are printable.
    Newlines are kept, and carriage returns too (the ingest's progress bar redraws its line).
    """
    from crag.app.cli.terminal_text import terminal_text

    return "\r".join(terminal_text(part, multiline=True) for part in str(text).split("\r"))


def _note(message: str, *args: object) -> None:
    """Log why the warm server is not used (a socket that is not this user's is warned of)."""
    logger.info("crag serve: " + message + "; running in-process", *args)


def _open_connection(argv: Sequence[str], cwd: Path) -> socket.socket | None:
    """A connection to this user's server, or ``None`` (warned) when it cannot be trusted.

    When no server answers, one is started (:mod:`crag.app.warm.autostart`) unless that is
    turned off or the command only asks for its help. A socket or directory that is not this
    user's own is never started on: the command runs in-process, warned.
    """
    path = socket_path()
    try:
        conn = connect_trusted(path, timeout=CONNECT_TIMEOUT_S)
    except SocketTrustError as exc:
        from crag.app.cli.terminal_text import terminal_text

        sys.stderr.write(f"crag: warning: not using the warm server: {terminal_text(exc)}\n")
        return None
    if conn is None and _may_start_server(argv):
        return _started_server(path, cwd)
    return conn


def _may_start_server(argv: Sequence[str]) -> bool:
    """Whether a command that finds no server starts one (not for ``--help``, nor when off)."""
    from crag.app.warm.autostart import autostart_enabled

    return autostart_enabled() and not any(a in ("-h", "--help") for a in argv)


def _started_server(path: Path, cwd: Path) -> socket.socket | None:
    """A connection to a server started for ``path``; ``None`` (said in one line) if none."""
    from crag.app.warm.autostart import AutostartError, start_server

    try:
        return start_server(path, cwd, connect_timeout=CONNECT_TIMEOUT_S)
    except (AutostartError, SocketTrustError, OSError) as exc:
        from crag.app.cli.terminal_text import terminal_text

        sys.stderr.write(
            f"crag: warning: could not start a warm server: {terminal_text(exc)}; "
            "running in-process\n"
        )
        return None


def run_on_server(argv: Sequence[str]) -> int | None:
    """Run ``crag argv`` on a running warm server; ``None`` when it must run in-process.

    A working directory that was deleted ends the command here, with one line and exit code 2,
    before anything heavy is loaded: it could run neither on the server nor in-process.
    """
    if not argv or argv[0] not in WARM_COMMANDS:
        return None
    try:
        cwd = current_directory()
    except WorkingDirectoryError as exc:
        from crag.app.cli.terminal_text import terminal_text

        sys.stderr.write(f"crag: error: {terminal_text(exc)}\n")
        return 2
    if NO_SERVER_OPTION in argv:
        return None
    conn = _open_connection(argv, cwd)
    if conn is None:
        return None
    request = {
        "argv": list(argv),
        "cwd": str(cwd),
        "env": deployment_environment(),
        "tty": {"out": sys.stdout.isatty(), "err": sys.stderr.isatty()},
    }
    with conn:
        try:
            conn.settimeout(ANSWER_TIMEOUT_S)
            _send(conn, request)
            messages = _messages(conn)
            first = next(messages, None)
        except (OSError, ValueError) as exc:  # TimeoutError is an OSError
            _note("no answer in time (%s)", exc)
            return None
        except KeyboardInterrupt:
            sys.stderr.write("crag: interrupted\n")
            return 130
        if first is None or "refused" in first or not first.get("accepted"):
            _note("%s", (first or {}).get("refused", "the server closed the connection"))
            return None
        conn.settimeout(None)
        return _relay(conn, messages)


def _relay(conn: socket.socket, messages: Iterator[dict[str, Any]]) -> int:
    """Print what the server streams for an accepted command; its exit code."""
    try:
        for message in messages:
            if "out" in message:
                sys.stdout.write(_shown(message["out"]))
                sys.stdout.flush()
            elif "err" in message:
                sys.stderr.write(_shown(message["err"]))
                sys.stderr.flush()
            elif "exit" in message:
                code = message["exit"]
                return code if isinstance(code, int) and 0 <= code <= 255 else 1
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)  # the server cancels the run
        sys.stderr.write("crag: interrupted\n")
        return 130
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"crag: error: the warm server went away ({_shown(exc)})\n")
        return 1
    sys.stderr.write("crag: error: the warm server closed the connection without an answer\n")
    return 1


def stop_server() -> int | None:
    """Ask the running server to stop: how many commands it answered; ``None`` when none runs.

    The server finishes the command it is running first.

    Raises:
        WarmServerError: The socket is not this user's own.
    """
    try:
        conn = connect_trusted(socket_path(), timeout=CONNECT_TIMEOUT_S)
    except SocketTrustError as exc:
        raise WarmServerError(str(exc)) from exc
    if conn is None:
        return None
    with conn:
        conn.settimeout(None)
        _send(conn, {"stop": True})
        for message in _messages(conn):
            if "exit" in message:
                return int(message.get("answered", 0))
    return 0


# --- the server -------------------------------------------------------------------------


class _RequestError(ValueError):
    """A connection's request is missing, late, too large or not JSON."""


def _read_request(conn: socket.socket) -> dict[str, Any]:
    """The first line of ``conn`` as a JSON object, read within the time and size limits."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    buffer = bytearray()
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _RequestError(f"no request within {REQUEST_TIMEOUT_S:g} s")
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(65536)
        except TimeoutError as exc:
            raise _RequestError(f"no request within {REQUEST_TIMEOUT_S:g} s") from exc
        if not chunk:
            raise _RequestError("the client closed the connection before its request")
        buffer += chunk
        end = buffer.find(b"\n")
        if end > MAX_REQUEST_BYTES or (end < 0 and len(buffer) > MAX_REQUEST_BYTES):
            raise _RequestError(f"the request is longer than {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(bytes(buffer.split(b"\n", 1)[0]))
    except ValueError as exc:
        raise _RequestError(f"the request is not JSON: {exc}") from exc
    except RecursionError as exc:  # a few bytes of brackets nest deeper than the parser goes
        raise _RequestError("the request is not JSON: it is nested too deeply") from exc
    if not isinstance(request, dict):
        raise _RequestError("the request is not a JSON object")
    problem = _request_problem(request)
    if problem:
        raise _RequestError(problem)
    return request


def _request_problem(request: Mapping[str, Any]) -> str:
    """What is wrong with the type of a field of ``request``, or ``""``.

    Every field the server reads is checked here, before anything uses it: a client that is
    not crag (or a broken one) must get a refusal, not stop the server with a traceback.
    """
    if "stop" in request:
        return "" if isinstance(request["stop"], bool) else "`stop` must be true or false"
    argv = request.get("argv")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return "`argv` must be a list of strings"
    if any("\0" in a for a in argv):
        return "`argv` holds a NUL character, which no command line can"
    if not isinstance(request.get("cwd"), str):
        return "`cwd` must be a string"
    env = request.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        return "`env` must be an object of strings"
    tty = request.get("tty", {})
    if not isinstance(tty, dict) or not all(isinstance(v, bool) for v in tty.values()):
        return "`tty` must be an object of true/false values"
    return ""


class _Client:
    """The connection to the client of the running command, which is dropped if it stops reading.

    Every send waits at most :data:`SEND_TIMEOUT_S` (the connection's timeout). A client that
    reads nothing for that long (stopped with Ctrl-Z or ``kill -STOP``, or its output piped to
    a pager nobody scrolls) would otherwise hold the server's one command thread, and with it
    every other client and ``crag serve --stop``. Such a client, like one that went away, is
    dropped: its run is cancelled, nothing more is sent to it (a message may have been cut
    mid-line), and the connection is shut down, so that it reads to the end when it resumes.
    """

    def __init__(self, conn: socket.socket, cancel: Callable[[], None]) -> None:
        self.conn = conn
        self.cancel = cancel
        """Cancels the client's run (its cancellation token)."""
        self._lock = threading.Lock()
        self.dropped = False

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one message, or drop the client when that fails or times out."""
        failure = self._send_or_drop(message)
        if isinstance(failure, TimeoutError):
            _tell_operator(
                f"crag serve: dropped a client that read nothing for {SEND_TIMEOUT_S:g} s; "
                "its run is cancelled"
            )
        elif failure is not None:  # outside the lock: the log may write to this client
            logger.info("crag serve: the client went away (%s); cancelling its run", failure)

    def _send_or_drop(self, message: Mapping[str, Any]) -> OSError | None:
        """Send ``message`` unless the client was dropped; why it is dropped now, if it is."""
        with self._lock:
            if self.dropped:
                return None
            try:
                _send(self.conn, message)
            except OSError as exc:  # TimeoutError is an OSError
                self.dropped = True
                self.cancel()
                with contextlib.suppress(OSError):
                    self.conn.shutdown(socket.SHUT_RDWR)
                return exc
            return None


class _SocketStream:
    """A text stream that sends what is written to the client as ``{"out"|"err": text}``."""

    def __init__(self, client: _Client, name: str, tty: bool) -> None:
        self._client, self._name, self._tty = client, name, tty
        self.encoding = "utf-8"

    def write(self, text: str) -> int:
        if text:
            self._client.send({self._name: text})
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        raise OSError("a warm-server stream has no file descriptor")


@dataclass
class _Job:
    """An accepted command: its connection (now the main thread's) and its request."""

    conn: socket.socket
    request: dict[str, Any]


class WarmServer:
    """Answers CLI commands on a Unix socket, one at a time, with the models kept loaded."""

    def __init__(
        self,
        path: Path,
        run_cli: Callable[[Sequence[str]], int],
        *,
        idle_timeout: float | None = None,
    ) -> None:
        self.path = path
        self.run_cli = run_cli
        self.idle_timeout = idle_timeout
        """Seconds without a command after which the server stops; ``None``: never."""
        self.environment = deployment_environment()
        self.answered = 0
        """Commands answered so far (``crag serve --stop`` reports it)."""
        self._listener: socket.socket | None = None
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        """Accepted commands for the main thread; ``None`` wakes it to look at :attr:`_stopping`."""
        self._state = threading.Lock()
        """Guards the five fields below."""
        self._running = False
        """A command was accepted and has not finished (others are refused as busy)."""
        self._stopping = False
        """``crag serve --stop`` asked: nothing more is accepted; the loop ends once idle."""
        self._stop_clients: list[socket.socket] = []
        """The ``--stop`` connections, answered once the server has stopped."""
        self._stopped = False
        """The ``--stop`` clients were answered: a later one is answered at once."""
        self._last_active = time.monotonic()
        """When the last command finished (or the server started): the idle timeout's start."""
        self._bound: tuple[int, int] | None = None
        """The socket file's device and inode: the one removed at the end, and no other."""
        self._readers = threading.BoundedSemaphore(MAX_PENDING_CONNECTIONS)
        self._stop_signal: tuple[int, Callable[[int, FrameType | None], Any]] | None = None

    def bind(self) -> None:
        """Create the socket (0600, in a private directory).

        Raises:
            WarmServerError: The path is taken by something that is not a stale socket of
                this user (a file, a directory, a live server), or its directory is not private.
        """
        try:
            prepare_socket_path(self.path)
        except SocketTrustError as exc:
            raise WarmServerError(str(exc)) from exc
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(self.path))
        except OSError as exc:
            listener.close()
            raise WarmServerError(f"cannot listen on {self.path}: {exc.strerror or exc}") from exc
        finally:
            os.umask(old_umask)
        listener.listen(MAX_PENDING_CONNECTIONS)
        self._listener = listener
        with contextlib.suppress(OSError):
            info = self.path.lstat()
            self._bound = (info.st_dev, info.st_ino)

    def serve_forever(self) -> None:
        """Answer requests until ``{"stop": true}`` arrives or the process is interrupted.

        SIGTERM, and SIGINT unless ignored, stop the server: a command running then is
        interrupted as Ctrl-C interrupts it in-process (its client gets its output and exit
        code), then the signal's own handler runs (``crag serve`` exits 143 or 130).
        The ``--stop`` clients are answered last, once the socket is gone.
        """
        assert self._listener is not None, "bind() first"
        accepter = threading.Thread(target=self._accept_forever, name="crag-accept", daemon=True)
        restore = self._handle_stop_signals()
        try:
            accepter.start()
            self._answer_until_stopped()
        finally:
            restore()
            self._remove_socket()
            with contextlib.suppress(OSError):
                self._listener.close()
            self._answer_stop_clients()

    def _remove_socket(self) -> None:
        """Remove the socket file, unless another server has bound its path since.

        Removed before the listener is closed: a command that finds no socket then starts a
        new server, where one that found this socket and nobody accepting would run in-process.
        """
        with contextlib.suppress(OSError):
            info = self.path.lstat()
            if self._bound is None or self._bound == (info.st_dev, info.st_ino):
                self.path.unlink()

    def _answer_until_stopped(self) -> None:
        """Run the accepted commands in turn until stopped (by ``--stop`` or a signal)."""
        while True:
            job = self._next_job()
            if job is not None:
                try:
                    self._answer(job)
                finally:
                    with self._state:
                        self._running = False
                        self._last_active = time.monotonic()
                if self._stop_signal is not None:
                    signum, handler = self._stop_signal
                    handler(signum, None)
                    return
            with self._state:
                if self._stopping and not self._running:
                    return
            if self._stop_when_idle():
                return

    def _stop_when_idle(self) -> bool:
        """Stop accepting when no command came for :attr:`idle_timeout`: whether it stopped.

        Decided under the state lock, as a command is claimed: a command is either claimed
        first (and runs), or refused as the server is stopping (and runs in its client).
        """
        if self.idle_timeout is None:
            return False
        with self._state:
            if self._running or self._stopping:
                return False
            if time.monotonic() - self._last_active < self.idle_timeout:
                return False
            self._stopping = True
        from crag.app.warm.autostart import duration_text

        idle = duration_text(self.idle_timeout)
        _tell_operator(f"crag serve: stopping after {idle} without a command")
        return True

    def _next_job(self) -> _Job | None:
        """The next accepted command; ``None`` after half a second or when woken.

        A timeout, so that a signal is seen even where waits are not interrupted.
        """
        try:
            return self._jobs.get(timeout=0.5)
        except queue.Empty:
            return None

    def _handle_stop_signals(self) -> Callable[[], None]:
        """Remember SIGTERM/SIGINT while a command runs, so the loop stops after it."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        saved: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                continue  # `nohup crag serve &` ignores SIGINT: it stays ignored
            handler = previous if callable(previous) else _raise_interrupt

            def stop(number: int, frame: FrameType | None, handler: Any = handler) -> None:
                self._stop_signal = (number, handler)
                handler(number, frame)

            saved[signum] = previous
            signal.signal(signum, stop)

        def restore() -> None:
            for number, previous in saved.items():
                signal.signal(number, previous)

        return restore

    def _accept_forever(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # the listener was closed: the server is stopping
                return
            if not self._readers.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(
                target=self._take, args=(conn,), name="crag-request", daemon=True
            ).start()

    def _take(self, conn: socket.socket) -> None:
        """Read one connection's request; hand a command to the main thread, or refuse it."""
        handed_over = False
        try:
            check_peer(conn)
            request = _read_request(conn)
            conn.settimeout(SEND_TIMEOUT_S)
            if request.get("stop") is True:
                self._request_stop(conn)
                handed_over = True
                return
            refusal = self._refusal(request) or self._claim()
            if refusal:
                _send(conn, {"refused": refusal})
                return
            try:
                _send(conn, {"accepted": True})
            except OSError:
                with self._state:
                    self._running = False
                raise
            self._jobs.put(_Job(conn, request))
            handed_over = True
        except (SocketTrustError, _RequestError, OSError) as exc:
            # debug only: the log's handler writes to the stderr of the command running now
            logger.debug("crag serve: dropped a connection: %s", exc)
            if isinstance(exc, _RequestError):  # the client may be there to hear why
                with contextlib.suppress(OSError):
                    _send(conn, {"refused": str(exc)})
        finally:
            self._readers.release()
            if not handed_over:
                conn.close()

    def _claim(self) -> str:
        """Take the server for a command: ``""``, or why not (busy, or stopping)."""
        with self._state:
            if self._stopping:
                return "it is stopping"
            if self._running:
                return "it is busy with another command"
            self._running = True
            return ""

    def _request_stop(self, conn: socket.socket) -> None:
        """Stop after the running command; ``conn`` is answered once the server has stopped.

        The stop holds whether or not its client is still there to hear the answer (a
        ``crag serve --stop`` interrupted while it waited): the request was made.
        """
        _tell_operator("crag serve: stopping (asked by `crag serve --stop`)")
        with self._state:
            self._stopping = True
            stopped = self._stopped
            if not stopped:
                self._stop_clients.append(conn)
        if stopped:  # asked while the server was answering the others: answered the same
            self._answer_stop_client(conn)
        self._jobs.put(None)  # wakes the main thread

    def _answer_stop_clients(self) -> None:
        """Tell each ``--stop`` client how many commands were answered (best effort)."""
        with self._state:
            self._stopped = True
            clients, self._stop_clients = self._stop_clients, []
        for conn in clients:
            self._answer_stop_client(conn)

    def _answer_stop_client(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a client gone (interrupted) hears nothing
            _send(conn, {"exit": 0, "answered": self.answered})

    def _refusal(self, request: Mapping[str, Any]) -> str:
        argv = request.get("argv")
        if not isinstance(argv, list) or not argv or argv[0] not in WARM_COMMANDS:
            return "only `crag ask` and `crag ingest` run on the warm server"
        if request.get("env") != self.environment:
            return "it was started with other CRAG_* settings than this shell's"
        cwd = request.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
            return "the client's working directory is not visible to the server"
        return ""

    def _answer(self, job: _Job) -> None:
        """Run an accepted command for its client, then send its exit code."""
        from crag.core.cancellation import cancellation_scope

        with job.conn, cancellation_scope() as token:
            client = _Client(job.conn, token.cancel)
            _reopen_changed_stores()
            code = self._run(client, job.request)
            self.answered += 1
            client.send({"exit": code})

    def _run(self, client: _Client, request: Mapping[str, Any]) -> int:
        """Run the command in the client's directory, its output streamed to the client."""
        tty = request.get("tty", {})  # its type checked by _request_problem
        out = _SocketStream(client, "out", tty.get("out") is True)
        err = _SocketStream(client, "err", tty.get("err") is True)
        previous_cwd = os.getcwd()
        try:
            os.chdir(str(request["cwd"]))
        except OSError as exc:  # removed since the request was read
            err.write(f"crag: error: cannot enter {request['cwd']}: {exc.strerror or exc}\n")
            return 2
        try:
            with _redirected(out, err), _watching(client):
                return self._run_cli(request)
        finally:
            os.chdir(previous_cwd)

    def _run_cli(self, request: Mapping[str, Any]) -> int:
        """The command's exit code, however it ends."""
        from crag.core.cancellation import RunCancelledError

        try:
            return self.run_cli([str(a) for a in request["argv"]])
        except (KeyboardInterrupt, RunCancelledError):
            return 130
        except SystemExit as exc:  # argparse's usage errors and --help
            return exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - a bug of one command must not end the server
            import traceback

            traceback.print_exc()  # to the client's stderr, as in-process
            _tell_operator(f"crag serve: a command failed ({type(exc).__name__}); still serving")
            return 1


def _reopen_changed_stores() -> None:
    """Before a command: drop the opened stores whose files changed since they were opened.

    The server keeps each store it opened (its Chroma client holds the vector index in
    memory); an ingest by another process (``crag ingest --no-server``, or one run in-process
    because the server was busy) is not seen by that client, so its chunks were never found
    and a large one read as a damaged index. A store that changed (one ``stat`` of its SQLite
    file per open store) is closed here and opened again by the command that needs it. A
    failure leaves the stores as they are: the command still runs.
    """
    if "crag.vectorstore.store" not in sys.modules:
        return  # no store opened yet (and chromadb not imported for nothing)
    from crag.vectorstore.store import close_stores, stores_changed_since_opened

    try:
        changed = stores_changed_since_opened()
        if not changed:
            return
        logger.debug("crag serve: reopening changed stores: %s", ", ".join(map(str, changed)))
        graphs = sys.modules.get("crag.app.graphs")
        components = getattr(graphs, "components", None)
        forget = getattr(components, "forget_stores", None)
        if callable(forget):
            forget()
        close_stores()
        from crag.vectorstore.index_health import forget_futile_rebuilds

        forget_futile_rebuilds()
    except Exception as exc:  # noqa: BLE001 - a command is better served stale than not at all
        _tell_operator(f"crag serve: could not reopen the changed stores: {exc}")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _tell_operator(line: str) -> None:
    """Write ``line`` to the server's own stderr (``sys.stderr`` is a client's during a run)."""
    stream = sys.__stderr__
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(line + "\n")
            stream.flush()


@contextlib.contextmanager
def _watching(client: _Client) -> Iterator[None]:
    """Cancel the client's run if it disconnects before the block ends."""
    finished = threading.Event()
    watcher = threading.Thread(
        target=_cancel_when_gone, args=(client, finished), name="crag-client-watch", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        with contextlib.suppress(OSError):
            client.conn.shutdown(socket.SHUT_RD)  # wakes the watcher; sending still works
        watcher.join(timeout=5)


def _cancel_when_gone(client: _Client, finished: threading.Event) -> None:
    """Cancel the running command's token if its client disconnects before it ends.

    The connection's timeout (for sends) applies to this read too: a quiet client is not a
    gone one, so a timeout only means reading again.
    """
    while not finished.is_set():
        try:
            if not client.conn.recv(1024):
                break
        except TimeoutError:
            continue
        except OSError:
            break
    if not finished.is_set():
        logger.info("crag serve: the client went away; cancelling its run")
        client.cancel()


@contextlib.contextmanager
def _redirected(out: TextIO | Any, err: TextIO | Any) -> Iterator[None]:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield
