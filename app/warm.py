"""A warm CLI: ``crag serve`` keeps the models loaded; ``crag ask`` and ``crag ingest`` use it.

Most of a cold ``crag ask`` is spent importing torch and loading the embedder, the evaluator
and the generator again. ``crag serve`` loads them once and listens on a Unix socket
(``.crag/serve.sock`` in the directory it was started from, or ``CRAG_SERVE_SOCKET``; only the
user who started it may connect: the socket is created mode 0600). While it runs, ``crag ask``
and ``crag ingest`` send their command line to it and print what it streams back: the same
output, the same exit code, as when they run in-process. When no server answers, or it was
started with other deployment settings (``CRAG_*`` variables) than the client's, they run
in-process as before. ``crag serve --stop`` stops it.

Protocol, one JSON object a line: the client sends ``{"argv", "cwd", "env", "tty"}`` (or
``{"stop": true}``); the server answers with ``{"out": text}`` and ``{"err": text}`` chunks and
a final ``{"exit": code}``, or ``{"refused": reason}`` when the client must run in-process.
A client that goes away (Ctrl-C) cancels its run: the server interrupts it the way Ctrl-C does
in-process. Commands run one at a time, in the server's main thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)

SOCKET_ENV = "CRAG_SERVE_SOCKET"
"""Where the warm server listens (default: ``.crag/serve.sock`` under the working directory)."""

DEFAULT_SOCKET = ".crag/serve.sock"

WARM_COMMANDS = frozenset({"ask", "ingest"})
"""The subcommands a running ``crag serve`` answers."""

NO_SERVER_OPTION = "--no-server"
"""Given to ``crag ask`` or ``crag ingest``: run in-process even when a server is running."""

MAX_REQUEST_BYTES = 1_000_000


class WarmServerError(RuntimeError):
    """``crag serve`` cannot start or stop (the message says why)."""


def socket_path() -> Path:
    """The socket ``crag serve`` listens on and the clients try."""
    configured = os.environ.get(SOCKET_ENV, "").strip()
    return Path(configured or DEFAULT_SOCKET).expanduser().absolute()


SECRET_VARIABLES = frozenset({"CRAG_LLM_API_KEY"})
"""Variables whose value never crosses the socket: only a digest of it does."""


def deployment_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``CRAG_*`` variables: a server answers only clients that agree with it on them.

    A secret (:data:`SECRET_VARIABLES`) is compared by its SHA-256 digest: the server uses its
    own environment's key, and the key itself never travels.
    """
    source = os.environ if environ is None else environ
    return {
        k: f"sha256:{hashlib.sha256(v.encode()).hexdigest()}" if k in SECRET_VARIABLES else v
        for k, v in source.items()
        if k.startswith("CRAG_") and k != SOCKET_ENV
    }


