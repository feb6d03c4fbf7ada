"""The chat page's uploads on a real ``langgraph dev``: quotas held before the body, served files.

One server, started as ``make serve`` starts it but with a relative ``CRAG_STORE_PATH`` (as the
Makefile's default ``.crag/chroma`` is), a quota of 1,000,000 bytes and of 5 files per user, and
two members. Twenty uploads of 200,000 bytes sent at once against that quota: at most five are
kept (each upload's declared size is held before its body is read). A member's uploads past
five files are refused, and a refused upload holds nothing afterwards. An upload is answered
201 under the relative store path (it was a 500: a blocking call inside the event loop). A
stored PDF is served inline in a sandbox (``Content-Security-Policy``), another file as a
sandboxed attachment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.document_factory import PAGES, write_pdf
from tests.server_support import build_server_store, langgraph_server
from tests.websearch_server import WebsearchServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

PASSWORD = "correct horse battery"
QUOTA = 1_000_000
MAX_FILES = 5
UPLOAD = 200_000
STORE = "data/chroma"
"""The store's path as the server is given it: relative to its working directory."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("langgraph_dev")


@pytest.fixture(scope="module")
def keys(workdir: Path) -> dict[str, str]:
    """Two members' API keys, made as the operator makes them (``crag users add``)."""
    made = Accounts(workdir / "threads.sqlite")
    return {name: made.add(name, PASSWORD) for name in ("alice", "bob")}


@pytest.fixture(scope="module")
def server(workdir: Path, keys: dict[str, str]) -> Iterator[DevServer]:
    build_server_store(workdir / STORE)
    with WebsearchServer() as search:
        search.search_status = 500
        env = {
            "CRAG_STORE_PATH": STORE,
            "CRAG_COLLECTION": "crag",
            "CRAG_DEFAULT_CORPUS": "false",
            "CRAG_SEARCH_PROVIDER": "searxng",
            "CRAG_SEARCH_URL": search.url,
            "CRAG_ALLOWED_HOSTS": "127.0.0.1",
            "CRAG_THREADS_DB": str(workdir / "threads.sqlite"),
            "CRAG_UPLOAD_QUOTA_BYTES": str(QUOTA),
            "CRAG_UPLOAD_MAX_FILES": str(MAX_FILES),
        }
        with langgraph_server(workdir, env) as started:
            yield started


def upload(
    server: DevServer, key: str, name: str, body: bytes, *, pause: float = 0.0
) -> httpx.Response:
    """``POST /chat/api/uploads?name=NAME`` as the caller of ``key`` (a program: its API key).

    ``pause``: seconds between the request's head (its ``Content-Length``) and its body, as a
    slow link's: the uploads sent at once are all checked before any of their bytes lands.
    """

    def slowly() -> Iterator[bytes]:
        time.sleep(pause)
        yield body

    return httpx.post(
        f"{server.url}/chat/api/uploads",
        params={"name": name},
        content=slowly() if pause else body,
        headers={
            "x-api-key": key,
            "content-type": "application/octet-stream",
            "content-length": str(len(body)),
        },
        timeout=120,
    )


def text(number: int, size: int = UPLOAD) -> bytes:
    """``size`` bytes of UTF-8 text, different for each ``number`` (so: another stored file)."""
    head = f"note {number}\n".encode()
    return head + b"a" * (size - len(head))


def kept(folder: Path) -> list[Path]:
    """The uploads kept in ``folder`` (the temporary files of uploads being received left out)."""
    return [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_an_upload_under_a_relative_store_path_is_answered_201(
    server: DevServer, workdir: Path
) -> None:
    response = upload(server, server.token, "hello.txt", b"Otters hold hands.")
    assert response.status_code == 201, response.text
    assert response.json()["path"].startswith("upload:") and "hello.txt" in response.json()["path"]
    assert str(workdir) not in response.text
    assert [p.name for p in kept(workdir / "data" / "uploads")] == ["hello.txt"]


def test_twenty_uploads_at_once_pass_a_quota_with_room_for_five(
    server: DevServer, keys: dict[str, str], workdir: Path
) -> None:
    start = threading.Barrier(20)

    def send(number: int) -> httpx.Response:
        start.wait()
        return upload(server, keys["bob"], f"note-{number}.txt", text(number), pause=2.0)

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(send, range(20)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * 5 + [413] * 15, [r.text for r in responses]
    for refused in (r for r in responses if r.status_code == 413):
        assert "(setting upload_quota_bytes)" in refused.json()["detail"]
    files = kept(workdir / "data" / "uploads" / "members" / "bob")
    assert len(files) == 5 and sum(p.stat().st_size for p in files) == QUOTA
    # nothing is held once they are done: the quota is full by what is kept, not more
    again = upload(server, keys["bob"], "one-more.txt", b"x")
    assert again.status_code == 413
    assert again.json()["detail"].startswith(f"the uploads kept already take {QUOTA:,} bytes")


def test_a_member_may_keep_five_files_and_a_refused_upload_holds_none(
    server: DevServer, keys: dict[str, str], workdir: Path
) -> None:
    alice = keys["alice"]
    for number in range(4):
        assert upload(server, alice, f"small-{number}.txt", text(number, 100)).status_code == 201
    for number in range(3):  # refused once their first bytes are read: nothing stays held
        refused = upload(server, alice, f"fake-{number}.pdf", b"not a pdf " * 100)
        assert refused.status_code == 415, refused.text
    assert upload(server, alice, "small-4.txt", text(4, 100)).status_code == 201

    sixth = upload(server, alice, "small-5.txt", text(5, 100))
    assert sixth.status_code == 413
    assert sixth.json()["detail"] == (
        "the uploads kept already number 5 files, the most allowed (setting upload_max_files): "
        "remove some documents before uploading more"
    )
    assert len(kept(workdir / "data" / "uploads" / "members" / "alice")) == 5


def _document(server: DevServer, source: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/chat/api/documents",
        params={"source": source},
        headers=server.headers,
        timeout=60,
    )


def test_a_stored_pdf_is_served_inline_in_a_sandbox_and_a_text_file_as_an_attachment(
    server: DevServer, tmp_path: Path
) -> None:
    pdf = write_pdf(tmp_path / "wind-report.pdf", PAGES)
    names = []
    for name, body in (("wind-report.pdf", pdf.read_bytes()), ("notes.md", b"# Beavers\n")):
        response = upload(server, server.token, name, body)
        assert response.status_code == 201, response.text
        names.append(response.json()["path"])
    client: Any = langgraph_sdk.get_sync_client(url=server.url, api_key=server.token, timeout=300)
    thread = client.threads.create()["thread_id"]
    report = client.runs.wait(thread, "ingest", input={"paths": names})
    assert sorted(report["added"]) == sorted(names), report

    served = _document(server, names[0])
    assert served.status_code == 200
    assert served.content == pdf.read_bytes()
    assert served.headers["content-type"] == "application/pdf"
    assert served.headers["content-disposition"].startswith("inline")
    policy = served.headers["content-security-policy"]
    assert policy.split(";")[0].split()[0] == "sandbox"
    assert "allow-same-origin" not in policy
    assert served.headers["x-content-type-options"] == "nosniff"

    notes = _document(server, names[1])
    assert notes.status_code == 200
    assert notes.headers["content-disposition"].startswith("attachment")
    assert notes.headers["content-security-policy"] == "sandbox; default-src 'none'"
