"""The first ``crag ask`` with no warm server starts one in the background, as build tools do.

Real processes: ``crag`` through its real entry point, and the ``crag serve`` it starts,
detached, in a private socket directory of the test's. Each test stops (and, failing that,
kills) every server it started, so the suite leaves none behind. The cheap commands ask about
a store that does not exist: the server answers them with the same one-line error as
in-process, without loading a model. A server's own count of the commands it answered (``crag
serve --stop``) tells whether a command ran on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration_support import build_small_store
from tests.warm_support import CLIENT, ROOT, crag

pytestmark = pytest.mark.integration

QUESTION = "Who painted the Mona Lisa?"
STARTING = "starting a warm server"
MISSING_STORE = ("ask", "--store", "missing", "Q?")
NOBODY = 65534


def _servers(sock: Path) -> list[int]:
    """The ``crag serve`` processes whose environment names ``sock`` (this user's, from /proc)."""
    wanted = f"CRAG_SERVE_SOCKET={sock}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if b"serve" in argv and wanted in environ:
            found.append(int(entry.name))
    return found


def _wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.2)
    return False


class Place:
    """A working directory, its private socket directory and the clients' environment."""

    def __init__(self, cwd: Path, sockets: Path) -> None:
        self.cwd = cwd
        self.sock = sockets / "serve.sock"
        base = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
        self.env = {**base, "PYTHONPATH": str(ROOT), "CRAG_SERVE_SOCKET": str(self.sock)}

    def crag(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return crag(*args, env={**self.env, **extra}, cwd=self.cwd, timeout=300)

    def stop(self) -> str:
        """``crag serve --stop``'s line (autostart off: stopping must start nothing)."""
        return self.crag("serve", "--stop", CRAG_SERVE_AUTOSTART="0").stderr


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    sockets = Path(tempfile.mkdtemp(prefix="crag-a-"))  # short: a socket's path must be
    where = Place(tmp_path, sockets)
    try:
        yield where
    finally:
        for pid in _servers(where.sock):  # what the test left running: SIGTERM stops it
            os.kill(pid, signal.SIGTERM)
        _wait_for(lambda: not _servers(where.sock), 30)
        for pid in _servers(where.sock):  # one that would not stop
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(sockets, ignore_errors=True)


def test_the_first_ask_starts_a_server_and_the_second_is_served_warm(place: Place) -> None:
    build_small_store(place.cwd / "store", others=10)
    ask = ("ask", "--store", "store", QUESTION)
    first = place.crag(*ask)
    assert first.returncode == 0, first.stderr
    assert "Leonardo" in first.stdout
    assert [line for line in first.stderr.splitlines() if STARTING in line] != []
    assert len(_servers(place.sock)) == 1
    log = place.sock.with_name("serve.sock.log")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "ready on" in log.read_text()

    second = place.crag(*ask)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout and STARTING not in second.stderr
    assert "after answering 2 command(s)" in place.stop()  # both ran on the server
    assert _wait_for(lambda: not _servers(place.sock), 30)


def test_two_first_asks_at_once_start_one_server(place: Place) -> None:
    clients = [
        subprocess.Popen(
            [*CLIENT, *MISSING_STORE],
            cwd=place.cwd,
            env=place.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [client.communicate(timeout=300) for client in clients]
    assert [client.returncode for client in clients] == [2, 2], outputs
    assert all("no vector store" in err for _, err in outputs), outputs
    assert sum(STARTING in err for _, err in outputs) == 1, outputs
    assert len(_servers(place.sock)) == 1
    assert "stopped after answering" in place.stop()


def test_an_autostarted_server_stops_when_idle(place: Place) -> None:
    done = place.crag(*MISSING_STORE, CRAG_SERVE_IDLE_TIMEOUT="2")
    assert done.returncode == 2 and "no vector store" in done.stderr, done.stderr
    assert STARTING in done.stderr and "2 s idle" in done.stderr
    assert _servers(place.sock)
    assert _wait_for(lambda: not _servers(place.sock), 60), "it did not stop when idle"
    assert not place.sock.exists()
    assert "without a command" in place.sock.with_name("serve.sock.log").read_text()


def test_no_server_and_the_switch_start_nothing(place: Place) -> None:
    for done in (
        place.crag("ask", "--no-server", "--store", "missing", "Q?"),
        place.crag(*MISSING_STORE, CRAG_SERVE_AUTOSTART="0"),
    ):
        assert done.returncode == 2 and "no vector store" in done.stderr, done.stderr
        assert STARTING not in done.stderr
        assert not _servers(place.sock) and not place.sock.exists()
    started = place.crag(*MISSING_STORE)  # neither: it starts one
    assert STARTING in started.stderr and _servers(place.sock)


def test_a_socket_or_directory_not_this_user_s_own_is_still_refused(place: Place) -> None:
    """Nothing is started on a socket of another user, nor in a directory others may write."""
    place.sock.parent.chmod(0o777)
    done = place.crag(*MISSING_STORE)
    assert done.returncode == 2 and "no vector store" in done.stderr, done.stderr
    warning = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "could not start a warm server" in warning[0], done.stderr
    assert "may be written by other users" in warning[0]
    assert not _servers(place.sock) and not place.sock.exists()

    place.sock.parent.chmod(0o700)
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    planted.bind(str(place.sock))
    planted.close()  # a dead socket, of another user: never replaced, nothing started there
    os.chown(place.sock, NOBODY, NOBODY)
    done = place.crag(*MISSING_STORE)
    assert done.returncode == 2 and "belongs to another user" in done.stderr, done.stderr
    assert STARTING not in done.stderr and not _servers(place.sock)
    assert place.sock.lstat().st_uid == NOBODY

    place.sock.unlink()  # once it is gone, the next command starts this user's own
    started = place.crag(*MISSING_STORE)
    assert STARTING in started.stderr and _servers(place.sock)