def _send(conn: socket.socket, message: Mapping[str, Any]) -> None:
    conn.sendall((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8"))


def _messages(conn: socket.socket) -> Iterator[dict[str, Any]]:
    buffer = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def _connect(path: Path, timeout: float | None = None) -> socket.socket | None:
    if not path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    try:
        conn.connect(str(path))
    except OSError:  # a socket left by a server that died, or one we may not use
        conn.close()
        return None
    conn.settimeout(None)
    return conn


def run_on_server(argv: Sequence[str]) -> int | None:
    """Run ``crag argv`` on a running warm server; ``None`` when it must run in-process."""
    if not argv or argv[0] not in WARM_COMMANDS or NO_SERVER_OPTION in argv:
        return None
    conn = _connect(socket_path(), timeout=2.0)
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
            _send(conn, request)
            for message in _messages(conn):
                if "refused" in message:
                    logger.info("crag serve: %s; running in-process", message["refused"])
                    return None
                if "out" in message:
                    sys.stdout.write(message["out"])
                    sys.stdout.flush()
                elif "err" in message:
                    sys.stderr.write(message["err"])
                    sys.stderr.flush()
                elif "exit" in message:
                    return int(message["exit"])
        except KeyboardInterrupt:
            conn.shutdown(socket.SHUT_RDWR)  # the server interrupts the run
            sys.stderr.write("crag: interrupted\n")
            return 130
        except OSError as exc:
            sys.stderr.write(f"crag: error: the warm server went away ({exc})\n")
            return 1
    sys.stderr.write("crag: error: the warm server closed the connection without an answer\n")
    return 1


def stop_server() -> int | None:
    """Ask the running server to stop: how many commands it answered; ``None`` when none runs."""
    conn = _connect(socket_path(), timeout=5.0)
    if conn is None:
        return None
    with conn:
        _send(conn, {"stop": True})
        for message in _messages(conn):
            if "exit" in message:
                return int(message.get("answered", 0))
    return 0


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


class WarmServer:
    """Answers CLI commands on a Unix socket, one at a time, with the models kept loaded."""

    def __init__(self, path: Path, run_cli: Callable[[Sequence[str]], int]) -> None:
        self.path = path
        self.run_cli = run_cli
        self.environment = deployment_environment()
        self.answered = 0
        """Commands answered so far (``crag serve --stop`` reports it)."""
        self._listener: socket.socket | None = None

    def bind(self) -> None:
        """Create the socket (0600); refuse when another server answers on it."""
        probe = _connect(self.path, timeout=2.0)
        if probe is not None:
            probe.close()
            raise WarmServerError(f"a crag server already listens on {self.path}")
        if len(str(self.path).encode()) > 100:
            raise WarmServerError(
                f"the socket path {self.path} is too long for a Unix socket; set "
                f"{SOCKET_ENV} to a shorter one"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # left by a server that died
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old_umask)
        listener.listen(8)
        self._listener = listener

    def serve_forever(self) -> None:
        """Answer requests until ``{"stop": true}`` arrives or the process is interrupted."""
        assert self._listener is not None, "bind() first"
        try:
            while True:
                conn, _ = self._listener.accept()
                with conn:
                    if not self._handle(conn):
                        return
        finally:
            self._listener.close()
            self.path.unlink(missing_ok=True)

    def _handle(self, conn: socket.socket) -> bool:
        """Answer one connection; ``False`` when the server should stop."""
        try:
            request = next(_messages(conn), None)
        except (OSError, ValueError):
            return True
        if request is None:
            return True
        if request.get("stop"):
            _send(conn, {"exit": 0, "answered": self.answered})
            return False
        refusal = self._refusal(request)
        if refusal:
            _send(conn, {"refused": refusal})
            return True
        code = self._run(conn, request)
        self.answered += 1
        with contextlib.suppress(OSError):
            _send(conn, {"exit": code})
        return True

    def _refusal(self, request: Mapping[str, Any]) -> str:
        argv = request.get("argv")
        if not isinstance(argv, list) or not argv or argv[0] not in WARM_COMMANDS:
            return "only `crag ask` and `crag ingest` run on the warm server"
        if request.get("env") != self.environment:
            return "it was started with other CRAG_* settings than this shell's"
        if not Path(str(request.get("cwd", ""))).is_dir():
            return "the client's working directory is not visible to the server"
        return ""

    def _run(self, conn: socket.socket, request: Mapping[str, Any]) -> int:
        tty = request.get("tty") or {}
        lock = threading.Lock()
        out = _SocketStream(conn, "out", bool(tty.get("out")), lock)
        err = _SocketStream(conn, "err", bool(tty.get("err")), lock)
        finished = threading.Event()
        watcher = threading.Thread(target=_interrupt_when_gone, args=(conn, finished), daemon=True)
        previous_cwd = os.getcwd()
        os.chdir(str(request["cwd"]))
        try:
            with _redirected(out, err):
                watcher.start()
                try:
                    return self.run_cli([str(a) for a in request["argv"]])
                except KeyboardInterrupt:
                    return 130
                except SystemExit as exc:  # argparse's usage errors and --help
                    return exc.code if isinstance(exc.code, int) else 2
                finally:
                    finished.set()
        finally:
            os.chdir(previous_cwd)


def _interrupt_when_gone(conn: socket.socket, finished: threading.Event) -> None:
    """Interrupt the running command (as Ctrl-C would) if its client disconnects first."""
    try:
        while conn.recv(1024):
            pass
    except OSError:
        pass
    if not finished.is_set():
        logger.info("crag serve: the client went away; interrupting its run")
        os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def _redirected(out: TextIO | Any, err: TextIO | Any) -> Iterator[None]:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield
