"""The warm client and server trust only their own user's socket, and never replace a file.

Real Unix sockets and real ``crag`` processes; the "server" a client meets here is a listener
the test runs, as a hostile or broken one would be. No model is loaded: each command either
talks to that listener or is refused before anything heavy is imported.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = [
    sys.executable,
    "-c",
    "import sys; from crag.app.cli.console import main; sys.exit(main())",
]
NOBODY = 65534
ESCAPES = "\x1b]0;owned\x07\x1b[31mred\u202etxt.exe"
"""What a hostile listener sends: a title change (OSC), a colour, a right-to-left override."""


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A short private directory (0700) for sockets (a socket's path must be short)."""
    path = Path(tempfile.mkdtemp(prefix="crag-t-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _environment(sock: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env["CRAG_SERVE_AUTOSTART"] = "0"  # a client that finds no server starts none
    return {**env, "PYTHONPATH": str(ROOT), "CRAG_SERVE_SOCKET": str(sock), **extra}


def _client(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``crag ARGS`` through its real entry point (the warm client first)."""
    return subprocess.run(
        [*CLIENT, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


class FakeListener:
    """A listener on a real Unix socket that records one request and answers as scripted."""

    def __init__(self, path: Path, replies: list[dict[str, object]], hang: bool = False) -> None:
        self.path = path
        self.replies = replies
        self.hang = hang
        self._released = threading.Event()
        self.received = b""
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._server.settimeout(60)
        self._thread = threading.Thread(target=self._answer, daemon=True)
        self._thread.start()

    def _answer(self) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(30)
            while b"\n" not in self.received:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                self.received += chunk
            for reply in self.replies:
                conn.sendall((json.dumps(reply) + "\n").encode())
            if self.hang:  # a stuck server: keeps the connection open, says nothing
                self._released.wait(120)

    def close(self) -> None:
        self._released.set()
        self._server.close()
        self._thread.join(timeout=5)


def test_a_listener_s_escape_sequences_reach_the_terminal_escaped(
    private_dir: Path, tmp_path: Path
) -> None:
    listener = FakeListener(
        private_dir / "s.sock",
        [{"accepted": True}, {"out": ESCAPES + "\n"}, {"err": ESCAPES + "\n"}, {"exit": 0}],
    )
    try:
        done = _client("ask", "Q?", env=_environment(listener.path), cwd=tmp_path)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr
    for stream in (done.stdout, done.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
        assert "\\x1b]0;owned\\x07\\x1b[31mred\\u202etxt.exe" in stream


def test_the_request_carries_no_setting_value(private_dir: Path, tmp_path: Path) -> None:
    listener = FakeListener(private_dir / "s.sock", [{"refused": "test"}])
    env = _environment(
        listener.path,
        CRAG_THREADS_DB="postgresql://crag:hunter2-pw@db.example/crag",
        CRAG_LLM_API_KEY="sk-live-secret-key",
    )
    try:
        # refused: the client then runs in-process, where --store of a missing store fails fast
        _client("ask", "--store", str(tmp_path / "missing"), "Q?", env=env, cwd=tmp_path)
    finally:
        listener.close()
    request = json.loads(listener.received.split(b"\n", 1)[0])
    assert request["argv"] == ["ask", "--store", str(tmp_path / "missing"), "Q?"]
    assert b"hunter2-pw" not in listener.received
    assert b"sk-live-secret-key" not in listener.received
    assert set(request["env"]) == {"CRAG_THREADS_DB", "CRAG_LLM_API_KEY"}
    assert all(v.startswith("sha256:") for v in request["env"].values())


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_serve_never_replaces_what_is_not_its_socket(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "notes.txt"
    if kind == "file":
        target.write_text("my notes\n")
    else:
        target.mkdir()
    env = _environment(Path("notes.txt"))
    done = subprocess.run(
        [sys.executable, "-m", "crag.app.cli.commands", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a socket; refusing to replace it" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    if kind == "file":
        assert target.read_text() == "my notes\n"
    else:
        assert target.is_dir()


def test_serve_refuses_a_directory_others_may_write(tmp_path: Path) -> None:
    from crag.app.warm.sockets import SocketTrustError, connect_trusted

    open_to_all = tmp_path / "open-to-all"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    done = subprocess.run(
        [sys.executable, "-m", "crag.app.cli.commands", "serve"],
        cwd=tmp_path,
        env=_environment(open_to_all / "s.sock"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "may be written by other users" in lines[0], done.stderr
    with pytest.raises(SocketTrustError, match="may be written by other users"):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.bind(str(open_to_all / "other.sock"))  # someone's socket in the open directory
        try:
            connect_trusted(open_to_all / "other.sock", timeout=1)
        finally:
            probe.close()


def test_a_stale_socket_is_replaced(private_dir: Path) -> None:
    from crag.app.warm.server import WarmServer, WarmServerError
    from crag.app.warm.sockets import connect_trusted

    path = private_dir / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nothing listens: a server that died
    server = WarmServer(path, lambda argv: 0)
    server.bind()
    try:
        assert connect_trusted(path, timeout=1) is not None
        with pytest.raises(WarmServerError, match="already listens"):
            WarmServer(path, lambda argv: 0).bind()
    finally:
        assert server._listener is not None
        server._listener.close()


NOBODY_LISTENER = """
import os, socket, sys
os.setgid(65534); os.setuid(65534)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o666)
server.listen(1)
print("ready", flush=True)
server.settimeout(60)
received = 0
for _ in range(2):  # the test's probe, then the client's
    try:
        conn, _ = server.accept()
        conn.settimeout(5)
        while chunk := conn.recv(65536):
            received += len(chunk)
    except OSError:
        pass
print("received", received, flush=True)
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a listener as another user")
def test_a_listener_running_as_another_user_is_not_trusted(private_dir: Path) -> None:
    """The socket file is ours and in our private directory; its process is not ours."""
    from crag.app.warm.sockets import SocketTrustError, connect_trusted

    theirs = Path(tempfile.mkdtemp(prefix="crag-n-"))
    os.chown(theirs, NOBODY, NOBODY)
    try:
        listener = subprocess.Popen(
            [sys.executable, "-c", NOBODY_LISTENER, str(theirs / "s.sock")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "ready"
        planted = private_dir / "s.sock"
        os.rename(theirs / "s.sock", planted)  # the same socket, now at our path
        os.chown(planted, 0, 0)
        with pytest.raises(SocketTrustError, match="runs as another user"):
            connect_trusted(planted, timeout=5)
        done = _client(
            "ask",
            "--store",
            str(private_dir / "missing"),
            "Q?",
            env=_environment(planted),
            cwd=private_dir,
        )
        assert "not using the warm server" in done.stderr and "another user" in done.stderr
        out, _ = listener.communicate(timeout=60)
        assert out.strip() == "received 0"  # nothing was sent to it
    finally:
        if listener.poll() is None:
            listener.kill()
        shutil.rmtree(theirs, ignore_errors=True)


def test_a_server_that_does_not_answer_leaves_the_command_to_the_client(
    private_dir: Path, tmp_path: Path
) -> None:
    listener = FakeListener(private_dir / "s.sock", [], hang=True)
    started = time.monotonic()
    try:
        done = _client(
            "ask",
            "--store",
            str(tmp_path / "missing"),
            "Q?",
            env=_environment(listener.path),
            cwd=tmp_path,
        )
    finally:
        listener.close()
    assert listener.received  # it was asked first
    assert time.monotonic() - started < 60  # it waited about 10 s for an answer, not forever
    # then the command ran here: the in-process CLI's own one-line error for a missing store
    assert done.returncode == 2 and "no vector store" in done.stderr, done.stderr


NOBODY_CLIENT = """
import json, os, socket, sys
os.setgid(65534); os.setuid(65534)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.settimeout(20)
conn.connect(sys.argv[1])
reply = b""
try:  # the server may hang up before the request is even sent: that is a refusal too
    conn.sendall(sys.argv[2].encode() + b"\\n")
    while chunk := conn.recv(65536):
        reply += chunk
except OSError:
    pass
print(json.dumps(reply.decode()))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another user")
def test_the_server_drops_a_client_of_another_user(tmp_path: Path) -> None:
    """Even where a careless mode lets another user reach the socket, nothing runs for it."""
    from crag.app.warm.server import WarmServer, deployment_environment

    shared = Path(tempfile.mkdtemp(prefix="crag-t-"))
    shared.chmod(0o711)  # others may pass through, not write: still a private directory
    ran: list[list[str]] = []

    def run_cli(argv: Sequence[str]) -> int:
        ran.append(list(argv))
        return 0

    server = WarmServer(shared / "s.sock", run_cli)
    server.bind()
    (shared / "s.sock").chmod(0o666)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        request = {
            "argv": ["ask", "Q?"],
            "cwd": "/",
            "env": deployment_environment(),  # what a matching client would send
            "tty": {},
        }
        done = subprocess.run(
            [sys.executable, "-c", NOBODY_CLIENT, str(shared / "s.sock"), json.dumps(request)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == ""  # closed without a word
        assert ran == []
    finally:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stop:
            stop.connect(str(shared / "s.sock"))
            stop.sendall(b'{"stop": true}\n')
            stop.recv(1024)
        serving.join(timeout=10)
        shutil.rmtree(shared, ignore_errors=True)
