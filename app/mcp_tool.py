"""crag as an MCP tool: the server's ``/mcp`` (streamable HTTP, JSON answers), one tool, ``crag``.

langgraph-api's own ``/mcp`` lists every assistant as a tool and answers a call with the
Python ``repr`` of the whole final state, a failed run with its error's class name only, each
call on a fresh stateless run, and the per-run settings only in a non-standard
``params.context``. This route replaces it (``langgraph.json``'s ``"http": {"disable_mcp":
true}``; :func:`crag.app.web.http.served_app` puts it among the app's routes):

- ``tools/list`` shows one tool, ``crag``: its input schema is the question, an optional
  ``thread_id`` and the per-run settings (:data:`~crag.settings.run_context.QUESTION_SCHEMA`,
  nothing a caller may not set); its output schema is :data:`OUTPUT_SCHEMA`.
- ``tools/call`` asks the ``crag`` graph on a thread: a new one, or the ``thread_id`` of an
  earlier answer, so a follow-up is answered in that conversation's context. The result's
  ``structuredContent`` is the answer, its sources (title, source, URL of web ones, whether
  cited), the action, whether crag abstained, the run's notes and the thread's id; its text
  is the answer, the sources and the thread id. A refused setting, an empty question or a
  failed run is a tool error (``isError``) whose text is crag's sentence.

The run is asked of the server itself over HTTP, on the address the request arrived at, with
the caller's own credential (``Authorization`` or ``X-Api-Key``) and ``Host``: the gate and
langgraph-api's authentication see the same caller, the thread is stamped with their identity,
and another caller's ``thread_id`` is a 404 like any other of theirs. (langgraph-api's
in-process client would skip its authentication for this app's routes.) A caller signed in
only by a session cookie or a trusted proxy's header has no such credential to pass on, and
is told to use an API key.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import TypeAdapter

from crag.core.state import KnowledgeStrip
from crag.knowledge.conversation import source_title
from crag.settings.run_context import QUESTION_SCHEMA
from crag.settings.setting_checks import InvalidSettingError
from crag.settings.setting_kinds import other_kind_error

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

__all__ = ["OUTPUT_SCHEMA", "TOOL_NAME", "input_schema", "mcp_routes", "tool_result"]

logger = logging.getLogger(__name__)

TOOL_NAME = "crag"
"""The tool's name, and the served graph it asks."""
MCP_PATH = "/mcp"
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The MCP revisions this endpoint speaks (the last is offered to a client asking another)."""
RUN_SECONDS = 600.0
"""How long a call waits for its run (a CPU-only server answers in tens of seconds)."""
_FORWARDED = ("authorization", "x-api-key")
"""The caller's credential headers, passed on to the run's request."""
_ARGUMENTS = ("question", "thread_id")
_MAX_ID_CHARS = 200
_INVALID_PARAMS = -32602
_METHOD_NOT_FOUND = -32601
_INVALID_REQUEST = -32600

DESCRIPTION = (
    "Ask crag (corrective retrieval-augmented generation) a question: it searches the "
    "server's documents, grades what it finds, searches the web when they fall short, and "
    "answers with its sources. Pass the thread_id of an earlier answer to ask a follow-up in "
    "that conversation."
)

_SOURCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "number": {"type": "integer", "description": "The source's [n] in the answer."},
        "title": {"type": "string"},
        "source": {"type": "string", "description": "The document, or the web page's URL."},
        "url": {"type": ["string", "null"], "description": "The URL of a web source."},
        "origin": {"enum": ["internal", "external"]},
        "location": {"type": "string", "description": "Where in the document (p. 12)."},
        "cited": {"type": "boolean", "description": "Whether the answer draws on it."},
    },
    "required": ["number", "title", "source", "url", "origin", "cited"],
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "question": {"type": "string", "description": "The question as answered (standalone)."},
        "sources": {"type": "array", "items": _SOURCE_SCHEMA},
        "action": {
            "type": ["string", "null"],
            "description": "correct, incorrect or ambiguous: the retrieved passages' verdict.",
        },
        "abstained": {"type": "boolean", "description": "True: no knowledge supported an answer."},
        "notes": {"type": "array", "items": {"type": "string"}},
        "thread_id": {"type": "string", "description": "Pass it back to ask a follow-up."},
    },
    "required": ["answer", "sources", "action", "abstained", "notes", "thread_id"],
}
"""The tool's ``structuredContent``."""


class ToolCallError(Exception):
    """A call crag answers with a tool error: the message is the sentence the caller reads."""


def input_schema() -> dict[str, Any]:
    """The tool's input schema: the question, ``thread_id`` and the per-run settings."""
    settings = TypeAdapter(QUESTION_SCHEMA).json_schema()
    properties: dict[str, Any] = {
        "question": {"type": "string", "description": "The question to answer."},
        "thread_id": {
            "type": "string",
            "description": "The thread_id of an earlier answer: ask in that conversation.",
        },
        **settings.get("properties", {}),
    }
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": ["question"],
        "additionalProperties": False,
    }
    if settings.get("$defs"):
        schema["$defs"] = settings["$defs"]
    return schema


