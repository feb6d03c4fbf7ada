"""The API reference at ``/docs`` and the OpenAPI document at ``/openapi.json``, offline.

langgraph-api's ``/docs`` is a page that loads its viewer (Scalar) from a CDN, so it is blank
on a machine without the internet; its ``/openapi.json`` declares no security scheme, since
crag's gate (:mod:`crag.app.web.gate`), not LangGraph's auth, asks for the key. Both are among
langgraph-api's *unshadowable* routes (they come before the app's own routes), so a route of
:mod:`crag.app.web.http` cannot replace them: :class:`ApiDocs`, the app's middleware behind the
gate (so behind its rules: ``/docs`` answers only a caller with a credential, like every route
but ``/ok``), answers both itself.

It reads the document the server itself serves (a request to ``/openapi.json`` passed on to
the app: langgraph-api's, or Aegra's FastAPI), adds the key's two headers as security schemes
(``X-Api-Key``, and ``Authorization: Bearer``, as :func:`crag.app.web.credentials.identify`
reads them; ``/ok`` needs neither), and renders ``/docs`` from it on the server: plain HTML, no
script, nothing fetched from anywhere (its policy allows only its own inline style).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import logging
from collections.abc import Iterator
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.app.web.asgi_response import send_response

__all__ = ["DOCS_PATH", "OPENAPI_PATH", "ApiDocs", "render_reference", "with_security"]

logger = logging.getLogger(__name__)


DOCS_PATH = "/docs"
OPENAPI_PATH = "/openapi.json"
_METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")
SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Api-Key",
        "description": "The server's token (crag server-token) or an account's API key "
        "(crag users add).",
    },
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "The same token or key, sent as Authorization: Bearer KEY.",
    },
}
"""How a program proves who it is to crag's gate: either header, the same secret."""
_PUBLIC_PATHS = frozenset({"/ok"})

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;"
    "line-height:1.4}code,pre{font-family:ui-monospace,monospace}"
    ".op{border:1px solid #ccc;border-radius:4px;margin:.5rem 0;padding:.25rem .75rem}"
    ".op summary{cursor:pointer}.method{display:inline-block;min-width:4.5rem;font-weight:bold;"
    "text-transform:uppercase}.desc{white-space:pre-wrap}table{border-collapse:collapse}"
    "td,th{border:1px solid #ddd;padding:.15rem .5rem;text-align:left;vertical-align:top}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; img-src data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def with_security(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` declaring the key's headers (:data:`SECURITY_SCHEMES`), required but on ``/ok``."""
    components = dict(spec.get("components") or {})
    components["securitySchemes"] = {
        **(components.get("securitySchemes") or {}),
        **SECURITY_SCHEMES,
    }
    paths = dict(spec.get("paths") or {})
    for path in _PUBLIC_PATHS & set(paths):
        paths[path] = {
            method: {**operation, "security": []} if method in _METHODS else operation
            for method, operation in paths[path].items()
        }
    return {
        **spec,
        "components": components,
        "security": [{"apiKey": []}, {"bearer": []}],
        "paths": paths,
    }


def _text(value: Any) -> str:
    return html.escape(str(value)) if value else ""


def _schema_name(schema: Any) -> str:
    """A short name of a schema: its ``$ref``'s last part, its type, or its alternatives'."""
    if not isinstance(schema, dict):
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(filter(None, (_schema_name(item) for item in schema[key])))
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items')) or 'any'}"
    kind = schema.get("type")
    return " | ".join(kind) if isinstance(kind, list) else str(kind or "")


