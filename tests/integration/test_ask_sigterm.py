"""SIGTERM stops ``crag ask`` at once while it reads a hostile web page.

The question misses the store, so the run searches the web (a local SearxNG stand-in) and reads
the one result's page: either a page whose server waits a minute before answering (the operator
allowed two, ``page_timeout``), or a 40 MB page of paragraphs (``max_page_bytes`` raised), read
and parsed on worker threads. Before, a terminated ``crag ask`` went on until the page was read
(the minute), because LangGraph waits for the node before the interrupt goes on and the page
reading did not look at the run's cancellation (:func:`crag.websearch.reader.until_cancelled`).
Parsing itself is bounded (:data:`crag.websearch.pages.MAX_PAGE_ELEMENTS`): the 660 KB page of
nested ``<div>`` that ignored SIGTERM for 10 minutes now takes about a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration_support import build_small_store
from tests.warm_support import ROOT, wait_for_output
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration

PARAGRAPHS = 400_000
"""About 40 MB of ``<p>``."""
SLOW_PAGE_DELAY = 60.0
"""Seconds the slow page's server waits before it answers."""
STOPPED_WITHIN = 10.0
"""Seconds from SIGTERM to the process's end."""


def _large_page() -> str:
    paragraphs = "".join(
        f"<p>Otter {i} holds hands with otter {i + 1} while they sleep in the kelp forest.</p>"
        for i in range(PARAGRAPHS)
    )
    return f"<html><head><title>Otters</title></head><body>{paragraphs}</body></html>"


def _wait_for_the_page_request(web: WebsearchServer, ask: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240
    while not web.requests_to("/otters"):
        assert ask.poll() is None, ask.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "crag ask never read the page"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("kind", "after_request"), [("slow", 1.0), ("large", 0.5)], ids=["slow-page", "40mb-page"]
)
def test_sigterm_stops_crag_ask_while_it_reads_a_page(
    tmp_path: Path, kind: str, after_request: float
) -> None:
    store = build_small_store(tmp_path / "store", others=0)
    with WebsearchServer() as web:
        if kind == "slow":
            web.add_page("/otters", "Otters", "Otters hold hands.", delay=SLOW_PAGE_DELAY)
        else:
            web.add_route("/otters", _large_page())
        web.results = [web.result("Otters", "/otters", "Otters hold hands.")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAG_")}
        env["PYTHONPATH"] = str(ROOT)
        env["CRAG_SERVE_AUTOSTART"] = "0"
        ask = subprocess.Popen(
            [sys.executable, "-m", "crag.app.cli.console", "ask", "--no-server", "--store",
             str(store), "--set", "search_provider=searxng", "--set", f"search_url={web.url}",
             "--set", "allowed_hosts=127.0.0.1", "--set", "max_page_bytes=60000000",
             "--set", "page_timeout=120", "Why do sea otters hold hands while they sleep?"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for_output(ask.stderr, "[web_search]", timeout=240)
            _wait_for_the_page_request(web, ask)
            time.sleep(after_request)
            assert ask.poll() is None, "the page was read too fast to be interrupted"
            ask.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            _, err = ask.communicate(timeout=120)
            took = time.monotonic() - sent
        finally:
            if ask.poll() is None:
                ask.kill()
    assert ask.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == b"crag: terminated", err[-3000:]
    assert b"Traceback" not in err and b"page 1/1 read" not in err, err[-3000:]
    assert took < STOPPED_WITHIN, f"crag ask ran on for {took:.1f} s after SIGTERM"