def tool_definition() -> dict[str, Any]:
    """The tool as ``tools/list`` shows it."""
    return {
        "name": TOOL_NAME,
        "title": "crag: answer a question from documents and the web",
        "description": DESCRIPTION,
        "inputSchema": input_schema(),
        "outputSchema": OUTPUT_SCHEMA,
        "annotations": {
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": False,
            "openWorldHint": True,
        },
    }


def _source(number: int, strip: KnowledgeStrip, cited: bool) -> dict[str, Any]:
    external = strip["origin"] == "external"
    entry: dict[str, Any] = {
        "number": number,
        "title": source_title(strip),
        "source": strip["source"],
        "url": strip["source"] if external else None,
        "origin": strip["origin"],
        "cited": cited,
    }
    if strip.get("location"):
        entry["location"] = strip["location"]
    return entry


def tool_result(values: Mapping[str, Any], thread_id: str) -> dict[str, Any]:
    """The ``structuredContent`` of a finished run's final ``values``."""
    cited = set(values.get("citations") or ())
    knowledge: list[KnowledgeStrip] = list(values.get("knowledge") or ())
    return {
        "answer": str(values.get("answer", "")),
        "question": str(values.get("standalone_question") or values.get("question") or ""),
        "sources": [_source(n, strip, n in cited) for n, strip in enumerate(knowledge, 1)],
        "action": values.get("action"),
        "abstained": bool(values.get("abstained", False)),
        "notes": [str(note) for note in values.get("notes") or ()],
        "thread_id": thread_id,
    }


def result_text(result: Mapping[str, Any]) -> str:
    """The short text form of a result: the answer, its sources, the thread to continue."""
    lines = [result["answer"]]
    if result["sources"]:
        lines.append("")
        lines.append("Sources:")
        lines.extend(f"[{s['number']}] {s['title']} ({s['source']})" for s in result["sources"])
    lines.append("")
    lines.append(f"thread_id: {result['thread_id']} (pass it to ask a follow-up)")
    return "\n".join(lines)