def _parameters(operation: dict[str, Any]) -> str:
    rows = [
        f"<tr><td><code>{_text(p.get('name'))}</code></td><td>{_text(p.get('in'))}</td>"
        f"<td>{'required' if p.get('required') else ''}</td>"
        f"<td>{_text(_schema_name(p.get('schema')))}</td><td>{_text(p.get('description'))}</td></tr>"
        for p in operation.get("parameters") or []
        if isinstance(p, dict)
    ]
    if not rows:
        return ""
    head = "<tr><th>Parameter</th><th>In</th><th></th><th>Type</th><th>Description</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _body_and_responses(operation: dict[str, Any]) -> str:
    parts = []
    body = operation.get("requestBody")
    if isinstance(body, dict):
        kinds = [
            f"<code>{_text(media)}</code> {_text(_schema_name(item.get('schema')))}"
            for media, item in (body.get("content") or {}).items()
            if isinstance(item, dict)
        ]
        parts.append(f"<p>Body: {', '.join(kinds)}</p>")
    responses = [
        f"<li><code>{_text(code)}</code> {_text(item.get('description'))}</li>"
        for code, item in (operation.get("responses") or {}).items()
        if isinstance(item, dict)
    ]
    if responses:
        parts.append(f"<p>Responses:</p><ul>{''.join(responses)}</ul>")
    return "".join(parts)


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    summary = operation.get("summary") or operation.get("operationId") or ""
    public = operation.get("security") == []
    return (
        f'<details class="op"><summary><span class="method">{_text(method)}</span> '
        f"<code>{_text(path)}</code> {_text(summary)}{' (public)' if public else ''}</summary>"
        f'<p class="desc">{_text(operation.get("description"))}</p>'
        f"{_parameters(operation)}{_body_and_responses(operation)}</details>"
    )


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """Each operation of ``spec``: its first tag, path, method and description."""
    for path, item in (spec.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for method in _METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                tag = (operation.get("tags") or ["Other"])[0]
                yield str(tag), str(path), method, operation


def _sections(spec: dict[str, Any]) -> str:
    grouped: dict[str, list[str]] = {}
    for tag, path, method, operation in _operations(spec):
        grouped.setdefault(tag, []).append(_operation(path, method, operation))
    return "".join(
        f"<section><h2>{_text(tag)}</h2>{''.join(items)}</section>"
        for tag, items in grouped.items()
    )


def _authentication(spec: dict[str, Any]) -> str:
    schemes = (spec.get("components") or {}).get("securitySchemes") or {}
    items = [
        f"<li><code>{_text(scheme.get('name') or scheme.get('scheme'))}</code> "
        f"({_text(scheme.get('in') or scheme.get('type'))}): "
        f"{_text(scheme.get('description'))}</li>"
        for scheme in schemes.values()
        if isinstance(scheme, dict)
    ]
    return f"<h2>Authentication</h2><ul>{''.join(items)}</ul>" if items else ""


@functools.lru_cache(maxsize=4)
def render_reference(document: bytes) -> bytes:
    """The reference page of the OpenAPI ``document`` (JSON): every operation, no script."""
    spec = json.loads(document)
    info = spec.get("info") or {}
    title = f"{info.get('title') or 'API'} {info.get('version') or ''}".strip()
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{_text(title)}: API reference</title><link rel="icon" href="data:,">'
        f"<style>{_STYLE}</style></head><body><main>"
        f'<h1>{_text(title)}</h1><p class="desc">{_text(info.get("description"))}</p>'
        f'<p>The same as JSON: <a href="{OPENAPI_PATH}">{OPENAPI_PATH}</a>.</p>'
        f"{_authentication(spec)}{_sections(spec)}</main></body></html>"
    )
    return page.encode()


async def _served_document(app: ASGIApp, scope: Scope) -> bytes | None:
    """The OpenAPI document the app behind serves at ``/openapi.json`` (``None``: not 200)."""
    inner = {
        **scope,
        "method": "GET",
        "path": scope.get("root_path", "") + OPENAPI_PATH,
        "raw_path": (scope.get("root_path", "") + OPENAPI_PATH).encode(),
        "query_string": b"",
    }
    status: list[int] = []
    chunks: list[bytes] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message["status"]))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(inner, receive, send)
    return b"".join(chunks) if status == [200] else None


class ApiDocs:
    """Pure ASGI middleware: ``GET /docs`` and ``GET /openapi.json`` answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The reference or the document; any other request passes on untouched."""
        path = _route_path(scope)
        if (
            scope["type"] != "http"
            or scope.get("method") not in {"GET", "HEAD"}
            or path not in {DOCS_PATH, OPENAPI_PATH}
        ):
            await self.app(scope, receive, send)
            return
        head = scope.get("method") == "HEAD"
        served = await _served_document(self.app, scope)
        if served is None:
            logger.error("the server's own %s did not answer 200", OPENAPI_PATH)
            detail = json.dumps({"detail": f"the server's {OPENAPI_PATH} could not be read"})
            await send_response(send, 502, detail.encode(), b"application/json", [], head=head)
            return
        document = json.dumps(with_security(json.loads(served))).encode()
        if path == OPENAPI_PATH:
            await send_response(send, 200, document, b"application/json", [], head=head)
            return
        extra = [
            (b"content-security-policy", _POLICY.encode()),
            (b"referrer-policy", b"no-referrer"),
        ]
        page = render_reference(document)
        await send_response(send, 200, page, b"text/html; charset=utf-8", extra, head=head)


def _route_path(scope: Scope) -> str:
    """The path the routes match: without the mount prefix (``root_path``), as Starlette does."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path
