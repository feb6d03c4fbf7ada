"""The chat page's routes (:mod:`crag.app.web.chat_page`), served in-process by Starlette's client.

The page and its assets carry a strict Content-Security-Policy and are gzipped when asked; an
asset is a plain file name of the built folder, nothing else. Uploads store the raw body
(:mod:`crag.app.web.uploads`); the documents route serves only the files of the upload folder or
the ingest root, a PDF inline and anything else as a sandboxed attachment. Every error is
``{"detail": "<one sentence>"}``. Nothing here leaves the process.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import starlette  # noqa: F401 - missing, the test fails: it never skips
from starlette.applications import Starlette
from starlette.testclient import TestClient

from crag.app.web.api_docs import ApiDocs
from crag.app.web.chat_page import DIST, PAGE_HEADERS, PAGE_POLICY, chat_page_routes
from crag.app.web.gate import Gate, gate_config
from crag.app.web.http import RefuseOtherKinds, served_app
from crag.settings.deployment import DeploymentSettings, deployment_with

PDF = b"%PDF-1.4\n1 0 obj << >> endobj\n%%EOF\n"
PAGE = "<!doctype html><title>crag</title>" + "<p>a chat page</p>" * 60
ERROR_HEADERS = {"content-type": "application/json", "x-content-type-options": "nosniff"}


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    """A built page: its files, a subfolder, a link and a dot file."""
    folder = tmp_path / "dist"
    folder.mkdir()
    (folder / "index.html").write_text(PAGE, encoding="utf-8")
    (folder / "app.js").write_text("export const answer = 42;\n" * 40, encoding="utf-8")
    (folder / "app.css").write_text("body { margin: 0; }\n", encoding="utf-8")
    (folder / ".hidden.js").write_text("secret", encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "x.js").write_text("nested", encoding="utf-8")
    (folder / "link.js").symlink_to(folder / "app.js")
    return folder


@pytest.fixture
def uploads(tmp_path: Path) -> Path:
    return tmp_path / "uploads"


@pytest.fixture
def settings(uploads: Path) -> DeploymentSettings:
    return deployment_with(upload_dir=str(uploads), ingest_root="", upload_max_bytes=1000)


REMOVED = "removed.md"
"""Files of this name stand for documents removed from the store (crag remove)."""


def _is_stored(source: str, settings: DeploymentSettings, member: str | None) -> bool:
    """The store's answer in these tests: every document is stored but a removed one."""
    return not source.endswith(REMOVED)


def _client(settings: DeploymentSettings, dist: Path) -> TestClient:
    return TestClient(Starlette(routes=chat_page_routes(settings, dist=dist, is_stored=_is_stored)))


@pytest.fixture
def client(settings: DeploymentSettings, dist: Path) -> TestClient:
    return _client(settings, dist)


def _assert_error(response: Any, status: int, words: str = "") -> str:
    """An error as langgraph-api answers its own: JSON ``{"detail": one sentence}``."""
    assert response.status_code == status, response.text
    for name, value in ERROR_HEADERS.items():
        assert response.headers[name] == value
    body = response.json()
    assert list(body) == ["detail"] and isinstance(body["detail"], str) and body["detail"]
    assert words in body["detail"]
    return str(body["detail"])


def _upload(client: TestClient, name: str, body: bytes) -> Any:
    return client.post(
        "/chat/api/uploads",
        params={"name": name},
        content=body,
        headers={"content-type": "application/octet-stream"},
    )


# -- the page and its assets --------------------------------------------------------------------


def test_chat_redirects_to_the_page(client: TestClient) -> None:
    response = client.get("/chat", follow_redirects=False)
    assert response.status_code == 307
    # Relative: never an address built from the request's Host (a rebinding name).
    assert response.headers["location"] == "/chat/"
    foreign = client.get("/chat", headers={"host": "rebind.example"}, follow_redirects=False)
    assert foreign.headers["location"] == "/chat/"
    assert client.get("/chat").url.path == "/chat/"


