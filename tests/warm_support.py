"""Helpers for tests of ``crag serve``: the real client, a raw protocol client, a big file.

Also a real ``crag serve`` whose embedder hashes words instead of running a model
(:func:`hash_server`), so that it starts in seconds and its batches take as long as a test needs.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT = [
    sys.executable,
    "-c",
    "import sys; from crag.app.cli.console import main; sys.exit(main())",
]
"""``crag`` through its real entry point: the warm client first, the CLI in-process after."""


def crag(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``crag ARGS`` to the end."""
    return subprocess.run(
        [*CLIENT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def raw_request(
    env: dict[str, str], cwd: Path, argv: list[str], *, answer_within: float = 15
) -> list[dict[str, Any]]:
    """Send one command to the server as the client does; every message it answers with.

    The first answer (accepted or refused) must come within ``answer_within`` seconds.
    """
    from crag.app.warm.server import deployment_environment

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(answer_within)
    conn.connect(env["CRAG_SERVE_SOCKET"])
    request = {
        "argv": argv,
        "cwd": str(cwd),
        "env": deployment_environment(env),
        "tty": {"out": False, "err": False},
    }
    with conn:
        conn.sendall((json.dumps(request) + "\n").encode())
        messages: list[dict[str, Any]] = []
        buffer = b""
        while not messages or "exit" not in messages[-1]:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                messages.append(json.loads(line))
            conn.settimeout(300)  # answered: the command itself may take a while
        return messages


def wait_for_output(stream: Any, needle: str, timeout: float) -> str:
    """Read ``stream`` (a pipe, unbuffered) until ``needle`` appears; what was read."""
    fd = stream.fileno()
    seen = ""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{needle!r} did not appear; got {seen[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            data = os.read(fd, 65536)
            assert data, f"the stream ended before {needle!r}; got {seen[-2000:]!r}"
            seen += data.decode("utf-8", "replace")
    return seen


def write_big_file(path: Path, chunks: int, craft: str = "Zeppelin") -> Path:
    """A text file of about ``chunks`` chunks of 1000 characters, all different.

    Files written with different ``craft`` names differ too.
    """
    lines = []
    size = 0
    number = 0
    while size < chunks * 900:
        line = (
            f"{craft} {number} crossed the lake of Constance carrying {number * 7 % 97} "
            f"passengers and {number * 13 % 89} crates of apples.\n"
        )
        lines.append(line)
        size += len(line)
        number += 1
    path.write_text("".join(lines))
    return path


HASH_SERVER = """
import signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup crag serve &` leaves it
import crag.app.cli.commands as cli
import crag.vectorstore.embeddings as embeddings
from tests.hash_embeddings import HashEmbeddings
delay, started, gate = float(sys.argv[1]), sys.argv[2], sys.argv[3]
embedder = HashEmbeddings(
    delay=delay,
    started=Path(started) if started else None,
    wait_for=Path(gate) if gate else None,
)
embeddings.shared_embeddings = lambda name="": embedder  # no model: what runs embed with
embeddings.load_embeddings = lambda name="": embedder
cli._warm_up = lambda context: None  # nothing to load before it listens
sys.exit(cli.main(["serve"]))
"""


@contextmanager
def hash_server(
    cwd: Path, *, delay: float = 0.0, started: Path | None = None, gate: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """A real ``crag serve`` in ``cwd`` ignoring SIGINT, whose embedder hashes words (no model).

    Each batch it embeds takes ``delay`` seconds; its first batch creates ``started`` and then
    waits until ``gate`` exists (when given). Yields the server, its stderr unread after its
    ready line, and the clients' environment (no ``CRAG_*`` setting but the socket's path).
    """
    socket_dir = Path(tempfile.mkdtemp(prefix="crag-sock-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
    env.update(PYTHONPATH=str(ROOT), CRAG_SERVE_SOCKET=str(socket_dir / "serve.sock"))
    env["CRAG_SERVE_AUTOSTART"] = "0"  # a client that finds no server starts none
    server = subprocess.Popen(
        [sys.executable, "-c", HASH_SERVER, str(delay), str(started or ""), str(gate or "")],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_output(server.stderr, "crag serve: ready on", timeout=120)
        yield server, env
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stderr is not None:
            server.stderr.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
