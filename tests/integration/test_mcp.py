"""crag as an MCP tool, driven with the official ``mcp`` client against a real ``langgraph dev``.

The server is started as in ``test_server.py`` (the repository's ``langgraph.json``, a small
Chroma store holding the Mona Lisa summary and 40 unrelated ones, the real SmolLM2 generator,
web search at a stand-in that answers HTTP 500) and the client talks to ``/mcp`` over
streamable HTTP with the server's token as ``X-Api-Key``: the tool and its input schema, an
answer as structured JSON with its sources, a follow-up on the answer's thread, and the
refusals (a wrong token, a setting only the operator sets, an empty question), each in crag's
words. The ``mcp`` package is imported at the top: without it these tests fail, never skip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import httpx2
import mcp  # noqa: F401 - missing, the test fails: it never skips
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from crag.settings.setting_kinds import other_kind_error
from crag_bench.dev_server import DevServer
from crag_bench.mona_lisa_store import MONA_LISA
from tests.server_support import (
    build_server_store,
    langgraph_server,
    served_environment,
)
from tests.websearch_server import WebsearchServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

RUN_TIMEOUT = 300.0
MONA_QUESTION = "Who painted the Mona Lisa?"
WRONG_KEY = "the server token or API key sent (X-Api-Key or Authorization) is wrong"
T = TypeVar("T")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """``langgraph dev`` serving the repository's graphs on a small store; stopped afterwards."""
    store = build_server_store(tmp_path_factory.mktemp("store") / "chroma")
    ingest_root = tmp_path_factory.mktemp("ingest_root")
    with WebsearchServer() as search:
        search.search_status = 500
        env = served_environment(store, search.url, ingest_root)
        with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
            yield started


async def _session(
    url: str, headers: dict[str, str], action: Callable[[ClientSession], Awaitable[T]]
) -> T:
    """``action`` on an initialised MCP session with ``url``'s ``/mcp``, sending ``headers``."""
    timeout = httpx2.Timeout(RUN_TIMEOUT, connect=10.0)
    async with (
        create_mcp_http_client(headers=headers, timeout=timeout) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, read_timeout_seconds=RUN_TIMEOUT) as session,
    ):
        await session.initialize()
        return await action(session)


def _call(server: DevServer, arguments: dict[str, Any]) -> Any:
    """A ``crag`` tool call (its tool listed first, so the client checks the output schema)."""

    async def call(session: ClientSession) -> Any:
        await session.list_tools()
        return await session.call_tool("crag", arguments)

    return asyncio.run(_session(server.url, server.headers, call))


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def test_the_token_lists_crags_tool_with_the_question_and_the_per_run_settings(
    server: DevServer,
) -> None:
    listed = asyncio.run(_session(server.url, server.headers, lambda s: s.list_tools()))
    assert [tool.name for tool in listed.tools] == ["crag"]
    (tool,) = listed.tools
    properties = tool.input_schema["properties"]
    assert tool.input_schema["required"] == ["question"]
    assert properties["question"]["type"] == "string"
    assert {"thread_id", "top_k", "web_search", "scope_tags"} <= set(properties)
    # Nothing only the method or the operator sets is offered.
    assert other_kind_error(properties) is None
    assert "store_path" not in properties and "generator" not in properties
    assert tool.output_schema is not None
    assert set(tool.output_schema["required"]) >= {"answer", "sources", "thread_id"}


def test_a_call_answers_with_structured_json_and_its_sources(server: DevServer) -> None:
    result = _call(server, {"question": MONA_QUESTION, "web_search": False})
    assert not result.is_error, _text(result)
    answer = result.structured_content
    assert "Leonardo" in answer["answer"], answer
    assert answer["action"] == "correct" and answer["abstained"] is False
    assert isinstance(answer["notes"], list) and answer["thread_id"]
    cited = [source for source in answer["sources"] if source["cited"]]
    assert cited and {source["source"] for source in cited} == {MONA_LISA}
    assert cited[0]["title"] == "Mona Lisa" and cited[0]["url"] is None
    # The text form: the answer, its sources, the thread to continue.
    text = _text(result)
    assert text.startswith(answer["answer"]) and "Mona Lisa" in text
    assert answer["thread_id"] in text
    assert len(text) < 2000


def test_a_follow_up_on_the_answers_thread_is_answered_in_context(server: DevServer) -> None:
    first = _call(server, {"question": MONA_QUESTION, "web_search": False})
    assert not first.is_error, _text(first)
    thread_id = first.structured_content["thread_id"]
    follow_up = _call(
        server, {"question": "Where is it displayed?", "thread_id": thread_id, "web_search": False}
    )
    assert not follow_up.is_error, _text(follow_up)
    answer = follow_up.structured_content
    assert answer["thread_id"] == thread_id
    # The follow-up was made standalone from the first turn, and found its document.
    assert "Mona Lisa" in answer["question"], answer
    assert MONA_LISA in {source["source"] for source in answer["sources"]}
    state = httpx.get(f"{server.url}/threads/{thread_id}/state", headers=server.headers)
    kinds = [message["type"] for message in state.json()["values"]["messages"]]
    assert kinds == ["human", "ai", "human", "ai"]


def test_an_unknown_thread_is_refused_in_one_sentence(server: DevServer) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    result = _call(server, {"question": MONA_QUESTION, "thread_id": missing})
    assert result.is_error
    assert _text(result) == (
        f"no thread {missing} of yours was found: ask without thread_id to start one"
    )


def test_a_setting_only_the_operator_sets_is_refused_with_crags_message(
    server: DevServer,
) -> None:
    result = _call(server, {"question": MONA_QUESTION, "store_path": "/etc"})
    assert result.is_error
    error = other_kind_error(["store_path"])
    assert error is not None and _text(result) == str(error)
    method = _call(server, {"question": MONA_QUESTION, "upper_threshold": 0.0})
    assert method.is_error and "upper_threshold" in _text(method)


def test_an_unknown_or_out_of_bounds_setting_is_refused(server: DevServer) -> None:
    unknown = _call(server, {"question": MONA_QUESTION, "langgraph_auth_user_id": "someone"})
    assert unknown.is_error and "langgraph_auth_user_id" in _text(unknown)
    bounds = _call(server, {"question": MONA_QUESTION, "top_k": 0})
    assert bounds.is_error and "top_k" in _text(bounds)


def test_an_empty_question_is_crags_message(server: DevServer) -> None:
    result = _call(server, {"question": "   "})
    assert result.is_error
    assert _text(result) == "the question is empty"


def test_a_wrong_token_is_refused_with_crags_sentence(server: DevServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"x-api-key": "wrong" * 8, "accept": "application/json, text/event-stream"}
    response = httpx.post(f"{server.url}/mcp", json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["detail"] == WRONG_KEY
    with pytest.raises(Exception) as info:  # the client may wrap it in a group
        asyncio.run(_session(server.url, {"x-api-key": "wrong" * 8}, lambda s: s.list_tools()))
    assert _mcp_errors(info.value), info.value


def _mcp_errors(error: BaseException) -> list[MCPError]:
    """The :class:`MCPError` in ``error`` (itself, or inside an exception group)."""
    if isinstance(error, MCPError):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [found for inner in error.exceptions for found in _mcp_errors(inner)]
    return []


def test_the_tool_is_crags_not_langgraph_apis_repr(server: DevServer) -> None:
    """langgraph-api's own /mcp (every assistant a tool, results a repr) is off."""
    listed = asyncio.run(_session(server.url, server.headers, lambda s: s.list_tools()))
    assert "ingest" not in {tool.name for tool in listed.tools}
