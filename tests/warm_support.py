"""Helpers for tests of ``crag serve``: the real client, a raw protocol client, a big file."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLIENT = [sys.executable, "-c", "import sys; from crag.app.console import main; sys.exit(main())"]
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
    from crag.app.warm import deployment_environment

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


def write_big_file(path: Path, chunks: int) -> Path:
    """A text file of about ``chunks`` chunks of 1000 characters, all different."""
    lines = []
    size = 0
    number = 0
    while size < chunks * 900:
        line = (
            f"Zeppelin {number} crossed the lake of Constance carrying {number * 7 % 97} "
            f"passengers and {number * 13 % 89} crates of apples.\n"
        )
        lines.append(line)
        size += len(line)
        number += 1
    path.write_text("".join(lines))
    return path
