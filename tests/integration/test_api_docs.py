"""``/docs`` and ``/openapi.json`` of a real ``langgraph dev``: offline, and naming the key.

headless Chromium, signed in as ``make serve`` prints it, opens ``/docs`` with every request
that leaves 127.0.0.1 aborted and recorded: the page lists the API's operations and asked
nothing of anywhere else. ``/openapi.json`` declares the key's headers as security schemes.
Both stay behind the gate (401 without a credential, docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import pytest

from crag_bench.dev_server import DevServer
from tests.browser_support import chromium_missing
from tests.server_support import langgraph_server

if chromium_missing():
    pytest.fail(str(chromium_missing()), pytrace=False)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    data = tmp_path_factory.mktemp("data")
    env = {
        "CRAG_STORE_PATH": str(data / "chroma"),
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_THREADS_DB": str(data / "threads.sqlite"),
    }
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
        yield started


def test_the_openapi_document_declares_the_keys_headers(server: DevServer) -> None:
    assert httpx.get(f"{server.url}/openapi.json").status_code == 401
    spec = httpx.get(f"{server.url}/openapi.json", headers=server.headers).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "apiKey", "in": "header"}
    assert schemes["apiKey"]["name"].lower() == "x-api-key"
    assert schemes["bearer"]["type"] == "http" and schemes["bearer"]["scheme"] == "bearer"
    assert {"apiKey": []} in spec["security"] and {"bearer": []} in spec["security"]
    assert spec["paths"]["/ok"]["get"]["security"] == []
    assert "/threads/search" in spec["paths"]


def test_docs_shows_the_operations_with_no_network(server: DevServer, chromium: Any) -> None:
    assert httpx.get(f"{server.url}/docs").status_code == 401
    context = chromium.new_context()
    elsewhere: list[str] = []

    def guard(route: Any) -> None:
        if route.request.url.startswith(f"{server.url}/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    try:
        context.route("**/*", guard)
        page = context.new_page()
        page.goto(server.page_url)
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        answer = page.goto(f"{server.url}/docs")
        assert answer is not None and answer.status == 200
        page.wait_for_load_state("networkidle")
        assert page.locator("details.op").count() > 20
        assert page.get_by_text("/threads/search", exact=True).first.is_visible()
        assert "X-Api-Key" in page.locator("body").inner_text()
    finally:
        context.close()
    assert elsewhere == []
