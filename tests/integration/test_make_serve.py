"""``make serve``'s script prints the chat page's address once the server answers, and it works.

The README's promise: ``make serve``, then open the address it prints. ``scripts/serve.sh`` (what
``make serve`` runs after installing) is started on a free port; the line it prints is read, the
address fetched, and Ctrl-C (SIGINT to its process group) stops the server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from crag_bench.dev_server import free_port

pytest.importorskip("langgraph_api", reason="the server extra (langgraph-cli[inmem]) is missing")
pytestmark = [pytest.mark.server, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"crag chat page: (http://127\.0\.0\.1:\d+/chat/)")


def test_serve_prints_the_chat_pages_address_and_the_address_gives_the_page() -> None:
    port = free_port()
    env = {**os.environ, "LANGGRAPH_NO_VERSION_CHECK": "1", "LANGSMITH_TRACING": "false"}
    process = subprocess.Popen(
        ["scripts/serve.sh", str(port), "1", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 180
        address = None
        while address is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            found = ADDRESS.search(line)
            address = found.group(1) if found else None
        assert address == f"http://127.0.0.1:{port}/chat/"
        page = httpx.get(address, timeout=30)
        assert page.status_code == 200
        assert "<title>crag: ask your documents</title>" in page.text
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