def _settings(arguments: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The per-run settings of a call (its arguments but the question, and ``params.context``).

    Raises:
        ToolCallError: one names what only the method or the operator sets, or is unknown or
            out of bounds (crag's sentence).
    """
    settings = dict(context) if isinstance(context, Mapping) else {}
    settings.update({k: v for k, v in arguments.items() if k not in _ARGUMENTS})
    error = other_kind_error(settings)
    if error is not None:
        raise ToolCallError(str(error))
    try:
        QUESTION_SCHEMA(**settings)
    except (InvalidSettingError, TypeError, ValueError) as exc:
        raise ToolCallError(str(exc)) from None
    return settings


def parsed_call(params: Mapping[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """A ``tools/call``'s question, thread id (``None``: a new thread) and settings.

    Raises:
        ToolCallError: the arguments are not an object, the question or thread id not text,
            or a setting is refused.
    """
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, Mapping):
        raise ToolCallError("the tool's arguments must be an object")
    question = arguments.get("question", "")
    if not isinstance(question, str):
        raise ToolCallError("the question must be text")
    thread_id = arguments.get("thread_id")
    if thread_id is not None:
        thread_id = _thread_id(thread_id)
    return question, thread_id, _settings(arguments, params.get("context"))


def _thread_id(given: Any) -> str:
    """``given`` as a thread's id (a UUID, lower-case), the one part of the run's path it names.

    Anything else never reaches that path: ``ID/copy?`` or ``../assistants/search?`` would send
    the tool's request, with the caller's key, to another of the server's routes.

    Raises:
        ToolCallError: ``given`` is not a thread's id.
    """
    if isinstance(given, str) and len(given) <= _MAX_ID_CHARS:
        with contextlib.suppress(ValueError):
            return str(uuid.UUID(given.strip()))
    raise ToolCallError("thread_id must be the thread_id of an earlier answer")


def _detail(response: httpx.Response) -> str:
    """The sentence of a refused request's body (``detail`` or ``message``), else its status."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, Mapping):
        for key in ("detail", "message", "error"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return f"HTTP {response.status_code}"


def _checked(response: httpx.Response, thread_id: str | None) -> Any:
    """The JSON of a successful response; a refusal as a :class:`ToolCallError`."""
    if response.status_code == 404 and thread_id is not None:
        raise ToolCallError(
            f"no thread {thread_id} of yours was found: ask without thread_id to start one"
        )
    if response.status_code >= 400:
        raise ToolCallError(f"the server refused the run: {_detail(response)}")
    return response.json()


def _loopback(request: Request) -> httpx.AsyncClient:
    """A client of this server, at the address the request came in on, as the same caller.

    Raises:
        ToolCallError: the caller holds no credential to pass on, or the server has no TCP
            address (a Unix socket).
    """
    headers = {name: value for name in _FORWARDED if (value := request.headers.get(name))}
    if not headers:
        raise ToolCallError(
            "the MCP tool needs an API key or the server's token (X-Api-Key or Authorization "
            "header); a browser session or a proxy's sign-in cannot be passed on"
        )
    server = request.scope.get("server")
    if not server or server[1] is None:
        raise ToolCallError("the MCP tool needs the server to listen on a TCP address")
    host, port = server
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    headers["host"] = request.headers.get("host") or netloc
    timeout = httpx.Timeout(RUN_SECONDS, connect=10.0)
    return httpx.AsyncClient(base_url=f"http://{netloc}", headers=headers, timeout=timeout)


async def _ask(
    client: httpx.AsyncClient, question: str, thread_id: str | None, settings: dict[str, Any]
) -> tuple[Any, str]:
    """The ``crag`` run's final values (or ``{"__error__": ...}``) and its thread's id."""
    if thread_id is None:
        created = _checked(await client.post("/threads", json={}), None)
        thread = str(created["thread_id"])
    else:
        thread = thread_id
    payload = {
        "assistant_id": TOOL_NAME,
        "input": {"messages": [{"role": "user", "content": question}]},
        "context": settings,
    }
    response = await client.post(f"/threads/{thread}/runs/wait", json=payload)
    return _checked(response, thread_id), thread


def _tool_error(message: str) -> dict[str, Any]:
    return {"isError": True, "content": [{"type": "text", "text": message}]}


def _run_error(values: Mapping[str, Any]) -> str:
    """The sentence for a failed run (its message; the error's class when it has none)."""
    error = values["__error__"]
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("error") or "the run failed")
    return str(error)


async def call_tool(request: Request, params: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-RPC answer to a ``tools/call``: a result (perhaps a tool error) or an error."""
    if params.get("name") != TOOL_NAME:
        message = f"unknown tool {str(params.get('name'))[:80]!r}: the only tool is {TOOL_NAME!r}"
        return {"error": {"code": _INVALID_PARAMS, "message": message}}
    try:
        question, thread_id, settings = parsed_call(params)
        async with _loopback(request) as client:
            values, thread = await _ask(client, question, thread_id, settings)
    except ToolCallError as exc:
        return {"result": _tool_error(str(exc))}
    except httpx.HTTPError as exc:
        logger.warning("MCP tool call failed: %s", exc)
        return {"result": _tool_error(f"the run did not finish ({type(exc).__name__})")}
    if isinstance(values, Mapping) and "__error__" in values:
        return {"result": _tool_error(_run_error(values))}
    result = tool_result(values, thread)
    text = {"type": "text", "text": result_text(result)}
    return {"result": {"content": [text], "structuredContent": result, "isError": False}}


def _initialize(params: Mapping[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    version = requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
    return {
        "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "crag", "version": "1"},
            "instructions": DESCRIPTION,
        }
    }


async def answer(request: Request, message: Mapping[str, Any]) -> dict[str, Any]:
    """The ``result`` or ``error`` of one JSON-RPC request."""
    method = message.get("method")
    params = message.get("params") or {}
    if not isinstance(params, Mapping):
        return {"error": {"code": _INVALID_PARAMS, "message": "params must be an object"}}
    if method == "initialize":
        return _initialize(params)
    if method == "ping":
        return {"result": {}}
    if method == "tools/list":
        return {"result": {"tools": [tool_definition()]}}
    if method == "tools/call":
        return await call_tool(request, params)
    return {"error": {"code": _METHOD_NOT_FOUND, "message": f"unknown method {str(method)[:80]!r}"}}


def _rpc_error(code: int, message: str, status: int = 400) -> Response:
    from starlette.responses import JSONResponse

    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(error, status_code=status)


async def handle_mcp(request: Request) -> Response:
    """``/mcp``: POST a JSON-RPC message; GET (a server stream) and DELETE (no sessions): 405."""
    from starlette.responses import JSONResponse, Response

    if request.method != "POST":
        return Response(status_code=405, headers={"allow": "POST"})
    try:
        message = json.loads(await request.body())
        # JSON's "\ud800" is no text: it would fail where it is encoded, with Python's error.
        json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return _rpc_error(
            -32700, "the request's JSON holds a string that is not Unicode text (a lone surrogate)"
        )
    except (ValueError, RecursionError):
        return _rpc_error(-32700, "the request is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(_INVALID_REQUEST, "the request is not a JSON-RPC 2.0 message")
    if message.get("id") is None:
        return Response(status_code=202)  # a notification (or a response): nothing to answer
    answered = await answer(request, message)
    return JSONResponse({"jsonrpc": "2.0", "id": message["id"], **answered})


def mcp_routes() -> list[BaseRoute]:
    """The ``/mcp`` route (GET and DELETE answered 405)."""
    from starlette.routing import Route

    return [Route(MCP_PATH, handle_mcp, methods=["GET", "POST", "DELETE"])]
