"""A warm CLI: ``crag serve`` keeps the models loaded; ``crag ask`` and ``crag ingest`` use it.

Most of a cold ``crag ask`` is spent importing torch and loading the embedder, the evaluator
and the generator again. ``crag serve`` loads them once and listens on a Unix socket (one per
directory in this user's private runtime directory, or ``CRAG_SERVE_SOCKET``: see
:mod:`crag.app.warm_socket` for where, and for the checks both ends make on each other). While
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
:data:`REQUEST_TIMEOUT_S` and fit in :data:`MAX_REQUEST_BYTES`. A client that goes away
(Ctrl-C, killed) cancels its run through the run's cancellation token
(:mod:`crag.core.cancellation`): model work and the ingest's embedding stop at their next
batch, and an ingest cancelled so leaves nothing behind. Commands run one at a time, in the
server's main thread; connections are read on threads of their own, so an idle one blocks
nobody.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from crag.app.warm_socket import (
    SOCKET_ENV,
    SocketTrustError,
    check_peer,
    connect_trusted,
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
        if name.startswith("CRAG_") and name != SOCKET_ENV
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
    from crag.app.terminal_text import terminal_text

    return "\r".join(terminal_text(part, multiline=True) for part in str(text).split("\r"))


def _note(message: str, *args: object) -> None:
    """Log why the warm server is not used (a socket that is not this user's is warned of)."""
    logger.info("crag serve: " + message + "; running in-process", *args)


def _open_connection() -> socket.socket | None:
    """A connection to this user's server, or ``None`` (warned) when it cannot be trusted."""
    path = socket_path()
    try:
        return connect_trusted(path, timeout=CONNECT_TIMEOUT_S)
    except SocketTrustError as exc:
        from crag.app.terminal_text import terminal_text

        sys.stderr.write(f"crag: warning: not using the warm server: {terminal_text(exc)}\n")
        return None


def run_on_server(argv: Sequence[str]) -> int | None:
    """Run ``crag argv`` on a running warm server; ``None`` when it must run in-process."""
    if not argv or argv[0] not in WARM_COMMANDS or NO_SERVER_OPTION in argv:
        return None
    conn = _open_connection()
    if conn is None:
        return None
    request = {
        "argv": list(argv),
        "cwd": os.getcwd(),
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
    import time

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
    if not isinstance(request, dict):
        raise _RequestError("the request is not a JSON object")
    return request


class _SocketStream:
    """A text stream that sends what is written to the client as ``{"out"|"err": text}``."""

    def __init__(self, conn: socket.socket, name: str, tty: bool, lock: threading.Lock) -> None:
        self._conn, self._name, self._tty, self._lock = conn, name, tty, lock
        self.encoding = "utf-8"

    def write(self, text: str) -> int:
        if text:
            with self._lock, contextlib.suppress(OSError):
                _send(self._conn, {self._name: text})
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

    def __init__(self, path: Path, run_cli: Callable[[Sequence[str]], int]) -> None:
        self.path = path
        self.run_cli = run_cli
        self.environment = deployment_environment()
        self.answered = 0
        """Commands answered so far (``crag serve --stop`` reports it)."""
        self._listener: socket.socket | None = None
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._busy = threading.Lock()
        """Held from accepting a command until it has finished (or for good, once stopping)."""
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

    def serve_forever(self) -> None:
        """Answer requests until ``{"stop": true}`` arrives or the process is interrupted.

        SIGTERM, and SIGINT unless ignored, stop the server: a command running then is
        interrupted as Ctrl-C interrupts it in-process (its client gets its output and exit
        code), then the signal's own handler runs (``crag serve`` exits 143 or 130).
        """
        assert self._listener is not None, "bind() first"
        accepter = threading.Thread(target=self._accept_forever, name="crag-accept", daemon=True)
        restore = self._handle_stop_signals()
        try:
            accepter.start()
            while True:
                job = self._next_job()
                if job is None:
                    return
                try:
                    self._answer(job)
                finally:
                    self._busy.release()
                if self._stop_signal is not None:
                    signum, handler = self._stop_signal
                    handler(signum, None)
                    return
        finally:
            restore()
            with contextlib.suppress(OSError):
                self._listener.close()
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)

    def _next_job(self) -> _Job | None:
        while True:  # a timeout, so that a signal is seen even where waits are not interrupted
            with contextlib.suppress(queue.Empty):
                return self._jobs.get(timeout=0.5)

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
            conn.settimeout(None)
            if request.get("stop"):
                self._busy.acquire()  # after the running command; never released
                _send(conn, {"exit": 0, "answered": self.answered})
                self._jobs.put(None)
                return
            refusal = self._refusal(request)
            if not refusal and not self._busy.acquire(blocking=False):
                refusal = "it is busy with another command"
            if refusal:
                _send(conn, {"refused": refusal})
                return
            try:
                _send(conn, {"accepted": True})
            except OSError:
                self._busy.release()
                raise
            self._jobs.put(_Job(conn, request))
            handed_over = True
        except (SocketTrustError, _RequestError, OSError) as exc:
            # debug only: the log's handler writes to the stderr of the command running now
            logger.debug("crag serve: dropped a connection: %s", exc)
            if isinstance(exc, _RequestError) and "longer than" in str(exc):
                with contextlib.suppress(OSError):
                    _send(conn, {"refused": str(exc)})
        finally:
            self._readers.release()
            if not handed_over:
                conn.close()

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
        with job.conn:
            code = self._run(job.conn, job.request)
            self.answered += 1
            with contextlib.suppress(OSError):
                _send(job.conn, {"exit": code})

    def _run(self, conn: socket.socket, request: Mapping[str, Any]) -> int:
        """Run the command in the client's directory, its output streamed to the client."""
        from crag.core.cancellation import RunCancelledError, cancellation_scope

        tty = request.get("tty") or {}
        lock = threading.Lock()
        out = _SocketStream(conn, "out", bool(tty.get("out")), lock)
        err = _SocketStream(conn, "err", bool(tty.get("err")), lock)
        finished = threading.Event()
        previous_cwd = os.getcwd()
        os.chdir(str(request["cwd"]))
        try:
            with cancellation_scope() as token, _redirected(out, err):
                watcher = threading.Thread(
                    target=_cancel_when_gone,
                    args=(conn, token.cancel, finished),
                    name="crag-client-watch",
                    daemon=True,
                )
                watcher.start()
                try:
                    return self.run_cli([str(a) for a in request["argv"]])
                except (KeyboardInterrupt, RunCancelledError):
                    return 130
                except SystemExit as exc:  # argparse's usage errors and --help
                    return exc.code if isinstance(exc.code, int) else 2
                finally:
                    finished.set()
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RD)  # wakes the watcher; sending still works
                    watcher.join(timeout=5)
        finally:
            os.chdir(previous_cwd)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _cancel_when_gone(
    conn: socket.socket, cancel: Callable[[], None], finished: threading.Event
) -> None:
    """Cancel the running command's token if its client disconnects before it ends."""
    try:
        while conn.recv(1024):
            pass
    except OSError:
        pass
    if not finished.is_set():
        logger.info("crag serve: the client went away; cancelling its run")
        cancel()


@contextlib.contextmanager
def _redirected(out: TextIO | Any, err: TextIO | Any) -> Iterator[None]:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield
