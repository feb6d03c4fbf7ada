"""Members' files stay theirs on a real ``langgraph dev`` with ``CRAG_INGEST_ROOT`` set.

The operator sets an ingest root (the upload folder is ``uploads`` in it) and lets runs replace
what runs stored (``CRAG_INGEST_RUN_REPLACE=served``, the most a member's run could use against
another's). Two members, alice and bob, have accounts made as ``crag users add`` makes them,
each with an API key; they upload through the chat page's route and ingest through
``langgraph-sdk``. Bob can neither read, take, relabel nor learn the names of alice's uploads,
nor squat a shared file; and a run on a thread ingests only what it sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_sdk
import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.server_support import team_server

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

PASSWORD = "correct horse battery"
DIARY = "# Diary\n\nAlice's diary: the spare key is under the blue flowerpot.\n"
PUBLIC = "The Vellmar canteen opens at noon and closes at three.\n"


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The store's folder (with the threads database) and the ingest root, with one shared file."""
    data = tmp_path_factory.mktemp("member_files")
    root = data / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "public.md").write_text(PUBLIC, encoding="utf-8")
    return {"data": data, "root": root}


@pytest.fixture(scope="module")
def keys(places: dict[str, Path]) -> dict[str, str]:
    """Two members' API keys (``crag users add``)."""
    made = Accounts(places["data"] / "threads.sqlite")
    return {name: made.add(name, PASSWORD) for name in ("alice", "bob")}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, places: dict[str, Path], keys: dict[str, str]
) -> Iterator[DevServer]:
    extra = {"CRAG_INGEST_ROOT": str(places["root"]), "CRAG_INGEST_RUN_REPLACE": "served"}
    with team_server(tmp_path_factory.mktemp("langgraph_dev"), places["data"], extra) as started:
        yield started


def client_of(server: DevServer, key: str) -> Any:
    return langgraph_sdk.get_sync_client(url=server.url, api_key=key, timeout=180)


def upload(server: DevServer, key: str, name: str, text: str) -> str:
    """Upload ``text`` as ``name`` through the chat page's route; the name it answers."""
    stored = httpx.post(
        f"{server.url}/chat/api/uploads",
        params={"name": name},
        content=text.encode(),
        headers={"x-api-key": key, "content-type": "application/octet-stream"},
        timeout=60,
    )
    assert stored.status_code == 201, stored.text
    path: str = stored.json()["path"]
    return path


def served_file(server: DevServer, key: str, source: str) -> int:
    """The status the file route answers ``key`` for the document ``source``."""
    answer = httpx.get(
        f"{server.url}/chat/api/documents", params={"source": source}, headers={"x-api-key": key}
    )
    return answer.status_code


def not_bobs(name: str) -> str:
    return (
        f"path {name!r} is not one of your uploads: a member's run ingests only the files in "
        "their own part of the upload folder (upload:members/bob/...)"
    )


def test_bob_neither_reads_nor_relabels_nor_learns_the_names_of_alices_uploads(
    server: DevServer, keys: dict[str, str], places: dict[str, Path]
) -> None:
    alice, bob = client_of(server, keys["alice"]), client_of(server, keys["bob"])
    diary = upload(server, keys["alice"], "diary.md", DIARY)
    assert diary.startswith("upload:members/alice/")
    assert alice.runs.wait(None, "ingest", input={"paths": [diary]})["added"] == [diary]
    folder = diary.rsplit("/", 1)[0]
    attempts = [
        diary,  # her file
        f"{folder}/missing.md",  # no such file: refused the same way
        "upload:members/alice",  # her whole folder
        "shared:uploads/members/alice",  # the same folder by its name under the root
        str(places["root"] / "uploads" / "members" / "alice"),  # and by its path
    ]
    for name in attempts:
        out = bob.runs.wait(
            None, "ingest", input={"paths": [name], "tags": ["bobs"]}, raise_error=False
        )
        assert out.get("__error__", {}).get("error") == "InvalidIngestInputError", (name, out)
        assert out["__error__"]["message"] == not_bobs(name), out
        assert name.startswith("/") or str(places["data"]) not in json.dumps(out)
    for key, status in ((keys["alice"], 200), (keys["bob"], 404)):
        assert served_file(server, key, diary) == status
    # Her document is as she left it: her next run finds it unchanged, her labels kept.
    again = alice.runs.wait(None, "ingest", input={"paths": [diary]})
    assert (again["skipped"], again["relabelled"], again["failed"]) == ([diary], [], []), again


def test_bob_cannot_squat_a_shared_file_before_the_operator_ingests_it(
    server: DevServer, keys: dict[str, str]
) -> None:
    """Bob's private copy under the shared file's own name would hide it from everyone."""
    bob = client_of(server, keys["bob"])
    name = "shared:docs/public.md"
    out = bob.runs.wait(None, "ingest", input={"paths": [name]}, raise_error=False)
    assert out.get("__error__", {}).get("message") == not_bobs(name), out
    operator = client_of(server, server.token)
    assert operator.runs.wait(None, "ingest", input={"paths": [name]})["added"] == [name]
    for key in (keys["alice"], keys["bob"]):
        assert served_file(server, key, name) == 200  # shared: everyone's


def test_the_operators_run_never_publishes_a_members_upload(
    server: DevServer, keys: dict[str, str], places: dict[str, Path]
) -> None:
    """Stored as a shared document, alice's private upload would be everyone's."""
    diary = upload(server, keys["alice"], "second-diary.md", DIARY.replace("blue", "red"))
    operator = client_of(server, server.token)
    refused = operator.runs.wait(None, "ingest", input={"paths": [diary]}, raise_error=False)
    assert refused.get("__error__", {}).get("error") == "InvalidIngestInputError", refused
    assert "is a member's upload" in refused["__error__"]["message"]
    # The folder holding the members' uploads is read without them.
    shared = upload(server, server.token, "operators-notes.md", PUBLIC.replace("noon", "nine"))
    walked = operator.runs.wait(None, "ingest", input={"paths": ["shared:uploads"]})
    stored = walked["added"] + walked["skipped"]
    assert shared in stored, walked
    assert not [name for name in stored + walked["replaced"] if "members" in name], walked
    assert served_file(server, keys["bob"], diary) == 404
    alice = client_of(server, keys["alice"])
    assert alice.runs.wait(None, "ingest", input={"paths": [diary]})["added"] == [diary]


def test_a_second_run_on_a_thread_ingests_only_what_it_sends(
    server: DevServer, keys: dict[str, str]
) -> None:
    alice = client_of(server, keys["alice"])
    plan = upload(server, keys["alice"], "plan.md", "# Plan\n\nAlice's plan: Oslo in June.\n")
    thread = alice.threads.create()["thread_id"]
    notes = {"documents": [{"text": "Alice's trip notes: pack the red coat.", "source": "trip"}]}
    first = alice.runs.wait(thread, "ingest", input={**notes, "tags": ["trip"]})
    assert first["added"] == ["trip"], first
    second = alice.runs.wait(thread, "ingest", input={"paths": [plan]})
    assert (second["added"], second["skipped"]) == ([plan], []), second
    # A failed run leaves nothing behind for the next one either.
    failed = alice.runs.wait(thread, "ingest", input={**notes, "tags": ["a,b"]}, raise_error=False)
    assert failed.get("__error__", {}).get("error") == "InvalidIngestInputError", failed
    third = alice.runs.wait(thread, "ingest", input={"paths": [plan]})
    assert (third["skipped"], third["failed"]) == ([plan], []), third
    # The plan was stored without the first run's tags: a fresh thread finds it unchanged.
    fresh = alice.runs.wait(None, "ingest", input={"paths": [plan]})
    assert (fresh["skipped"], fresh["relabelled"]) == ([plan], []), fresh
