"""LangGraph's authenticate handler (crag.app.web.server_auth), called as each server calls it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import langgraph_sdk  # noqa: F401 - missing, the test fails: it never skips
import pytest
from langgraph_sdk import Auth

from crag.app.web.gate import gate_config
from crag.app.web.server_auth import authenticate

TOKEN = "t" * 40


@pytest.fixture(autouse=True)
def operator_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    monkeypatch.setenv("CRAG_SERVER_TOKEN", TOKEN)
    monkeypatch.setenv("CRAG_THREADS_DB", str(tmp_path / "threads.sqlite"))
    gate_config.cache_clear()
    yield
    gate_config.cache_clear()


def test_langgraph_apis_call_with_bytes_and_a_scope() -> None:
    scope = {"type": "http", "method": "GET", "client": ("127.0.0.1", 5)}
    user = asyncio.run(authenticate({b"X-Api-Key": TOKEN.encode()}, scope))
    assert user["identity"] == "operator" and user["permissions"] == ["admin"]


def test_a_server_that_gives_only_text_headers_is_answered_the_same() -> None:
    user = asyncio.run(authenticate({"x-api-key": TOKEN}))  # as Aegra calls it
    assert user["identity"] == "operator" and user["permissions"] == ["admin"]
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        asyncio.run(authenticate({"x-api-key": "wrong"}))
    assert refused.value.status_code == 401