def test_the_page_and_its_assets_carry_the_policy_headers(client: TestClient) -> None:
    for path, media_type in [
        ("/chat/", "text/html; charset=utf-8"),
        ("/chat/assets/app.js", "text/javascript; charset=utf-8"),
        ("/chat/assets/app.css", "text/css; charset=utf-8"),
        ("/chat/assets/index.html", "text/html; charset=utf-8"),
    ]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == media_type
        assert response.headers["content-security-policy"] == PAGE_POLICY
        for name, value in PAGE_HEADERS.items():
            assert response.headers[name] == value, (path, name)
    assert PAGE_POLICY.startswith("default-src 'self';") and "frame-ancestors 'none'" in PAGE_POLICY
    assert client.get("/chat/").text == PAGE


def test_the_page_and_assets_are_gzipped_when_the_client_accepts_it(client: TestClient) -> None:
    for path in ("/chat/", "/chat/assets/app.js"):
        zipped = client.get(path, headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["content-encoding"] == "gzip", path
        assert zipped.headers["content-security-policy"] == PAGE_POLICY
        plain = client.get(path, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        assert zipped.content == plain.content


def test_an_asset_carries_what_a_browser_revalidates_it_with(client: TestClient) -> None:
    response = client.get("/chat/assets/app.css")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["etag"] and response.headers["last-modified"]


@pytest.mark.parametrize(
    "path",
    [
        "/chat/assets/%2E%2E",
        "/chat/assets/..%2Fapp.js",
        "/chat/assets/%2E%2E%2F%2E%2E%2Fhttp.py",
        "/chat/assets/sub/x.js",
        "/chat/assets/sub%2Fx.js",
        "/chat/assets/.hidden.js",
        "/chat/assets/link.js",
        "/chat/assets/missing.js",
        "/chat/assets/",
        "/chat/elsewhere",
        "/chat/api/unknown",
    ],
)
def test_anything_but_a_plain_built_file_is_404(client: TestClient, path: str) -> None:
    _assert_error(client.get(path), 404)


def test_a_page_not_built_is_404_with_a_sentence(
    settings: DeploymentSettings, tmp_path: Path
) -> None:
    client = _client(settings, tmp_path / "nothing")
    _assert_error(client.get("/chat/"), 404, "the chat page is not built")


def test_a_method_a_route_does_not_answer_is_405(client: TestClient) -> None:
    response = client.get("/chat/api/uploads")
    assert _assert_error(response, 405) == "/chat/api/uploads does not answer GET, only POST"
    assert response.headers["allow"] == "POST"
    assert client.delete("/chat/").headers["allow"] == "GET, HEAD"
    assert client.head("/chat/").status_code == 200


# -- uploads ------------------------------------------------------------------------------------


def test_an_upload_round_trip(client: TestClient, uploads: Path) -> None:
    response = _upload(client, "../../paper.pdf", PDF)
    assert response.status_code == 201, response.text
    stored = response.json()
    name = stored["path"]  # the file's name, never the server's folder
    assert name.startswith("upload:") and str(uploads) not in response.text
    path = uploads.resolve() / name.removeprefix("upload:")
    assert stored["name"] == "paper.pdf" and stored["bytes"] == len(PDF)
    assert path.parent.parent == uploads.resolve() and path.name == "paper.pdf"
    assert path.read_bytes() == PDF
    again = _upload(client, "paper.pdf", PDF)
    assert again.json() == stored
    other = _upload(client, "paper.pdf", PDF + b"\n")
    assert Path(other.json()["path"]).parent != Path(name).parent
    assert path.read_bytes() == PDF


@pytest.mark.parametrize(
    ("name", "body", "status", "words"),
    [
        ("tool.exe", b"MZ", 415, "the ingestion does not read .exe files"),
        ("paper.pdf", b"<html>", 415, "is not a PDF"),
        ("notes.txt", b"\xff\xfe", 415, "not UTF-8"),
        ("empty.txt", b"", 400, "is empty"),
        ("..", b"text", 400, "has nothing a stored file can be named after"),
        ("big.txt", b"x" * 1001, 413, "larger than 1,000 bytes"),
    ],
)
def test_a_refused_upload_answers_its_status_and_sentence(
    client: TestClient, uploads: Path, name: str, body: bytes, status: int, words: str
) -> None:
    _assert_error(_upload(client, name, body), status, words)
    assert [p for p in uploads.rglob("*") if p.is_file()] == []


def test_an_upload_without_a_name_is_400(client: TestClient) -> None:
    detail = _assert_error(client.post("/chat/api/uploads", content=b"text"), 400)
    assert "?name=" in detail


def test_a_streamed_upload_is_counted_and_refused_at_the_limit(client: TestClient) -> None:
    def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 300  # chunked: no Content-Length

    response = client.post("/chat/api/uploads", params={"name": "big.txt"}, content=chunks())
    _assert_error(response, 413, "larger than 1,000 bytes")


def _asgi_upload(app: Any, chunks: int, size: int) -> tuple[int, int]:
    """POST ``chunks`` chunks of ``size`` bytes straight to the app: (status, chunks it read)."""
    received = 0
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * size, "more_body": received < chunks}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/chat/api/uploads",
        "raw_path": b"/chat/api/uploads",
        "query_string": b"name=big.txt",
        "headers": [],
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    return status, received


def test_reading_the_request_stops_at_the_limit(settings: DeploymentSettings, dist: Path) -> None:
    app = Starlette(routes=chat_page_routes(settings, dist=dist))
    assert _asgi_upload(app, chunks=100, size=300) == (413, 4)  # 1,200 bytes > 1,000: stop
    assert _asgi_upload(app, chunks=3, size=300) == (201, 3)


def test_uploads_outside_the_ingest_root_are_refused_naming_both_settings(
    dist: Path, tmp_path: Path
) -> None:
    settings = deployment_with(upload_dir=str(tmp_path / "up"), ingest_root=str(tmp_path / "root"))
    detail = _assert_error(_upload(_client(settings, dist), "notes.txt", b"text"), 500)
    assert "setting upload_dir" in detail and "setting ingest_root" in detail


# -- documents ----------------------------------------------------------------------------------


def _document(client: TestClient, source: str, **headers: str) -> Any:
    return client.get("/chat/api/documents", params={"source": source}, headers=headers)


def test_an_uploaded_pdf_is_served_inline(client: TestClient) -> None:
    path = _upload(client, "paper.pdf", PDF).json()["path"]
    response = _document(client, path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"] == 'inline; filename="paper.pdf"'
    assert response.headers["content-security-policy"] == "sandbox allow-scripts"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.content == PDF
    assert client.head("/chat/api/documents", params={"source": path}).status_code == 200


def test_an_html_file_is_a_sandboxed_attachment(client: TestClient) -> None:
    body = b"<script>document.cookie</script>"
    path = _upload(client, "page.html", body).json()["path"]
    response = _document(client, path)
    assert response.status_code == 200
    assert response.headers["content-disposition"] == 'attachment; filename="page.html"'
    assert response.headers["content-security-policy"] == "sandbox; default-src 'none'"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.content == body


def test_a_json_lines_source_serves_its_file_uncompressed(client: TestClient) -> None:
    body = b"".join(b'{"text": "line %d of a long file"}\n' % n for n in range(25))
    assert 500 < len(body) <= 1000  # worth gzipping, within the upload limit
    path = _upload(client, "rows.jsonl", body).json()["path"]
    response = _document(client, f"{path}#line3", **{"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-disposition"] == 'attachment; filename="rows.jsonl"'
    assert "content-encoding" not in response.headers  # gzip is the page's and assets' only
    assert response.content == body


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("/etc/passwd", "does not share this document's file"),
        ("/etc/passwd#line1", "does not share this document's file"),
        ("wikipedia:Mona Lisa", "bundled Wikipedia corpus"),
        ("inline:3f2a", "not a file's path"),
        ("relative/notes.txt", "not a file's path"),
    ],
)
def test_a_document_the_server_does_not_share_is_404(
    client: TestClient, source: str, words: str
) -> None:
    _assert_error(_document(client, source), 404, words)


def test_a_link_in_the_upload_folder_to_a_file_outside_is_not_served(
    client: TestClient, uploads: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret", encoding="utf-8")
    uploads.mkdir()
    (uploads / "link.txt").symlink_to(secret)
    _assert_error(_document(client, str(uploads / "link.txt")), 404, "does not share")
    (uploads / "folder").symlink_to(tmp_path, target_is_directory=True)
    _assert_error(_document(client, str(uploads / "folder" / "secret.txt")), 404)
    _assert_error(_document(client, str(uploads / ".." / "secret.txt")), 404)
    _assert_error(_document(client, str(uploads)), 404)  # a folder is not a file


def test_only_stored_document_files_are_served_never_dot_files_databases_or_partial_uploads(
    dist: Path, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    (root / ".crag").mkdir(parents=True)
    files = {
        ".env": "CRAG_LLM_API_KEY=secret\n",
        ".crag/notes.md": "# inside a dot folder\n",
        "threads.sqlite": "SQLite format 3\x00",
        "checkpoint.pckl": "pickle",
        "server.log": "log",
        "uploads/.upload-abc.part": "arriving",
        "removed.md": "# removed with crag remove\n",
        "kept.md": "# kept\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    client = _client(deployment_with(upload_dir="", ingest_root=str(root)), dist)
    for name in files:
        response = _document(client, str(root / name))
        if name == "kept.md":
            assert response.status_code == 200 and response.text == "# kept\n"
        else:
            _assert_error(response, 404, "does not share")


def test_a_document_request_without_a_source_is_400(client: TestClient) -> None:
    _assert_error(client.get("/chat/api/documents"), 400, "?source=")


def test_the_ingest_roots_files_are_served_and_uploads_go_inside_it(
    dist: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "notes.md").write_text("# notes\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("# outside\n", encoding="utf-8")
    client = _client(deployment_with(upload_dir="", ingest_root=str(root)), dist)
    assert _document(client, str(root / "docs" / "notes.md")).text == "# notes\n"
    assert _document(client, "shared:docs/notes.md").text == "# notes\n"  # a served run's name
    _assert_error(_document(client, "shared:../outside.md"), 404)
    _assert_error(_document(client, str(tmp_path / "outside.md")), 404)
    stored = _upload(client, "notes.txt", b"text").json()
    name = stored["path"]  # the upload folder's name comes first, inside the root as it is
    assert name.startswith("upload:") and len(list((root / "uploads").glob("*/notes.txt"))) == 1
    assert _document(client, name).content == b"text"


# -- the served app -----------------------------------------------------------------------------


def test_the_served_app_serves_the_built_page_and_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CRAG_UPLOAD_DIR", str(tmp_path / "env-uploads"))
    monkeypatch.delenv("CRAG_INGEST_ROOT", raising=False)
    token = "t" * 32
    monkeypatch.setenv("CRAG_SERVER_TOKEN", token)
    gate_config.cache_clear()
    app = served_app()
    classes: list[object] = [middleware.cls for middleware in app.user_middleware]
    assert classes == [Gate, ApiDocs, RefuseOtherKinds]
    # A program signs in with the token; the gate answers loopback host names only.
    client = TestClient(app, base_url="http://127.0.0.1", headers={"x-api-key": token})
    assert client.get("/chat", follow_redirects=False).headers["location"].endswith("/chat/")
    assert TestClient(app, base_url="http://127.0.0.1").get("/chat/").status_code == 401
    page = client.get("/chat/")
    assert (DIST / "index.html").is_file(), "the chat page's build (app/web/dist) is missing"
    assert page.status_code == 200 and page.content == (DIST / "index.html").read_bytes()
    assert page.headers["content-security-policy"] == PAGE_POLICY
    stored = _upload(client, "notes.txt", b"text")
    assert stored.status_code == 201, stored.text
    name = stored.json()["path"].removeprefix("upload:")
    assert ((tmp_path / "env-uploads").resolve() / name).read_bytes() == b"text"
    # the middleware still refuses what a run may not set, next to the page's routes
    refused = client.post("/runs", json={"assistant_id": "crag", "context": {"upload_dir": "/"}})
    assert refused.status_code == 422
    assert json.loads(refused.text)["detail"].startswith("setting upload_dir is a deployment")
    gate_config.cache_clear()


def test_the_method_route_gives_the_thresholds_the_served_graph_uses(
    client: TestClient, settings: DeploymentSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crag.settings.method import operator_method

    response = client.get("/chat/api/method")
    assert response.status_code == 200
    upper, lower = operator_method().thresholds_for(settings.evaluator, settings.evaluator_model)
    assert response.json() == {
        "upper_threshold": upper,
        "lower_threshold": lower,
        "evaluator": settings.evaluator,
    }
    monkeypatch.setenv("CRAG_UPPER_THRESHOLD", "0.25")
    assert client.get("/chat/api/method").json()["upper_threshold"] == 0.25
