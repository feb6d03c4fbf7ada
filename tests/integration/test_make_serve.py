"""``make serve``'s script prints the chat page's address once the server answers, and it works.

The README's promise: ``make serve``, then open the address it prints. ``scripts/serve.sh`` (what
``make serve`` runs after installing) is started on a free port; the line it prints is read, the
address (with the server's token) fetched as a browser would, the token traded for the
session cookie; without it only ``/ok`` answers. Ctrl-C (SIGINT to its process group) stops
the server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import pytest

from crag_bench.dev_server import free_port

pytestmark = [pytest.mark.server, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"crag chat page: (http://127\.0\.0\.1:\d+/chat/)\?token=([A-Za-z0-9_-]+)")


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
        address = token = None
        while address is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            found = ADDRESS.search(line)
            address, token = (found.group(1), found.group(2)) if found else (None, None)
        assert address == f"http://127.0.0.1:{port}/chat/"
        assert token
        printed = f"{address}?token={token}"
        with httpx.Client(timeout=30, follow_redirects=True) as browser:
            page = browser.get(printed)  # the token traded for the session cookie
            assert page.status_code == 200
            assert "<title>crag: ask your documents</title>" in page.text
            assert str(page.url) == address  # the token is gone from the address
        # Without the token: the sign-in page, and nothing else answers but /ok.
        stranger = httpx.get(address, timeout=30)
        assert stranger.status_code == 401 and "Server token" in stranger.text
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/ok", timeout=30).status_code == 200
        assert httpx.post(f"{base}/threads/search", json={}, timeout=30).status_code == 401
        assert httpx.get(f"{base}/openapi.json", timeout=30).status_code == 401
        signed = httpx.post(
            f"{base}/threads/search", json={}, headers={"x-api-key": token}, timeout=30
        )
        assert signed.status_code == 200
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
